"""The LLVM generator's vector constants (lane indices, shuffle masks, splatted sizes and
values) are shared objects whose text is formatted once: the kernels they are in compute
PyTorch's values, and a shared constant prints as a fresh one would."""

from __future__ import annotations

import numpy as np
import pytest
from llvmlite import ir

import kiln
from kiln.inductor import config
from kiln.inductor.codegen.llvm.values import I1, I32, I64, int_vector, splat_constant
from tests.oracle import assert_close, needs_torch, torch


@needs_torch
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
def test_kernels_with_splatted_constants_lane_indices_and_divisions_match_torch(
    monkeypatch, cache_dir, dtype
):
    """Constants splatted over lanes, a reduction's halving shuffles, division and modulo of
    the lane index by a constant and a gather, in kernels compiled cold (no graph cache)."""
    monkeypatch.setattr(config, "fx_graph_cache", False)
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((6, 40)) * 8).astype(dtype)
    ids = rng.integers(0, 6, size=(5,))

    def fn(t, i):
        scaled = t * 3 + 2
        return scaled, t.sum(-1), t.reshape(6, 10, 4)[:, :, ::3] - 1, t[i] * 2

    got = kiln.compile(fn, fullgraph=True)(kiln.tensor(x), kiln.tensor(ids))
    expected = fn(torch.tensor(x), torch.tensor(ids))
    for g, e in zip(got, expected):
        assert_close(g, e)  # the dtype's tolerance: the sums add in another order


def test_a_shared_vector_constant_prints_as_a_fresh_one():
    """One object per element width and values, with a fresh constant's text; a bool is kept
    apart from the int it equals (``true``, not ``1``)."""
    lanes = int_vector(I64, range(8))
    assert lanes is int_vector(I64, list(range(8)))
    assert str(lanes) == str(ir.Constant(ir.VectorType(I64, 8), list(range(8))))
    assert int_vector(I32, [0] * 4) is not int_vector(I64, [0] * 4)
    assert str(int_vector(I1, [1] * 4)) == "<4 x i1> <i1 1, i1 1, i1 1, i1 1>"
    assert str(int_vector(I1, [True] * 4)) == "<4 x i1> <i1 true, i1 true, i1 true, i1 true>"
    half = ir.Constant(ir.DoubleType(), -0.0)
    fresh = ir.Constant(ir.VectorType(ir.DoubleType(), 4), [-0.0] * 4)
    assert str(splat_constant(half, 4)) == str(fresh)
