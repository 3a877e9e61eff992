"""``kiln.nn.grad`` (and ``F.grad``): a convolution's input and weight gradients against
PyTorch's ``torch.nn.grad`` on the same data, over strides, padding, dilation, groups and odd
sizes; and against kiln's own autograd of the convolution."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
import kiln.nn.functional as F
from tests.oracle import needs_torch, torch

pytestmark = needs_torch

# (spatial dims, input shape, weight shape, stride, padding, dilation, groups)
CASES = [
    (1, (2, 3, 11), (4, 3, 3), 1, 0, 1, 1),
    (1, (1, 4, 9), (6, 2, 2), 2, 1, 1, 2),
    (1, (2, 2, 13), (2, 2, 3), 3, 2, 2, 1),
    (2, (2, 3, 7, 6), (5, 3, 3, 2), 1, 1, 1, 1),
    (2, (1, 4, 9, 8), (4, 1, 3, 3), (2, 1), (1, 0), (1, 2), 4),
    (2, (3, 2, 6, 5), (3, 2, 2, 3), 2, 0, 1, 1),
    (3, (1, 2, 5, 6, 4), (3, 2, 2, 3, 2), 1, 0, 1, 1),
    (3, (2, 4, 7, 5, 6), (4, 2, 3, 2, 3), (2, 1, 2), 1, (1, 2, 1), 2),
]


def _data(case, seed):
    dims, x_shape, w_shape, stride, padding, dilation, groups = case
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(x_shape)
    w = rng.standard_normal(w_shape)
    out = getattr(torch.nn.functional, f"conv{dims}d")(
        torch.from_numpy(x), torch.from_numpy(w), None, stride, padding, dilation, groups
    )
    g = rng.standard_normal(tuple(out.shape))
    return x, w, g


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}d-{c[1]}-{c[3]}-{c[6]}")
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_input_gradient_matches_pytorch(case, dtype):
    dims, x_shape, _, stride, padding, dilation, groups = case
    x, w, g = _data(case, 1)
    k = lambda a: kiln.tensor(a, dtype=getattr(kiln, dtype))  # noqa: E731
    t = lambda a: torch.tensor(a, dtype=getattr(torch, dtype))  # noqa: E731
    ours = getattr(kiln.nn.grad, f"conv{dims}d_input")(
        x_shape, k(w), k(g), stride, padding, dilation, groups
    )
    theirs = getattr(torch.nn.grad, f"conv{dims}d_input")(
        x_shape, t(w), t(g), stride, padding, dilation, groups
    )
    assert ours.dtype is getattr(kiln, dtype) and tuple(ours.shape) == tuple(theirs.shape)
    tol = 1e-4 if dtype == "float32" else 1e-10
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=tol, atol=tol)


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}d-{c[1]}-{c[3]}-{c[6]}")
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_weight_gradient_matches_pytorch(case, dtype):
    dims, _, w_shape, stride, padding, dilation, groups = case
    x, w, g = _data(case, 2)
    k = lambda a: kiln.tensor(a, dtype=getattr(kiln, dtype))  # noqa: E731
    t = lambda a: torch.tensor(a, dtype=getattr(torch, dtype))  # noqa: E731
    ours = getattr(F.grad, f"conv{dims}d_weight")(
        k(x), w_shape, k(g), stride, padding, dilation, groups
    )
    theirs = getattr(torch.nn.functional.grad, f"conv{dims}d_weight")(
        t(x), w_shape, t(g), stride, padding, dilation, groups
    )
    assert ours.dtype is getattr(kiln, dtype) and tuple(ours.shape) == tuple(theirs.shape)
    tol = 1e-4 if dtype == "float32" else 1e-10
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=tol, atol=tol)
    assert not ours.requires_grad


def test_gradients_equal_autograd_of_the_convolution():
    x = kiln.randn(2, 3, 10, 9, requires_grad=True)
    w = kiln.randn(4, 3, 3, 3, requires_grad=True)
    out = F.conv2d(x, w, stride=2, padding=1)
    g = kiln.randn(*out.shape)
    gx, gw = kiln.autograd.grad(out, (x, w), g)
    np.testing.assert_allclose(
        kiln.nn.grad.conv2d_input(x.shape, w, g, stride=2, padding=1).detach().numpy(),
        gx.numpy(),
        rtol=1e-5,
        atol=1e-5,
    )
    np.testing.assert_allclose(
        kiln.nn.grad.conv2d_weight(x, w.shape, g, stride=2, padding=1).detach().numpy(),
        gw.numpy(),
        rtol=1e-5,
        atol=1e-5,
    )


def test_gradient_functions_are_differentiable_like_pytorchs():
    x, w, g = _data(CASES[3], 3)
    results = []
    for lib in (kiln, torch):
        xs, ws, gs = (lib.tensor(a, requires_grad=True) for a in (x, w, g))
        gw = lib.nn.grad.conv2d_weight(xs, w.shape, gs, 1, 1)
        gx = lib.nn.grad.conv2d_input(x.shape, ws, gs, 1, 1)
        (gw.square().sum() + gx.square().sum()).backward()
        results.append([a.grad.detach().numpy() for a in (xs, ws, gs)])
    for ours, theirs in zip(*results, strict=True):
        np.testing.assert_allclose(ours, theirs, rtol=1e-8, atol=1e-8)


def test_input_size_out_of_reach_is_refused():
    w = kiln.randn(2, 1, 3)
    g = kiln.randn(1, 2, 4)
    with pytest.raises(ValueError, match="valid sizes range from 9 to 10"):
        kiln.nn.grad.conv1d_input((1, 1, 12), w, g, stride=2)
