"""Eager direct convolution loops (``kiln.ops.nn.conv_direct``) on the host's tiles and over flat
planes, against PyTorch.

A stride-1 layer whose output rows are not whole vectors walks each image's padded plane as one
flat row; that walk also takes layers of up to ``PLANE_CHANNEL_TAPS`` channels by taps (the MNIST
CNN's input gradient). Both tiles are checked: eager mode's 8-lane module and, where the host has
AVX-512, the 16-lane compiled tiles eager mode takes there.
"""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.ops.nn import conv_direct
from kiln.runtime import machine_code
from tests.oracle import needs_torch, torch

pytestmark = needs_torch


def _host_tiles():
    tiles = machine_code.get("convolution_tiles")
    return tiles if tiles is not None and tiles.host_lanes >= 16 else None


@pytest.fixture(params=["eager-module", "host-tiles"])
def loops(request, monkeypatch):
    """The loops the convolutions run: eager mode's 8-lane module, or the host's tiles."""
    if request.param == "eager-module":
        module = machine_code.get("convolution")
        monkeypatch.setattr(conv_direct, "_kernels", lambda: module)
    elif _host_tiles() is None:
        pytest.skip("no AVX-512 on this host: eager mode runs its 8-lane module")
    return request.param


def _run(lib, x, w, b, stride, padding):
    leaves = [lib.tensor(a, requires_grad=True) for a in (x, w, b)]
    y = lib.nn.functional.conv2d(*leaves, stride, padding)
    g = np.cos(np.arange(y.numel())).reshape(tuple(y.shape)).astype(np.float32)
    y.backward(lib.tensor(g))
    return [y.detach().numpy()] + [t.grad.numpy() for t in leaves]


def _compare(x, w, b, stride=1, padding=0):
    want = _run(torch, x, w, b, stride, padding)
    got = _run(kiln, x, w, b, stride, padding)
    for name, mine, theirs in zip(("out", "grad_x", "grad_w", "grad_b"), got, want):
        assert mine.shape == theirs.shape, name
        assert mine.strides == theirs.strides, name
        np.testing.assert_allclose(mine, theirs, rtol=2e-4, atol=2e-4, err_msg=name)


@pytest.mark.parametrize(
    "n, c, o, h, w, k, padding",
    [
        (3, 32, 64, 26, 26, 3, 0),  # the MNIST CNN's second layer (its input gradient: 64x9)
        (2, 64, 32, 22, 22, 3, 2),  # the same input gradient's shape as a forward pass
        (2, 5, 7, 13, 21, 5, 2),  # odd sizes, a 5x5 kernel, a last channel block of 3
        (1, 16, 9, 9, 40, 3, 1),  # wide, short images
        (2, 1, 32, 28, 28, 3, 0),  # the MNIST CNN's first layer
    ],
)
def test_stride_one_layers_match_torch(n, c, o, h, w, k, padding, loops):
    rng = np.random.default_rng(c * o + h)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    wt = rng.standard_normal((o, c, k, k)).astype(np.float32) * 0.1
    b = rng.standard_normal(o).astype(np.float32)
    _compare(x, wt, b, 1, padding)


@pytest.mark.parametrize("stride", [2, (1, 3)])
def test_strided_layers_on_the_host_tiles_match_torch(stride, loops):
    """Strided layers keep the rows form (rows rounded up to the tile's vectors)."""
    rng = np.random.default_rng(11)
    x = rng.standard_normal((2, 3, 32, 35)).astype(np.float32)
    wt = rng.standard_normal((20, 3, 7, 7)).astype(np.float32) * 0.1
    b = rng.standard_normal(20).astype(np.float32)
    _compare(x, wt, b, stride, 3)


def test_flat_planes_are_walked_where_rows_round_up(monkeypatch):
    """16 lanes: 24-column rows compute 32 columns each, the plane 26 a row: the planes' walk.
    8 lanes: 24 columns are whole vectors, the rows form runs (and above 288 channels by taps
    the planes' walk, as the rows form stops there)."""
    a = np.zeros((2, 32, 26, 26), np.float32)
    for lanes, plane in ((16, (3, 8, 208)), (8, None)):
        monkeypatch.setattr(conv_direct, "_lanes", lambda _kernels, lanes=lanes: lanes)
        x = conv_direct._phase_input_for(a, (64, 32, 3, 3), (1, 1), [(0, 0), (0, 0)], (24, 24))
        assert x.plane == plane and x.lanes == lanes
    g = np.zeros((2, 64, 24, 24), np.float32)
    x = conv_direct._phase_input_for(g, (32, 64, 3, 3), (1, 1), [(2, 2), (2, 2)], (26, 26))
    assert x.plane is not None  # 64 channels by 9 taps: past the rows form's bound


def test_infinite_input_read_by_the_planes_padding_columns(loops):
    """The planes' walk computes columns past each output row, their output gradient zero: an
    infinite input those columns read would give NaN (zero times infinity) where PyTorch's
    weight gradient is infinite; the weight gradient is computed again in numpy."""
    rng = np.random.default_rng(12)
    x = rng.standard_normal((2, 4, 20, 20)).astype(np.float32)
    x[1, 2, 5, 18] = np.inf
    wt = rng.standard_normal((6, 4, 3, 3)).astype(np.float32)
    b = np.zeros(6, np.float32)
    want = _run(torch, x, wt, b, 1, 0)[2]
    got = _run(kiln, x, wt, b, 1, 0)[2]
    assert np.isinf(want).any()
    np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-4)


def test_the_planes_input_is_kept_for_the_weight_gradient(monkeypatch):
    """A layer whose im2col columns exceed the size kept (the MNIST CNN's second: 42 MB)
    still keeps the loops' padded input: the weight gradient reads it, copying nothing again."""
    from kiln.ops.nn import conv

    monkeypatch.setattr(conv, "_KEEP_COLUMNS_BYTES", 0)
    copies = []
    real = conv_direct._plane_input

    def counting(*args):
        copies.append(args[0].shape)
        return real(*args)

    monkeypatch.setattr(conv_direct, "_plane_input", counting)
    monkeypatch.setattr(conv_direct, "_lanes", lambda _kernels: 16)
    if _host_tiles() is None:
        pytest.skip("no AVX-512 on this host")
    rng = np.random.default_rng(13)
    x = rng.standard_normal((2, 8, 26, 26)).astype(np.float32)
    wt = rng.standard_normal((16, 8, 3, 3)).astype(np.float32)
    b = rng.standard_normal(16).astype(np.float32)
    want = _run(torch, x, wt, b, 1, 0)
    weight = kiln.tensor(wt, requires_grad=True)
    y = kiln.nn.functional.conv2d(kiln.tensor(x), weight, kiln.tensor(b))
    g = np.cos(np.arange(y.numel())).reshape(tuple(y.shape)).astype(np.float32)
    y.backward(kiln.tensor(g))
    assert copies == [x.shape]
    np.testing.assert_allclose(weight.grad.numpy(), want[2], rtol=2e-4, atol=2e-4)
