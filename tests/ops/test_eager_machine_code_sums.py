"""Small float32 row sums in PyTorch's addition order as machine code (``llvm/eager_sums.py``):
the numpy replay's bits (``ops/reductions/sum_order.py``) for every row length below PyTorch's
cascade, PyTorch's through the public ops, and the replay when the machine code is missing."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.runtime import machine_code
from tests.oracle import needs_torch, torch


def _block(rows: int, n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    a = (rng.standard_normal((rows, n)) * np.exp(rng.uniform(-6, 6, (rows, n)))).astype(np.float32)
    if n > 2:
        a[0, :2] = -0.0
    return a


def _replayed(block: np.ndarray, monkeypatch) -> np.ndarray:
    from kiln.ops.reductions import sum_order

    with monkeypatch.context() as m:
        m.setitem(machine_code._built, "sums", False)
        return sum_order._contiguous_rows(block)


@pytest.mark.parametrize("rows", [2, 3, 17])
def test_rows_are_the_replays_bits(rows, monkeypatch):
    from kiln.ops.reductions import sum_order

    kernels = machine_code.get("sums")
    assert kernels is not None
    for n in [*range(1, 70), 127, 128, 129, 255, 256, 257, 300, 511]:
        block = _block(rows, n, seed=n)
        got = sum_order._contiguous_rows(block)
        want = _replayed(block, monkeypatch)
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


@needs_torch
@pytest.mark.parametrize("shape", [(4, 7), (8, 16), (3, 61), (2, 300)])
def test_small_reductions_print_torchs_digits(shape):
    a = _block(*shape)
    k, t = kiln.from_numpy(a.copy()), torch.from_numpy(a.copy())
    for fn in (lambda x: x.sum(1), lambda x: x.mean(-1)):
        np.testing.assert_array_equal(fn(k).numpy(), fn(t).numpy())
    got = kiln.nn.functional.layer_norm(k, shape[-1:]).numpy()
    want = torch.nn.functional.layer_norm(t, shape[-1:]).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@needs_torch
def test_flat_sums_are_torchs_bits_with_and_without_the_machine_code(monkeypatch):
    """``x.sum()`` of a 1-d float32 tensor below PyTorch's cascade: one machine-code row (eight
    or more elements) or the numpy replay, PyTorch's bits either way."""
    for built in (True, False):
        with monkeypatch.context() as m:
            if not built:
                m.setitem(machine_code._built, "sums", False)
            for n in [*range(1, 40), 63, 64, 65, 255, 256, 257, 300, 511]:
                a = _block(1, n, seed=n)[0]
                got = kiln.tensor(a).sum().numpy()
                want = torch.tensor(a).sum().numpy()
                assert got.view(np.int32) == want.view(np.int32), (built, n)


@needs_torch
@pytest.mark.parametrize("n", range(8))
def test_short_flat_sums_keep_torchs_signed_zeros_and_specials(n):
    """Fewer than eight elements are one running sum (``np.add.accumulate``) that starts from
    the first element, not PyTorch's 0: an all -0.0 input must still sum to +0.0, and NaN/inf
    must land as PyTorch's additions put them."""
    cases = [np.full(n, -0.0, np.float32), _block(1, n, seed=100 + n)[0]]
    for special in (np.inf, -np.inf, np.nan):
        for at in range(n):
            a = _block(1, n, seed=at)[0]
            a[at] = special
            cases.append(a)
    for a in cases:
        got = kiln.tensor(a).sum().numpy()
        want = torch.tensor(a).sum().numpy()
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)
        assert np.signbit(got) == np.signbit(want), a


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(np.int32)


@needs_torch
@pytest.mark.parametrize("shape", [(256, 256), (9, 13, 129), (2000, 7), (40, 511), (1100, 1)])
def test_large_last_dim_sums_are_torchs_bits(shape):
    """Above the small-sum size, rows shorter than PyTorch's cascade still sum in its order
    (its threads split the rows, never a row): sum, mean and keepdim, with NaN, infinities and
    rows of -0.0 among them."""
    a = _block(int(np.prod(shape[:-1])), shape[-1], seed=len(shape)).reshape(shape)
    flat = a.reshape(-1, shape[-1])
    flat[1] = -0.0
    if shape[-1] > 3:
        flat[2, 3], flat[3, 0], flat[4, 1], flat[4, 2] = np.nan, np.inf, np.inf, -np.inf
    k, t = kiln.from_numpy(a.copy()), torch.from_numpy(a.copy())
    for fn in (
        lambda x: x.sum(-1),
        lambda x: x.mean(-1),
        lambda x: x.sum(len(shape) - 1, keepdim=True),
    ):
        got, want = fn(k).numpy(), fn(t).numpy()
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_array_equal(_bits(got), _bits(want))


@needs_torch
@pytest.mark.parametrize("shape", [(0, 300), (300, 0), (3, 0, 600)])
def test_empty_last_dim_sums(shape):
    a = np.zeros(shape, np.float32)
    for fn in (lambda x: x.sum(-1), lambda x: x.mean(-1)):
        got, want = fn(kiln.from_numpy(a.copy())).numpy(), fn(torch.from_numpy(a.copy())).numpy()
        assert got.shape == want.shape
        np.testing.assert_array_equal(got, want)


@needs_torch
def test_non_contiguous_large_last_dim_sums_match_torch():
    """A transposed or sliced input keeps the general path (numpy's pairwise sums)."""
    a = _block(300, 260, seed=5)
    k, t = kiln.from_numpy(a.copy()), torch.from_numpy(a.copy())
    for fn in (lambda x: x.t().sum(-1), lambda x: x[:, ::2].sum(-1), lambda x: x[::3].mean(-1)):
        got, want = fn(k), fn(t)
        assert got.stride() == want.stride()
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=2e-6, atol=1e-3)
