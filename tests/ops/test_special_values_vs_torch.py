"""NaN, infinities, signed zeros and ties through ~100 ops, eager and compiled, against PyTorch:
values, index results and which tied or NaN element a selection picks. (A probe of this kind
found compiled searchsorted steering past NaN boundaries otherwise than PyTorch's bisection.)"""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from tests.oracle import gelu_depends_on_host, needs_torch, torch


def _special(shape, seed):
    """Values rounded to halves (ties), a tenth NaN, a fifteenth each +inf and -inf, two -0.0."""
    r = np.random.default_rng(seed)
    a = (np.round(r.standard_normal(shape) * 2) / 2).astype(np.float32).reshape(-1)
    n = a.size
    idx = r.permutation(n)
    tenth, fifteenth = max(1, n // 10), max(1, n // 15)
    a[idx[:tenth]] = np.nan
    a[idx[tenth : tenth + fifteenth]] = np.inf
    a[idx[tenth + fifteenth : tenth + 2 * fifteenth]] = -np.inf
    a[idx[-2:]] = -0.0
    return a.reshape(shape)


X = _special((4, 7), 1)
T = np.array([1, 0, 3, 6])

OPS = {
    "max dim": lambda L, x: tuple(L.max(x, 1)),
    "min dim": lambda L, x: tuple(L.min(x, 1)),
    "argmax": lambda L, x: L.argmax(x, 1),
    "argmin": lambda L, x: L.argmin(x, 0),
    "amax": lambda L, x: L.amax(x, 1),
    "max all": lambda L, x: L.max(x),
    "sort": lambda L, x: tuple(L.sort(x, 1)),
    "sort desc stable": lambda L, x: tuple(L.sort(x, dim=1, descending=True, stable=True)),
    "argsort": lambda L, x: L.argsort(x, dim=1, stable=True),
    "topk": lambda L, x: tuple(L.topk(x, 3, 1)),
    "topk smallest": lambda L, x: tuple(L.topk(x, 3, 1, largest=False)),
    "kthvalue": lambda L, x: tuple(L.kthvalue(x, 2, 1)),
    "median dim": lambda L, x: tuple(L.median(x, 1)),
    "median all": lambda L, x: L.median(x),
    "nanmedian dim": lambda L, x: tuple(L.nanmedian(x, 1)),
    "mode": lambda L, x: tuple(L.mode(x, 1)),
    "quantile": lambda L, x: L.quantile(x, 0.3, dim=1),
    "nanquantile": lambda L, x: L.nanquantile(x, 0.3, dim=1),
    "cummax": lambda L, x: tuple(L.cummax(x, 1)),
    "cummin": lambda L, x: tuple(L.cummin(x, 1)),
    "logcumsumexp": lambda L, x: L.logcumsumexp(x, 1),
    "logsumexp": lambda L, x: L.logsumexp(x, 1),
    "softmax": lambda L, x: L.softmax(x, 1),
    "log_softmax": lambda L, x: L.log_softmax(x, 1),
    "nansum": lambda L, x: L.nansum(x, 1),
    "nanmean": lambda L, x: L.nanmean(x, 1),
    "clamp": lambda L, x: L.clamp(x, -1, 1),
    "clamp nan bound": lambda L, x: L.clamp(x, min=L.tensor(float("nan"))),
    "maximum": lambda L, x: L.maximum(x, x.flip(1)),
    "fmax": lambda L, x: L.fmax(x, x.flip(1)),
    "fmin": lambda L, x: L.fmin(x, x.flip(0)),
    "relu": lambda L, x: L.relu(x),
    "hardtanh": lambda L, x: L.nn.functional.hardtanh(x),
    "relu6": lambda L, x: L.nn.functional.relu6(x),
    "leaky_relu": lambda L, x: L.nn.functional.leaky_relu(x, 0.1),
    "elu": lambda L, x: L.nn.functional.elu(x),
    "gelu": lambda L, x: L.nn.functional.gelu(x),
    "silu": lambda L, x: L.nn.functional.silu(x),
    "softplus": lambda L, x: L.nn.functional.softplus(x),
    "mish": lambda L, x: L.nn.functional.mish(x),
    "sign": lambda L, x: L.sign(x),
    "sgn": lambda L, x: L.sgn(x),
    "nan_to_num": lambda L, x: L.nan_to_num(x),
    "isclose": lambda L, x: L.isclose(x, x.flip(1)),
    "eq": lambda L, x: x == x.flip(1),
    "unique": lambda L, x: tuple(L.unique(x, return_inverse=True, return_counts=True)),
    "unique sorted dim": lambda L, x: L.unique(x, dim=0),
    "bucketize": lambda L, x: L.bucketize(x, L.tensor([-1.0, 0.0, 1.0])),
    "searchsorted": lambda L, x: L.searchsorted(L.tensor([-1.0, 0.0, float("nan")]), x),
    "histc": lambda L, x: L.histc(x.nan_to_num(0, 0, 0), 4, -2, 2),
    "where": lambda L, x: L.where(x > 0, x, -x),
    "masked_fill": lambda L, x: x.masked_fill(x.isnan(), 0.0),
    "norm": lambda L, x: L.linalg.vector_norm(x, dim=1),
    "norm inf": lambda L, x: L.linalg.vector_norm(x, float("inf"), dim=1),
    "norm -inf": lambda L, x: L.linalg.vector_norm(x, float("-inf"), dim=1),
    "norm 0": lambda L, x: L.linalg.vector_norm(x, 0, dim=1),
    "std": lambda L, x: L.std(x, 1),
    "var_mean": lambda L, x: tuple(L.var_mean(x, 1)),
    "prod": lambda L, x: L.prod(x, 1),
    "cumprod": lambda L, x: L.cumprod(x, 1),
    "cumsum": lambda L, x: L.cumsum(x, 1),
    "aminmax": lambda L, x: tuple(L.aminmax(x, dim=1)),
    "max_pool1d idx": lambda L, x: tuple(
        L.nn.functional.max_pool1d(x.unsqueeze(0), 3, 2, 1, return_indices=True)
    ),
    "max_pool2d ceil": lambda L, x: tuple(
        L.nn.functional.max_pool2d(
            x.unsqueeze(0).unsqueeze(0), 2, 2, 0, ceil_mode=True, return_indices=True
        )
    ),
    "adaptive_max1d": lambda L, x: tuple(
        L.nn.functional.adaptive_max_pool1d(x.unsqueeze(0), 3, return_indices=True)
    ),
    "lp_pool1d": lambda L, x: L.nn.functional.lp_pool1d(x.unsqueeze(0).abs(), 2, 2),
    "cross_entropy": lambda L, x: L.nn.functional.cross_entropy(x, L.tensor(T)),
    "nll_loss": lambda L, x: L.nn.functional.nll_loss(x, L.tensor(T), reduction="none"),
    "mse": lambda L, x: L.nn.functional.mse_loss(x, x.flip(1), reduction="none"),
    "smooth_l1": lambda L, x: L.nn.functional.smooth_l1_loss(x, x.flip(1), reduction="none"),
    "huber": lambda L, x: L.nn.functional.huber_loss(x, x.flip(1), reduction="none"),
    "bce logits": lambda L, x: L.nn.functional.binary_cross_entropy_with_logits(
        x, (x.flip(1) > 0).float(), reduction="none"
    ),
    "kl_div": lambda L, x: L.nn.functional.kl_div(x, x.flip(1).exp(), reduction="none"),
    "layer_norm": lambda L, x: L.nn.functional.layer_norm(x, (7,)),
    "normalize": lambda L, x: L.nn.functional.normalize(x, dim=1),
    "cosine_sim": lambda L, x: L.nn.functional.cosine_similarity(x, x.flip(1)),
    "pdist": lambda L, x: L.cdist(x, x.flip(0)),
    "round": lambda L, x: L.round(x * 1.5),
    "floor_divide": lambda L, x: L.floor_divide(x, 0.7),
    "fmod": lambda L, x: L.fmod(x, 0.7),
    "remainder": lambda L, x: L.remainder(x, -0.7),
    "atan2": lambda L, x: L.atan2(x, x.flip(1)),
    "pow": lambda L, x: L.pow(x, x.flip(1)),
    "copysign": lambda L, x: L.copysign(L.ones_like(x), x),
    "signbit": lambda L, x: L.signbit(x),
    "heaviside": lambda L, x: L.heaviside(x, L.tensor(0.5)),
    "logaddexp": lambda L, x: L.logaddexp(x, x.flip(1)),
    "xlogy": lambda L, x: L.xlogy(x, x.flip(1)),
    "hypot": lambda L, x: L.hypot(x, x.flip(1)),
    "nextafter": lambda L, x: L.nextafter(x, x.flip(1)),
    "frexp": lambda L, x: tuple(L.frexp(x)),
    "ldexp": lambda L, x: L.ldexp(x, L.tensor([[1, 2, 3, 4, 5, 6, 7]])),
    "trunc": lambda L, x: L.trunc(x),
    "logit": lambda L, x: L.logit(x, eps=1e-3),
    "sinc": lambda L, x: L.sinc(x),
    "erfinv": lambda L, x: L.erfinv(x / 4),
    "digamma": lambda L, x: L.digamma(x),
    "lgamma": lambda L, x: L.lgamma(x),
}


def _numpy(value):
    if isinstance(value, (tuple, list)):
        return [_numpy(v) for v in value]
    return value.detach().numpy() if hasattr(value, "detach") else np.asarray(value)


def _assert_same(actual, expected, name):
    if isinstance(expected, list):
        assert isinstance(actual, list) and len(actual) == len(expected), name
        for a, e in zip(actual, expected):
            _assert_same(a, e, name)
        return
    assert actual.shape == expected.shape, (name, actual.shape, expected.shape)
    if expected.dtype.kind in "fc":
        np.testing.assert_allclose(
            actual.astype(np.float64),
            expected.astype(np.float64),
            rtol=1e-4,
            atol=1e-5,
            equal_nan=True,
            err_msg=name,
        )
    else:
        np.testing.assert_array_equal(actual, expected, err_msg=name)


@needs_torch
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("name", sorted(OPS))
def test_special_values_match_pytorch(name, compiled):
    fn = OPS[name]
    x = np.where(gelu_depends_on_host(X), np.float32(2.5), X) if name == "gelu" else X
    expected = _numpy(fn(torch, torch.tensor(x)))
    run = lambda x: fn(kiln, x)
    if compiled:
        run = kiln.compile(run)
    _assert_same(_numpy(run(kiln.tensor(x))), expected, name)
