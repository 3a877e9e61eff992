"""``gather`` against PyTorch: values, dtypes and strides along every dim, for index extents
smaller than the input's, int32 and int64 indices, each dtype, strided inputs and indices,
empty and 0-d tensors, and the out-of-range refusal; a C-contiguous input takes one flat
``np.take`` (``gather_scatter._take_along``), not numpy's take_along_axis."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from tests.oracle import assert_raises_alike, needs_torch, torch

_CASES = [  # (input shape, index shape, dim)
    ((67, 131), (67, 131), 1),
    ((67, 131), (30, 131), 0),
    ((67, 131), (67, 200), 1),
    ((5, 7, 9), (3, 7, 4), 2),
    ((5, 7, 9), (5, 2, 9), 1),
    ((5, 7, 9), (2, 3, 8), 0),
    ((3, 1, 4), (3, 1, 6), 2),
    ((3, 1, 4), (2, 5, 4), 1),
    ((11,), (20,), 0),
    ((), (), 0),
]


def _input(shape, dtype, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(shape) * 100
    if dtype == np.bool_:
        return np.asarray(a > 0)
    a = np.asarray(a).astype(dtype)
    if np.issubdtype(dtype, np.floating) and a.size > 3:
        a.reshape(-1)[:4] = [np.nan, np.inf, -np.inf, -0.0]
    return a


def _index(shape, size: int, dtype, seed: int) -> np.ndarray:
    return np.asarray(np.random.default_rng(seed).integers(0, max(size, 1), shape)).astype(dtype)


def _compare(a, idx, dim, layout=lambda t: t, index_layout=lambda t: t):
    k = layout(kiln.from_numpy(a.copy())).gather(dim, index_layout(kiln.from_numpy(idx.copy())))
    t = layout(torch.from_numpy(a.copy())).gather(dim, index_layout(torch.from_numpy(idx.copy())))
    assert tuple(k.shape) == tuple(t.shape) and k.stride() == t.stride()
    assert str(k.dtype).split(".")[-1] == str(t.dtype).split(".")[-1]
    got, want = k.numpy(), t.numpy()
    np.testing.assert_array_equal(got, want)
    if got.dtype.kind == "f":
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


@needs_torch
@pytest.mark.parametrize("shape, index_shape, dim", _CASES)
@pytest.mark.parametrize("index_dtype", [np.int64, np.int32])
def test_gather_matches_torch(shape, index_shape, dim, index_dtype):
    size = shape[dim] if shape else 1
    for dtype in (np.float32, np.float64, np.float16, np.int64, np.int8, np.bool_):
        a = _input(shape, dtype, seed=1)
        _compare(a, _index(index_shape, size, index_dtype, seed=2), dim)


@needs_torch
def test_gather_of_strided_inputs_and_indices():
    a = _input((40, 50), np.float32, seed=3)
    idx = _index((50, 40), 40, np.int64, seed=4)
    _compare(a, idx, 1, layout=lambda t: t.t(), index_layout=lambda t: t)  # transposed input
    _compare(a, idx, 0, layout=lambda t: t, index_layout=lambda t: t.t())  # transposed index
    _compare(a, idx[:, ::2].copy(), 1, layout=lambda t: t[::2, :], index_layout=lambda t: t[:20])
    _compare(a, idx, 1, layout=lambda t: t[:, :1].expand(40, 50), index_layout=lambda t: t.t())


@needs_torch
def test_gather_of_empty_tensors():
    _compare(np.zeros((0, 5), np.float32), np.zeros((0, 3), np.int64), 1)
    _compare(np.ones((4, 5), np.float32), np.zeros((4, 0), np.int64), 1)
    _compare(np.ones((4, 5), np.float32), np.zeros((0, 5), np.int64), 0)


@needs_torch
def test_gather_refuses_an_index_out_of_range():
    a = np.ones((4, 5), np.float32)
    for bad in (5, -1):
        idx = np.zeros((4, 5), np.int64)
        idx[2, 3] = bad
        assert_raises_alike(
            RuntimeError,
            lambda i=idx: kiln.from_numpy(a).gather(1, kiln.from_numpy(i)),
            lambda i=idx: torch.from_numpy(a).gather(1, torch.from_numpy(i)),
        )


def test_contiguous_gather_is_one_flat_take(monkeypatch):
    """numpy's take_along_axis (a fancy index of broadcast aranges, 7x slower at 256 x 256) is
    left to strided inputs."""

    def refuse(*args, **kwargs):
        raise AssertionError("take_along_axis called")

    a = kiln.arange(24.0).reshape(2, 3, 4)
    idx = kiln.tensor([[[3, 0], [1, 1], [2, 0]], [[0, 0], [3, 2], [1, 3]]])
    with monkeypatch.context() as m:
        m.setattr(np, "take_along_axis", refuse)
        got = a.gather(2, idx)
    expected = [[[3, 0], [5, 5], [10, 8]], [[12, 12], [19, 18], [21, 23]]]
    assert got.tolist() == expected
