"""A padding's input is read at an index that leaves it at the edges (``x - 1``): compiled, the
read is one masked vector load (lanes outside the buffer read nothing), not a gather of wrapped
indices. Values are compared with PyTorch at the edges of buffers, of views into larger
storage, and with NaN and inf next to the padding."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.inductor import config as inductor_config
from tests.oracle import assert_close, needs_torch, torch

CASES = {
    "pad a row both sides": (lambda lib, x: lib.nn.functional.pad(x, (3, 5)) * 2.0, (6, 37)),
    "pad an image": (lambda lib, x: lib.nn.functional.pad(x, (1, 1, 2, 0)).relu(), (2, 3, 9, 11)),
    "shifted difference": (
        lambda lib, x: lib.nn.functional.pad(x[..., 1:] - x[..., :-1], (0, 1)),
        (5, 100),
    ),
    "max pool, stride 1": (
        lambda lib, x: lib.nn.functional.max_pool1d(x, 5, 1, 2),
        (3, 4, 29),
    ),
    "pad of a negative amount": (lambda lib, x: lib.nn.functional.pad(x, (-2, 4)), (4, 21)),
}


def _input(shape, seed):
    a = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    flat = a.reshape(-1)
    flat[0], flat[-1] = np.nan, np.inf  # the buffer's first and last elements
    return a


@needs_torch
@pytest.mark.parametrize("case", sorted(CASES))
def test_padded_reads_equal_pytorch(case):
    fn, shape = CASES[case]
    a = _input(shape, len(case))
    expected = fn(torch, torch.tensor(a))
    assert_close(kiln.compile(lambda x: fn(kiln, x))(kiln.tensor(a)), expected, equal_nan=True)


@needs_torch
@pytest.mark.parametrize("case", sorted(CASES))
def test_padded_reads_of_a_view_into_larger_storage_equal_pytorch(case):
    fn, shape = CASES[case]
    wide = _input((shape[0] + 2,) + shape[1:-1] + (shape[-1] + 3,), len(case) + 1)
    view = (slice(1, -1),) + (slice(None),) * (len(shape) - 2) + (slice(2, -1),)
    expected = fn(torch, torch.tensor(wide)[view])
    compiled = kiln.compile(lambda x: fn(kiln, x))
    assert_close(compiled(kiln.tensor(wide)[view]), expected, equal_nan=True)


def test_a_padded_row_is_read_by_masked_vector_loads(tmp_path, monkeypatch):
    monkeypatch.setattr(inductor_config, "fx_graph_cache", False)
    monkeypatch.setenv("KILN_DEBUG_DIR", str(tmp_path))
    x = kiln.randn(4, 40)
    out = kiln.compile(lambda t: kiln.nn.functional.pad(t, (1, 1)) + 1.0)(x)
    kernels = "".join(p.read_text() for p in tmp_path.glob("inductor/*/kernels.ll"))
    assert "llvm.masked.load" in kernels
    expected = np.pad(x.numpy(), ((0, 0), (1, 1))) + 1.0
    np.testing.assert_array_equal(out.numpy(), expected)
