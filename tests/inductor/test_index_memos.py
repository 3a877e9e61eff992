"""Index work remembered across bodies and graphs (``Layout.offset_expr``'s memo, shared by
layouts of one geometry, and ``sym.index_key`` for divided and reduced indices): what is
remembered for one question must never answer another. Views that differ only in their
offset, and reshaped or pooled indices over loops of other sizes, compile to PyTorch's values."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
import kiln.nn.functional as F
from kiln.inductor import config, ir, sym
from tests.oracle import assert_close, needs_torch, torch


@pytest.fixture
def cold(monkeypatch, cache_dir):
    """Every graph compiled anew (no graph cache), so every body is planned and emitted."""
    monkeypatch.setattr(config, "fx_graph_cache", False)


@needs_torch
def test_views_of_one_shape_and_stride_at_other_offsets_match_torch(cold):
    """``x[:, 1:]`` and ``x[:, :-1]`` share shape and strides: only the offset tells their
    elements apart, in one graph and in graphs compiled one after the other."""
    x = np.arange(60, dtype=np.float32).reshape(6, 10)

    def shifted_difference(t):
        return t[:, 1:] - t[:, :-1] * 2

    def left(t):
        return t[:, :-1] * 3

    def right(t):
        return t[:, 1:] * 3

    for fn in (shifted_difference, left, right):
        got = kiln.compile(fn, fullgraph=True)(kiln.tensor(x))
        assert_close(got, fn(torch.tensor(x)), rtol=0, atol=0)


@needs_torch
@pytest.mark.parametrize("size", [8, 12])
def test_pooled_and_reshaped_indices_for_each_size_match_torch(cold, size):
    """Pooling windows and a pixel shuffle index by division and modulo; compiled for two
    sizes in turn, each size's indices are its own."""
    rng = np.random.default_rng(size)
    x = rng.standard_normal((2, 8, size, size)).astype(np.float32)

    def fn(t, nn_functional):
        shuffled = nn_functional.pixel_shuffle(t, 2)
        pooled = nn_functional.max_pool2d(t, 2) + nn_functional.avg_pool2d(t, 2)
        return shuffled * 2, pooled, t.reshape(2, 4, 2, size, size).sum(2)

    got = kiln.compile(lambda t: fn(t, F), fullgraph=True)(kiln.tensor(x))
    expected = fn(torch.tensor(x), torch.nn.functional)
    for g, e in zip(got, expected):
        assert_close(g, e, rtol=1e-6, atol=1e-6)


def test_layouts_of_one_geometry_share_offsets_and_other_offsets_do_not():
    """``offset_expr``'s memo is shared by layouts of equal shape, strides and offset (dtypes
    may differ): a layout at another offset gets its own answers."""
    i, j = sym.Var("x0", 6), sym.Var("x1", 9)
    a = ir.Layout((6, 9), (10, 1), kiln.float32, 0)
    b = ir.Layout((6, 9), (10, 1), kiln.float32, 1)
    assert a.offset_expr([i, j]) is ir.Layout((6, 9), (10, 1), kiln.float64).offset_expr([i, j])
    assert a.offset_expr([i, j]) != b.offset_expr([i, j])
    assert b.offset_expr([i, j]) == sym.as_expr(i) * 10 + j + 1
