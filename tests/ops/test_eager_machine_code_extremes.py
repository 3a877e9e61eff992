"""float32 row maxima and minima as machine code (``llvm/eager_extremes.py``, reached by
``amax``/``amin`` over the last dim of a C-contiguous tensor): PyTorch's values for every row
length around the 8-lane vectors, the four chains and the tail, NaN anywhere in a row, infinite
rows; the calls left to numpy (strided, float64, other dims, empty) and the gradient as before.
Signed zeros are compared as equal: which zero of a -0.0/+0.0 tie PyTorch returns depends on
its vector lanes, and kiln's numpy reduction did not follow them either."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.runtime import machine_code
from tests.oracle import needs_torch, torch


def _rows(count: int, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    a = (rng.standard_normal((count, n)) * 100).astype(np.float32)
    for r in range(1, count):  # a NaN at each position in turn, one row each
        a[r, (r - 1) % n] = np.nan if r % 3 else a[r, (r - 1) % n]
    a[0] = -np.inf
    if count > 2 and n > 1:
        a[-1, n // 2] = np.inf
    return a


def _same(got, want) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)  # (NaN equals NaN here; -0.0 equals 0.0)


@needs_torch
@pytest.mark.parametrize("n", [*range(1, 70), 255, 256, 257, 1000])
def test_row_extremes_match_torch(n):
    a = _rows(max(4, min(80, 300 // n + 4)), n, seed=n)
    k, t = kiln.from_numpy(a.copy()), torch.from_numpy(a.copy())
    for fn in (
        lambda x: x.amax(-1),
        lambda x: x.amin(1),
        lambda x: x.amax(-1, keepdim=True),
        lambda x: x.amin((-1,)),
    ):
        _same(fn(k).numpy(), fn(t).numpy())
        assert fn(k).stride() == fn(t).stride()


@needs_torch
def test_three_dim_rows_and_the_calls_numpy_keeps():
    a = _rows(60, 37, seed=1).reshape(3, 20, 37)
    k, t = kiln.from_numpy(a.copy()), torch.from_numpy(a.copy())
    for fn in (
        lambda x: x.amax(-1),
        lambda x: x.amin(2, keepdim=True),
        lambda x: x.amax(1),  # not the last dim
        lambda x: x.amin((1, 2)),
        lambda x: x.transpose(1, 2).amax(-1),  # strided rows
        lambda x: x[:, ::2].amin(-1),
        lambda x: x.double().amax(-1),
    ):
        got, want = fn(k), fn(t)
        _same(got.numpy(), want.numpy())
        assert got.stride() == want.stride()


@needs_torch
def test_empty_inputs():
    for shape in ((0, 300), (300, 0)):
        a = np.zeros(shape, np.float32)
        k, t = kiln.from_numpy(a), torch.from_numpy(a)
        for fn in (lambda x: x.amax(-1), lambda x: x.amin(-1)):
            try:
                want = fn(t)
            except IndexError:  # (PyTorch's message names dim -1, kiln's dim 1: reported)
                with pytest.raises(IndexError, match="to have non-zero size"):
                    fn(k)
                continue
            _same(fn(k).numpy(), want.numpy())


@needs_torch
def test_gradient_splits_among_ties_as_torch():
    a = np.array([[1.0, 3.0, 3.0, -2.0] * 80, [np.nan, 1.0, 2.0, 0.0] * 80], np.float32)
    k = kiln.from_numpy(a.copy()).requires_grad_()
    t = torch.from_numpy(a.copy()).requires_grad_()
    k.amax(-1).sum().backward()
    t.amax(-1).sum().backward()
    np.testing.assert_allclose(k.grad.numpy(), t.grad.numpy(), rtol=1e-6)


def test_the_machine_code_takes_last_dim_extremes(monkeypatch):
    kernels = machine_code.get("extremes")
    assert kernels is not None
    calls = []

    class Counting:
        def rows(self, kind, block):
            calls.append((kind, block.shape))
            return kernels.rows(kind, block)

    x = kiln.from_numpy(_rows(20, 33, seed=2))
    with monkeypatch.context() as m:
        m.setitem(machine_code._built, "extremes", Counting())
        native = [x.amax(-1), x.amin(-1)]
    assert calls == [("max", (20, 33)), ("min", (20, 33))]
    with monkeypatch.context() as m:
        m.setitem(machine_code._built, "extremes", False)
        plain = [x.amax(-1), x.amin(-1)]
    for got, want in zip(native, plain, strict=True):
        _same(got.numpy(), want.numpy())
