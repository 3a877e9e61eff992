"""How a convolution's backward reads and writes its weight-shaped operands. The input gradient
of a unit-stride layer over small images (resnet18's 128- and 256-channel 3x3 layers) is the
product ``W^T g`` and col2im, which reads the stored weight through a transposed view, where
the forward form needed a flipped copy of the weight each step; a weight gradient the
derivative transposes into the weight's order is written in that order by the columns product
where the channels-in-lanes loop's channels-last result would need a transposing copy. Both
compiled equal eager kiln and PyTorch over odd sizes, padding, dilation, groups, strides and
input layouts."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
import kiln.nn.functional as F
from tests.inductor.helpers import compile_traced
from tests.oracle import needs_torch, torch

# (batch, in channels, out channels, image, kernel, conv2d keywords): output channels that are
# not whole vectors, so no direct loop takes the forward form of the input gradient
INPUT_GRADIENT_LAYERS = [
    ((2, 36, 44, (2, 2), (3, 3)), {"padding": 1}),
    ((3, 20, 28, (3, 2), (3, 3)), {"padding": 1}),
    ((2, 12, 20, (3, 3), (3, 3)), {"padding": 2, "dilation": 2}),
    ((2, 24, 36, (2, 3), (3, 1)), {"padding": (1, 0), "groups": 2}),
    ((1, 18, 30, (3, 4), (1, 3)), {"padding": (0, 1)}),
]

# the weight gradient's form where output channels outnumber each sum's terms (8 samples by
# 2x2 positions: 32 terms for 64 and 48 channels), and a strided layer's
WEIGHT_GRADIENT_LAYERS = [
    ((8, 48, 64, (2, 2), (3, 3)), {"padding": 1}),
    ((8, 24, 48, (4, 4), (3, 3)), {"padding": 1, "stride": 2}),
    ((4, 16, 64, (3, 3), (3, 3)), {"padding": 1}),
]


def _operands(layer, seed: int = 0):
    (n, c, o, image, kernel), keywords = layer
    rng = np.random.default_rng(seed + n + c + o)
    x = rng.standard_normal((n, c) + image).astype(np.float32)
    w = rng.standard_normal((o, c // keywords.get("groups", 1)) + kernel).astype(np.float32)
    return x, w


def _gradients(lib, x, w, keywords, channels_last: bool):
    tx = lib.tensor(x)
    if channels_last:
        tx = tx.to(memory_format=lib.channels_last)
    tx.requires_grad_(True)
    tw = lib.tensor(w, requires_grad=True)
    conv = keywords.pop("fn")
    out = conv(tx, tw)
    grad = np.random.default_rng(1).standard_normal(tuple(out.shape)).astype(np.float32)
    gx, gw = lib.autograd.grad((out * 0.5).relu(), (tx, tw), lib.tensor(grad))
    return [out.detach(), gx, gw]


def _compare(layer, channels_last: bool) -> None:
    keywords = layer[1]
    x, w = _operands(layer)
    torch_conv = {"fn": lambda a, b: torch.nn.functional.conv2d(a, b, **keywords)}
    torch_results = _gradients(torch, x, w, torch_conv, channels_last)
    eager = _gradients(kiln, x, w, {"fn": lambda a, b: F.conv2d(a, b, **keywords)}, channels_last)
    compiled_conv = kiln.compile(lambda a, b: F.conv2d(a, b, **keywords))
    compiled = _gradients(kiln, x, w, {"fn": compiled_conv}, channels_last)
    for name, got, want, reference in zip(
        ("output", "input grad", "weight grad"), compiled, eager, torch_results
    ):
        assert got.dtype is want.dtype and tuple(got.shape) == tuple(want.shape), name
        assert got.stride() == want.stride() == tuple(reference.stride()), name
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-4, atol=1e-5, err_msg=name)
        np.testing.assert_allclose(
            got.numpy(), reference.detach().numpy(), rtol=1e-4, atol=1e-5, err_msg=name
        )


@needs_torch
@pytest.mark.parametrize("channels_last", [False, True], ids=["contiguous", "channels_last"])
@pytest.mark.parametrize("layer", INPUT_GRADIENT_LAYERS, ids=lambda layer: str(layer[0][1:]))
def test_compiled_input_gradient_over_small_images_equals_eager_and_torch(layer, channels_last):
    _compare(layer, channels_last)


@needs_torch
@pytest.mark.parametrize("channels_last", [False, True], ids=["contiguous", "channels_last"])
@pytest.mark.parametrize("layer", WEIGHT_GRADIENT_LAYERS, ids=lambda layer: str(layer[0][1:]))
def test_compiled_weight_gradient_of_many_channels_equals_eager_and_torch(layer, channels_last):
    _compare(layer, channels_last)


@pytest.mark.parametrize("layer", INPUT_GRADIENT_LAYERS, ids=lambda layer: str(layer[0][1:]))
def test_the_input_gradient_reads_the_weight_without_a_flipped_copy(layer):
    (n, c, o, image, kernel), keywords = layer
    x, w = _operands(layer)
    out_shape = tuple(F.conv2d(kiln.tensor(x), kiln.tensor(w), **keywords).shape)
    g = kiln.tensor(np.random.default_rng(2).standard_normal(out_shape).astype(np.float32))
    weight = kiln.tensor(w)
    groups = keywords.get("groups", 1)

    def input_grad(g, weight):
        # the derivative's transposed convolution back to the input's size
        back = F.conv_transpose2d(
            g, weight, None, 1, keywords["padding"], 0, groups, keywords.get("dilation", 1)
        )
        return back.sin()

    compiled = compile_traced(input_grad, g, weight)
    flipped = (c, o // groups) + kernel
    copied = [k for k in compiled.schedule.kernels if tuple(k.outer) == flipped]
    assert not copied, [list(k.outer) for k in compiled.schedule.kernels]
    np.testing.assert_allclose(
        compiled(g, weight)[0].numpy(), input_grad(g, weight).numpy(), rtol=1e-5, atol=1e-5
    )


@pytest.mark.parametrize("layer", WEIGHT_GRADIENT_LAYERS[:1], ids=lambda layer: str(layer[0][1:]))
def test_the_weight_gradient_is_written_in_the_weights_order(layer):
    (n, c, o, image, kernel), keywords = layer
    x, w = _operands(layer)
    out_shape = tuple(F.conv2d(kiln.tensor(x), kiln.tensor(w), **keywords).shape)
    g = kiln.tensor(np.random.default_rng(3).standard_normal(out_shape).astype(np.float32))
    xt = kiln.tensor(x)
    padding = [keywords["padding"]] * 2

    def weight_grad(x, g):
        # the derivative's form: the input's image convolved by the output gradient's, batch and
        # channels swapped, the result transposed into the weight's order
        swapped = kiln.ops.convolution(
            x.transpose(0, 1), g.transpose(0, 1), None, [1, 1], padding, [1, 1], False, [0, 0], 1
        )
        return swapped.transpose(0, 1).contiguous()

    compiled = compile_traced(weight_grad, xt, g)
    transposing = [k for k in compiled.schedule.kernels if tuple(k.outer) == (o, c) + kernel]
    assert not transposing
    got = compiled(xt, g)[0]
    want = weight_grad(xt, g)
    assert got.stride() == want.stride() == tuple(kiln.empty((o, c) + kernel).stride())
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-5)
