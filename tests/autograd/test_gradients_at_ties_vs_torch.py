"""Gradients where ops are not smooth, eager and compiled, against PyTorch: ties in max, min,
median, sort and pooling (which element gets the gradient, or how it is split), clamp and
hardtanh at their bounds, abs and relu at zero, norms and products with zeros, constant rows
under normalization, rounding steps."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from tests.oracle import needs_torch, torch


def _ties():
    """Halves (ties), a row starting with zeros, a row of ones in the middle, a constant row."""
    r = np.random.default_rng(3)
    x = (np.round(r.standard_normal((4, 7)) * 2) / 2).astype(np.float32)
    x[0, :3] = 0.0
    x[1, 2:5] = 1.0
    x[2, :] = 0.5
    x[3, 1] = -1.0
    x[3, 4] = 1.0
    return x


X = _ties()

OPS = {
    "max dim": lambda L, x: L.max(x, 1)[0],
    "min dim": lambda L, x: L.min(x, 1)[0],
    "amax": lambda L, x: L.amax(x, 1),
    "amin all": lambda L, x: L.amin(x),
    "max all": lambda L, x: L.max(x),
    "max binary": lambda L, x: L.maximum(x, x.flip(1)),
    "fmax": lambda L, x: L.fmax(x, x.flip(1)),
    "median dim": lambda L, x: L.median(x, 1)[0],
    "median all": lambda L, x: L.median(x),
    "nanmedian": lambda L, x: L.nanmedian(x, 1)[0],
    "kthvalue": lambda L, x: L.kthvalue(x, 3, 1)[0],
    "mode": lambda L, x: L.mode(x, 1)[0],
    "sort": lambda L, x: L.sort(x, 1)[0] * L.arange(7.0),
    "topk": lambda L, x: L.topk(x, 3, 1)[0] * L.arange(3.0),
    "cummax": lambda L, x: L.cummax(x, 1)[0],
    "cummin": lambda L, x: L.cummin(x, 1)[0],
    "clamp": lambda L, x: L.clamp(x, 0.0, 1.0),
    "clamp tensor": lambda L, x: L.clamp(x, x.flip(1) * 0.5, x.flip(0) + 0.5),
    "hardtanh": lambda L, x: L.nn.functional.hardtanh(x, 0.0, 1.0),
    "relu6": lambda L, x: L.nn.functional.relu6(x * 6),
    "relu": lambda L, x: L.relu(x),
    "leaky": lambda L, x: L.nn.functional.leaky_relu(x),
    "elu": lambda L, x: L.nn.functional.elu(x),
    "celu": lambda L, x: L.nn.functional.celu(x),
    "hardsigmoid": lambda L, x: L.nn.functional.hardsigmoid(x * 3),
    "hardswish": lambda L, x: L.nn.functional.hardswish(x * 3),
    "hardshrink": lambda L, x: L.nn.functional.hardshrink(x),
    "softshrink": lambda L, x: L.nn.functional.softshrink(x),
    "threshold": lambda L, x: L.nn.functional.threshold(x, 0.5, -1.0),
    "abs": lambda L, x: L.abs(x),
    "sign": lambda L, x: L.sign(x) * x,
    "sqrt": lambda L, x: L.sqrt(x.abs() + 1.0),
    "norm 2 dim": lambda L, x: L.linalg.vector_norm(x, dim=1),
    "norm inf": lambda L, x: L.linalg.vector_norm(x, float("inf"), dim=1),
    "norm 1": lambda L, x: L.linalg.vector_norm(x, 1, dim=1),
    "norm 3": lambda L, x: L.linalg.vector_norm(x, 3, dim=1),
    "dist": lambda L, x: L.dist(x, x.flip(1)),
    "cdist": lambda L, x: L.cdist(x, x.flip(0)),
    "pdist": lambda L, x: L.nn.functional.pdist(x),
    "std": lambda L, x: L.std(x, 1),
    "prod with zeros": lambda L, x: L.prod(x, 1),
    "cumprod with zeros": lambda L, x: L.cumprod(x, 1),
    "pow 0": lambda L, x: L.pow(x, 2.5).nan_to_num(),
    "x**x": lambda L, x: L.pow(x.abs(), x),
    "atan2": lambda L, x: L.atan2(x, x.flip(1)),
    "remainder": lambda L, x: L.remainder(x, 0.5),
    "fmod": lambda L, x: L.fmod(x, 0.5),
    "floor": lambda L, x: L.floor(x) * x,
    "round": lambda L, x: L.round(x) * x,
    "logsumexp": lambda L, x: L.logsumexp(x, 1),
    "smooth_l1": lambda L, x: L.nn.functional.smooth_l1_loss(x, x.flip(1), reduction="none"),
    "l1_loss": lambda L, x: L.nn.functional.l1_loss(x, x.flip(1), reduction="none"),
    "huber": lambda L, x: L.nn.functional.huber_loss(x, x.flip(1), delta=0.5, reduction="none"),
    "margin ranking": lambda L, x: L.nn.functional.margin_ranking_loss(
        x, x.flip(1), L.ones_like(x), reduction="none"
    ),
    "hinge": lambda L, x: L.nn.functional.hinge_embedding_loss(
        x, L.ones_like(x).neg(), reduction="none"
    ),
    "maxpool": lambda L, x: L.nn.functional.max_pool1d(x.unsqueeze(0), 3, 1, 1),
    "adaptive max": lambda L, x: L.nn.functional.adaptive_max_pool1d(x.unsqueeze(0), 3),
    "where": lambda L, x: L.where(x > 0.5, x, x * 2),
    "masked_select": lambda L, x: x.masked_select(x > 0),
    "unique-consecutive-ish sort": lambda L, x: L.msort(x),
    "normalize": lambda L, x: L.nn.functional.normalize(x, dim=1),
    "cos sim": lambda L, x: L.nn.functional.cosine_similarity(x, x.flip(0)),
    "group_norm": lambda L, x: L.nn.functional.group_norm(x.reshape(2, 2, 7), 1),
    "layer_norm const row": lambda L, x: L.nn.functional.layer_norm(x, (7,)),
    "rms_norm": lambda L, x: L.nn.functional.rms_norm(x, (7,)),
    "var 0 row": lambda L, x: L.var(x, 1, correction=0),
    "logaddexp": lambda L, x: L.logaddexp(x, x.flip(1)),
    "xlogy": lambda L, x: L.xlogy(x, x.abs() + 0.5),
    "trace": lambda L, x: L.trace(x),
    "diff": lambda L, x: L.diff(x, dim=1),
    "renorm": lambda L, x: L.renorm(x, 2, 0, 1.0),
    "nan_to_num": lambda L, x: L.nan_to_num(x / x.flip(1)),
    "sinc": lambda L, x: L.sinc(x),
    "special.xlog1py": lambda L, x: L.special.xlog1py(x, x.abs()),
    "special.entr": lambda L, x: L.special.entr(x.abs()),
    "logit": lambda L, x: L.logit(x.abs().clamp(max=0.99)),
    "erfinv": lambda L, x: L.erfinv(x.clamp(-0.9, 0.9)),
}


def _value_and_gradient(lib, fn, compiled: bool):
    x = lib.tensor(X, requires_grad=True)
    run = lambda t: fn(lib, t)
    if compiled:
        run = lib.compile(run)
    y = run(x)
    cotangent = np.random.default_rng(1).standard_normal(tuple(y.shape)).astype(np.float32)
    y.backward(lib.tensor(cotangent))
    return y.detach().numpy(), x.grad.numpy()


@needs_torch
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("name", sorted(OPS))
def test_gradients_at_ties_and_kinks_match_pytorch(name, compiled):
    value, gradient = _value_and_gradient(kiln, OPS[name], compiled)
    expected_value, expected_gradient = _value_and_gradient(torch, OPS[name], False)
    np.testing.assert_allclose(value, expected_value, rtol=1e-4, atol=1e-5, equal_nan=True)
    np.testing.assert_allclose(gradient, expected_gradient, rtol=1e-4, atol=1e-4, equal_nan=True)
