"""A convolution whose border taps read only padding (a 3x3 layer over 1x1 images: ResNet-18's
last stage). Its weight gradient is computed for the live taps alone and padded with zeros, as
eager kiln's kernel does: compiled, that is one small product instead of a product as wide as
the whole kernel whose other columns are zero, and the dead taps stay zero where the output
gradient is infinite (the padding's zeros times infinity gave NaN). The forward pass and the
input gradient share one copy of the live taps, which the backward takes saved, not the whole
weight. A weight gradient written by its product in the weight's order is returned without a
copy."""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest

import kiln
from kiln.aot import partition_report
from kiln.ops.core.registry import OPS
from tests.oracle import needs_torch, torch

# (batch, in channels, out channels, image, kernel, conv2d keywords): every one leaves at most a
# quarter of the kernel's taps reading the input
LAYERS = [
    ((2, 16, 16, (1, 1), (3, 3)), {"padding": 1}),
    ((1, 6, 4, (1, 1), (5, 5)), {"padding": 2, "groups": 2}),
    ((3, 8, 8, (1, 1), (3, 3)), {"padding": 2, "dilation": 2}),
    ((2, 4, 8, (1, 1), (3, 3)), {"padding": 1, "stride": 2}),
    ((2, 4, 8, (1, 1), (4, 4)), {"padding": 2}),
    ((1, 5, 7, (1, 1), (7, 7)), {"padding": 3}),
    ((2, 3, 5, (1, 2), (5, 7)), {"padding": (2, 3), "stride": (1, 2)}),
]


def _operands(layer, seed: int = 0):
    (n, c, o, image, kernel), keywords = layer
    rng = np.random.default_rng(seed + n + c + o)
    x = rng.standard_normal((n, c) + image).astype(np.float32)
    w = rng.standard_normal((o, c // keywords.get("groups", 1)) + kernel).astype(np.float32)
    return x, w


def _results(lib, fn, x, w, grad):
    tx = lib.tensor(x, requires_grad=True)
    tw = lib.tensor(w, requires_grad=True)
    out = fn(tx, tw)
    grads = lib.autograd.grad(out, (tx, tw), lib.tensor(grad))
    return [out.detach().numpy(), *(g.numpy() for g in grads)]


def _conv(lib, keywords):
    return lambda a, b: lib.nn.functional.conv2d(a, b, **keywords)


@needs_torch
@pytest.mark.parametrize("layer", LAYERS, ids=lambda layer: str(layer[1]))
def test_compiled_gradients_over_dead_taps_equal_torch(layer):
    keywords = layer[1]
    x, w = _operands(layer)
    expected_out = _conv(torch, keywords)(torch.tensor(x), torch.tensor(w))
    grad = np.random.default_rng(1).standard_normal(tuple(expected_out.shape)).astype(np.float32)
    expected = _results(torch, _conv(torch, keywords), x, w, grad)
    compiled = _results(kiln, kiln.compile(_conv(kiln, keywords)), x, w, grad)
    for name, got, want in zip(("output", "input grad", "weight grad"), compiled, expected):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=name)


@pytest.mark.parametrize("layer", LAYERS, ids=lambda layer: str(layer[1]))
def test_dead_taps_gradient_stays_zero_for_an_infinite_output_gradient(layer):
    keywords = layer[1]
    x, w = _operands(layer)
    out_shape = kiln.nn.functional.conv2d(kiln.tensor(x), kiln.tensor(w), **keywords).shape
    grad = np.random.default_rng(2).standard_normal(tuple(out_shape)).astype(np.float32)
    grad.flat[0] = np.inf
    eager = _results(kiln, _conv(kiln, keywords), x, w, grad)
    compiled = _results(kiln, kiln.compile(_conv(kiln, keywords)), x, w, grad)
    weight_grad = compiled[2]
    assert np.isnan(weight_grad).sum() < weight_grad.size  # the dead taps are numbers
    for name, got, want in zip(("output", "input grad", "weight grad"), compiled, eager):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=name)


@needs_torch
@pytest.mark.parametrize("batch", [1, 3])
def test_a_module_weight_gradient_over_one_pixel_equals_torch(batch):
    # its product lies in the weight's order: the step returns it without a copy
    x = np.random.default_rng(batch).standard_normal((batch, 24, 1, 1)).astype(np.float32)
    layers = {}
    for lib in (torch, kiln):
        lib.manual_seed(0)
        layers[lib] = lib.nn.Conv2d(24, 40, 3, padding=1, bias=False)
    layers[kiln].weight.data = kiln.tensor(layers[torch].weight.detach().numpy())

    def step(layer, inp):
        layer(inp).square().sum().backward()
        return layer.weight.grad

    want = step(layers[torch], torch.tensor(x)).numpy()
    got = kiln.compile(step)(layers[kiln], kiln.tensor(x))
    assert got.is_contiguous() and tuple(got.shape) == want.shape
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("returned", ["clone alone", "clone and source", "two clones"])
def test_a_returned_clone_of_a_product_never_shares_memory_with_another_output(returned):
    def fn(a, b):
        p = a @ b
        flat = p.reshape(-1).clone()
        if returned == "clone alone":
            return (flat,)
        if returned == "clone and source":
            return flat, p
        return flat, p.reshape(-1).clone()

    rng = np.random.default_rng(3)
    a, b = (kiln.tensor(rng.standard_normal(s).astype(np.float32)) for s in ((5, 7), (7, 6)))
    eager, compiled = fn(a, b), kiln.compile(fn)(a, b)
    for got, want in zip(compiled, eager):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)
    before = [t.numpy().copy() for t in compiled]
    compiled[0].add_(1.0)
    np.testing.assert_array_equal(compiled[0].numpy(), before[0] + 1.0)
    for got, old in zip(compiled[1:], before[1:]):
        np.testing.assert_array_equal(got.numpy(), old)


def test_forward_and_input_gradient_share_one_saved_copy_of_the_live_taps():
    x = kiln.randn(2, 32, 1, 1, requires_grad=True)
    w = kiln.randn(48, 32, 3, 3, requires_grad=True)
    conv = partial(kiln.nn.functional.conv2d, padding=1)
    chosen = partition_report(conv, (x, w))["min_cut_partition"]
    # the forward convolution and the input gradient's (the weight gradient's kernel is the
    # output gradient): both by the (48, 32, 1, 1) live taps
    forward, input_grad = (
        n
        for graph in (chosen.forward, chosen.backward)
        for n in graph.nodes
        if n.target is OPS["convolution"] and tuple(n.args[1].meta["val"].shape)[1:] == (32, 1, 1)
    )
    assert forward.args[1].name == input_grad.args[1].name  # one copy, saved
    assert forward.args[4] == input_grad.args[4] == [0, 0]  # no padding left to read
    saved = [n for n in chosen.backward.nodes if n.op == "placeholder"][: len(chosen.saved)]
    assert all(tuple(n.meta["val"].shape) != (48, 32, 3, 3) for n in saved)  # not the weight
