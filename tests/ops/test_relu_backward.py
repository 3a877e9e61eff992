"""relu's derivative against PyTorch: the bit-select form of a plain backward and the kiln-op
``where`` form under ``create_graph``, with NaN inputs, inf/NaN gradients, signed zeros and
non-contiguous or broadcast gradients."""

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
