"""The sort-and-reduceat fast path of accumulating row scatters (``index_put(accumulate=True)``,
``index_add``, the embedding backward) against PyTorch: repeated, negative and unique indices,
float32 and float64, scatters along dim 0 and along a later dim, and the dtypes that keep
``np.add.at``.
"""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from tests.oracle import assert_close, needs_torch, torch


def _indices(kind: str, num: int, rng) -> np.ndarray:
    if kind == "repeated":
        return rng.integers(0, num, (6, 7))
    if kind == "negative":
        return rng.integers(-num, num, (40,))  # -1 and num-1 name the same row
    if kind == "spread":  # many runs, few repeats: the pass-per-occurrence path
        return rng.permutation(np.concatenate([np.arange(num), [3, 5, 3 - num]]))
    if kind == "unique":
        return rng.permutation(num)[:5]
    return np.zeros((0,), np.int64)


@needs_torch
@pytest.mark.parametrize("kind", ["repeated", "negative", "spread", "unique", "empty"])
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "int64"])
def test_index_put_accumulate_matches_torch(kind, dtype):
    rng = np.random.default_rng(3)
    idx = _indices(kind, 80, rng)
    base = (rng.standard_normal((80, 3, 2)) * 4).astype(dtype)
    vals = (rng.standard_normal(idx.shape + (3, 2)) * 4).astype(dtype)
    got = kiln.tensor(base).index_put([kiln.tensor(idx)], kiln.tensor(vals), accumulate=True)
    want = torch.from_numpy(base).index_put(
        [torch.from_numpy(idx)], torch.from_numpy(vals), accumulate=True
    )
    assert_close(got, want)


@needs_torch
@pytest.mark.parametrize("dim", [0, 1, 2])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_index_add_along_any_dim_matches_torch(dim, dtype):
    rng = np.random.default_rng(4)
    base = rng.standard_normal((5, 6, 7)).astype(dtype)
    idx = rng.integers(0, base.shape[dim], 11)
    shape = list(base.shape)
    shape[dim] = 11
    src = rng.standard_normal(shape).astype(dtype)
    got = kiln.tensor(base).index_add(dim, kiln.tensor(idx), kiln.tensor(src), alpha=2.0)
    want = torch.from_numpy(base).index_add(
        dim, torch.from_numpy(idx), torch.from_numpy(src), alpha=2.0
    )
    assert_close(got, want)


@needs_torch
@pytest.mark.parametrize("padding_idx", [None, 2])
@pytest.mark.parametrize("scale_grad_by_freq", [False, True])
def test_embedding_backward_with_repeated_rows_matches_torch(padding_idx, scale_grad_by_freq):
    rng = np.random.default_rng(5)
    w = rng.standard_normal((10, 4)).astype(np.float32)
    idx = rng.integers(0, 10, (8, 16))
    g = rng.standard_normal((8, 16, 4)).astype(np.float32)
    grads = []
    for lib, conv in ((kiln, kiln.tensor), (torch, torch.from_numpy)):
        wt = conv(w).requires_grad_()
        out = lib.nn.functional.embedding(
            conv(idx), wt, padding_idx=padding_idx, scale_grad_by_freq=scale_grad_by_freq
        )
        out.backward(conv(g))
        grads.append(wt.grad)
    assert_close(grads[0], grads[1])
