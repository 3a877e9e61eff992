"""The 2-norm (``x.norm()``, ``linalg.vector_norm``) against PyTorch: full and per-dim norms,
keepdim, strided inputs, NaN and infinities, float64, complex, empty and 0-d tensors; the
squares go into a pooled buffer (a fresh one the size of ``x`` faulted its pages in)."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.ops.reductions import vector_norm
from tests.oracle import needs_torch, torch


def _check(a: np.ndarray, fn, rtol: float = 2e-6) -> None:
    k, t = fn(kiln, kiln.from_numpy(a.copy())), fn(torch, torch.from_numpy(a.copy()))
    assert tuple(k.shape) == tuple(t.shape) and k.stride() == t.stride()
    assert str(k.dtype).split(".")[-1] == str(t.dtype).split(".")[-1]
    np.testing.assert_allclose(k.numpy(), t.numpy(), rtol=rtol, atol=0)


_CALLS = [
    lambda lib, x: x.norm(),
    lambda lib, x: lib.linalg.vector_norm(x, 2, dim=-1),
    lambda lib, x: lib.linalg.vector_norm(x, 2, dim=0, keepdim=True),
    lambda lib, x: x.transpose(0, -1).norm(dim=1),
    lambda lib, x: x[::2].norm(),
]


@needs_torch
@pytest.mark.parametrize("shape", [(67, 131), (5, 7, 33), (64, 128, 16)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_two_norms_match_torch(shape, dtype):
    a = np.random.default_rng(0).standard_normal(shape).astype(dtype)
    for fn in _CALLS:
        _check(a, fn)


@needs_torch
def test_two_norms_of_nonfinite_complex_empty_and_0d():
    a = np.random.default_rng(1).standard_normal((40, 30)).astype(np.float32)
    a[3, 4], a[5, 6], a[7, 8] = np.nan, np.inf, -np.inf
    for fn in _CALLS:
        k = fn(kiln, kiln.from_numpy(a.copy())).numpy()
        t = fn(torch, torch.from_numpy(a.copy())).numpy()
        np.testing.assert_array_equal(np.isnan(k), np.isnan(t))
        np.testing.assert_array_equal(np.isinf(k), np.isinf(t))
    c = (a + 1j * a[::-1]).astype(np.complex64)
    c[np.isnan(c)] = 0
    c[np.isinf(c)] = 1
    _check(c, lambda lib, x: x.norm())
    _check(np.zeros((0, 5), np.float32), lambda lib, x: x.norm())
    _check(np.array(-3.0, np.float32), lambda lib, x: x.norm())


def test_squares_go_into_a_pooled_buffer(monkeypatch):
    shapes = []
    real = vector_norm.empty_array

    def recording(shape, dtype):
        shapes.append(tuple(shape))
        return real(shape, dtype)

    monkeypatch.setattr(vector_norm, "empty_array", recording)
    x = kiln.arange(12.0).reshape(3, 4)
    assert abs(x.norm().item() - float(np.sqrt((np.arange(12.0) ** 2).sum()))) < 1e-4
    assert shapes == [(3, 4)]
