"""Custom ``autograd.Function``s under capture: one node in the graph with its own
backward (both the ``ctx`` and the ``setup_context`` forms), for every backend."""

from __future__ import annotations

import pytest

import kiln
from kiln.dynamo.testing import CompileCounter

from .helpers import assert_same


class _ClampedSquare(kiln.autograd.Function):
    @staticmethod
    def forward(ctx, x, k):
        ctx.save_for_backward(x)
        ctx.k = k
        return x * x * k

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return (2 * x * grad * ctx.k).clamp(-1.0, 1.0), None


class _SinAndScale(kiln.autograd.Function):
    @staticmethod
    def forward(x, k):
        return x * k, x.sin()

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])
        ctx.k = inputs[1]

    @staticmethod
    def backward(ctx, g_scaled, g_sin):
        (x,) = ctx.saved_tensors
        return g_scaled * ctx.k * 10 + g_sin * x.cos(), None


def custom_functions(x):
    a, b = _SinAndScale.apply(x * 2, 3.0)
    return (_ClampedSquare.apply(a, 0.5) + b).sum()


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
def test_custom_autograd_function_is_one_node_with_its_own_backward(backend):
    counter = CompileCounter(backend)
    x = kiln.tensor([1.0, -2.0, 0.5], requires_grad=True)
    twin = x.detach().clone().requires_grad_(True)
    out = kiln.compile(custom_functions, backend=counter, fullgraph=True)(x)
    expected = custom_functions(twin)
    out.backward()
    expected.backward()
    assert_same(out.detach(), expected.detach())
    assert_same(x.grad, twin.grad)
    assert counter.frame_count == 1
    with kiln.no_grad():
        assert_same(kiln.compile(custom_functions, backend=backend)(x), expected.detach())
