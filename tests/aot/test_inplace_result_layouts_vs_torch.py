"""An in-place op leaves its tensor's strides alone, whatever layout its functional form gives:
a compiled ``v = x * 2; v.index_add_(0, i, s)`` of a transposed ``x`` keeps ``v`` transposed,
as eager code and PyTorch do.

Functionalization replaced ``v`` by the functional op's result, laid out its own way (row-major
for index_add, index_copy, scatter, cumsum, masked_fill, masked_scatter, index_reduce), so the
compiled output's strides differed from eager's (the fuzzer's reduction rules, inductor check,
seed 10807); ops after the write that read strides (``view``) would differ too.
"""

from __future__ import annotations

import pytest

import kiln
from tests.oracle import assert_close, needs_torch, torch

pytestmark = needs_torch


def _written(op: str):
    """A function writing ``op`` in place into ``x * 2`` (``x``'s layout), then reading it."""

    def run(x):
        lib = kiln if isinstance(x, kiln.Tensor) else torch
        v = x * 2
        rows = lib.tensor([0, 2])
        part = x[:2].contiguous()
        {
            "index_add_": lambda: v.index_add_(0, rows, part),
            "index_copy_": lambda: v.index_copy_(0, rows, part),
            "index_reduce_": lambda: v.index_reduce_(0, rows, part, "prod"),
            "scatter_": lambda: v.scatter_(0, lib.zeros(2, 3, dtype=lib.int64), part),
            "scatter_add_": lambda: v.scatter_add_(0, lib.zeros(2, 3, dtype=lib.int64), part),
            "cumsum_": lambda: v.cumsum_(0),
            "masked_fill_": lambda: v.masked_fill_(x.contiguous() > 2, 0.5),
            "masked_scatter_": lambda: v.masked_scatter_(x > 3, x.contiguous()),
        }[op]()
        return v, v.view(-1, 2) if v.is_contiguous() else v + 1

    return run


OPS = ("index_add_", "index_copy_", "index_reduce_", "scatter_", "scatter_add_", "cumsum_",
       "masked_fill_", "masked_scatter_")  # fmt: skip


LAYOUTS = {
    "transposed": lambda lib: lib.arange(12.0).view(3, 4).t(),
    "row-major": lambda lib: lib.arange(12.0).view(4, 3),
}


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("backend", ["aot_eager", "inductor", "dynamic"])
@pytest.mark.parametrize("op", OPS)
def test_a_compiled_in_place_write_keeps_the_written_tensors_strides(op, backend, layout):
    expected = _written(op)(LAYOUTS[layout](torch))
    kiln.dynamo.reset()
    compiled = kiln.compile(
        _written(op), backend="aot_eager" if backend == "aot_eager" else "inductor",
        dynamic=backend == "dynamic" or None, fullgraph=True,
    )  # fmt: skip
    got = compiled(LAYOUTS[layout](kiln))
    for g, e in zip(got, expected):
        assert_close(g, e)
        assert g.stride() == e.stride()
