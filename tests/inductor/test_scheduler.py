"""Scheduler decisions: what fuses into one kernel, what stays in registers, what reuses memory."""

from __future__ import annotations

import pytest

import kiln
from kiln.inductor.scheduler import ExternCall
from tests.inductor.helpers import check_against_eager

F = kiln.nn.functional


def test_pointwise_chain_of_ten_ops_is_one_kernel():
    x = kiln.randn(33, 17)
    sched = check_against_eager(
        lambda t: ((((t * 2 + 1).sin() * t).exp() - 3).tanh() * 0.5 + t).relu().sqrt(),
        x,
        codegen="numpy",
    ).schedule
    assert len(sched.kernels) == 1


def test_softmax_is_at_most_two_kernels_and_keeps_row_stats_local():
    sched = check_against_eager(
        lambda t: F.softmax(t, -1), kiln.randn(8, 30), codegen="numpy"
    ).schedule
    assert len(sched.kernels) <= 2
    (kernel,) = sched.kernels
    assert len(kernel.locals) == 2  # the row max and the row sum never touch memory


@pytest.mark.parametrize("codegen", ["llvm", "numpy"])
def test_softmax_writes_its_exp_values_where_its_output_goes(codegen):
    """The row's exp values are written into the output's memory and normalized in place: no
    full-size buffer of their own (one more write and read of the whole tensor)."""
    x = kiln.randn(6, 70)
    x[2, 5] = float("inf")
    x[4] = float("-inf")
    compiled = check_against_eager(lambda t: F.softmax(t, -1) * 3, x, codegen=codegen)
    (kernel,) = compiled.schedule.kernels
    ((internal, target),) = kernel.aliases.items()
    assert internal not in compiled.schedule.stored and target in compiled.schedule.stored


def test_masked_softmax_aliases_one_level():
    # where -> exp -> div: each internal buffer could go where the next goes; only one level
    # is taken (the target of an alias keeps memory of its own)
    mask = kiln.triu(kiln.ones(9, 9, dtype=kiln.bool), diagonal=1)

    def fn(t):
        s = t.masked_fill(mask, float("-inf"))
        return F.softmax(s, -1)

    compiled = check_against_eager(fn, kiln.randn(2, 3, 9, 9))
    (kernel,) = compiled.schedule.kernels
    assert kernel.aliases and not set(kernel.aliases) & set(kernel.aliases.values())


def test_an_internal_buffer_read_at_other_positions_keeps_its_memory():
    # the flip reads the exp values at mirrored positions: writing the output over them first
    # would corrupt the rows read later
    def fn(t):
        e = (t - t.amax(-1, keepdim=True)).exp()
        return e / e.sum(-1, keepdim=True) + e.flip(-1)

    compiled = check_against_eager(fn, kiln.randn(5, 33))
    assert all(not k.aliases for k in compiled.schedule.kernels)


def test_layer_norm_is_at_most_two_kernels():
    w, b = kiln.randn(24), kiln.randn(24)
    sched = check_against_eager(
        lambda t: F.layer_norm(t, (24,), w, b), kiln.randn(5, 24), codegen="numpy"
    ).schedule
    assert len(sched.kernels) <= 2


def test_reduction_over_leading_dim_is_not_fused_with_a_row_consumer():
    def fn(t):
        col = t.sum(0)  # reduces over rows: every row must finish first
        return t * col

    sched = check_against_eager(fn, kiln.randn(6, 5), codegen="numpy").schedule
    assert len(sched.kernels) == 2


def test_matmul_is_an_extern_call_between_fused_kernels():
    w = kiln.randn(8, 4)
    sched = check_against_eager(
        lambda t: (t.sin() @ w).relu() * 2, kiln.randn(3, 8), codegen="numpy"
    ).schedule
    kinds = ["extern" if isinstance(s, ExternCall) else "kernel" for s in sched.steps]
    assert kinds == ["kernel", "extern", "kernel"]


def test_views_are_index_remaps_not_copies():
    sched = check_against_eager(
        lambda t: (t.t()[1:, ::2].reshape(-1) * 2).exp(), kiln.randn(7, 6), codegen="numpy"
    ).schedule
    assert len(sched.kernels) == 1 and len(sched.kernels[0].nodes) == 1


def test_dead_buffers_memory_is_reused():
    def fn(t):
        a = t.sum(1, keepdim=True)
        b = (t - a).exp()
        c = b.sum(0, keepdim=True)
        d = (b / c).cos()
        e = d.sum(0, keepdim=True)
        return (d - e).abs()

    sched = check_against_eager(fn, kiln.randn(16, 16), codegen="numpy").schedule
    assert sched.reuse, sched.describe()


@pytest.mark.parametrize("shape", [(1,), (7,), (3, 1, 5), (0, 4)])
def test_odd_shapes(shape):
    x = kiln.randn(*shape)
    check_against_eager(lambda t: (t * 3).tanh() + t.sum(), x, codegen="numpy")
