"""SyncBatchNorm's kernels (``batch_norm_stats`` ... ``batch_norm_backward_elemt``) against
PyTorch. PyTorch runs most of them on CUDA only, so the oracle is what they exist to compute:
workers that each hold a slice of the batch, reduce it, combine the statistics and normalize,
must reproduce PyTorch's batch norm over the whole batch (``torch.native_batch_norm``: output,
saved statistics, running statistics, and its autograd gradients). ``batch_norm_update_stats``
has a CPU kernel and is compared call for call."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from tests.oracle import assert_close, first_lines_of_errors, needs_torch, to_torch, torch

pytestmark = needs_torch

EPS = 1e-5


def _batch(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape) * 2.0 + 0.5


def _sync_forward(chunks, weight, bias, running_mean, running_var, momentum):
    """One SyncBatchNorm forward over ``chunks`` (one per worker), the all-gather in-process."""
    stats = [kiln.batch_norm_stats(c, EPS) for c in chunks]
    counts = kiln.tensor([c.numel() // c.shape[1] for c in chunks], dtype=kiln.float64)
    mean, invstd = kiln.batch_norm_gather_stats_with_counts(
        chunks[0],
        kiln.stack([s[0] for s in stats]),
        kiln.stack([s[1] for s in stats]),
        running_mean,
        running_var,
        momentum,
        EPS,
        counts,
    )
    outs = [kiln.batch_norm_elemt(c, weight, bias, mean, invstd, EPS) for c in chunks]
    return outs, mean, invstd, counts


@pytest.mark.parametrize("sizes", [(3, 5), (4, 4, 4), (2, 0, 6)])
def test_workers_stats_gathered_reproduce_batch_norm_of_the_whole_batch(sizes):
    x = _batch((sum(sizes), 3, 7))
    w, b = _batch(3, 1), _batch(3, 2)
    rm, rv = kiln.zeros(3, dtype=kiln.float64), kiln.ones(3, dtype=kiln.float64)
    trm, trv = to_torch(rm), to_torch(rv)
    chunks = [c for c in kiln.tensor(x).split(list(sizes)) if c.shape[0]]
    outs, mean, invstd, _ = _sync_forward(chunks, kiln.tensor(w), kiln.tensor(b), rm, rv, 0.1)
    want = torch.native_batch_norm(
        torch.tensor(x), torch.tensor(w), torch.tensor(b), trm, trv, True, 0.1, EPS
    )
    assert_close(kiln.cat(outs), want[0])
    assert_close((mean, invstd), want[1:])
    assert_close((rm, rv), (trm, trv))


def test_batch_norm_gather_stats_is_gather_with_equal_counts():
    chunks = [kiln.tensor(_batch((4, 3, 5), s)) for s in range(3)]
    stats = [kiln.batch_norm_stats(c, EPS) for c in chunks]
    means, invstds = kiln.stack([s[0] for s in stats]), kiln.stack([s[1] for s in stats])
    rm1, rv1, rm2, rv2 = (kiln.zeros(3, dtype=kiln.float64) for _ in range(4))
    got = kiln.batch_norm_gather_stats(chunks[0], means, invstds, rm1, rv1, 0.2, EPS, 20)
    counts = kiln.full((3,), 20.0, dtype=kiln.float64)
    want = kiln.batch_norm_gather_stats_with_counts(
        chunks[0], means, invstds, rm2, rv2, 0.2, EPS, counts
    )
    assert_close(got, want)
    assert_close((rm1, rv1), (rm2, rv2))
    whole = torch.native_batch_norm(
        to_torch(kiln.cat(chunks)), None, None, None, None, True, 0.2, EPS
    )
    assert_close(got, whole[1:])


def test_workers_backward_reduce_and_elemt_give_batch_norms_gradients():
    sizes = (3, 5)
    x, w, b = _batch((8, 3, 6)), _batch(3, 1), _batch(3, 2)
    grad_out = _batch((8, 3, 6), 3)
    tx, tw, tb = (torch.tensor(a, requires_grad=True) for a in (x, w, b))
    out = torch.native_batch_norm(tx, tw, tb, None, None, True, 0.1, EPS)[0]
    out.backward(torch.tensor(grad_out))

    chunks = list(kiln.tensor(x).split(list(sizes)))
    grads = list(kiln.tensor(grad_out).split(list(sizes)))
    weight = kiln.tensor(w)
    _, mean, invstd, counts = _sync_forward(chunks, weight, kiln.tensor(b), None, None, 0.1)
    reduced = [
        kiln.batch_norm_backward_reduce(g, c, mean, invstd, weight, True, True, True)
        for g, c in zip(grads, chunks)
    ]
    sum_dy, sum_dy_xmu, grad_w, grad_b = (sum(r[i] for r in reduced) for i in range(4))
    grad_in = [
        kiln.batch_norm_backward_elemt(
            g, c, mean, invstd, weight, sum_dy, sum_dy_xmu, counts.to(kiln.int32)
        )
        for g, c in zip(grads, chunks)
    ]
    assert_close(kiln.cat(grad_in), tx.grad)
    assert_close((grad_w, grad_b), (tw.grad, tb.grad))


def test_backward_reduce_leaves_out_what_is_not_asked_for():
    x, g = kiln.tensor(_batch((4, 3, 5))), kiln.tensor(_batch((4, 3, 5), 1))
    mean, invstd = kiln.batch_norm_stats(x, EPS)
    got = kiln.batch_norm_backward_reduce(g, x, mean, invstd, None, False, True, False)
    assert got[0] is None and got[1] is None and got[3] is None
    tw = torch.ones(3, dtype=torch.float64, requires_grad=True)
    torch.native_batch_norm(to_torch(x), tw, None, None, None, True, 0.1, EPS)[0].backward(
        to_torch(g)
    )
    assert_close(got[2], tw.grad)


def test_sixteen_bit_inputs_keep_float32_statistics_and_their_own_dtype_for_outputs():
    x = kiln.tensor(_batch((6, 3, 5))).half()
    mean, invstd = kiln.batch_norm_stats(x, EPS)
    assert mean.dtype == invstd.dtype == kiln.float32
    want = torch.native_batch_norm(to_torch(x).float(), None, None, None, None, True, 0.1, EPS)
    assert_close((mean, invstd), want[1:], rtol=1e-5, atol=1e-5)
    out = kiln.batch_norm_elemt(x, None, None, mean, invstd, EPS)
    assert out.dtype == kiln.float16
    assert_close(out, want[0].half(), rtol=2e-3, atol=2e-3)


def test_kernel_results_do_not_require_grad():
    x = kiln.tensor(_batch((4, 3, 5)), requires_grad=True)
    mean, invstd = kiln.batch_norm_stats(x, EPS)
    assert not mean.requires_grad and not invstd.requires_grad
    assert not kiln.batch_norm_elemt(x, None, None, mean, invstd, EPS).requires_grad


@pytest.mark.parametrize("dtype", ["float64", "float16"])
@pytest.mark.parametrize("running", [True, False])
def test_batch_norm_update_stats_matches_pytorch_cpu(dtype, running):
    x = kiln.tensor(_batch((5, 3, 4))).to(getattr(kiln, dtype))
    stats_dtype = kiln.float32 if dtype == "float16" else kiln.float64
    rm = kiln.zeros(3, dtype=stats_dtype) if running else None
    rv = kiln.ones(3, dtype=stats_dtype) if running else None
    trm, trv = to_torch(rm), to_torch(rv)
    got = kiln.batch_norm_update_stats(x, rm, rv, 0.3)
    want = torch.batch_norm_update_stats(to_torch(x), trm, trv, 0.3)
    tol = 2e-3 if dtype == "float16" else None
    assert_close(got, want, rtol=tol, atol=tol)
    if running:
        assert_close((rm, rv), (trm, trv), rtol=tol, atol=tol)


def test_batch_norm_update_stats_refuses_an_input_without_channels():
    got, want = first_lines_of_errors(
        lambda: kiln.batch_norm_update_stats(kiln.randn(3), None, None, 0.1),
        lambda: torch.batch_norm_update_stats(torch.randn(3), None, None, 0.1),
    )
    assert got == want


def test_sync_forward_compiled_equals_eager():
    def program(a, b, rm, rv):
        outs, mean, invstd, _ = _sync_forward([a, b], None, None, rm, rv, 0.1)
        return kiln.cat(outs), mean, invstd

    def inputs():
        return [kiln.tensor(_batch((3, 2, 4))), kiln.tensor(_batch((2, 2, 4), 1))] + [
            kiln.zeros(2, dtype=kiln.float64),
            kiln.ones(2, dtype=kiln.float64),
        ]

    eager_args, compiled_args = inputs(), inputs()
    eager = program(*eager_args)
    compiled = kiln.compile(program, backend="inductor", fullgraph=True)(*compiled_args)
    assert_close(compiled, eager, rtol=1e-12, atol=1e-12)
    assert_close(compiled_args[2:], eager_args[2:], rtol=1e-12, atol=1e-12)
