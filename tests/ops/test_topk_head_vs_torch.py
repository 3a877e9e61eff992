"""``topk`` of a few among many (``sorting.stable_head``) against PyTorch: indices and values,
ties, NaN, infinities and signed zeros, every dtype the path takes, rows long enough for the
blocked threshold (a language model's vocabulary) and short ones, another dim, strided inputs;
a long row is not partitioned whole."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from tests.oracle import needs_torch, torch


def _rows(count: int, n: int, kind: str, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((count, n))
    if kind == "ties":
        a = np.round(a * 2)
    a = a.astype(np.float32)
    if kind == "specials":
        a[0, rng.integers(0, n, 5)] = np.nan
        a[1, rng.integers(0, n, 70)] = np.inf
        a[2] = -0.0
        a[2, ::7] = 0.0
        a[3, ::3] = -np.inf
        a[:, -1] = np.nan  # (the first row keeps NaN when one row is compared)
    return a


def _compare(a: np.ndarray, k: int, dim: int = -1, view=lambda t: t) -> None:
    for largest in (True, False):
        kv, ki = view(kiln.from_numpy(a.copy())).topk(k, dim, largest)
        tv, ti = view(torch.from_numpy(a.copy())).topk(k, dim, largest)
        np.testing.assert_array_equal(ki.numpy(), ti.numpy())
        np.testing.assert_array_equal(kv.numpy(), tv.numpy())
        assert kv.stride() == tv.stride() and ki.stride() == ti.stride()


@needs_torch
@pytest.mark.parametrize(
    "n, k", [(50257, 50), (4096, 64), (4159, 1), (5000, 3), (300, 5), (512, 8)]
)
@pytest.mark.parametrize("kind", ["plain", "ties", "specials"])
def test_topk_of_few_matches_torch(n, k, kind):
    # rows with ties replay PyTorch's selection up to stl_order.REPLAY_LIMIT elements a call
    count = 4 if kind == "plain" or 4 * n <= 1 << 16 else 1
    _compare(_rows(4, n, kind, seed=n + k)[:count], k)


@needs_torch
@pytest.mark.parametrize("dtype", [np.float64, np.float16, np.int64, np.int32, np.int8])
def test_topk_of_few_in_each_dtype(dtype):
    a = _rows(3, 6000, "ties", seed=1)
    if np.dtype(dtype).kind == "i":
        a = (a * 20).astype(dtype)
    else:
        a = a.astype(dtype)
    _compare(a, 40)


@needs_torch
def test_topk_of_few_along_another_dim_and_strided():
    a = _rows(6000, 3, "ties", seed=2)
    _compare(a, 20, dim=0)
    b = _rows(3, 12000, "plain", seed=3)
    _compare(b, 30, view=lambda t: t[:, ::2])
    _compare(b.T.copy(), 30, dim=0, view=lambda t: t)


def test_a_long_row_is_not_partitioned_whole(monkeypatch):
    """The threshold comes from the blocks' maxima and the few candidates reaching it."""
    sizes = []
    partition = np.partition

    def recording(a, *args, **kwargs):
        sizes.append(np.shape(a))
        return partition(a, *args, **kwargs)

    a = _rows(2, 50257, "plain", seed=4)
    with monkeypatch.context() as m:
        m.setattr(np, "partition", recording)
        values, _ = kiln.from_numpy(a).topk(50)
    assert sizes and all(shape[-1] < 50257 for shape in sizes)
    np.testing.assert_array_equal(values.numpy(), -np.sort(-a, axis=1)[:, :50])
