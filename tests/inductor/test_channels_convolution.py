"""Compiled convolutions of small images through the channels-in-lanes loop
(``extern_convolution.conv2d_channels_out``): the forward pass, the weight gradient (a
convolution whose output is the kernel) and a stride-1 transposed layer equal PyTorch's and
eager kiln's over strides, padding, dilation, odd sizes and channel counts of one to four
vectors; layers the loop does not take (output channels not whole vectors, wide rows, groups)
keep the columns lowering; the numpy fallback computes the loop's sums."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
import kiln.nn.functional as F
from kiln.bench.dumps import observe_compiled_graphs
from kiln.inductor import config, extern_convolution
from kiln.inductor.ir import ExternBuffer
from kiln.inductor.lowering import convolution as convolution_lowering
from kiln.runtime import machine_code
from tests.oracle import assert_close, needs_torch, torch

# (input shape, output channels, kernel, stride, padding, dilation)
CASES = {
    "dcgan_discriminator": ((4, 32, 8, 8), 64, 4, 2, 1, 1),
    "dcgan_first_layer": ((3, 3, 16, 16), 32, 4, 2, 1, 1),
    "odd_image": ((2, 5, 7, 9), 16, 3, 2, 1, 1),
    "rows_and_columns_strides": ((3, 6, 9, 11), 48, 3, (2, 1), (0, 2), 1),
    "dilated": ((2, 7, 9, 6), 32, 3, 1, 2, 2),
    "no_padding": ((5, 4, 6, 6), 16, 2, 1, 0, 1),
}


@pytest.fixture(autouse=True)
def _schedules_kept(monkeypatch):
    """Graphs compiled afresh: one rebuilt from the compiled-graph cache keeps no schedule,
    which the tests read to see which extern calls a graph makes."""
    monkeypatch.setattr(config, "fx_graph_cache", False)


# the lowering's tile choice: the host's, AVX2's (8 lanes) and AVX-512's (16) on any host
@pytest.fixture(params=[None, "eager", "wide"], ids=lambda k: k or "host")
def tile_knob(request, monkeypatch):
    monkeypatch.setattr(convolution_lowering, "TILES", request.param)
    return request.param


def _externs(observed) -> list:
    return [
        step.buffer.kernel.__name__
        for item in observed
        for step in item.graph.schedule.steps
        if isinstance(getattr(step, "buffer", None), ExternBuffer)
    ]


def _inputs(xs, o, k, seed: int, transposed: bool = False, groups: int = 1):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(xs).astype(np.float32)
    shape = (xs[1], o // groups, k, k) if transposed else (o, xs[1] // groups, k, k)
    return x, (rng.standard_normal(shape) / k).astype(np.float32)


def _run(fn, arrays, compiled: bool):
    tensors = [kiln.tensor(a, requires_grad=True) for a in arrays]
    with observe_compiled_graphs() as observed:
        out = (kiln.compile(fn, fullgraph=True) if compiled else fn)(*tensors)
        (out * out.detach().cos()).sum().backward()
    return out.detach(), [t.grad for t in tensors], _externs(observed)


def _check(fn, torch_fn, arrays):
    """Compiled against eager kiln and PyTorch, forward and both gradients; the externs."""
    got, grads, externs = _run(fn, arrays, compiled=True)
    eager, eager_grads, _ = _run(fn, arrays, compiled=False)
    tensors = [torch.tensor(a, requires_grad=True) for a in arrays]
    expected = torch_fn(*tensors)
    (expected * expected.detach().cos()).sum().backward()
    assert_close(got, expected, rtol=1e-5, atol=1e-5)
    assert_close(got, eager, rtol=1e-5, atol=1e-5)
    for g, e, t in zip(grads, eager_grads, tensors):
        assert_close(g, t.grad, rtol=1e-4, atol=1e-4)
        assert_close(g, e, rtol=1e-4, atol=1e-4)
    return externs


@needs_torch
@pytest.mark.parametrize("name", list(CASES))
def test_channels_loop_matches_torch(name, tile_knob):
    xs, o, k, stride, padding, dilation = CASES[name]

    def fn(x, w):
        # the input's producer (a leaky ReLU, as a DCGAN discriminator's) fuses into the
        # padded copy; the consumer reads the channels-last output as NCHW
        return (
            F.conv2d(F.leaky_relu(x * 0.5 + 0.25, 0.2), w, None, stride, padding, dilation) * 1.5
        ).tanh()

    def torch_fn(x, w):
        y = torch.nn.functional.leaky_relu(x * 0.5 + 0.25, 0.2)
        return torch.tanh(torch.nn.functional.conv2d(y, w, None, stride, padding, dilation) * 1.5)

    externs = _check(fn, torch_fn, _inputs(xs, o, k, sum(map(ord, name))))
    # the forward pass, and the weight gradient where its output channels (the layer's) are
    # whole vectors and its kernel (the output gradient's image) has enough taps
    assert externs.count("conv2d_channels_out") >= 1, externs


@needs_torch
def test_weight_gradient_runs_the_loop(tile_knob):
    """The weight gradient's convolution (the batch as its channels, the output gradient's
    image as its kernel, the stride as its dilation) takes the loop, as the forward pass does:
    no columns copy and product left for either."""
    xs, o, k, stride, padding, _ = CASES["dcgan_discriminator"]

    def fn(x, w):
        return F.conv2d(x, w, None, stride, padding)

    def torch_fn(x, w):
        return torch.nn.functional.conv2d(x, w, None, stride, padding)

    externs = _check(fn, torch_fn, _inputs(xs, o, k, 7))
    # forward, weight gradient; the input gradient is a transposed layer at stride 2
    assert externs.count("conv2d_channels_out") == 2, externs


@needs_torch
def test_weight_gradient_of_a_saved_permuted_input_is_copied_contiguous():
    """A 1x1 layer's weight gradient reads the input with batch and channels swapped; saved for
    the backward graph as that permuted view (an input of it, stored in another order), it is
    copied before the loop reads it as contiguous (a U-Net's ``proj_out`` got its gradient
    from the wrong pixels)."""

    def fn(x, w):
        return F.conv2d(x * 1, w)

    def torch_fn(x, w):
        return torch.nn.functional.conv2d(x * 1, w)

    externs = _check(fn, torch_fn, _inputs((3, 16, 6, 6), 16, 1, 11))
    assert "conv2d_channels_out" in externs, externs


@needs_torch
def test_stride_one_transposed_layer_runs_the_loop(tile_knob):
    """A stride-1 transposed convolution is a forward one over the flipped kernel: the loop."""

    def fn(x, w):
        return F.conv_transpose2d(x, w, None, 1, 1)

    def torch_fn(x, w):
        return torch.nn.functional.conv_transpose2d(x, w, None, 1, 1)

    externs = _check(fn, torch_fn, _inputs((3, 16, 5, 7), 32, 3, 11, transposed=True))
    assert "conv2d_channels_out" in externs, externs


# transposed: (input shape, output channels, kernel, stride, padding, output padding)
TRANSPOSED_CASES = {
    "dcgan_generator": ((4, 64, 4, 4), 32, (4, 4), 2, 1, 0),
    "odd_image": ((3, 16, 3, 5), 16, (4, 4), 2, 1, 0),
    "output_padding": ((2, 8, 5, 4), 32, (4, 4), 2, 1, 1),
    "no_padding": ((2, 5, 3, 3), 16, (2, 2), 2, 0, 0),
    "uneven_strides": ((2, 6, 4, 3), 48, (4, 6), (2, 3), (2, 1), (1, 2)),
}


@needs_torch
@pytest.mark.parametrize("name", list(TRANSPOSED_CASES))
def test_strided_transposed_layer_runs_the_loop_by_phase(name, tile_knob):
    """A transposed convolution whose kernel is whole strides: each output phase a stride-1
    convolution by its part of the kernel, read backwards (a DCGAN generator's upsampling,
    and a strided layer's input gradient)."""
    xs, o, kernel, stride, padding, output_padding = TRANSPOSED_CASES[name]
    rng = np.random.default_rng(sum(map(ord, name)))
    x = rng.standard_normal(xs).astype(np.float32)
    w = (rng.standard_normal((xs[1], o) + kernel) / kernel[0]).astype(np.float32)

    def fn(x, w):
        y = F.conv_transpose2d(x.relu() * 0.5, w, None, stride, padding, output_padding)
        return y.tanh()

    def torch_fn(x, w):
        y = torch.nn.functional.conv_transpose2d(
            torch.relu(x) * 0.5, w, None, stride, padding, output_padding
        )
        return torch.tanh(y)

    externs = _check(fn, torch_fn, (x, w))
    assert externs[0] == "conv2d_channels_transposed_out", externs


@needs_torch
@pytest.mark.parametrize(
    "case",
    [
        ((2, 8, 8, 8), 12, 3, 1, 1, 1),  # output channels not whole vectors
        ((2, 4, 8, 8), 16, 1, 1, 0, 1),  # one tap: a plain product
        ((2, 8, 8, 8), 16, 3, 1, 1, 2),  # groups
    ],
    ids=["ragged_channels", "one_by_one", "groups"],
)
def test_layers_the_loop_leaves_keep_the_columns(case):
    xs, o, k, stride, padding, groups = case
    x, w = _inputs(xs, o, k, 3, groups=groups)

    def fn(x, w):
        return F.conv2d(x, w, None, stride, padding, 1, groups)

    def torch_fn(x, w):
        return torch.nn.functional.conv2d(x, w, None, stride, padding, 1, groups)

    got, _, externs = _run(fn, (x, w), compiled=True)
    tensors = [torch.tensor(a) for a in (x, w)]
    assert_close(got, torch_fn(*tensors), rtol=1e-5, atol=1e-5)
    # the forward pass is a product (the weight gradient may still take the loop: its output
    # channels are the layer's, whole vectors for 16)
    assert externs[0] != "conv2d_channels_out", externs


@needs_torch
def test_wide_rows_keep_their_lowering():
    """Rows of 16 columns or more are the direct loops' (or the columns'), not this loop's."""
    x, w = _inputs((2, 8, 16, 16), 16, 3, 5)
    _, _, externs = _run(lambda x, w: F.conv2d(x, w, None, 1, 1), (x, w), compiled=True)
    assert externs[0] != "conv2d_channels_out", externs


def test_switch_off_gives_the_columns_values(monkeypatch):
    x, w = _inputs(*CASES["dcgan_discriminator"][:3], 13)

    def fn(x, w):
        return F.conv2d(x.relu(), w, None, 2, 1)

    got, grads, externs = _run(fn, (x, w), compiled=True)
    monkeypatch.setattr(config, "direct_convolutions", False)
    off, off_grads, off_externs = _run(fn, (x, w), compiled=True)
    assert "conv2d_channels_out" in externs and "conv2d_channels_out" not in off_externs
    assert_close(got, off, rtol=1e-5, atol=1e-5)
    for g, e in zip(grads, off_grads):
        assert_close(g, e, rtol=1e-4, atol=1e-4)


def _without_machine_code(monkeypatch):
    real_get = machine_code.get
    monkeypatch.setattr(
        machine_code, "get", lambda name: None if name == "convolution_tiles" else real_get(name)
    )


# (lanes, vectors, pixels) tiles, with 64 output channels: whole blocks of every tile's vectors
CHANNEL_TILES = [(16, 4, 4), (16, 2, 8), (8, 2, 4), (8, 1, 8)]


@pytest.mark.parametrize("tiles", CHANNEL_TILES, ids=lambda t: "x".join(map(str, t)))
def test_numpy_fallback_computes_the_loops_sums(monkeypatch, tiles):
    """Without the machine code the extern function computes the same sums with numpy: the
    convolution's, channels-last."""
    lanes, vectors, pixels = tiles
    rng = np.random.default_rng(pixels)
    xp = rng.standard_normal((3, 5, 9, 10)).astype(np.float32)  # padded input
    wt = rng.standard_normal((5, 3, 2, 64)).astype(np.float32)  # (C, KH, KW, O)
    stride, dilation, spatial = (2, 3), (2, 1), (3, 3)
    count = 3 * 3 * 3
    args = (*stride, *dilation, 3, 2, *spatial, lanes, vectors, pixels)
    machine = np.empty((count + pixels - 1, 64), np.float32)
    extern_convolution.conv2d_channels_out(machine, xp, wt, *args)
    _without_machine_code(monkeypatch)
    fallback = np.empty((count + pixels - 1, 64), np.float32)
    extern_convolution.conv2d_channels_out(fallback, xp, wt, *args)
    np.testing.assert_allclose(fallback[:count], machine[:count], rtol=1e-5, atol=1e-5)
    expected = np.zeros((3, 3, 3, 64), np.float32)
    for i in range(3):
        for j in range(2):
            window = xp[
                :,
                :,
                i * dilation[0] : i * dilation[0] + stride[0] * 2 + 1 : stride[0],
                j * dilation[1] : j * dilation[1] + stride[1] * 2 + 1 : stride[1],
            ]
            expected += np.einsum("nchw,co->nhwo", window, wt[:, i, j])
    np.testing.assert_allclose(machine[:count], expected.reshape(count, 64), rtol=1e-5, atol=1e-5)


@needs_torch
@pytest.mark.parametrize("tiles", CHANNEL_TILES, ids=lambda t: "x".join(map(str, t)))
def test_numpy_fallback_computes_the_transposed_loops_sums(monkeypatch, tiles):
    """The same for a transposed layer's phases: both equal PyTorch's transposed convolution."""
    lanes, vectors, pixels = tiles
    rng = np.random.default_rng(pixels)
    x = rng.standard_normal((2, 5, 3, 4)).astype(np.float32)
    w = rng.standard_normal((5, 64, 4, 6)).astype(np.float32)
    stride, padding = (2, 3), (1, 2)
    expected = torch.nn.functional.conv_transpose2d(
        torch.tensor(x), torch.tensor(w), None, stride, padding
    ).numpy()
    oh, ow = expected.shape[2:]
    count = 2 * oh * ow
    # padded by the phase kernel (2, 2) less one before, and as far as the outputs read after
    xp = np.zeros((2, 5, 1 + max(3, (oh - 1 + 1) // 2 + 1), 1 + max(4, (ow - 1 + 2) // 3 + 1)))
    xp[:, :, 1:4, 1:5] = x
    xp = xp.astype(np.float32)
    wt = np.ascontiguousarray(
        w.reshape(5, 64, 2, 2, 2, 3).transpose(3, 5, 0, 2, 4, 1)
    )  # (SH, SW, C, JH, JW, O): w[c, o, ry + 2 j, rx + 3 i]
    args = (*stride, *padding, oh, ow, lanes, vectors, pixels)
    machine = np.empty((count + pixels - 1, 64), np.float32)
    extern_convolution.conv2d_channels_transposed_out(machine, xp, wt, *args)
    _without_machine_code(monkeypatch)
    fallback = np.empty((count + pixels - 1, 64), np.float32)
    extern_convolution.conv2d_channels_transposed_out(fallback, xp, wt, *args)
    nchw = expected.transpose(0, 2, 3, 1).reshape(count, 64)
    np.testing.assert_allclose(machine[:count], nchw, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(fallback[:count], nchw, rtol=1e-4, atol=1e-4)
