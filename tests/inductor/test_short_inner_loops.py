"""Pointwise kernels whose last dimension is shorter than a vector join it with the one before,
so the loop runs as vectors (indexing the joined dims by division and modulo) instead of
scalar: convolution columns over 4x4 outputs, upsampled 4x4 images, strided and permuted reads.
Values are compared with PyTorch, forward and backward."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.inductor.codegen.llvm.loop_plan import plan_kernel
from tests.inductor.helpers import compile_traced
from tests.oracle import assert_close, needs_torch, to_torch, torch

F = kiln.nn.functional


def _pointwise_plans(fn, *args):
    compiled = compile_traced(fn, *args)
    return compiled, [plan_kernel(k) for k in compiled.schedule.kernels if not k.is_reduction]


def test_a_2x2_image_upsampled_to_4x4_runs_as_vectors_of_joined_rows():
    x = kiln.randn(2, 3, 2, 2)
    compiled, plans = _pointwise_plans(lambda t: F.interpolate(t, scale_factor=2) + 1.0, x)
    (plan,) = plans
    assert plan.inner_size >= 8 and all(step.vectorize for step in plan.steps)
    expected = F.interpolate(x, scale_factor=2) + 1.0
    np.testing.assert_array_equal(compiled(x)[0].numpy(), expected.numpy())


def test_a_last_dimension_of_a_vector_or_more_is_left_as_it_is():
    x = kiln.randn(4, 6, 16)
    _, plans = _pointwise_plans(lambda t: t.transpose(0, 1) * 2.0, x)
    (plan,) = plans
    assert plan.inner_size == 16


CASES = {
    "strided convolution to 4x4": (
        lambda x, w: F.conv2d(x, w, stride=2, padding=1),
        [(4, 6, 8, 8), (5, 6, 4, 4)],
    ),
    "transposed convolution from 3x3": (
        lambda x, w: F.conv_transpose2d(x, w, stride=2, padding=1),
        [(2, 4, 3, 3), (4, 3, 4, 4)],
    ),
    "nearest upsampling of 3x5": (
        lambda x: F.interpolate(x, scale_factor=2).relu(),
        [(2, 3, 3, 5)],
    ),
    "every other column of 7": (
        lambda x: x[..., ::2] * x[..., 1::2].sum(-1, keepdim=True),
        [(3, 5, 7)],
    ),
    "channels last of 3 channels": (
        lambda x: x.permute(0, 2, 3, 1).contiguous() * 3.0 - 1.0,
        [(2, 3, 5, 5)],
    ),
    "transposed 4x4 blocks": (lambda x: x.transpose(-1, -2).tanh() + x, [(3, 2, 4, 4)]),
    "a trailing dimension of one": (
        lambda x: (x.unsqueeze(-1) * x.unsqueeze(-2)).exp(),
        [(3, 5, 1)],
    ),
}


@needs_torch
@pytest.mark.parametrize("case", sorted(CASES))
def test_short_inner_loops_equal_pytorch_forward_and_backward(case):
    fn, shapes = CASES[case]
    rng = np.random.default_rng(7)
    arrays = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    args = [kiln.tensor(a, requires_grad=True) for a in arrays]
    targs = [torch.tensor(a, requires_grad=True) for a in arrays]
    compiled = kiln.compile(fn)
    out = compiled(*args)
    expected = _with_torch(fn)(*targs)
    assert_close(out, expected, rtol=1e-4, atol=1e-4)
    cotangent = rng.standard_normal(tuple(out.shape)).astype(np.float32)
    out.backward(kiln.tensor(cotangent))
    expected.backward(torch.tensor(cotangent))
    for a, t in zip(args, targs):
        assert_close(a.grad, t.grad, rtol=1e-4, atol=1e-4)


def _with_torch(fn):
    """``fn`` with its global ``F`` bound to PyTorch's functional module."""
    import types

    namespace = dict(fn.__globals__, F=torch.nn.functional)
    return types.FunctionType(fn.__code__, namespace, fn.__name__, fn.__defaults__)


def test_joined_loops_read_a_strided_view_input_as_pytorch():
    base = np.arange(2 * 3 * 9 * 4, dtype=np.float32).reshape(2, 3, 9, 4)
    x = kiln.tensor(base)[:, :, ::3, :]  # a view whose rows are 12 elements apart
    out = kiln.compile(lambda t: t.transpose(-1, -2) + 0.5)(x)
    expected = to_torch(x).transpose(-1, -2) + 0.5 if torch is not None else None
    reference = np.swapaxes(base[:, :, ::3, :], -1, -2) + 0.5
    np.testing.assert_array_equal(out.numpy(), reference)
    if expected is not None:
        assert_close(out, expected)
