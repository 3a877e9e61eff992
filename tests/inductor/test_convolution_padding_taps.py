"""Compiled convolutions leave out the kernel taps that read only padding, as eager kiln and
PyTorch's oneDNN kernels do: a 3x3 layer with padding 1 over 1x1 images (ResNet-18's last
stage) reads its centre tap alone, so an infinite weight at a corner never meets a padding zero
and the output and the input gradient stay finite. The compiled lowering multiplied every tap
and gave NaN (infinity times zero) where eager and PyTorch give numbers."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from tests.oracle import needs_torch, torch

# (batch, in channels, out channels, height, width): images whose border taps read padding only
SHAPES = [(2, 16, 16, 1, 1), (2, 3, 8, 1, 1), (2, 64, 32, 1, 1), (3, 4, 8, 1, 1)]
CORNERS = [(0, 0), (0, 2), (2, 0), (2, 2)]


def _operands(shape, corner):
    n, c, o, h, w = shape
    rng = np.random.default_rng(sum(shape) + 3 * corner[0] + corner[1])
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    weight = rng.standard_normal((o, c, 3, 3)).astype(np.float32)
    weight[:, :, corner[0], corner[1]] = np.inf
    grad = rng.standard_normal((n, o, h, w)).astype(np.float32)
    return x, weight, grad


def _conv(lib, x, w):
    return lib.nn.functional.conv2d(x, w, padding=1)


def _kiln_results(fn, x, weight, grad, channels_last: bool):
    inp = kiln.tensor(x)
    if channels_last:
        inp = inp.contiguous(memory_format=kiln.channels_last)
    inp.requires_grad_()
    w = kiln.tensor(weight, requires_grad=True)
    out = fn(inp, w)
    grads = kiln.autograd.grad(out, (inp, w), kiln.tensor(grad))
    return [out.detach().numpy(), *(g.numpy() for g in grads)]


@needs_torch
@pytest.mark.parametrize("dynamic", [False, True])
@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "channels_last"])
@pytest.mark.parametrize("corner", CORNERS, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_an_infinite_corner_weight_over_padding_stays_finite_compiled(
    shape, corner, channels_last, dynamic
):
    x, weight, grad = _operands(shape, corner)
    tx = torch.tensor(x, requires_grad=True)
    tw = torch.tensor(weight, requires_grad=True)
    tout = _conv(torch, tx, tw)
    expected = [tout.detach().numpy(), *(g.numpy() for g in torch.autograd.grad(
        tout, (tx, tw), torch.tensor(grad)
    ))]  # fmt: skip
    eager = _kiln_results(lambda a, b: _conv(kiln, a, b), x, weight, grad, channels_last)
    compiled = _kiln_results(
        kiln.compile(lambda a, b: _conv(kiln, a, b), dynamic=dynamic),
        x,
        weight,
        grad,
        channels_last,
    )
    for name, got, mine, want in zip(("output", "input grad", "weight grad"), compiled, eager,
                                     expected):  # fmt: skip
        assert np.isfinite(want).all()
        np.testing.assert_allclose(mine, want, rtol=1e-4, atol=1e-4, err_msg=f"eager {name}")
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=f"compiled {name}")
