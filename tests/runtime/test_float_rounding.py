"""Float results with PyTorch's bits: small float32 reductions (summation order),
sigmoid's formula, ranges in every float dtype, and ``add(alpha=)``/``lerp`` rounding once."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from tests.oracle import needs_torch, torch
from tests.runtime.helpers import same_as_torch

pytestmark = needs_torch


def _bits_equal(fn, values):
    k = fn(kiln, kiln.from_numpy(values.copy())).detach().numpy()
    t = fn(torch, torch.from_numpy(values.copy())).detach().numpy()
    assert k.dtype == t.dtype and k.shape == t.shape
    np.testing.assert_array_equal(k, t)


REDUCTION_BITS = {
    "sum-short": (7, lambda lib, x: x.sum()),
    "sum": (100, lambda lib, x: x.sum()),
    "sum-long": (1000, lambda lib, x: x.sum()),
    "mean": (37, lambda lib, x: x.mean()),
    "sum-rows": (60, lambda lib, x: x.reshape(6, 10).sum(1)),
    "sum-columns": (60, lambda lib, x: x.reshape(6, 10).sum(0)),
    "sum-wide-columns": (800, lambda lib, x: x.reshape(20, 40).sum(0)),
    "mean-middle": (120, lambda lib, x: x.reshape(2, 6, 10).mean(1, keepdim=True)),
    "sum-transposed": (60, lambda lib, x: x.reshape(6, 10).t().sum(0)),
    "sum-strided": (60, lambda lib, x: x.reshape(6, 10)[:, ::2].sum()),
    "sum-two-dims": (120, lambda lib, x: x.reshape(4, 5, 6).sum((0, 2))),
    "mse-loss": (50, lambda lib, x: lib.nn.functional.mse_loss(x, x.flip(0))),
    "cumsum": (100, lambda lib, x: x.cumsum(0)),
    "cumprod": (50, lambda lib, x: (1 + x / 10).cumprod(0)),
}


@pytest.mark.parametrize("size, fn", list(REDUCTION_BITS.values()), ids=list(REDUCTION_BITS))
def test_small_float32_results_have_torchs_bits(size, fn):
    values = (np.random.default_rng(size).standard_normal(size) * 3).astype(np.float32)
    _bits_equal(fn, values)


def test_sigmoid_uses_torchs_formula():
    # 1 / (1 + e^-x) everywhere (112 of these 400 differ in the last bit with the sign-split
    # form; what remains is numpy's float32 exp against PyTorch's)
    values = (np.random.default_rng(2).standard_normal(400) * 3).astype(np.float32)
    k = kiln.sigmoid(kiln.from_numpy(values)).numpy()
    t = torch.sigmoid(torch.from_numpy(values)).numpy()
    assert np.count_nonzero(k != t) <= 80


def _float_bits(t) -> list:
    return t.double().tolist()


RANGE_CASES = [
    (-1, 1, 0.2),
    (0, 2, 0.1),
    (0, 4, 0.1),
    (-3, 3, 0.3),
    (0, 10, 1 / 3),
    (-4, 39.2, 0.8),
    # int bounds with a whole float step (Transformer-XL's positions), counted in ints
    (5, -1, -1.0),
    (0, 7, 2.0),
    (10, 3, -3.0),
    (2, 2, 1.0),
]


LINSPACE_CASES = [
    (-1, 1, 7),
    (-1, 1, 41),
    (0, 1, 11),
    (-43.28, -28.69, 286),
    (0.5, 10.7, 5),
    (3, 9, 1),
]


LOGSPACE_CASES = [(-2, 2, 7), (0, 1, 10), (4.56, 4.48, 5, 10), (-4.15, 3.35, 21, 2.5), (2.3, 2, 1)]


RANGE_DTYPES = ["float32", "float64", "float16", "bfloat16"]


@pytest.mark.parametrize("dtype", RANGE_DTYPES)
def test_arange_rounds_like_torch(dtype):
    for args in RANGE_CASES:
        k = kiln.arange(*args, dtype=getattr(kiln, dtype))
        t = torch.arange(*args, dtype=getattr(torch, dtype))
        assert _float_bits(k) == _float_bits(t), args


@pytest.mark.parametrize("dtype", RANGE_DTYPES + ["int64", "int32", "uint8"])
def test_linspace_and_logspace_round_like_torch(dtype):
    for args in LINSPACE_CASES:
        same_as_torch(lambda lib: _float_bits(lib.linspace(*args, dtype=getattr(lib, dtype))))
    for args in LOGSPACE_CASES:
        same_as_torch(lambda lib: _float_bits(lib.logspace(*args, dtype=getattr(lib, dtype))))


@needs_torch
@pytest.mark.parametrize("other_dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("self_dtype", ["bfloat16", "float32"])
def test_add_with_alpha_rounds_once_in_the_compute_dtype(self_dtype, other_dtype):
    """``param.add_(update, alpha=-lr)``: alpha * update is not rounded to update's dtype first."""
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((2, 64)).astype(np.float32)
    results = []
    for lib in (kiln, torch):
        a = lib.tensor(x).to(getattr(lib, self_dtype))
        b = lib.tensor(y).to(getattr(lib, other_dtype))
        out = a.add(b, alpha=-0.0123456)
        a.sub_(b, alpha=0.37)
        results.append((out.float().numpy(), a.float().numpy(), str(out.dtype).split(".")[-1]))
    # float32 results may differ in the last bit (PyTorch fuses the multiply-add); a rounding of
    # alpha * other to bfloat16 would show as ~1e-3 relative errors
    rtol = 0 if results[1][2] == "bfloat16" else 1e-6
    np.testing.assert_allclose(results[0][0], results[1][0], rtol=rtol)
    np.testing.assert_allclose(results[0][1], results[1][1], rtol=rtol)
    assert results[0][2] == results[1][2]


@needs_torch
@pytest.mark.parametrize("weight", [0.1, 0.9, -0.3, "tensor"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_lerp_rounds_like_torchs_fused_kernel(weight, dtype):
    rng = np.random.default_rng(0)
    x, y, w = rng.standard_normal((3, 500)).astype(np.float32)
    results = []
    for lib in (kiln, torch):
        a, b = (lib.from_numpy(v).to(getattr(lib, dtype)) for v in (x, y))
        wt = lib.from_numpy(w).to(getattr(lib, dtype)) if weight == "tensor" else weight
        results.append(a.lerp(b, wt).float().numpy())
    np.testing.assert_array_equal(results[0], results[1])
