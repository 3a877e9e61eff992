"""Transposing copies run as register-transposed tiles (``llvm/transpose_tiles.py``): a kernel
whose vector lanes would gather an input that is contiguous along its innermost row variable
loads ``LANES`` rows of it as whole vectors and transposes them in registers. Results equal
PyTorch's for every element type, for rows the tile does not cover (a row count ``LANES`` does
not divide, a thread's range starting mid-tile), fused bodies and gradients."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import kiln
from kiln.inductor import config as inductor_config
from kiln.inductor.codegen.llvm.values import LANES
from tests.inductor.helpers import kernels_ir, seeded_values

TILED = "tile_rows"


@pytest.fixture(autouse=True)
def _copies_at_their_sizes(monkeypatch):
    """Plain copies emitted at their own sizes, where the tiles serve them (else they run the
    kernel for every size, ``test_transposing_copy.py``)."""
    monkeypatch.setattr(inductor_config, "copies_for_every_size", False)


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "int8", "int64", "bool"])
@pytest.mark.parametrize(
    "shape, perm",
    [
        ((2 * LANES, 3 * LANES), (1, 0)),  # a matrix transpose
        ((4 * LANES, 2, 3, 3), (1, 2, 3, 0)),  # a convolution weight, output channels last
        ((3, 2 * LANES, 5, 7), (0, 2, 3, 1)),  # NCHW to NHWC: 35 rows, two tiles and 3 rows
        ((LANES, 3 * LANES + 5), (1, 0)),  # rows no tile covers at the end of each
    ],
)
def test_permuted_copy_is_tiled_and_equals_pytorch(tmp_path, monkeypatch, dtype, shape, perm):
    a = seeded_values(shape, dtype, seed=11)

    def fn(x):
        return x.permute(*perm).contiguous()

    out, ir_text = kernels_ir(tmp_path, monkeypatch, kiln.compile(fn), kiln.tensor(a))
    assert TILED in ir_text
    np.testing.assert_array_equal(out.numpy(), fn(torch.from_numpy(a)).numpy())
    assert out.stride() == fn(torch.from_numpy(a)).stride()


def test_fused_body_reads_the_tile_and_contiguous_inputs(tmp_path, monkeypatch):
    """A permuted input combined with one read along the lanes and a scalar: each row of the
    tile runs the body with its transposed column in place of the gather."""
    a = seeded_values((3 * LANES, 2 * LANES), "float32", seed=11)
    b = seeded_values((2 * LANES, 3 * LANES), "float32", seed=11)

    def fn(x, y):
        return (x.t() * 2.5 + y).contiguous()

    out, ir_text = kernels_ir(
        tmp_path, monkeypatch, kiln.compile(fn), kiln.tensor(a), kiln.tensor(b)
    )
    assert TILED in ir_text
    want = fn(torch.from_numpy(a), torch.from_numpy(b)).numpy()
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-6, atol=1e-6)


def test_threads_taking_rows_mid_tile(monkeypatch):
    """Two threads split a large transposing copy's rows in chunks that start and end inside
    tiles: those rows run one at a time, the rest as tiles."""
    monkeypatch.setattr(inductor_config, "threads_follow_load", False)
    saved = kiln.get_num_threads()
    kiln.set_num_threads(2)
    try:
        a = seeded_values((16 * LANES, 64 * LANES + 3), "float32", seed=11)

        def fn(x):
            return x.t().contiguous() + 1.0

        got = kiln.compile(fn)(kiln.tensor(a))
        np.testing.assert_array_equal(got.numpy(), fn(torch.from_numpy(a)).numpy())
    finally:
        kiln.set_num_threads(saved)


def test_gradient_of_a_permuted_product_matches_pytorch():
    a = seeded_values((2 * LANES, LANES, 3), "float32", seed=11)
    w = seeded_values((3, 2 * LANES, LANES), "float32", seed=11)

    def fn(lib, x, y):
        return ((x.permute(2, 0, 1) * y).contiguous() ** 2).sum()

    xs, ys = kiln.tensor(a, requires_grad=True), kiln.tensor(w, requires_grad=True)
    kiln.compile(lambda x, y: fn(kiln, x, y))(xs, ys).backward()
    xt, yt = torch.tensor(a, requires_grad=True), torch.tensor(w, requires_grad=True)
    fn(torch, xt, yt).backward()
    np.testing.assert_allclose(xs.grad.numpy(), xt.grad.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ys.grad.numpy(), yt.grad.numpy(), rtol=1e-5, atol=1e-5)


def test_untileable_permutes_keep_their_gathers(tmp_path, monkeypatch):
    """No row variable along which the input is contiguous (it walks the middle of the rows)
    or an inner length the vector width does not divide: the kernel keeps its loop."""
    a = seeded_values((2 * LANES, 2 * LANES, 3, 3), "float32", seed=11)

    def fn(x):
        return x.permute(2, 3, 1, 0).contiguous()

    out, ir_text = kernels_ir(tmp_path, monkeypatch, kiln.compile(fn), kiln.tensor(a))
    assert TILED not in ir_text
    np.testing.assert_array_equal(out.numpy(), fn(torch.from_numpy(a)).numpy())
    b = seeded_values((LANES + 3, 2 * LANES), "float32", seed=11)
    out, ir_text = kernels_ir(
        tmp_path / "odd",
        monkeypatch,
        kiln.compile(fn := lambda x: x.t().contiguous()),
        kiln.tensor(b),
    )
    assert TILED not in ir_text
    np.testing.assert_array_equal(out.numpy(), fn(torch.from_numpy(b)).numpy())
