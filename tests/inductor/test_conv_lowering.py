"""The inductor's convolution lowering (im2col/col2im loops around a BLAS product): compiled
forward and backward equal eager kiln and PyTorch over strides, padding, dilation, groups,
odd sizes, layouts and dtypes, and the graphs really use the lowering (no eager fallback)."""

from __future__ import annotations

import contextlib
import logging

import numpy as np
import pytest

import kiln
import kiln.nn.functional as F
from tests.inductor.helpers import compile_traced
from tests.oracle import assert_close, needs_torch, to_torch, torch

# (input shape, weight shape, stride, padding, dilation, groups)
CASES = {
    "2d_same": ((2, 3, 9, 11), (4, 3, 3, 3), 1, 1, 1, 1),
    "2d_stride2": ((2, 5, 13, 10), (6, 5, 3, 3), 2, 1, 1, 1),
    "2d_mixed": ((2, 4, 9, 11), (6, 2, 3, 2), (2, 1), (1, 2), (2, 1), 2),
    "2d_depthwise": ((3, 4, 12, 7), (8, 1, 3, 3), 2, 0, 1, 4),
    "2d_depthwise_same_dilated": ((2, 6, 9, 10), (6, 1, 3, 3), 1, 2, 2, 6),
    "2d_depthwise_5x5": ((2, 5, 11, 8), (5, 1, 5, 5), 1, 2, 1, 5),
    "1d_depthwise": ((2, 4, 19), (4, 1, 7), 1, 3, 1, 4),
    "2d_pointwise": ((2, 6, 7, 5), (3, 6, 1, 1), 1, 0, 1, 1),
    "2d_large_output": ((2, 3, 20, 17), (5, 3, 3, 3), 1, 1, 1, 1),
    "2d_dilated_wide": ((1, 2, 15, 16), (3, 2, 4, 5), (1, 3), (3, 0), (2, 1), 1),
    "1d": ((3, 5, 17), (7, 5, 4), 3, 2, 1, 1),
    "1d_groups": ((2, 6, 40), (9, 2, 5), 1, 4, 2, 3),
    # stride 2 with even sizes: the input gradient's col2im runs by phase (odd and even pads,
    # odd and even kernels, groups, 1-d)
    "2d_stride2_even": ((2, 5, 12, 10), (6, 5, 3, 3), 2, 1, 1, 1),
    "2d_stride2_k4_groups": ((2, 4, 16, 8), (6, 2, 4, 4), 2, 1, 1, 2),
    "2d_stride2_k1": ((2, 3, 8, 6), (4, 3, 1, 1), 2, 0, 1, 1),
    "1d_stride2_k5_pad2": ((3, 4, 18), (5, 4, 5), 2, 2, 1, 1),
}

DTYPES = [kiln.float32, kiln.float64]


@contextlib.contextmanager
def _inductor_messages():
    """The inductor's log messages while the block runs (kiln's loggers do not propagate)."""
    messages = []
    handler = logging.Handler()
    handler.emit = lambda record: messages.append(record.getMessage())
    logger = logging.getLogger("kiln.inductor")
    level = logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    try:
        yield messages
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def _tensor(rng, shape, dtype, requires_grad=False):
    t = kiln.tensor(rng.standard_normal(shape)).to(dtype)
    return t.requires_grad_(requires_grad)


def _conv(x, w, b, stride, padding, dilation, groups):
    conv = F.conv1d if x.ndim == 3 else F.conv2d
    return conv(x, w, b, stride, padding, dilation, groups)


def _tolerance(dtype) -> dict:
    return {"rtol": 1e-4, "atol": 1e-4} if dtype is kiln.float32 else {"rtol": 1e-9, "atol": 1e-9}


def _forward_and_grads(fn, inputs, cotangent):
    out = fn(*inputs)
    (out * cotangent).sum().backward()
    return out.detach(), [t.grad for t in inputs]


def _torch_reference(case, inputs, cotangent):
    xs, ws, stride, padding, dilation, groups = case
    tx, tw, tb = (to_torch(t, True) for t in inputs)
    conv = torch.nn.functional.conv1d if len(xs) == 3 else torch.nn.functional.conv2d
    out = torch.relu(conv(tx, tw, tb, stride, padding, dilation, groups) * 0.5 + 1.0)
    (out * to_torch(cotangent)).sum().backward()
    return out.detach(), [tx.grad, tw.grad, tb.grad]


@needs_torch
@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "float64"])
@pytest.mark.parametrize("name", list(CASES))
def test_compiled_convolution_matches_eager_and_torch(name, dtype):
    case = CASES[name]
    xs, ws, stride, padding, dilation, groups = case
    rng = np.random.default_rng(sum(map(ord, name)))

    def fn(x, w, b):
        return (_conv(x, w, b, stride, padding, dilation, groups) * 0.5 + 1.0).relu()

    def inputs():
        r = np.random.default_rng(sum(map(ord, name)))
        return [
            _tensor(r, xs, dtype, True),
            _tensor(r, ws, dtype, True),
            _tensor(r, (ws[0],), dtype, True),
        ]

    probe = fn(*inputs())
    cotangent = _tensor(rng, tuple(probe.shape), dtype)
    with _inductor_messages() as messages:
        got, got_grads = _forward_and_grads(kiln.compile(fn, fullgraph=True), inputs(), cotangent)
    eager, eager_grads = _forward_and_grads(fn, inputs(), cotangent)
    expected, expected_grads = _torch_reference(case, inputs(), cotangent)
    tol = _tolerance(dtype)
    assert got.dtype is dtype
    assert_close(got, eager, **tol)
    assert_close(got, expected, **tol)
    for g, e, t in zip(got_grads, eager_grads, expected_grads):
        assert_close(g, e, **tol)
        assert_close(g, t, **tol)
    assert not [m for m in messages if "convolution" in m and "eager" in m], messages


@needs_torch
@pytest.mark.parametrize(
    "name",
    [
        "2d_stride2",
        "2d_mixed",
        "1d_groups",
        "2d_stride2_even",
        "2d_stride2_k4_groups",
        "1d_stride2_k5_pad2",
    ],
)
def test_compiled_transposed_convolution_matches_torch(name):
    xs, ws, stride, padding, dilation, groups = CASES[name]
    rng = np.random.default_rng(7)
    dtype = kiln.float64
    # a transposed convolution maps the forward's output shape back to its input shape
    out_shape = tuple(
        _conv(kiln.zeros(xs), kiln.zeros(ws), None, stride, padding, dilation, groups).shape
    )
    y = _tensor(rng, out_shape, dtype, True)
    w = _tensor(rng, ws, dtype, True)
    b = _tensor(rng, (ws[1] * groups,), dtype, True)
    transpose = F.conv_transpose1d if len(xs) == 3 else F.conv_transpose2d

    def fn(y, w, b):
        return transpose(y, w, b, stride, padding, 0, groups, dilation).tanh()

    out = kiln.compile(fn, fullgraph=True)(y, w, b)
    cotangent = _tensor(rng, tuple(out.shape), dtype)
    (out * cotangent).sum().backward()
    ty, tw, tb = (to_torch(t, True) for t in (y, w, b))
    torch_transpose = getattr(torch.nn.functional, transpose.__name__)
    expected = torch_transpose(ty, tw, tb, stride, padding, 0, groups, dilation).tanh()
    (expected * to_torch(cotangent)).sum().backward()
    assert_close(out, expected)
    for got, want in zip((y.grad, w.grad, b.grad), (ty.grad, tw.grad, tb.grad)):
        assert_close(got, want)


@needs_torch
@pytest.mark.parametrize("layout", ["channels_last", "transposed_view", "sliced"])
def test_compiled_convolution_of_non_contiguous_input(layout):
    rng = np.random.default_rng(3)
    base = _tensor(rng, (2, 4, 11, 13), kiln.float32)
    if layout == "channels_last":
        x = base.contiguous(memory_format=kiln.channels_last)
    elif layout == "transposed_view":
        x = base.transpose(2, 3)
    else:
        x = base[:, 1:, ::2, 1:]
    x = x.detach().requires_grad_(True)
    w = _tensor(rng, (5, x.shape[1], 3, 3), kiln.float32, True)

    def fn(x, w):
        return F.conv2d(x, w, None, 2, 1).sigmoid()

    tx, tw = to_torch(x, True), to_torch(w, True)
    _sum_backward_matches(
        kiln.compile(fn, fullgraph=True)(x, w),
        torch.nn.functional.conv2d(tx, tw, None, 2, 1).sigmoid(),
        [(x, tx), (w, tw)],
        grad_atol=1e-5,
    )


def test_convolution_lowers_without_eager_fallback():
    rng = np.random.default_rng(0)
    x = _tensor(rng, (2, 3, 10, 10), kiln.float32)
    w = _tensor(rng, (4, 3, 3, 3), kiln.float32)
    b = _tensor(rng, (4,), kiln.float32)

    def fn(x, w, b):
        return F.conv2d(x, w, b, 1, 1).relu()

    compiled = compile_traced(fn, x, w, b)
    assert compiled.schedule.lowered.fallbacks == []
    assert_close(compiled(x, w, b)[0], fn(x, w, b), rtol=1e-5, atol=1e-5)


def test_a_depthwise_convolution_is_one_pointwise_loop_over_its_stored_input():
    """A depthwise layer sums its kernel's offsets in the output's loop: no product, no
    columns; its input's producer (a batch norm's affine and ReLU) is stored once."""
    rng = np.random.default_rng(3)
    x = _tensor(rng, (2, 8, 12, 12), kiln.float32)
    w = _tensor(rng, (8, 1, 3, 3), kiln.float32)
    scale = _tensor(rng, (1, 8, 1, 1), kiln.float32)

    def fn(x, w, scale):
        return F.conv2d((x * scale).relu(), w, None, 1, 1, 1, 8) + 1.0

    compiled = compile_traced(fn, x, w, scale)
    steps = [step.describe() for step in compiled.schedule.steps]
    assert not [s for s in steps if "extern" in s], steps
    assert len(steps) == 2, steps  # the producer stored, then the taps' loop
    assert_close(compiled(x, w, scale)[0], fn(x, w, scale), rtol=1e-5, atol=1e-5)


@needs_torch
@pytest.mark.parametrize(
    "case",
    [
        ((16, 1, 1, 1), (1, 64, 4, 4), 1, 0, 0, 1),  # a DCGAN discriminator's last input gradient
        ((3, 1, 3, 2), (1, 5, 3, 3), 2, 1, 0, 1),
        ((2, 4, 3, 3), (4, 2, 3, 3), 2, 0, 1, 4),
        ((2, 3, 2, 5), (3, 7, 2, 4), 1, 0, 0, 3),
    ],
    ids=["noise_to_image", "strided", "strided_groups", "growing_groups"],
)
def test_transposed_convolution_of_one_channel_per_group_is_one_pointwise_loop(case):
    """With one input channel per group the columns ``W^T x`` are products of two values: no
    BLAS product, col2im reads them as it computes them."""
    xs, ws, stride, padding, output_padding, groups = case
    rng = np.random.default_rng(9)
    x = _tensor(rng, xs, kiln.float32, True)
    w = _tensor(rng, ws, kiln.float32, True)

    def fn(x, w):
        return F.conv_transpose2d(x.tanh(), w, None, stride, padding, output_padding, groups)

    compiled = compile_traced(fn, x, w)
    steps = [step.describe() for step in compiled.schedule.steps]
    assert not [s for s in steps if "extern" in s], steps
    tx, tw = to_torch(x, True), to_torch(w, True)
    expected = torch.nn.functional.conv_transpose2d(
        tx.tanh(), tw, None, stride, padding, output_padding, groups
    )
    _sum_backward_matches(
        kiln.compile(fn, fullgraph=True)(x, w), expected, [(x, tx), (w, tw)], grad_atol=1e-5
    )


@needs_torch
@pytest.mark.parametrize("dynamic", [True, None], ids=["dynamic", "automatic_dynamic_batch"])
def test_convolution_with_changing_sizes_matches_torch(dynamic):
    """``dynamic=True`` makes the image sizes symbolic too; a batch that changes from call to
    call becomes one symbolic size: either way the lowering computes every value."""
    rng = np.random.default_rng(5)
    w = _tensor(rng, (4, 3, 3, 3), kiln.float32, True)

    def fn(x):
        return F.conv2d(x, w, None, 1, 1).relu()

    compiled = kiln.compile(fn, dynamic=dynamic)
    for batch in (2, 3, 5):
        x = _tensor(rng, (batch, 3, 8, 9), kiln.float32, True)
        w.grad = None
        compiled(x).sum().backward()
        tx, tw = to_torch(x, True), to_torch(w, True)
        expected = torch.relu(torch.nn.functional.conv2d(tx, tw, None, 1, 1))
        expected.sum().backward()
        assert_close(compiled(x), expected, rtol=1e-5, atol=1e-5)
        assert_close(x.grad, tx.grad, rtol=1e-4, atol=1e-5)
        assert_close(w.grad, tw.grad, rtol=1e-4, atol=1e-5)


def _sum_backward_matches(out, expected, leaves, grad_atol=1e-4) -> None:
    """``out`` and PyTorch's ``expected`` agree, and so do the gradients of their sums for each
    (kiln leaf, torch leaf) pair."""
    out.sum().backward()
    expected.sum().backward()
    assert_close(out, expected, rtol=1e-4, atol=1e-5)
    for ours, theirs in leaves:
        assert_close(ours.grad, theirs.grad, rtol=1e-4, atol=grad_atol)


def _grown(shape: tuple, extra: int) -> tuple:
    """``shape`` with ``extra`` more samples and ``extra`` + d more positions along spatial dim d."""
    return (shape[0] + extra, shape[1]) + tuple(s + extra + d for d, s in enumerate(shape[2:]))


def _run_with_growing_images(name: str) -> list:
    """Run case ``name`` compiled with ``dynamic=True`` on three batch and image sizes, forward
    and both gradients against PyTorch; returns the inductor's messages."""
    xs, ws, stride, padding, dilation, groups = CASES[name]
    rng = np.random.default_rng(sum(map(ord, name)) + 1)
    w = kiln.nn.Parameter(_tensor(rng, ws, kiln.float32))  # a parameter: static under dynamic

    def fn(x):
        return (_conv(x, w, None, stride, padding, dilation, groups) * 0.5).tanh()

    compiled = kiln.compile(fn, dynamic=True)
    with _inductor_messages() as messages:
        for extra in (0, 3, 1):
            x = _tensor(rng, _grown(xs, extra), kiln.float32, True)
            w.grad = None
            out = compiled(x)
            cotangent = _tensor(rng, tuple(out.shape), kiln.float32)
            (out * cotangent).sum().backward()
            tx, tw = to_torch(x, True), to_torch(w, True)
            conv = torch.nn.functional.conv1d if len(xs) == 3 else torch.nn.functional.conv2d
            expected = (conv(tx, tw, None, stride, padding, dilation, groups) * 0.5).tanh()
            (expected * to_torch(cotangent)).sum().backward()
            assert_close(out, expected, rtol=1e-4, atol=1e-5)
            assert_close(x.grad, tx.grad, rtol=1e-4, atol=1e-4)
            assert_close(w.grad, tw.grad, rtol=1e-4, atol=1e-4)
    return messages


@needs_torch
@pytest.mark.parametrize("name", list(CASES))
def test_convolution_compiled_once_for_every_image_size(stats, name):
    """``dynamic=True``: batch and image sizes are symbols, and one compile with the lowering
    (no eager convolution) serves every size: grouped and dilated ones too, whose output sizes
    enter index divisions (``s1 * q - s1`` must be known non-negative for ``q >= 1``)."""
    messages = _run_with_growing_images(name)
    assert not [m for m in messages if "convolution" in m and "eager" in m], messages
    assert stats.symbolic_compiles >= 2  # the forward and the backward graph (duck sizing
    assert stats.symbolic_refused == stats.static_compiles == stats.fallback_calls == 0


@needs_torch
def test_transposed_convolution_compiled_once_for_every_image_size(stats):
    """A stride-2 transposed convolution (col2im over symbolic image sizes) and its gradients."""
    rng = np.random.default_rng(11)
    w = kiln.nn.Parameter(_tensor(rng, (6, 4, 4, 4), kiln.float32))

    def fn(y):
        return F.conv_transpose2d(y, w, None, 2, 1).sigmoid()

    compiled = kiln.compile(fn, dynamic=True)
    with _inductor_messages() as messages:
        for shape in ((2, 6, 4, 5), (3, 6, 7, 6), (2, 6, 5, 9)):
            y = _tensor(rng, shape, kiln.float32, True)
            w.grad = None
            ty, tw = to_torch(y, True), to_torch(w, True)
            _sum_backward_matches(
                compiled(y),
                torch.nn.functional.conv_transpose2d(ty, tw, None, 2, 1).sigmoid(),
                [(y, ty), (w, tw)],
            )
    assert not [m for m in messages if "convolution" in m and "eager" in m], messages
    assert stats.symbolic_refused == stats.static_compiles == stats.fallback_calls == 0


@needs_torch
def test_a_symbolic_compile_the_lowering_fails_retries_with_eager_convolutions(stats, monkeypatch):
    """When the lowering's loops over symbolic images make a decision the sizes leave open, the
    graph is compiled once more with those convolutions as eager calls (still one compile for
    every size) rather than going per size."""
    from kiln.inductor.lowering import convolution as lowering
    from kiln.runtime.symbolic import SizeDependentError

    forward = lowering._forward

    def undecided(spec):
        if not lowering._STATIC_IMAGES.on:
            raise SizeDependentError("a decision the sizes leave open (test)")
        return forward(spec)

    monkeypatch.setattr(lowering, "_forward", undecided)
    rng = np.random.default_rng(13)
    w = kiln.nn.Parameter(_tensor(rng, (4, 3, 3, 3), kiln.float32), requires_grad=False)
    compiled = kiln.compile(lambda x: F.conv2d(x, w, None, 1, 1).relu(), dynamic=True)
    with _inductor_messages() as messages:
        for shape in ((2, 3, 8, 9), (4, 3, 10, 7)):
            x = _tensor(rng, shape, kiln.float32)
            expected = torch.nn.functional.conv2d(to_torch(x), to_torch(w), None, 1, 1).relu()
            assert_close(compiled(x), expected, rtol=1e-5, atol=1e-5)
    assert any("lowered for symbolic batch sizes only" in m for m in messages), messages
    assert stats.symbolic_compiles == 1
    assert stats.symbolic_refused == stats.static_compiles == stats.fallback_calls == 0


def test_a_stride_2_col2im_loops_by_phase(monkeypatch):
    """The input gradient of a stride-2 layer with even sizes is one kernel over
    ``[N, C, 2, 2, H/2, W/2]`` (phase outer, affine reads of the columns), stored through a
    stride-2 layout into the plain NCHW buffer; its values are eager's."""
    import kiln.inductor.lowering.convolution as lowering

    calls = []
    real = lowering._col2im_by_phase
    monkeypatch.setattr(lowering, "_col2im_by_phase", lambda *a: calls.append(a) or real(*a))
    rng = np.random.default_rng(3)
    y = _tensor(rng, (2, 6, 8, 5), kiln.float32, True)
    w = _tensor(rng, (6, 4, 3, 3), kiln.float32, True)

    def fn(y, w):
        return F.conv_transpose2d(y, w, None, 2, 1, 1).sin()

    compiled = compile_traced(fn, y, w)
    assert len(calls) == 1
    shapes = [list(k.outer) for k in compiled.schedule.kernels]
    assert [2, 4, 2, 2, 8, 5] in shapes, shapes
    assert_close(compiled(y, w)[0], fn(y, w), rtol=1e-5, atol=1e-5)
