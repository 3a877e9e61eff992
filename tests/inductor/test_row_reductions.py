"""Compiled row reductions (softmax, layer_norm, sums, max, variance) against PyTorch at row
lengths around the vector width and the split loop's step (``SPLIT * LANES`` elements: several
independent accumulators per row), tails shorter than a vector, and rows holding NaN or inf."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import kiln

F = kiln.nn.functional
TF = torch.nn.functional

# below, at and around one vector (8 lanes) and one split step (32 elements), and long rows
WIDTHS = [1, 5, 8, 13, 31, 32, 33, 63, 64, 65, 100, 257, 1000, 4099]

OPS = {
    "softmax": (lambda x: F.softmax(x, dim=-1), lambda x: TF.softmax(x, dim=-1)),
    "log_softmax": (lambda x: F.log_softmax(x, dim=-1), lambda x: TF.log_softmax(x, dim=-1)),
    "sum": (lambda x: x.sum(-1), lambda x: x.sum(-1)),
    "amax": (lambda x: x.amax(-1), lambda x: x.amax(-1)),
    "amin": (lambda x: x.amin(-1), lambda x: x.amin(-1)),
    "var": (lambda x: x.var(-1), lambda x: x.var(-1)),
    "sum_of_squares": (
        lambda x: ((x - 0.5) * (x - 0.5)).sum(-1),
        lambda x: ((x - 0.5) ** 2).sum(-1),
    ),
    "layer_norm": (
        lambda x: F.layer_norm(x, (x.shape[-1],)),
        lambda x: TF.layer_norm(x, (x.shape[-1],)),
    ),
}


def _compare(op: str, data: np.ndarray, rtol: float = 2e-5, atol: float = 2e-5) -> None:
    ours, theirs = OPS[op]
    got = kiln.compile(ours)(kiln.from_numpy(data.copy())).numpy()
    expected = theirs(torch.from_numpy(data.copy())).numpy()
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=rtol, atol=atol, equal_nan=True)


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("op", sorted(OPS))
def test_row_reduction_matches_pytorch(op, width):
    data = np.random.default_rng(width).standard_normal((7, width), dtype=np.float32) * 3 + 1
    scale = max(1.0, np.sqrt(width)) if op in ("sum", "sum_of_squares", "var") else 1.0
    _compare(op, data, atol=2e-5 * scale * (width if op == "sum_of_squares" else 1))


@pytest.mark.parametrize("width", [5, 33, 100, 1000])
@pytest.mark.parametrize("op", ["softmax", "log_softmax", "sum", "amax", "amin", "layer_norm"])
def test_rows_with_nan_and_inf_match_pytorch(op, width):
    data = np.random.default_rng(width).standard_normal((6, width), dtype=np.float32)
    data[0, width // 2] = np.nan  # one NaN in the middle of a row (any accumulator)
    data[1, -1] = np.nan  # in the tail
    data[2, 0] = np.inf
    data[3, width // 3] = -np.inf
    data[4, :] = -np.inf  # a row of -inf only
    data[5, 0], data[5, -1] = np.inf, -np.inf
    _compare(op, data)


def test_long_rows_use_the_split_loop_and_short_ones_do_not(tmp_path, monkeypatch):
    def dump(width: int) -> str:
        monkeypatch.setenv("KILN_DEBUG_DIR", str(tmp_path / str(width)))
        x = kiln.randn(4, width)
        got = kiln.compile(lambda x: F.softmax(x * 0.75, dim=-1))(x)
        expected = TF.softmax(torch.from_numpy(x.numpy()) * 0.75, dim=-1).numpy()
        np.testing.assert_allclose(got.numpy(), expected, rtol=2e-5, atol=2e-6)
        return "".join(p.read_text() for p in (tmp_path / str(width)).rglob("kernels.ll"))

    assert "split_head" in dump(1000)
    short = dump(9)
    assert short and "split_head" not in short


@pytest.mark.parametrize("width", [33, 1000, 4099])
def test_welford_rows_far_from_zero_match_pytorch(width):
    # a mean far above the spread: the split loop's parts and their merge must keep the digits
    # a sum of squares would lose
    data = np.random.default_rng(width).standard_normal((5, width), dtype=np.float32) * 2 + 1000
    x = kiln.from_numpy(data)
    got_var = kiln.compile(lambda x: x.var(-1))(x).numpy()
    got_norm = kiln.compile(lambda x: F.layer_norm(x, (width,)))(x).numpy()
    t = torch.from_numpy(data)
    np.testing.assert_allclose(got_var, t.var(-1).numpy(), rtol=1e-3)
    np.testing.assert_allclose(got_norm, TF.layer_norm(t, (width,)).numpy(), rtol=1e-3, atol=2e-3)
