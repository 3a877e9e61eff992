"""In-place writes through an expanded (stride-0) view of an intermediate, compiled as eagerly:
``fill_``/``zero_`` of a number write one value through it (functionalization scatters the first
copy of each element back into the parent), every other in-place op raises PyTorch's internal
overlap error at capture, as its kernel does eagerly. Compiled code fell back to the eager
backend with a 'failed to compile' warning for all of them (UnsupportedMutationError: the fuzzer's
reduction rules, inductor check, seed 10807).
"""

from __future__ import annotations

import warnings

import pytest

import kiln
from tests.oracle import assert_close, needs_torch, torch

pytestmark = needs_torch

WRITES = {
    "fill_": lambda lib, v: v.fill_(2.5),
    "zero_": lambda lib, v: v.zero_(),
    "fill_-of-a-tensor": lambda lib, v: v.fill_(lib.tensor(2.0)),
    "add_": lambda lib, v: v.add_(1),
    "copy_": lambda lib, v: v.copy_(lib.ones(3, 4)),
    "clamp_": lambda lib, v: v.clamp_(min=0.5),
    "uniform_": lambda lib, v: v.uniform_(),
    "index_add_": lambda lib, v: v.index_add_(0, lib.tensor([0]), lib.ones(1, 4)),
}


def _program(write):
    def run(lib, x):
        v = x * 1
        write(lib, v[:1].expand(3, 4))
        return v + 1

    return run


def _outcome(call):
    try:
        return call()
    except RuntimeError as e:
        return e


@pytest.mark.parametrize("backend", ["aot_eager", "inductor", "dynamic"])
@pytest.mark.parametrize("write", list(WRITES.values()), ids=list(WRITES))
def test_compiled_writes_through_an_expanded_view_match_eager(write, backend):
    program = _program(write)
    expected = _outcome(lambda: program(torch, torch.arange(8.0).view(2, 4)))
    kiln.dynamo.reset()
    compiled = kiln.compile(
        lambda x: program(kiln, x), backend="aot_eager" if backend == "aot_eager" else "inductor",
        dynamic=backend == "dynamic" or None,
    )  # fmt: skip
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = _outcome(lambda: compiled(kiln.arange(8.0).view(2, 4)))
    assert not [w for w in caught if "failed to compile" in str(w.message)]
    if isinstance(expected, RuntimeError):
        assert isinstance(got, RuntimeError) and str(got) == str(expected)
    else:
        assert_close(got, expected)
