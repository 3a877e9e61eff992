"""Ops over other dtypes and edge shapes than their samples', compared with PyTorch, eagerly and
compiled: result dtypes, shapes and values, or the same exception type.

Each case is (operands, call): ``operands(lib)`` makes the tensors, ``call(lib, *tensors)`` the
op; compiled runs give ``kiln.compile`` the tensors as inputs.
"""

from __future__ import annotations

import pytest

import kiln
from tests.ops import dtype_sweep as sweep
from tests.oracle import needs_torch, torch

pytestmark = needs_torch


def _t(lib, values, dtype: str):
    return lib.tensor(values, dtype=getattr(lib, dtype))


def _agrees_with_torch(operands, call, compiled: bool) -> None:
    want = sweep.outcome(lambda: call(torch, *operands(torch)))
    got = sweep.outcome(lambda: call(kiln, *operands(kiln)))
    assert sweep.compare(got, want, strides=False) is None, sweep.compare(got, want, False)
    if compiled:
        kiln.dynamo.reset()
        inputs = operands(kiln)
        got = sweep.outcome(lambda: kiln.compile(lambda *xs: call(kiln, *xs))(*inputs))
        assert sweep.compare(got, want, strides=False) is None, sweep.compare(got, want, False)


def _cases(table: dict):
    return pytest.mark.parametrize("operands,call", list(table.values()), ids=list(table))


def _complex(lib):
    return (_t(lib, [[1 + 2j, 2 - 1j, 3j, -1.5], [0.5j, 1, -2 + 1j, 4]], "complex64"),)


COMPLEX_RESULTS = {
    "fill_diagonal_-real-value": (_complex, lambda lib, x: x[:, :2].clone().fill_diagonal_(1.5)),
    "fill_diagonal_-complex-value": (
        _complex,
        lambda lib, x: x[:, :2].clone().fill_diagonal_(1.5 - 2j),
    ),
    "pad-constant": (_complex, lambda lib, x: lib.nn.functional.pad(x, (1, 2), value=-2.5)),
    "cov": (_complex, lambda lib, x: lib.cov(x)),
    "cov-weighted": (
        _complex,
        lambda lib, x: lib.cov(x, fweights=lib.tensor([1, 2, 1, 3]), aweights=x.real.abs() + 1),
    ),
    "cov-1d": (_complex, lambda lib, x: lib.cov(x[0])),
    "corrcoef": (_complex, lambda lib, x: lib.corrcoef(x)),
    "vander": (_complex, lambda lib, x: lib.vander(x[0], N=3)),
    "linalg.vander": (_complex, lambda lib, x: lib.linalg.vander(x[0])),
    "pairwise_distance": (_complex, lambda lib, x: lib.nn.functional.pairwise_distance(x, x + 1)),
    "pairwise_distance-p1": (
        _complex,
        lambda lib, x: lib.nn.functional.pairwise_distance(x, -x, p=1.0),
    ),
}


@_cases(COMPLEX_RESULTS)
def test_complex_operands_give_pytorchs_values_and_dtypes(operands, call):
    """A real fill value is not truncated to an integer in a complex tensor; covariances,
    Vandermonde matrices and distances of complex inputs keep PyTorch's complex (or real)
    dtypes."""
    _agrees_with_torch(operands, call, compiled=True)


def _square(dtype: str):
    return lambda lib: (_t(lib, [[1, 2], [3, 4]], dtype),)


FILL_VALUES = {
    "uint8-negative-float": (_square("uint8"), lambda lib, x: x.fill_diagonal_(-1.5)),
    "uint8-negative-int": (_square("uint8"), lambda lib, x: x.fill_diagonal_(-1)),
    "int8-too-large": (_square("int8"), lambda lib, x: x.fill_diagonal_(300)),
    "int8-fraction": (_square("int8"), lambda lib, x: x.fill_diagonal_(2.7)),
    "bool-fraction": (_square("bool"), lambda lib, x: x.fill_diagonal_(0.5)),
}


@_cases(FILL_VALUES)
def test_fill_diagonal_converts_its_value_as_pytorch_does(operands, call):
    """An integer tensor takes the value truncated, and refuses one its dtype cannot hold (a
    negative float in uint8, 300 in int8) as PyTorch does, instead of wrapping it around."""
    _agrees_with_torch(operands, call, compiled=True)
