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
    # non-differentiable ops write into ``out`` whatever requires grad; differentiable ones refuse
    "eq-out-input-requires-grad": lambda lib: _into(
        lambda o: lib.eq(lib.ones(3, requires_grad=True), 1.0, out=o),
        lib.empty(3, dtype=lib.bool),
    ),
    "argmax-out-input-requires-grad": lambda lib: _into(
        lambda o: lib.argmax(lib.tensor([1.0, 3.0, 2.0], requires_grad=True), out=o),
        lib.empty((), dtype=lib.int64),
    ),
    "logical-and-out-input-requires-grad": lambda lib: _out(
        lib.logical_and,
        lib.ones(2, requires_grad=True),
        lib.zeros(2),
        lib.empty(2, dtype=lib.bool),
    ),
    "eq-out-requires-grad": lambda lib: _out(
        lib.eq, lib.ones(2), lib.ones(2), lib.empty(2, requires_grad=True)
    ),
    "add-out-itself-requires-grad": lambda lib: _out(
        lib.add, lib.ones(2), lib.ones(2), lib.empty(2, requires_grad=True)
    ),
    "sign-integer-out-input-requires-grad": lambda lib: _into(
        lambda o: lib.sign(lib.ones(2, requires_grad=True), out=o), lib.empty(2, dtype=lib.int64)
    ),
    "max-dim-out-input-requires-grad": lambda lib: lib.max(
        lib.ones(2, 2, requires_grad=True),
        1,
        out=(lib.empty(2), lib.empty(2, dtype=lib.int64)),
    ),
    "bucketize-out-input-requires-grad": lambda lib: _into(
        lambda o: lib.bucketize(lib.tensor([0.5, 2.0], requires_grad=True), lib.ones(1), out=o),
        lib.empty(0, dtype=lib.int64),
    ),
    # Python-level functions take ``out=`` as registered ops do
    "std-dim-out": lambda lib: _into(lambda o: lib.std(_grid(lib), 0, out=o), lib.empty(0)),
    "var-out-widens": lambda lib: _into(
        lambda o: lib.var(_grid(lib), 1, out=o), lib.empty(0, dtype=lib.float64)
    ),
    "var-out-to-integer": lambda lib: _into(
        lambda o: lib.var(_grid(lib), 1, out=o), lib.empty(0, dtype=lib.int64)
    ),
    "std-out-input-requires-grad": lambda lib: _into(
        lambda o: lib.std(_grid(lib).requires_grad_(), 0, out=o), lib.empty(0)
    ),
    "median-dim-out": lambda lib: lib.median(
        _grid(lib), 1, out=(lib.empty(0), lib.empty(0, dtype=lib.int64))
    ),
    "aminmax-out-needs-its-dtype": lambda lib: lib.aminmax(
        _grid(lib), out=(lib.empty(0, dtype=lib.float64), lib.empty(0, dtype=lib.float64))
    ),
    "aminmax-out": lambda lib: lib.aminmax(_grid(lib), dim=0, out=(lib.empty(0), lib.empty(0))),
    "quantile-out": lambda lib: _into(
        lambda o: lib.quantile(_grid(lib), 0.25, dim=1, out=o), lib.empty(5)
    ),
    "quantile-out-records-the-copy": lambda lib: _gradient_through_out(
        lambda x, o: lib.quantile(x, 0.5, out=o), _grid(lib).requires_grad_(), lib.empty(0)
    ),
    "nanquantile-out": lambda lib: _into(
        lambda o: lib.nanquantile(_grid(lib), 0.5, dim=0, out=o), lib.empty(0)
    ),
    "diff-out": lambda lib: _into(lambda o: lib.diff(_grid(lib), dim=1, out=o), lib.empty(0)),
    "xlogy-out": lambda lib: _into(lambda o: lib.xlogy(_grid(lib), 2.0, out=o), lib.empty(0)),
    "norm-out-needs-its-dtype": lambda lib: lib.norm(
        _grid(lib), out=lib.empty(0, dtype=lib.float64)
    ),
    "fft-out": lambda lib: _into(
        lambda o: lib.fft.rfft(lib.arange(4.0), out=o), lib.empty(0, dtype=lib.complex64)
    ),
    "linalg-lu-out": lambda lib: lib.linalg.lu(
        lib.eye(2) * 2, out=(lib.empty(0), lib.empty(0), lib.empty(0))
    ),
    "take-along-dim-out": lambda lib: _into(
        lambda o: lib.take_along_dim(_grid(lib), lib.zeros(2, 1, dtype=lib.int64), 1, out=o),
        lib.empty(0),
    ),
}


def _grid(lib):
    return lib.arange(10.0).reshape(2, 5) ** 1.5


def _gradient_through_out(fn, x, out):
    fn(x, out).sum().backward()
    return out.requires_grad, x.grad


def _into(fn, out):
    result = fn(out)
    return (result is out, out)


def _out(fn, a, b, out):
    result = fn(a, b, out=out)
    return result is out, out


@cases(OUT_ARGUMENTS)
def test_out_arguments_match_torch(case):
    same_as_torch(case)
