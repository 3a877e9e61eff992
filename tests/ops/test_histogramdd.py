"""``kiln.histogramdd`` against ``torch.histogramdd``: every form of ``bins`` (a count, counts
per dim, edge tensors), ``range``, ``weight`` and ``density``, batched points, odd sizes and
points on and past the edges."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from tests.oracle import needs_torch, torch

pytestmark = needs_torch


def _points(shape, seed=0, dtype=np.float32):
    rng = np.random.default_rng(seed)
    return rng.standard_normal(shape).astype(dtype)


def _compare(points, weight=None, dtype="float32", **kwargs):
    k = lambda a: kiln.tensor(a, dtype=getattr(kiln, dtype))  # noqa: E731
    t = lambda a: torch.tensor(a, dtype=getattr(torch, dtype))  # noqa: E731
    kw_ours, kw_theirs = dict(kwargs), dict(kwargs)
    bins = kwargs.get("bins")
    if isinstance(bins, list) and bins and isinstance(bins[0], np.ndarray):
        kw_ours["bins"] = [k(b) for b in bins]
        kw_theirs["bins"] = [t(b) for b in bins]
    if weight is not None:
        kw_ours["weight"], kw_theirs["weight"] = k(weight), t(weight)
    ours = kiln.histogramdd(k(points), **kw_ours)
    theirs = torch.histogramdd(t(points), **kw_theirs)
    assert type(ours).__name__ == "histogramdd"
    assert ours.hist.dtype is getattr(kiln, dtype)
    assert tuple(ours.hist.shape) == tuple(theirs.hist.shape)
    assert ours.hist.is_contiguous()
    np.testing.assert_allclose(ours.hist.numpy(), theirs.hist.numpy(), rtol=1e-5, atol=1e-6)
    assert isinstance(ours.bin_edges, tuple) and len(ours.bin_edges) == len(theirs.bin_edges)
    for e, f in zip(ours.bin_edges, theirs.bin_edges, strict=True):
        np.testing.assert_array_equal(e.numpy(), f.numpy())


@pytest.mark.parametrize("bins", [1, 3, 7])
@pytest.mark.parametrize("shape", [(50, 2), (33, 3), (17, 1), (4, 5, 2)])
def test_integer_bins_over_the_data_extent(shape, bins):
    _compare(_points(shape), bins=bins)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_bin_counts_per_dim_with_range(dtype):
    points = _points((200, 3), 1, np.float64)
    _compare(points, dtype=dtype, bins=[2, 5, 3], range=[-1.0, 1.0, -2.0, 0.5, 0.0, 3.0])


def test_edge_tensors_per_dim_with_points_on_edges():
    points = np.array([[0, 1], [1, 1], [2, 3], [4, 5], [-1, 2], [2, 2.5], [4, 1]], np.float32)
    bins = [np.array([0, 1, 2, 4], np.float32), np.array([1, 2.5, 5], np.float32)]
    _compare(points, bins=bins)


@pytest.mark.parametrize("density", [False, True])
def test_weights_and_density(density):
    points = _points((3, 40, 2), 2)
    weight = np.abs(_points((3, 40), 3))
    _compare(points, weight=weight, bins=[4, 6], density=density)


def test_density_with_uneven_edges():
    points = _points((60, 2), 4)
    bins = [np.array([-3, -1, 0, 0.5, 3], np.float32), np.array([-2, 0, 2], np.float32)]
    _compare(points, bins=bins, density=True)


def test_equal_points_get_a_unit_wide_range():
    _compare(np.array([[0, 1], [0, 1], [0, 1]], np.float32), bins=2)


def test_no_points():
    _compare(np.zeros((0, 2), np.float32), bins=2)


def test_bad_arguments_are_refused_as_pytorch_refuses():
    for lib in (kiln, torch):
        with pytest.raises(RuntimeError, match="at least 2 dimensions"):
            lib.histogramdd(lib.tensor([1.0, 2.0]), 2)
        with pytest.raises(RuntimeError, match="same dtype"):
            lib.histogramdd(lib.ones(3, 2), 2, weight=lib.ones(3, dtype=lib.float64))
        with pytest.raises(RuntimeError, match="min should not exceed max"):
            lib.histogramdd(lib.ones(3, 1), 2, range=[1.0, 0.0])


def test_compiled_histogramdd_equals_eager():
    points = kiln.tensor(_points((30, 2), 7))

    def program(x):
        return kiln.histogramdd(x * 2, [3, 4], weight=x[:, 0].abs()).hist + 1

    np.testing.assert_array_equal(kiln.compile(program)(points).numpy(), program(points).numpy())
