"""The regularized incomplete gamma functions igamma/igammac (special.gammainc/gammaincc):
float64 accuracy against PyTorch and against high-precision values where PyTorch's kernel is
less accurate (small a near 1, large a), the boundary values, float32, the derivative in x (and
PyTorch's refusal in a), dtypes, errors and the Tensor methods."""

from __future__ import annotations

import math

import numpy as np
import pytest

import kiln
from kiln.autograd import gradcheck
from tests.oracle import needs_torch, raised_by_both, torch

NAN, INF = math.nan, math.inf
FUNCTIONS = ["gammainc", "gammaincc"]


def _grid(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(a, x) pairs: a from 1e-8 to 3e4, x within two decades of a or anywhere in 1e-10..1e5."""
    rng = np.random.default_rng(seed)
    a = np.concatenate([10 ** rng.uniform(-8, 4.5, 6000), rng.uniform(0, 5, 2000)])
    ratio = 10 ** rng.uniform(-2, 2, 4000)
    x = np.concatenate([a[:4000] * ratio, 10 ** rng.uniform(-10, 5, a.size - 4000)])
    return a, x


def _call(lib, name, a, x, dtype="float64"):
    d = getattr(lib, dtype)
    return getattr(lib.special, name)(lib.tensor(a, dtype=d), lib.tensor(x, dtype=d)).numpy()


@needs_torch
@pytest.mark.parametrize("name", FUNCTIONS)
def test_float64_values_match_torch(name):
    # PyTorch's own kernel is good to about 1e-8 relative here (its a ~ 20 and small-a paths)
    a, x = _grid()
    k, t = _call(kiln, name, a, x), _call(torch, name, a, x)
    np.testing.assert_allclose(k, t, rtol=5e-8, atol=1e-300)


# (a, x, P(a, x), Q(a, x)) from mpmath at 40 digits; PyTorch is off by up to 3% for a ~ 1e7 and
# 1e-8 relative for a ~ 1e-8 or a ~ 20, x ~ 0.7 a
REFERENCE = [
    (24.15727695191567, 1.865181225128311e-10, 9.0302660537862780712e-260, 1.0),
    (22.335900145779156, 15.845804837148991, 0.071844550034587066014, 0.92815544996541293399),
    (1e-08, 0.9, 0.99999999739816058216, 2.6018394178440253346e-9),
    (0.5, 1e-05, 0.0035682363381804504206, 0.99643176366181954958),
    (3.0, 40.0, 0.99999999999999642713, 3.5728659287002263451e-15),
    (9449080.819981536, 9433755.628412422, 3.0485312121759712931e-7, 0.9999996951468787824),
    (7187039.666243828, 7174891.1560347425, 2.8939303511161384373e-6, 0.99999710606964888386),
    (20000.0, 20100.0, 0.76061670556141764814, 0.23938329443858235186),
    (50000.0, 49000.0, 3.3847542280794914268e-6, 0.99999661524577192051),
    (1000.0, 1000.0, 0.5042052441802155085, 0.4957947558197844915),
    (150.0, 180.0, 0.99008988142756661586, 0.0099101185724333841417),
]


@pytest.mark.parametrize("column", [2, 3])
def test_float64_values_match_high_precision_references(column):
    a, x, *expected = np.array(REFERENCE).T
    got = _call(kiln, FUNCTIONS[column - 2], a, x)
    np.testing.assert_allclose(got, expected[column - 2], rtol=1e-13)


def test_lower_and_upper_add_to_one():
    a, x = _grid(seed=1)
    total = _call(kiln, "gammainc", a, x) + _call(kiln, "gammaincc", a, x)
    np.testing.assert_allclose(total, 1.0, rtol=1e-14)


@needs_torch
@pytest.mark.parametrize("name", FUNCTIONS)
def test_boundary_values_match_torch(name):
    # zero, negative, infinite and nan arguments; (subnormal a or x: PyTorch flushes some of
    # its results to 0 where kiln keeps the value, P(1, 1e-310) = 1e-310)
    edges = [0.0, -0.0, -1.0, 0.5, 1.0, 3.0, INF, -INF, NAN]
    a, x = (grid.ravel() for grid in np.meshgrid(edges, edges, indexing="ij"))
    np.testing.assert_allclose(
        _call(kiln, name, a, x), _call(torch, name, a, x), rtol=1e-15, equal_nan=True
    )


@needs_torch
@pytest.mark.parametrize("name", FUNCTIONS)
def test_float32_values_match_torch(name):
    # PyTorch computes in float32 (its far tails lose up to 2e-4 relative, and a Q it takes as
    # 1 - P a few float32 ulp of 1 absolute); kiln computes in float64, rounding once
    a, x = (v.astype(np.float32) for v in _grid(seed=2))
    k, t = _call(kiln, name, a, x, "float32"), _call(torch, name, a, x, "float32")
    assert k.dtype == np.float32
    np.testing.assert_array_equal(k, _call(kiln, name, a, x).astype(np.float32))
    np.testing.assert_allclose(k, t, rtol=5e-4, atol=1e-7)


@needs_torch
@pytest.mark.parametrize("name", ["igamma", "igammac"])
def test_gradient_in_x_matches_torch(name):
    a = [1.0, 2.0, 0.5, 3.0, 40.0]
    x = [0.0, 2.0, 1e-3, 5.0, 38.0]
    grads = []
    for lib in (kiln, torch):
        xt = lib.tensor(x, dtype=lib.float64, requires_grad=True)
        getattr(lib, name)(lib.tensor(a, dtype=lib.float64), xt).sum().backward()
        grads.append(xt.grad.numpy())
    np.testing.assert_allclose(grads[0], grads[1], rtol=1e-13, equal_nan=True)


@pytest.mark.parametrize("name", ["igamma", "igammac"])
def test_gradcheck_in_x(name):
    a = kiln.tensor([0.7, 2.0, 5.5], dtype=kiln.float64)
    x = kiln.tensor([0.3, 2.5, 4.0], dtype=kiln.float64, requires_grad=True)
    assert gradcheck(lambda t: getattr(kiln, name)(a, t), (x,))


@needs_torch
@pytest.mark.parametrize("name", ["igamma", "igammac"])
def test_gradient_in_a_is_refused_like_torch(name):
    def run(lib):
        a = lib.tensor([1.0, 2.0], requires_grad=True)
        getattr(lib, name)(a, lib.ones(2)).sum().backward()

    got, expected = raised_by_both(NotImplementedError, lambda: run(kiln), lambda: run(torch))
    assert str(got) == str(expected)


@needs_torch
@pytest.mark.parametrize(
    "dtypes", [("float16", "float16"), ("bfloat16", "float32"), ("float32", "float64")]
)
def test_result_dtype_and_values_follow_torch(dtypes):
    results = []
    for lib in (kiln, torch):
        a = lib.tensor([0.5, 1.5, 4.0], dtype=getattr(lib, dtypes[0]))
        x = lib.tensor([1.0, 1.5, 2.0], dtype=getattr(lib, dtypes[1]))
        results.append(lib.special.gammainc(a, x))
    assert str(results[0].dtype).split(".")[-1] == str(results[1].dtype).split(".")[-1]
    np.testing.assert_allclose(results[0].float().numpy(), results[1].float().numpy(), rtol=1e-2)


ERRORS = {
    "int-tensors": (
        lambda lib: lib.igamma(lib.tensor([1, 2]), lib.tensor([1, 2])),
        NotImplementedError,
    ),
    "bool-tensors": (
        lambda lib: lib.igammac(lib.tensor([True]), lib.tensor([True])),
        NotImplementedError,
    ),
    "complex": (
        lambda lib: lib.igamma(lib.ones(1, dtype=lib.complex64), lib.ones(1, dtype=lib.complex64)),
        NotImplementedError,
    ),
    "number-x": (lambda lib: lib.igamma(lib.ones(2), 2.0), TypeError),
    "inplace-on-int": (lambda lib: lib.tensor([1, 2]).igamma_(lib.ones(2)), RuntimeError),
}


@needs_torch
@pytest.mark.parametrize("case", sorted(ERRORS))
def test_errors_match_torch(case):
    fn, exc = ERRORS[case]
    got, expected = raised_by_both(exc, lambda: fn(kiln), lambda: fn(torch))
    assert str(got) == str(expected).replace("torch", "kiln")


def test_methods_and_aliases_are_the_same_function():
    a = kiln.tensor([0.5, 2.0, 3.0])
    x = kiln.tensor([1.0, 1.0, 4.0])
    lower = kiln.special.gammainc(a, x)
    assert kiln.igamma(a, x).tolist() == a.igamma(x).tolist() == lower.tolist()
    assert a.igammac(x).tolist() == kiln.special.gammaincc(a, x).tolist()
    inplace = a.clone()
    assert inplace.igammac_(x) is inplace
    assert inplace.tolist() == kiln.igammac(a, x).tolist()
    assert a.clone().igamma_(x).tolist() == lower.tolist()


def test_broadcasts_its_arguments():
    a = kiln.tensor([[0.5], [2.0]], dtype=kiln.float64)
    x = kiln.tensor([0.1, 1.0, 10.0], dtype=kiln.float64)
    got = kiln.special.gammainc(a, x)
    assert got.shape == (2, 3)
    np.testing.assert_allclose(got[1].numpy(), 1 - np.exp(-x.numpy()) * (1 + x.numpy()))
