"""``out=`` arguments as PyTorch handles them: the same object returned, resized when
empty, dtype and requires_grad checks, for pointwise ops, factories and multi-output ops."""

from __future__ import annotations

from tests.oracle import needs_torch
from tests.runtime.helpers import cases, same_as_torch

pytestmark = needs_torch


OUT_ARGUMENTS = {
    "mul-out": lambda lib: _out(lib.mul, lib.ones(2, 2), lib.ones(2, 2) * 3, lib.empty(2, 2)),
    "matmul-out-resized": lambda lib: _out(
        lib.matmul, lib.ones(2, 3), lib.ones(3, 2), lib.empty(0)
    ),
    "add-out-wrong-dtype": lambda lib: _out(
        lib.add, lib.ones(2), lib.ones(2), lib.empty(2, dtype=lib.long)
    ),
    "add-out-requires-grad": lambda lib: _out(
        lib.add, lib.ones(2, requires_grad=True), lib.ones(2), lib.empty(2)
    ),
    "zeros-out": lambda lib: _into(lambda o: lib.zeros(2, 3, out=o), lib.empty(2, 3)),
    "ones-out-resizes": lambda lib: _into(lambda o: lib.ones(2, 3, out=o), lib.empty(0)),
    "arange-out-float": lambda lib: _into(lambda o: lib.arange(5, out=o), lib.empty(5)),
    "linspace-out": lambda lib: _into(lambda o: lib.linspace(0, 1, 3, out=o), lib.empty(3)),
    "full-out": lambda lib: _into(lambda o: lib.full((2,), 7.0, out=o), lib.empty(2)),
    "eye-out": lambda lib: _into(lambda o: lib.eye(2, out=o), lib.empty(2, 2)),
    "randn-out-shape": lambda lib: lib.randn(3, out=lib.empty(0)).shape,
    "where-out": lambda lib: _into(
        lambda o: lib.where(lib.tensor([True, False]), lib.ones(2), lib.zeros(2), out=o),
        lib.empty(2),
    ),
    "max-dim-out": lambda lib: lib.max(
        lib.tensor([[1, 5], [7, 2]]),
        1,
        out=(lib.empty(2, dtype=lib.int64), lib.empty(2, dtype=lib.int64)),
    ),
    "hstack-out": lambda lib: _into(
        lambda o: lib.hstack([lib.ones(2), lib.zeros(1)], out=o), lib.empty(0)
    ),
    "nonzero-out": lambda lib: _into(
        lambda o: lib.nonzero(lib.tensor([0, 1, 1]), out=o), lib.empty(0, dtype=lib.int64)
    ),
}


def _into(fn, out):
    result = fn(out)
    return (result is out, out)


def _out(fn, a, b, out):
    result = fn(a, b, out=out)
    return result is out, out


@cases(OUT_ARGUMENTS)
def test_out_arguments_match_torch(case):
    same_as_torch(case)
