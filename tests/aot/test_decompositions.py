"""Every decomposition equals its op's eager kernel, forward and backward.

Runs the whole op sample database twice: normally, and with every non-prim op forced through its
decomposition (``force_decompositions``), and compares values and gradients. A decomposition that
changes a dtype breaks compiled code downstream of it, which the last test shows on every backend.
"""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.aot.decompositions import decomposition_table, force_decompositions, list_decompositions
from tests.ops import test_oracle as oracle
from tests.ops.opinfo import T
from tests.oracle import assert_close, needs_torch, to_torch

_DECOMPOSED = set(list_decompositions())
_SAMPLES = [
    (s, i)
    for s, i in zip(oracle.SAMPLES, oracle._IDS)
    if any(name in _DECOMPOSED for name in s.covered_ops())
]


def _run(sample, arrays):
    args, leaves = oracle._build(kiln, sample, arrays, grad=sample.grad)
    outs = oracle._tensors(sample.call(kiln, args, sample.kwargs))
    diff = [o for o in outs if o.dtype.is_floating_point and o.requires_grad]
    grads = []
    if diff and leaves:
        rng = oracle._rng(sample)
        cot = [kiln.tensor(rng.uniform(-1, 1, size=tuple(o.shape)), dtype=o.dtype) for o in diff]
        grads = kiln.autograd.grad(diff, leaves, cot, allow_unused=True)
    return outs, grads


@pytest.mark.parametrize("sample", [pytest.param(s, id=i) for s, i in _SAMPLES])
def test_decomposition_matches_eager_kernel(sample):
    arrays = oracle._arrays(sample)
    kiln.manual_seed(0)
    eager_outs, eager_grads = _run(sample, arrays)
    kiln.manual_seed(0)
    with force_decompositions():
        dec_outs, dec_grads = _run(sample, arrays)
    assert len(eager_outs) == len(dec_outs)
    floats = any(isinstance(a, T) and a.dtype in ("float16", "bfloat16") for a in sample.args)
    rtol, atol = (2e-2, 2e-2) if floats else (1e-4, 1e-5)
    for e, d in zip(eager_outs, dec_outs):
        assert e.dtype is d.dtype and tuple(e.shape) == tuple(d.shape)
        np.testing.assert_allclose(
            d.detach().float().numpy(),
            e.detach().float().numpy(),
            rtol=rtol,
            atol=atol,
            equal_nan=True,
        )
    grad_tol = (2e-2, 2e-2) if floats else (1e-4, 1e-5)
    for e, d in zip(eager_grads, dec_grads):
        if e is None:
            continue
        assert d is not None
        np.testing.assert_allclose(
            d.float().numpy(), e.float().numpy(), rtol=grad_tol[0], atol=grad_tol[1]
        )


def test_every_decomposition_is_exercised_by_some_sample():
    covered = {name for s, _ in _SAMPLES for name in s.covered_ops()}
    missing = sorted(set(list_decompositions()) - covered)
    assert not missing, f"decompositions with no sample: {missing}"


def test_table_contains_only_non_prims():
    for op in decomposition_table():
        assert not op.is_prim


@needs_torch
@pytest.mark.parametrize("requires_grad", [False, True], ids=["no_grad", "grad"])
@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
def test_a_bool_causal_mask_stays_bool_under_every_backend(backend, requires_grad):
    import torch

    size = 4

    def masked(lib, x):
        mask = lib.triu(lib.ones(size, size, dtype=lib.bool), diagonal=1)
        keep = lib.tril(lib.ones(size, size, dtype=lib.bool))
        return mask, keep, x.masked_fill(mask, float("-inf")).softmax(-1)

    x = kiln.randn(size, size).requires_grad_(requires_grad)
    compiled = kiln.compile(lambda x: masked(kiln, x), backend=backend, fullgraph=True)
    got = compiled(x)
    x_torch = to_torch(x)
    expected = masked(torch, x_torch)
    assert_close(list(got), list(expected))
    assert got[2].requires_grad == expected[2].requires_grad
    if requires_grad:
        cotangent = kiln.randn(size, size)
        got[2].backward(cotangent)
        expected[2].backward(to_torch(cotangent))
        assert_close(x.grad, x_torch.grad)


def test_forced_decompositions_record_the_parts_in_this_thread_only():
    import threading

    x = kiln.randn(5, requires_grad=True)
    other_thread = []
    with force_decompositions(["gelu"]):
        forced = kiln.nn.functional.gelu(x)
        worker = threading.Thread(
            target=lambda: other_thread.append(kiln.nn.functional.gelu(x).grad_fn.name())
        )
        worker.start()
        worker.join()
    # the decomposition's last part recorded the node; the op's own derivative was bypassed
    assert forced.grad_fn.name() != "GeluBackward0"
    assert other_thread == ["GeluBackward0"]
    assert kiln.nn.functional.gelu(x).grad_fn.name() == "GeluBackward0"
    (g_forced,) = kiln.autograd.grad(forced.sum(), x)
    (g_eager,) = kiln.autograd.grad(kiln.nn.functional.gelu(x).sum(), x)
    np.testing.assert_allclose(g_forced.numpy(), g_eager.numpy(), rtol=1e-5, atol=1e-6)
