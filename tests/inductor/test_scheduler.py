"""Scheduler decisions: what fuses into one kernel, what stays in registers, what reuses memory."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.inductor.compile_fx import compile_graph
from kiln.inductor.scheduler import ExternCall
from kiln.ir.tracer import trace

F = kiln.nn.functional


def _compile(fn, *inputs):
    gm = trace(fn, *inputs, decompositions="prims")
    compiled = compile_graph(gm, list(inputs), {"cpu_codegen": "numpy"})
    got = compiled(*inputs)
    expected = fn(*inputs)
    expected = expected if isinstance(expected, tuple) else (expected,)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g.numpy(), e.numpy(), rtol=1e-5, atol=1e-6)
    return compiled.schedule


def test_pointwise_chain_of_ten_ops_is_one_kernel():
    x = kiln.randn(33, 17)
    sched = _compile(
        lambda t: ((((t * 2 + 1).sin() * t).exp() - 3).tanh() * 0.5 + t).relu().sqrt(), x
    )
    assert len(sched.kernels) == 1


def test_softmax_is_at_most_two_kernels_and_keeps_row_stats_local():
    sched = _compile(lambda t: F.softmax(t, -1), kiln.randn(8, 30))
    assert len(sched.kernels) <= 2
    (kernel,) = sched.kernels
    assert len(kernel.locals) == 2  # the row max and the row sum never touch memory


def test_layer_norm_is_at_most_two_kernels():
    w, b = kiln.randn(24), kiln.randn(24)
    sched = _compile(lambda t: F.layer_norm(t, (24,), w, b), kiln.randn(5, 24))
    assert len(sched.kernels) <= 2


def test_reduction_over_leading_dim_is_not_fused_with_a_row_consumer():
    def fn(t):
        col = t.sum(0)  # reduces over rows: every row must finish first
        return t * col

    sched = _compile(fn, kiln.randn(6, 5))
    assert len(sched.kernels) == 2


def test_matmul_is_an_extern_call_between_fused_kernels():
    w = kiln.randn(8, 4)
    sched = _compile(lambda t: (t.sin() @ w).relu() * 2, kiln.randn(3, 8))
    kinds = ["extern" if isinstance(s, ExternCall) else "kernel" for s in sched.steps]
    assert kinds == ["kernel", "extern", "kernel"]


def test_views_are_index_remaps_not_copies():
    sched = _compile(lambda t: (t.t()[1:, ::2].reshape(-1) * 2).exp(), kiln.randn(7, 6))
    assert len(sched.kernels) == 1 and len(sched.kernels[0].nodes) == 1


def test_dead_buffers_memory_is_reused():
    def fn(t):
        a = t.sum(1, keepdim=True)
        b = (t - a).exp()
        c = b.sum(0, keepdim=True)
        d = (b / c).cos()
        e = d.sum(0, keepdim=True)
        return (d - e).abs()

    sched = _compile(fn, kiln.randn(16, 16))
    assert sched.reuse, sched.describe()


@pytest.mark.parametrize("shape", [(1,), (7,), (3, 1, 5), (0, 4)])
def test_odd_shapes(shape):
    x = kiln.randn(*shape)
    _compile(lambda t: (t * 3).tanh() + t.sum(), x)
