"""kiln.special's orthogonal polynomials f(x, n) against PyTorch: a grid of x (inside, at the
ends of and outside the interval, infinities) and of n (negative, fractional, nan, infinite,
degrees large enough to overflow), in float64 and float32, with the scalar forms, dtypes and
errors."""

from __future__ import annotations

import math

import numpy as np
import pytest

import kiln
from tests.ops.samples_special import POLYNOMIALS
from tests.oracle import needs_torch, raised_by_both, torch

NAN, INF = math.nan, math.inf
NAMES = POLYNOMIALS

X_EDGES = [-1.0, 1.0, 0.0, -0.0, 0.5, -0.5, INF, -INF, 1e-20, -1e-300, 1 - 1e-16, 50.0, -50.0]
N_EDGES = [60, 100, 171, 200, 300, 1000, -0.5, 0.5, 2.9, -1.2, NAN, INF, -INF, 1e20]


def _grid() -> tuple[np.ndarray, np.ndarray]:
    x = np.concatenate([np.linspace(-3, 3, 121), X_EDGES])
    n = np.concatenate([np.arange(-3, 40), N_EDGES])
    grid_x, grid_n = np.meshgrid(x, n, indexing="ij")
    return grid_x.ravel(), grid_n.ravel()


def _call(lib, name, x, n, dtype):
    d = getattr(lib, dtype)
    return getattr(lib.special, name)(lib.tensor(x, dtype=d), lib.tensor(n, dtype=d)).numpy()


@needs_torch
@pytest.mark.parametrize(
    "dtype, rtol, atol",
    # PyTorch's compiled recurrences fuse multiply-adds: where a value cancels (Laguerre near
    # its zeros) the last digits differ; float32 loses up to 1e-3 relative there
    [("float64", 1e-10, 1e-12), ("float32", 1e-3, 1e-4)],
)
@pytest.mark.parametrize("name", NAMES)
def test_values_match_torch(name, dtype, rtol, atol):
    x, n = _grid()
    k, t = _call(kiln, name, x, n, dtype), _call(torch, name, x, n, dtype)
    assert k.dtype == t.dtype
    # nan and inf where PyTorch has them: overflow in the result's dtype, then inf - inf
    np.testing.assert_array_equal(np.isnan(k), np.isnan(t))
    np.testing.assert_array_equal(np.isinf(k), np.isinf(t))
    finite = np.isfinite(t)
    np.testing.assert_allclose(k[finite], t[finite], rtol=rtol, atol=atol)


@pytest.mark.parametrize("name", NAMES)
def test_nan_x_gives_nan_from_degree_one(name):
    # (PyTorch returns an uninitialised value for some of them at n >= 2: not a reference)
    got = getattr(kiln.special, name)(kiln.full((5,), NAN), kiln.tensor([-1, 0, 1, 2, 7]))
    np.testing.assert_array_equal(got.numpy(), [0.0, 1.0, NAN, NAN, NAN])


CALL_FORMS = {
    "int-tensors": lambda lib, f: f(lib.tensor([1, 2]), lib.tensor([1, 3])),
    "number-n": lambda lib, f: f(lib.tensor([0.25, 2.0]), 3),
    "fractional-number-n": lambda lib, f: f(lib.tensor([0.25, 2.0]), 2.5),
    "number-x": lambda lib, f: f(0.5, lib.tensor([1, 2, 5])),
    "float64-n": lambda lib, f: f(lib.tensor([0.25, 2.0]), lib.tensor([2.0], dtype=lib.float64)),
    "int-x-float-n": lambda lib, f: f(lib.tensor([1, 2]), lib.tensor([2.5])),
    "keywords": lambda lib, f: f(x=lib.tensor([0.25, 2.0]), n=lib.tensor([4, 9])),
    "bool-x": lambda lib, f: f(lib.tensor([True, False]), 3),
}


@needs_torch
@pytest.mark.parametrize("form", sorted(CALL_FORMS))
@pytest.mark.parametrize("name", NAMES)
def test_call_forms_and_dtypes_match_torch(name, form):
    k = CALL_FORMS[form](kiln, getattr(kiln.special, name))
    t = CALL_FORMS[form](torch, getattr(torch.special, name))
    assert str(k.dtype).split(".")[-1] == str(t.dtype).split(".")[-1]
    np.testing.assert_allclose(k.numpy(), t.numpy(), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("name", NAMES)
def test_results_never_require_grad(name):
    x = kiln.tensor([0.3, 0.7], requires_grad=True)
    assert not getattr(kiln.special, name)(x, 3).requires_grad


ERRORS = {
    "two-numbers": (lambda lib, f: f(0.5, 2), TypeError),
    "half": (lambda lib, f: f(lib.ones(2, dtype=lib.float16), 2), NotImplementedError),
    "bfloat16": (lambda lib, f: f(lib.ones(2, dtype=lib.bfloat16), 2), NotImplementedError),
}


@needs_torch
@pytest.mark.parametrize("case", sorted(ERRORS))
@pytest.mark.parametrize("name", ["chebyshev_polynomial_t", "laguerre_polynomial_l"])
def test_errors_have_torch_exception_types(name, case):
    fn, exc = ERRORS[case]
    got, expected = raised_by_both(
        exc,
        lambda: fn(kiln, getattr(kiln.special, name)),
        lambda: fn(torch, getattr(torch.special, name)),
    )
    if exc is NotImplementedError:
        assert str(got) == str(expected)
