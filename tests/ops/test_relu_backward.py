"""relu's and leaky_relu's derivatives against PyTorch: the bit-select form of a plain backward
and the kiln-op ``where`` form under ``create_graph``, with NaN inputs, inf/NaN gradients,
signed zeros and non-contiguous or broadcast gradients; leaky_relu's max/min forward for every
kind of slope."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from tests.oracle import needs_torch, torch

pytestmark = needs_torch

_SPECIAL = [0.0, -0.0, 1.5, -2.0, np.nan, np.inf, -np.inf, 1e-30, -1e-30]


def _grad(lib, x, g, create_graph, transposed):
    xt = lib.tensor(x, requires_grad=True)
    gt = lib.tensor(g)
    if transposed:
        gt = gt.t().contiguous().t()
    y = lib.relu(xt)
    (gx,) = lib.autograd.grad(y, [xt], gt, create_graph=create_graph)
    return gx.detach().numpy()


@pytest.mark.parametrize("transposed", [False, True], ids=["contiguous", "transposed"])
@pytest.mark.parametrize("create_graph", [False, True], ids=["numpy", "kiln-ops"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_gradient_matches_torch_bit_for_bit(dtype, create_graph, transposed):
    x = np.array([_SPECIAL] * len(_SPECIAL), dtype)
    g = x.T.copy()  # every special input against every special gradient
    got = _grad(kiln, x, g, create_graph, transposed)
    want = _grad(torch, x, g, create_graph, transposed)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


def test_gradient_of_a_sum_matches_torch():
    """``relu(x).sum().backward()`` hands the derivative an expanded (stride-0) gradient."""
    x = np.random.default_rng(0).standard_normal((5, 7)).astype("float32")
    grads = []
    for lib in (kiln, torch):
        xt = lib.tensor(x, requires_grad=True)
        (lib.relu(xt) * 2).sum().backward()
        grads.append(xt.grad.numpy())
    np.testing.assert_array_equal(*grads)


_SLOPES = [0.2, 0.01, 1.0, 3.0, 0.0, -0.5, np.inf, np.nan]


def _leaky(lib, x, g, slope, create_graph, transposed):
    xt = lib.tensor(x, requires_grad=True)
    gt = lib.tensor(g)
    if transposed:
        gt = gt.t().contiguous().t()
    y = lib.nn.functional.leaky_relu(xt, slope)
    (gx,) = lib.autograd.grad(y, [xt], gt, create_graph=create_graph)
    return y.detach().numpy(), gx.detach().numpy()


def _assert_same_bits(got, want):
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


@pytest.mark.parametrize("slope", _SLOPES)
@pytest.mark.parametrize("transposed", [False, True], ids=["contiguous", "transposed"])
@pytest.mark.parametrize("create_graph", [False, True], ids=["numpy", "kiln-ops"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_leaky_relu_matches_torch_bit_for_bit(dtype, create_graph, transposed, slope):
    specials = _SPECIAL + [3e38, -3e38, 5e-324 if dtype == "float64" else 1e-45]
    x = np.array([specials] * len(specials), dtype)
    g = x.T.copy()
    got = _leaky(kiln, x, g, slope, create_graph, transposed)
    want = _leaky(torch, x, g, slope, create_graph, transposed)
    for a, b in zip(got, want):
        _assert_same_bits(a, b)


@pytest.mark.parametrize("slope", [0.2, 3.0, -0.5])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_leaky_relu_forward_of_halves_matches_torch(dtype, slope):
    x = np.array(_SPECIAL + [60000.0, -60000.0, 1e-5, -1e-5], "float32")
    got = kiln.nn.functional.leaky_relu(kiln.tensor(x).to(getattr(kiln, dtype)), slope)
    want = torch.nn.functional.leaky_relu(torch.tensor(x).to(getattr(torch, dtype)), slope)
    _assert_same_bits(got.float().numpy(), want.float().numpy())


def test_leaky_relu_gradient_of_a_sum_matches_torch():
    """A broadcast (stride-0) gradient goes through the bit select."""
    x = np.random.default_rng(1).standard_normal((6, 5)).astype("float32")
    grads = []
    for lib in (kiln, torch):
        xt = lib.tensor(x, requires_grad=True)
        lib.nn.functional.leaky_relu(xt, 0.2).sum().backward()
        grads.append(xt.grad.numpy())
    _assert_same_bits(*grads)
