"""Row kernels prefetch the next row's inputs from a later loop of the row (``codegen.llvm.
prefetch``): which kernels do (softmax, layer_norm) and which do not (one loop per row, flat
pointwise loops, rows too long to stay in cache), and that results are PyTorch's wherever the
prefetched address is unusual: the last row (past the buffer), rows over several dimensions,
strided rows, and kernels for every size that decide on the row length when they run."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import kiln
from kiln.inductor.codegen.llvm.prefetch import LINE_BYTES, ROW_BYTES
from kiln.inductor.codegen.llvm.values import LANES

F = kiln.nn.functional
TF = torch.nn.functional
PREFETCH = 'call void @"llvm.prefetch'


def _kernels_ir(tmp_path, monkeypatch, compiled, *args) -> str:
    """The LLVM IR of the kernels ``compiled(*args)`` compiles (``KILN_DEBUG_DIR`` dumps)."""
    monkeypatch.setenv("KILN_DEBUG_DIR", str(tmp_path))
    compiled(*args)
    monkeypatch.delenv("KILN_DEBUG_DIR")
    return "\n".join(p.read_text() for p in sorted(tmp_path.rglob("kernels.ll")))


def _loop_of(ir_text: str, call: str) -> str:
    """The basic block holding the first line with ``call``."""
    lines = ir_text.splitlines()
    at = next(k for k, line in enumerate(lines) if call in line)
    start = max(k for k in range(at + 1) if lines[k].endswith(":"))
    return lines[start]


def test_softmax_prefetches_the_next_row_from_its_exp_loop(tmp_path, monkeypatch):
    x = kiln.randn(16, 1024)
    ir_text = _kernels_ir(tmp_path, monkeypatch, kiln.compile(lambda x: F.softmax(x, -1)), x)
    assert PREFETCH in ir_text
    # the loop that issues them is the one computing exp (its split loop: one per cache line)
    block = ir_text[ir_text.index(_loop_of(ir_text, PREFETCH)) :]
    block = block[: block.index("br label")]
    assert "kiln.math.exp" in block
    # one per 64-byte line the step covers: 4 vectors of LANES floats (two lines with AVX2's 8,
    # four with AVX-512's 16)
    assert block.count(PREFETCH) == 4 * LANES * 4 // LINE_BYTES


def test_layer_norm_prefetches_its_input_not_the_weights(tmp_path, monkeypatch):
    x, w, b = kiln.randn(16, 512), kiln.randn(512), kiln.randn(512)
    compiled = kiln.compile(lambda x, w, b: F.layer_norm(x, (512,), w, b))
    ir_text = _kernels_ir(tmp_path, monkeypatch, compiled, x, w, b)
    # the normalize loop (vector loop only: no reduction, no math) prefetches x alone
    assert ir_text.count(PREFETCH) == 1


@pytest.mark.parametrize(
    "fn, shape",
    [
        (lambda x: x.sum(-1), (16, 1024)),  # one loop per row: the stream never pauses
        (lambda x: (x * 2).exp(), (64, 1024)),  # a flat pointwise loop
        (lambda x: F.softmax(x, -1), (4, 20000)),  # 80 KB rows: the next one would not fit
        (lambda x: F.softmax(x, -1), (1, 1024)),  # a single row
    ],
)
def test_kernels_that_stream_once_or_have_long_rows_do_not_prefetch(
    tmp_path, monkeypatch, fn, shape
):
    ir_text = _kernels_ir(tmp_path, monkeypatch, kiln.compile(fn), kiln.randn(*shape))
    assert ir_text and PREFETCH not in ir_text


def _plain(shape, seed) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _softmax_data(shape, seed=0) -> np.ndarray:
    """Rows of every kind softmax meets: plain, NaN, +-inf, all -inf (NaN out, like PyTorch),
    masked with -inf, large negative values and spreads whose exps are denormal or zero."""
    rng = np.random.default_rng(seed)
    data = rng.standard_normal(shape).astype(np.float32) * 4
    rows = data.reshape(-1, shape[-1])
    width = shape[-1]
    rows[1, width // 2] = np.nan
    rows[2, 0] = np.inf
    rows[3, :] = -np.inf
    rows[4, width // 3 :] = -np.inf  # an attention mask
    rows[5] = -1e30 + rows[5]  # large negative values: the max takes them back to 0
    rows[6] = np.linspace(0.0, -110.0, width, dtype=np.float32)  # exp(-87..-104): denormals
    rows[-1, -1] = np.nan  # the last row, whose prefetches point past the buffer
    return data


@pytest.mark.parametrize("shape", [(9, 1024), (3, 4, 257), (2, 5, 33), (8, 4096)])
def test_prefetching_softmax_and_layer_norm_match_pytorch(shape):
    data = _softmax_data(shape)
    x = kiln.from_numpy(data.copy())
    t = torch.from_numpy(data.copy())
    got = kiln.compile(lambda x: F.softmax(x, -1))(x).numpy()
    np.testing.assert_allclose(got, TF.softmax(t, -1).numpy(), rtol=2e-5, atol=1e-7, equal_nan=True)
    assert np.isnan(got.reshape(-1, shape[-1])[3]).all()
    clean = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    w = np.random.default_rng(2).standard_normal(shape[-1]).astype(np.float32)
    norm = kiln.compile(lambda x, w: F.layer_norm(x, (shape[-1],), w, w))
    got = norm(kiln.from_numpy(clean), kiln.from_numpy(w)).numpy()
    tw = torch.from_numpy(w)
    expected = TF.layer_norm(torch.from_numpy(clean), (shape[-1],), tw, tw).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=2e-5)


@pytest.mark.parametrize(
    "view",
    [lambda x: x.t(), lambda x: x[:, ::2] * 1.5],
    ids=["transposed", "every_other_column"],
)
def test_softmax_of_strided_rows_matches_pytorch(view):
    # rows of a view: a row step of one element (transposed) or a strided inner loop
    data = np.ascontiguousarray(_softmax_data((300, 12)).T)
    got = kiln.compile(lambda x: F.softmax(view(x), -1))(kiln.from_numpy(data.copy())).numpy()
    expected = TF.softmax(view(torch.from_numpy(data.copy())), -1).numpy()
    np.testing.assert_allclose(got, expected, rtol=2e-5, atol=1e-7, equal_nan=True)


def test_kernels_for_every_size_prefetch_short_rows_only_when_they_run(
    stats, tmp_path, monkeypatch
):
    compiled = kiln.compile(lambda x: F.softmax(x, -1), dynamic=True)
    ir_text = _kernels_ir(tmp_path, monkeypatch, compiled, kiln.from_numpy(_plain((8, 100), 0)))
    # symbolic sizes: the row length is compared with the limit when the kernel runs
    assert PREFETCH in ir_text and f", {ROW_BYTES}" in ir_text
    # rows under and over the 64 KiB the kernel checks for (prefetching the next row, or
    # this one's lines again), and a few short rows
    for k, shape in enumerate([(9, 300), (7, 5000), (8, 20000), (2, 33)]):
        data = _softmax_data(shape, k) if shape[0] > 6 else _plain(shape, k)
        got = compiled(kiln.from_numpy(data.copy())).numpy()
        expected = TF.softmax(torch.from_numpy(data), -1).numpy()
        np.testing.assert_allclose(got, expected, rtol=2e-5, atol=1e-7, equal_nan=True)
    # one compile for every size: nothing in the prefetch plan asked for a size's value
    assert stats.symbolic_compiles == 1 and stats.symbolic_refused == 0
