"""isclose / allclose / equal / is_nonzero and clamp_min / clamp_max beyond the sample database:
PyTorch's closeness formula over grids of special values and tolerances for every dtype, integer
differences that must not wrap, Python-bool results, error types and messages, and capture
under kiln.compile."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

import kiln
from tests.oracle import assert_close, needs_torch, raised_by_both, torch

NAN, INF = math.nan, math.inf

# every pair of these, so each comparison branch (exact, within tolerance, inf, nan) shows up
FLOAT_VALUES = [0.0, -0.0, 1.0, 1.0 + 1e-6, 1.0 + 1e-4, -1.0, 1e-9, 1e10, 1.0001e10, INF, -INF, NAN]
INT_VALUES = [0, 1, 2, 3, 7, 100, 101, 120]
TOLERANCES = [
    {},
    {"rtol": 0.0, "atol": 0.0},
    {"rtol": 1e-3, "atol": 0.0},
    {"rtol": 0.0, "atol": 1.5},
    {"rtol": 0.5, "atol": 0.1, "equal_nan": True},
    {"atol": INF},
]


def _grid(values):
    a, b = zip(*itertools.product(values, repeat=2))
    return list(a), list(b)


def _kiln_message(exc: BaseException) -> str:
    return str(exc).replace("torch", "kiln")


# ------------------------------------------------------------------------------ isclose


@needs_torch
@pytest.mark.parametrize("tol", range(len(TOLERANCES)))
@pytest.mark.parametrize(
    "dtype", ["float32", "float64", "float16", "bfloat16", "uint8", "int8", "int32", "int64"]
)
def test_isclose_matches_torch_on_grids_of_values(dtype, tol):
    a, b = _grid(INT_VALUES if "int" in dtype else FLOAT_VALUES)
    k, t = (
        lib.isclose(
            lib.tensor(a, dtype=getattr(lib, dtype)),
            lib.tensor(b, dtype=getattr(lib, dtype)),
            **TOLERANCES[tol],
        )
        for lib in (kiln, torch)
    )
    assert k.dtype is kiln.bool
    assert k.tolist() == t.tolist()


def test_unsigned_differences_do_not_wrap():
    # 1 - 2 in uint8 is 255: the difference must be taken in floating point
    x = kiln.tensor([1, 200], dtype=kiln.uint8)
    y = kiln.tensor([2, 100], dtype=kiln.uint8)
    assert kiln.isclose(x, y, rtol=0.0, atol=1).tolist() == [True, False]


def test_int64_extremes_are_not_close():
    lo, hi = kiln.iinfo(kiln.int64).min, kiln.iinfo(kiln.int64).max
    x, y = kiln.tensor([lo]), kiln.tensor([hi])
    assert kiln.isclose(x, y, rtol=0.0, atol=1).tolist() == [False]


def test_bool_tensors_compare_as_numbers():
    x = kiln.tensor([True, False, True])
    y = kiln.tensor([True, True, False])
    assert kiln.isclose(x, y).tolist() == [True, False, False]
    assert kiln.isclose(x, y, atol=1.0).tolist() == [True, True, True]


def test_isclose_scales_rtol_by_other_only():
    # |1 - 1.5| = 0.5 is within 0.4 * 1.5 but not within 0.4 * 1
    one, other = kiln.tensor([1.0]), kiln.tensor([1.5])
    assert kiln.isclose(one, other, rtol=0.4, atol=0.0).tolist() == [True]
    assert kiln.isclose(other, one, rtol=0.4, atol=0.0).tolist() == [False]


def test_isclose_broadcasts():
    a = kiln.tensor([[1.0], [2.0]])
    b = kiln.tensor([1.5, 3.0])
    assert kiln.isclose(a, b, rtol=0.5, atol=0.0).tolist() == [[True, False], [True, True]]


def test_isclose_method_takes_keywords():
    x = kiln.tensor([1.0, NAN])
    assert x.isclose(x, equal_nan=True).tolist() == [True, True]
    assert x.isclose(x + 0.01, atol=0.1).tolist() == [True, False]


# ------------------------------------------------------------------------------ bool results


@needs_torch
@pytest.mark.parametrize("tol", range(len(TOLERANCES)))
def test_allclose_matches_torch_and_returns_a_python_bool(tol):
    for a, b in [
        ([1.0, 2.0], [1.0, 2.0 + 1e-6]),
        ([1.0, NAN], [1.0, NAN]),
        ([INF, 1.0], [INF, 1.1]),
        ([0.0], [1e-9]),
    ]:
        k = kiln.allclose(kiln.tensor(a), kiln.tensor(b), **TOLERANCES[tol])
        t = torch.allclose(torch.tensor(a), torch.tensor(b), **TOLERANCES[tol])
        assert type(k) is bool
        assert k == t, (a, b)


def test_allclose_broadcasts_like_isclose():
    assert kiln.allclose(kiln.ones(3, 2), kiln.ones(2))
    assert kiln.ones(3, 1).allclose(kiln.ones(1, 4) + 1e-7)


@needs_torch
@pytest.mark.parametrize(
    "a,b",
    [
        ([1.0, 2.0], [1.0, 2.0]),
        ([1.0, 2.0], [1.0, 2.5]),
        ([NAN], [NAN]),
        ([0.0], [-0.0]),
        ([[1.0, 2.0]], [1.0, 2.0]),
        ([], []),
    ],
    ids=["same", "differ", "nan", "signed-zero", "shapes", "empty"],
)
def test_equal_matches_torch(a, b):
    k = kiln.equal(kiln.tensor(a), kiln.tensor(b))
    assert type(k) is bool
    assert k == torch.equal(torch.tensor(a), torch.tensor(b))
    assert kiln.tensor(a).equal(kiln.tensor(b)) == k


@needs_torch
def test_equal_compares_values_across_dtypes():
    for a, b in [([1.0, 2.0], [1, 2]), ([1.5], [1]), ([1, 0], [True, False])]:
        assert kiln.equal(kiln.tensor(a), kiln.tensor(b)) == torch.equal(
            torch.tensor(a), torch.tensor(b)
        )


def test_equal_reads_through_views():
    x = kiln.arange(6.0).reshape(2, 3)
    assert kiln.equal(x.t(), x.t().contiguous())
    assert not kiln.equal(x.t(), x.reshape(3, 2))


@needs_torch
@pytest.mark.parametrize("value", [[0.0], [[2]], [True], [NAN], [-0.0]])
def test_is_nonzero_matches_torch(value):
    k = kiln.is_nonzero(kiln.tensor(value))
    assert type(k) is bool
    assert k == torch.is_nonzero(torch.tensor(value))
    assert kiln.tensor(value).is_nonzero() == k


# ------------------------------------------------------------------------------ errors

ERRORS = {
    "isclose-dtypes": (lambda lib: lib.isclose(lib.ones(2), lib.ones(2).double()), RuntimeError),
    "isclose-number": (lambda lib: lib.isclose(lib.ones(2), 1.0), TypeError),
    "isclose-rtol": (lambda lib: lib.isclose(lib.ones(2), lib.ones(2), rtol=-1.0), RuntimeError),
    "isclose-atol": (lambda lib: lib.isclose(lib.ones(2), lib.ones(2), atol=-1.0), RuntimeError),
    "isclose-shapes": (lambda lib: lib.isclose(lib.ones(2), lib.ones(3)), RuntimeError),
    "isclose-equal_nan": (
        lambda lib: lib.isclose(lib.ones(2), lib.ones(2), equal_nan=1),
        TypeError,
    ),
    "allclose-dtypes": (lambda lib: lib.allclose(lib.ones(2), lib.ones(2).double()), RuntimeError),
    "allclose-shapes": (lambda lib: lib.allclose(lib.ones(2), lib.ones(3)), RuntimeError),
    "equal-number": (lambda lib: lib.equal(lib.ones(2), 1.0), TypeError),
    "is_nonzero-empty": (lambda lib: lib.is_nonzero(lib.ones(0)), RuntimeError),
    "is_nonzero-many": (lambda lib: lib.is_nonzero(lib.ones(2)), RuntimeError),
    "clamp_min_-int": (lambda lib: lib.tensor([1, 5]).clamp_min_(2.5), RuntimeError),
}
# kiln adds the shapes / dtypes / op to these messages; PyTorch's text is the prefix
MESSAGE_PREFIX_ONLY = {
    "isclose-dtypes",
    "allclose-dtypes",
    "isclose-shapes",
    "allclose-shapes",
    "is_nonzero-many",
    "clamp_min_-int",
}


@needs_torch
@pytest.mark.parametrize("case", sorted(ERRORS))
def test_errors_match_torch(case):
    fn, exc = ERRORS[case]
    got, expected = raised_by_both(exc, lambda: fn(kiln), lambda: fn(torch))
    if case == "clamp_min_-int":
        assert "can't be cast to the desired output type" in str(got)
    elif case in MESSAGE_PREFIX_ONLY:
        assert str(got).startswith(_kiln_message(expected))
    else:
        assert str(got) == _kiln_message(expected)


def test_isclose_dtype_error_names_both_dtypes():
    with pytest.raises(RuntimeError, match="Float did not match Long"):
        kiln.isclose(kiln.ones(2), kiln.ones(2, dtype=kiln.int64))


# ------------------------------------------------------------------------------ one-sided clamps


@needs_torch
@pytest.mark.parametrize("op", ["clamp_min", "clamp_max"])
@pytest.mark.parametrize(
    "dtype,bound",
    [("float32", 0.5), ("int64", 2), ("int64", 2.5), ("uint8", 3), ("float16", -1.0)],
)
def test_clamps_match_torch_values_and_dtypes(op, dtype, bound):
    values = [0, 1, 2, 3, 4] if dtype in ("int64", "uint8") else [-2.0, 0.0, 0.5, NAN, 3.0]
    k = getattr(kiln, op)(kiln.tensor(values, dtype=getattr(kiln, dtype)), bound)
    t = getattr(torch, op)(torch.tensor(values, dtype=getattr(torch, dtype)), bound)
    assert_close(k, t)


@needs_torch
@pytest.mark.parametrize("op", ["clamp_min", "clamp_max"])
def test_clamp_gradients_at_ties_and_nan_match_torch(op):
    values, bound = [0.0, 1.0, 2.0, NAN], [1.0, 1.0, 1.0, 1.0]
    weights = [1.0, 2.0, 3.0, 4.0]
    kx, kb = kiln.tensor(values, requires_grad=True), kiln.tensor(bound, requires_grad=True)
    tx, tb = torch.tensor(values, requires_grad=True), torch.tensor(bound, requires_grad=True)
    (getattr(kiln, op)(kx, kb) * kiln.tensor(weights)).sum().backward()
    (getattr(torch, op)(tx, tb) * torch.tensor(weights)).sum().backward()
    assert_close(kx.grad, tx.grad)
    assert_close(kb.grad, tb.grad)


def test_in_place_clamps_update_the_tensor():
    x = kiln.tensor([-1.0, 0.5, 2.0])
    assert x.clamp_min_(0.0) is x
    x.clamp_max_(1.0)
    assert x.tolist() == [0.0, 0.5, 1.0]


# ------------------------------------------------------------------------------ compiled


def _closeness(x, y):
    near = kiln.isclose(x, y, rtol=1e-2, atol=1e-3)
    clipped = kiln.clamp_min(x, -0.5) + kiln.clamp_max(y, 0.5)
    return near, kiln.where(near, clipped, x - y)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_isclose_and_clamps_compile_to_the_eager_values(backend):
    x = kiln.randn(4, 6)
    y = x + kiln.randn(4, 6) * 1e-2
    y[0, :2] = kiln.tensor([INF, NAN])
    eager = _closeness(x, y)
    compiled = kiln.compile(_closeness, backend=backend, fullgraph=True)(x, y)
    assert compiled[0].tolist() == eager[0].tolist()
    np.testing.assert_allclose(compiled[1].numpy(), eager[1].numpy(), rtol=1e-6, equal_nan=True)


def _branch_on_allclose(x, y):
    if kiln.allclose(x, y):
        return x + y
    return x - y


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_allclose_branches_run_under_compile(backend):
    # allclose returns a Python bool: a data-dependent branch, so the graph breaks there
    fn = kiln.compile(_branch_on_allclose, backend=backend)
    x = kiln.randn(3)
    np.testing.assert_allclose(fn(x, x.clone()).numpy(), (x + x).numpy())
    np.testing.assert_allclose(fn(x, x + 1).numpy(), (x - (x + 1)).numpy())
