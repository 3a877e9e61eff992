"""Channels-last results of the spatial ops: convolution, pooling, padding, resampling, the
shuffles, ``roll``, ``index_fill`` and ``stack`` lay out their results (and the input gradients
of their own derivatives) as PyTorch's do, eagerly, in the meta (which compiled graphs plan
with) and compiled. A later ``view``, ``is_contiguous(memory_format=...)`` or ``stride()`` of
a result then behaves as it does in PyTorch."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from tests.oracle import needs_torch, torch

pytestmark = needs_torch


def _spatial_ops(lib):
    """name -> (function, input shapes): the first input channels-last (channels_last_3d for
    5-d), the others too where they are 4-d or 5-d (a convolution's weight)."""
    F = lib.nn.functional
    image, volume = (2, 3, 6, 7), (2, 3, 4, 5, 6)
    return {
        "conv2d": (lambda x, w: F.conv2d(x, w, padding=1), [image, (4, 3, 3, 3)]),
        "conv2d-stride2": (lambda x, w: F.conv2d(x, w, stride=2), [(2, 3, 8, 9), (5, 3, 3, 3)]),
        "conv2d-groups": (lambda x, w: F.conv2d(x, w, groups=3), [(2, 6, 6, 7), (6, 2, 3, 3)]),
        "conv2d-depthwise": (
            lambda x, w: F.conv2d(x, w, groups=6, padding=1),
            [(2, 6, 6, 7), (6, 1, 3, 3)],
        ),
        "conv2d-1x1": (lambda x, w: F.conv2d(x, w), [image, (5, 3, 1, 1)]),
        "conv2d-weight-only": (lambda x, w: F.conv2d(x.contiguous(), w), [image, (4, 3, 3, 3)]),
        "conv3d": (lambda x, w: F.conv3d(x, w), [volume, (4, 3, 2, 2, 2)]),
        "conv_transpose2d": (
            lambda x, w: F.conv_transpose2d(x, w, stride=2),
            [(2, 3, 5, 6), (3, 4, 3, 3)],
        ),
        "max_pool2d": (lambda x: F.max_pool2d(x, 2), [image]),
        "max_pool2d-indices": (lambda x: F.max_pool2d(x, 3, 2, 1, return_indices=True), [image]),
        "max_pool3d": (lambda x: F.max_pool3d(x, 2), [volume]),
        "avg_pool2d": (lambda x: F.avg_pool2d(x, 3, 2, 1), [image]),
        "avg_pool3d": (lambda x: F.avg_pool3d(x, 2), [volume]),
        "adaptive_avg_pool2d": (lambda x: F.adaptive_avg_pool2d(x, (3, 2)), [image]),
        "adaptive_avg_pool2d-global": (lambda x: F.adaptive_avg_pool2d(x, 1), [image]),
        "adaptive_max_pool2d": (lambda x: F.adaptive_max_pool2d(x, (3, 2)), [image]),
        "adaptive_avg_pool3d": (lambda x: F.adaptive_avg_pool3d(x, 2), [volume]),
        "pad-constant": (lambda x: F.pad(x, (1, 2, 3, 4)), [image]),
        "pad-constant-3d": (lambda x: F.pad(x, (1, 2, 1, 1, 1, 0)), [volume]),
        "pad-reflect": (lambda x: F.pad(x, (1, 2, 3, 1), mode="reflect"), [image]),
        "pad-replicate": (lambda x: F.pad(x, (1, 2, 3, 1), mode="replicate"), [image]),
        "pad-circular": (lambda x: F.pad(x, (1, 2, 3, 1), mode="circular"), [image]),
        "nearest": (lambda x: F.interpolate(x, scale_factor=2), [image]),
        "nearest-exact": (lambda x: F.interpolate(x, (5, 9), mode="nearest-exact"), [image]),
        "bilinear": (lambda x: F.interpolate(x, scale_factor=2, mode="bilinear"), [image]),
        "bilinear-antialias": (
            lambda x: F.interpolate(x, (3, 4), mode="bilinear", antialias=True),
            [image],
        ),
        "bicubic": (
            lambda x: F.interpolate(x, (4, 9), mode="bicubic", align_corners=True),
            [image],
        ),
        "trilinear": (lambda x: F.interpolate(x, scale_factor=2, mode="trilinear"), [volume]),
        "upsample-module": (lambda x: lib.nn.Upsample(scale_factor=2)(x), [image]),
        "pixel_shuffle": (lambda x: F.pixel_shuffle(x, 2), [(2, 8, 3, 4)]),
        "pixel_unshuffle": (lambda x: F.pixel_unshuffle(x, 2), [(2, 3, 6, 4)]),
        "channel_shuffle": (lambda x: lib.nn.ChannelShuffle(3)(x), [(2, 6, 3, 4)]),
        "roll": (lambda x: x.roll(1, 2), [image]),
        "roll-two-dims": (lambda x: x.roll((1, 2), (1, 3)), [image]),
        "roll-flattened": (lambda x: x.roll(5), [image]),
        "index_fill": (lambda x: x.index_fill(1, lib.tensor([0, 2]), 0.5), [image]),
        "flip": (lambda x: x.flip(2), [image]),
        "stack": (lambda x: lib.stack([x, x * 2]), [image]),
        "stack-dim1": (lambda x: lib.stack([x, x * 2], 1), [image]),
        "stack-last": (lambda x: lib.stack([x, x * 2], -1), [image]),
        "unfold": (lambda x: F.unfold(x, 2), [image]),
        "conv_transpose2d-groups": (
            lambda x, w: F.conv_transpose2d(x, w, stride=2, output_padding=1, groups=3),
            [(2, 6, 5, 6), (6, 2, 3, 3)],
        ),
        "max_pool2d-ceil-dilated": (
            lambda x: F.max_pool2d(x, 2, 2, dilation=2, ceil_mode=True),
            [image],
        ),
        "lp_pool2d": (lambda x: F.lp_pool2d(x, 2, 2), [image]),
        "area": (lambda x: F.interpolate(x, (3, 4), mode="area"), [image]),
        "pad-reflect-3d": (lambda x: F.pad(x, (1, 1, 1, 1, 1, 1), mode="reflect"), [volume]),
    }


# their own derivatives lay out the input gradient as PyTorch's backward kernels do (the
# others' gradients are computed by the ops they are built of; values are right)
_GRADIENT_LAYOUTS = {
    "conv2d",
    "conv2d-stride2",
    "conv2d-groups",
    "conv2d-depthwise",
    "conv2d-1x1",
    "conv2d-weight-only",
    "conv3d",
    "conv_transpose2d",
    "conv_transpose2d-groups",
    "max_pool2d",
    "max_pool2d-ceil-dilated",
    "max_pool2d-indices",
    "max_pool3d",
    "avg_pool2d",
    "avg_pool3d",
    "adaptive_max_pool2d",
    "adaptive_avg_pool2d-global",
    "pad-constant",
    "pad-constant-3d",
    "roll",
    "roll-flattened",
    "flip",
    "stack",
    "stack-dim1",
    "stack-last",
    "unfold",
}


def _channels_last(lib, t):
    if t.ndim == 4:
        return t.contiguous(memory_format=lib.channels_last)
    if t.ndim == 5:
        return t.contiguous(memory_format=lib.channels_last_3d)
    return t


def _inputs(lib, shapes, requires_grad=False):
    rng = np.random.default_rng(0)
    data = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    return [_channels_last(lib, lib.tensor(d)).requires_grad_(requires_grad) for d in data]


def _results(out) -> list:
    return list(out) if isinstance(out, tuple) else [out]


def _strides(out) -> list:
    return [tuple(r.stride()) for r in _results(out)]


def _run_with_grads(lib, fn, shapes):
    """The results and the gradients of the inputs, the output gradients laid out as the
    results (as ``randn_like`` would make them)."""
    inputs = _inputs(lib, shapes, requires_grad=True)
    results = _results(fn(*inputs))
    floats = [r for r in results if r.dtype.is_floating_point]
    rng = np.random.default_rng(1)
    grads_out = [
        lib.empty_like(r).copy_(lib.tensor(rng.standard_normal(tuple(r.shape)).astype(np.float32)))
        for r in floats
    ]
    grads = lib.autograd.grad(floats, inputs, grads_out)
    return results, list(grads)


def _assert_same(got: list, expected: list) -> None:
    assert [tuple(g.stride()) for g in got] == [tuple(e.stride()) for e in expected]
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g.detach().numpy(), e.detach().numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("op", sorted(_spatial_ops(kiln)))
def test_result_strides_match_torch_and_the_meta(op):
    fn, shapes = _spatial_ops(kiln)[op]
    got = fn(*_inputs(kiln, shapes))
    torch_fn, _ = _spatial_ops(torch)[op]
    _assert_same(_results(got), _results(torch_fn(*_inputs(torch, shapes))))
    meta = fn(*[x.to("meta") for x in _inputs(kiln, shapes)])
    assert _strides(meta) == _strides(got)


@pytest.mark.parametrize("op", sorted(_GRADIENT_LAYOUTS))
def test_input_gradient_strides_match_torch(op):
    fn, shapes = _spatial_ops(kiln)[op]
    results, grads = _run_with_grads(kiln, fn, shapes)
    expected_results, expected_grads = _run_with_grads(torch, _spatial_ops(torch)[op][0], shapes)
    _assert_same(results, expected_results)
    _assert_same(grads, expected_grads)


_COMPILED = [
    "conv2d",
    "conv2d-1x1",
    "conv2d-depthwise",
    "adaptive_avg_pool2d-global",
    "conv2d-weight-only",
    "conv_transpose2d",
    "conv3d",
    "max_pool2d-indices",
    "avg_pool2d",
    "avg_pool3d",
    "adaptive_avg_pool2d",
    "adaptive_max_pool2d",
    "pad-constant",
    "pad-reflect",
    "bilinear",
    "nearest",
    "pixel_shuffle",
    "roll",
    "index_fill",
    "flip",
    "stack-dim1",
    "unfold",
]


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("op", _COMPILED)
def test_compiled_results_have_the_strides_of_torch(op, backend):
    fn, shapes = _spatial_ops(kiln)[op]
    compiled = kiln.compile(fn, backend=backend, dynamic=False)
    results, grads = _run_with_grads(kiln, compiled, shapes)
    expected_results, expected_grads = _run_with_grads(torch, _spatial_ops(torch)[op][0], shapes)
    _assert_same(results, expected_results)
    if op in _GRADIENT_LAYOUTS:
        _assert_same(grads, expected_grads)
    else:
        for g, e in zip(grads, expected_grads):
            np.testing.assert_allclose(g.numpy(), e.numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("op", ["conv2d", "conv2d-1x1", "conv2d-stride2", "conv2d-weight-only"])
def test_compiled_results_for_every_size_have_the_strides_of_torch(op):
    """Under ``dynamic=True`` a convolution's product (batch and channels swapped, or padded
    rows) is copied into the channels-last layout its symbolic meta gives, as for static
    sizes, not returned as the product's view ((16, 32, 4, 1) for a (2, 3, 4, 4) result)."""
    fn, shapes = _spatial_ops(kiln)[op]
    compiled = kiln.compile(fn, backend="inductor", dynamic=True)
    got = _results(compiled(*_inputs(kiln, shapes)))
    _assert_same(got, _results(_spatial_ops(torch)[op][0](*_inputs(torch, shapes))))


@pytest.mark.parametrize("mode", ["eager", "static", "dynamic"])
@pytest.mark.parametrize("shapes", [((2, 1, 4, 4), (3, 1, 1, 1)), ((1, 4, 2), (2, 1, 1, 1))])
def test_one_element_filters_keep_a_row_major_result(shapes, mode):
    """A (O, 1, 1, 1) weight's strides are channels-last's and row-major's at once: c10 calls
    that tie row-major, and so must the meta of symbolic sizes (a dynamic compile gave a
    channels-last result; fuzz campaign --check inductor-dynamic --seed 131)."""

    def run(lib):
        rng = np.random.default_rng(0)
        x, w = (lib.tensor(rng.standard_normal(s).astype(np.float32)) for s in shapes)
        fn = lib.nn.functional.conv2d
        if lib is kiln and mode != "eager":
            fn = kiln.compile(fn, backend="inductor", dynamic=mode == "dynamic")
        return fn(x, w.requires_grad_())

    _assert_same([run(kiln)], [run(torch)])


@pytest.mark.parametrize("op", ["conv2d", "max_pool2d", "avg_pool2d", "pad-constant", "bilinear"])
def test_row_major_inputs_keep_row_major_results(op):
    fn, shapes = _spatial_ops(kiln)[op]
    rng = np.random.default_rng(0)
    inputs = [kiln.tensor(rng.standard_normal(s).astype(np.float32)) for s in shapes]
    for result in _results(fn(*inputs)):
        assert result.is_contiguous()


def test_a_resnet_stem_stays_channels_last():
    """conv, batch norm, relu, max pool, a residual conv and global pooling on a channels-last
    batch: every activation channels-last as in PyTorch, and the pooled features flatten."""

    def stem(lib, x, w1, w2):
        F = lib.nn.functional
        y = F.max_pool2d(
            F.relu(F.batch_norm(F.conv2d(x, w1, padding=1), None, None, training=True)), 2
        )
        z = F.relu(F.conv2d(y, w2, padding=1) + y)
        pooled = F.adaptive_avg_pool2d(z, 1)
        return y, z, pooled, pooled.flatten(1)

    shapes = [(2, 3, 8, 8), (4, 3, 3, 3), (4, 4, 3, 3)]
    got = stem(kiln, *_inputs(kiln, shapes))
    expected = stem(torch, *_inputs(torch, shapes))
    _assert_same(list(got), list(expected))
    for y in got[:2]:
        assert y.is_contiguous(memory_format=kiln.channels_last)


def _conv1d_calls(lib) -> dict:
    F = lib.nn.functional
    return {
        "conv1d": (lambda x, w: F.conv1d(x, w, padding=1), (2, 3, 5), (4, 3, 2)),
        "conv1d-unbatched-strided": (
            lambda x, w: F.conv1d(x, w, stride=2, padding=1, dilation=2),
            (3, 6),
            (4, 3, 2),
        ),
        "conv1d-groups": (lambda x, w: F.conv1d(x, w, groups=2), (2, 6, 5), (4, 3, 2)),
        "conv_transpose1d": (lambda x, w: F.conv_transpose1d(x, w, stride=2), (2, 3, 5), (3, 4, 2)),
    }


@pytest.mark.parametrize("input_order", ["row-major", "transposed"])
@pytest.mark.parametrize("backend", [None, "aot_eager", "inductor"], ids=["eager", "aot", "ind"])
@pytest.mark.parametrize("op", sorted(_conv1d_calls(kiln)))
def test_1d_convolution_with_a_permuted_weight_is_channels_last_as_torch(op, backend, input_order):
    """PyTorch runs a 1-d convolution as a 2-d one of a contiguous copy of the input and the
    weight viewed (O, C, 1, K): a weight stored (O, K, C) suggests channels-last, so the
    result is (N, L, C)-ordered whatever the input's layout."""

    def run(lib):
        fn, x_shape, w_shape = _conv1d_calls(lib)[op]
        rng = np.random.default_rng(0)
        x = lib.tensor(rng.standard_normal(x_shape).astype(np.float32))
        if input_order == "transposed":
            x = x.transpose(-1, -2).contiguous().transpose(-1, -2)
        stored = (w_shape[0], w_shape[2], w_shape[1])
        w = lib.tensor(rng.standard_normal(stored).astype(np.float32)).permute(0, 2, 1)
        if lib is kiln and backend is not None:
            fn = kiln.compile(fn, backend=backend, dynamic=False)
        return fn(x, w)

    _assert_same([run(kiln)], [run(torch)])
