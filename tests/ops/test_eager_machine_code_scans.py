"""Eager float cumsum as one machine-code pass (``llvm/eager_scans.py``): PyTorch's bits (double
accumulation, one rounding, sums starting from +0.0) for every dim and layout, and numpy's
scan when the machine code is missing."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.runtime import machine_code
from tests.oracle import needs_torch, torch


def _values(shape, dtype):
    rng = np.random.default_rng(9)
    a = (rng.standard_normal(shape) * 1e3).astype(dtype)
    if a.size:
        a.flat[0] = -0.0  # a -0.0 prefix sums to +0.0 in PyTorch
        a.flat[a.size // 2] = np.inf
    return a


@needs_torch
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize(
    "shape,dim,transposed",
    [((64, 65), 1, False), ((64, 65), 0, False), ((3, 40, 7), 1, False), ((1031,), 0, False),
     ((40, 30), 1, True), ((2, 0, 300), 2, False)],
)  # fmt: skip
def test_cumsum_is_torchs_bits(shape, dim, transposed, dtype):
    a = _values(shape, dtype)
    k, t = kiln.from_numpy(a.copy()), torch.from_numpy(a.copy())
    if transposed:
        k, t = k.t(), t.t()
    got, want = kiln.cumsum(k, dim).numpy(), torch.cumsum(t, dim).numpy()
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


def test_numpy_scan_when_the_machine_code_is_missing(monkeypatch, capsys):
    def broken():
        raise OSError("no JIT here")

    x = kiln.from_numpy(_values((30, 50), "float32"))
    expected = kiln.cumsum(x, 1).numpy()
    monkeypatch.setitem(machine_code._loaders, "scans", broken)
    monkeypatch.delitem(machine_code._built, "scans", raising=False)
    np.testing.assert_array_equal(kiln.cumsum(x, 1).numpy(), expected)
    assert "no machine code for scans" in capsys.readouterr().err
