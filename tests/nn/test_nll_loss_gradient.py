"""The numpy fast path of the ``nll_loss`` derivative (a plain backward: no one-hot mask) against
PyTorch and against kiln's own kiln-op derivative (``create_graph=True`` keeps that path):
class dim of 1-D, 2-D and spatial inputs, every reduction, class weights, ignored targets (all
of them ignored too: a mean's 0/0), label smoothing, float32/float64, and half precision, which
keeps the kiln-op form.
"""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from tests.oracle import assert_close, needs_torch, torch

_SHAPES = [((7,), ()), ((6, 5), (6,)), ((3, 4, 2, 3), (3, 2, 3))]


def _inputs(shape, tshape, ignore: str, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape) * 3
    n = shape[0] if len(shape) == 1 else shape[1]
    t = rng.integers(0, n, tshape)
    if ignore == "some" and t.ndim:
        t.flat[::3] = -1
    elif ignore == "all":
        t[...] = -1
    return x, t, rng.random(n) + 0.5


def _grad(lib, x, t, w, dtype, reduction, smoothing, create_graph=False):
    xt = lib.tensor(x, dtype=getattr(lib, dtype), requires_grad=True)
    wt = None if w is None else lib.tensor(w, dtype=getattr(lib, dtype))
    loss = lib.nn.functional.cross_entropy(
        xt, lib.tensor(t), wt, ignore_index=-1, reduction=reduction, label_smoothing=smoothing
    )
    loss = loss.sum() if reduction == "none" else loss
    (g,) = lib.autograd.grad(loss, xt, create_graph=create_graph)
    return g


@needs_torch
@pytest.mark.parametrize("shape,tshape", _SHAPES)
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("ignore", ["none", "some", "all"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_cross_entropy_gradient_matches_torch_and_kiln_op_form(
    shape, tshape, reduction, weighted, ignore, dtype
):
    x, t, w = _inputs(shape, tshape, ignore)
    w = w if weighted else None
    got = _grad(kiln, x, t, w, dtype, reduction, 0.0)
    assert_close(got, _grad(torch, x, t, w, dtype, reduction, 0.0))
    assert_close(got, _grad(kiln, x, t, w, dtype, reduction, 0.0, create_graph=True).detach())


@needs_torch
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_label_smoothing_gradient_matches_torch(reduction):
    x, t, w = _inputs((6, 5), (6,), "some", seed=1)
    for weight in (None, w):
        got = _grad(kiln, x, t, weight, "float32", reduction, 0.2)
        assert_close(got, _grad(torch, x, t, weight, "float32", reduction, 0.2))


@needs_torch
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision_gradient_matches_torch(dtype):
    x, t, w = _inputs((6, 5), (6,), "some", seed=2)
    got = _grad(kiln, x, t, None, dtype, "mean", 0.0)
    assert got.dtype is getattr(kiln, dtype)
    assert_close(got, _grad(torch, x, t, None, dtype, "mean", 0.0))


@needs_torch
def test_nll_loss_gradient_with_upstream_gradient_per_target():
    rng = np.random.default_rng(3)
    logp = rng.standard_normal((5, 4)).astype(np.float32)
    t = np.array([0, 3, -1, 2, 3])
    up = rng.standard_normal(5).astype(np.float32)
    grads = []
    for lib in (kiln, torch):
        xt = lib.tensor(logp, requires_grad=True)
        loss = lib.nn.functional.nll_loss(xt, lib.tensor(t), ignore_index=-1, reduction="none")
        loss.backward(lib.tensor(up))
        grads.append(xt.grad)
    assert_close(grads[0], grads[1])
