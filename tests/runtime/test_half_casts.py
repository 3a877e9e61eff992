"""Casts to and from float16/bfloat16 in machine code, and eager 16-bit float math done in float32
between such casts: the same bits as numpy's (ml_dtypes') casts and as PyTorch's."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import kiln
from kiln.runtime import casting, machine_code
from kiln.runtime import dtypes as dt
from tests.oracle import needs_torch, torch

_BF16 = np.dtype(ml_dtypes.bfloat16)
_FLOATS = (np.dtype(np.float64), np.dtype(np.float32), np.dtype(np.float16), _BF16)


def _numpy_cast(a: np.ndarray, to) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):
        return dt.through_float32(a, to).astype(to)


def _assert_same_floats(got: np.ndarray, want: np.ndarray) -> None:
    """Equal bits, except that NaNs need only stay NaNs of the same sign (payloads may differ)."""
    assert got.dtype == want.dtype and got.shape == want.shape
    g64, w64 = got.astype(np.float64), want.astype(np.float64)
    nan = np.isnan(w64)
    np.testing.assert_array_equal(np.isnan(g64), nan)
    np.testing.assert_array_equal(np.signbit(g64), np.signbit(w64))
    bits = f"u{got.dtype.itemsize}"
    np.testing.assert_array_equal(got.view(bits)[~nan], want.view(bits)[~nan])


def _edge_floats(n: int) -> np.ndarray:
    """Normal numbers over float32's whole range, subnormals, halfway cases, overflow, NaN/inf."""
    rng = np.random.default_rng(7)
    a = rng.standard_normal(n) * np.exp2(rng.uniform(-150, 129, n))
    edges = [np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 65504.0, 65519.99, 65520.0, 2.0**-24]
    edges += [2.0**-25, 3 * 2.0**-26, 1 + 2.0**-11, 1 + 2.0**-11 + 2.0**-40, 1 + 2.0**-8]
    edges += [1 + 3 * 2.0**-9, 3.3895313892515355e38, 3.4028234663852886e38, 1e-45, 1e-39]
    a[: len(edges)] = edges
    a[len(edges) : 2 * len(edges)] = -np.asarray(edges)
    return a


def test_import_installs_the_machine_code_casts():
    assert machine_code.get("casts") is not None


_PAIRS = [(s, t) for s in _FLOATS for t in _FLOATS if casting.has_native_cast(s, t)]


@pytest.mark.parametrize("src,to", _PAIRS, ids=[f"{s}-{t}" for s, t in _PAIRS])
def test_every_cast_gives_numpys_bits(src, to):
    if src.itemsize == 2:  # every 16-bit pattern, vector body and scalar tail
        a = np.arange(65536, dtype=np.uint16).view(src)[:65533]
    else:
        a = _edge_floats(100_003).astype(src)
    _assert_same_floats(casting.astype(a, to), _numpy_cast(a, to))


@pytest.mark.parametrize("to", [np.float16, ml_dtypes.bfloat16], ids=["float16", "bfloat16"])
def test_float32_to_16_bits_near_every_rounding_boundary(to):
    # float32 patterns around the halfway points of each 16-bit step, in every binade
    shift = 13 if to is np.float16 else 16
    high = np.arange(0, 2**32, 2**shift * 97, dtype=np.uint64)
    low = np.array(
        [0, 1, 2 ** (shift - 1) - 1, 2 ** (shift - 1), 2 ** (shift - 1) + 1, 2**shift - 1]
    )
    bits = (high[:, None] + low[None, :]).ravel().astype(np.uint32)
    a = bits.view(np.float32)
    _assert_same_floats(casting.astype(a, to), _numpy_cast(a, to))


def test_layouts_are_kept_and_small_arrays_use_numpy():
    a = _edge_floats(4096).astype(np.float32).reshape(64, 64)
    for view in (a.T, a[:, ::2], np.broadcast_to(a[0], (64, 64)), a[:3, :3]):
        got = casting.astype(view, np.float16)
        _assert_same_floats(got, _numpy_cast(view, np.float16))
        if view.flags.f_contiguous and not view.flags.c_contiguous:
            assert got.flags.f_contiguous  # numpy's order 'K'


def test_numpy_casts_when_the_machine_code_is_missing(monkeypatch, capsys):
    def broken():
        raise OSError("no JIT here")

    x = kiln.from_numpy(_edge_floats(5000).astype(np.float32))
    expected = x.half().numpy()
    monkeypatch.setitem(machine_code._loaders, "casts", broken)
    monkeypatch.delitem(machine_code._built, "casts")
    got = x.half().numpy()
    warned = capsys.readouterr().err
    assert "no machine code for casts" in warned and "no JIT here" in warned
    _assert_same_floats(got, expected)


_HALF_MATH = {
    "to": lambda lib, x, d: x.to(d),
    "from": lambda lib, x, d: x.to(d).float(),
    "double": lambda lib, x, d: x.double().to(d).double(),
    "add": lambda lib, x, d: x.to(d) + x.flip(0).to(d),
    "mul-scalar": lambda lib, x, d: x.to(d) * 0.3,
    "sub-mixed": lambda lib, x, d: x.to(d) - x[:1].to(d),
    "relu": lambda lib, x, d: lib.relu(x.to(d)),
    "sum": lambda lib, x, d: x.to(d).sum(1),
    "mean": lambda lib, x, d: x.to(d).mean(),
    "max-dim": lambda lib, x, d: x.to(d).max(1),
    "transposed": lambda lib, x, d: x.t().to(d).t().contiguous(),
    "copy_": lambda lib, x, d: lib.empty(x.shape, dtype=d).copy_(x),
    "maximum": lambda lib, x, d: lib.maximum(x.to(d), -x.to(d)),
}


@needs_torch
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("case", sorted(_HALF_MATH))
def test_16_bit_math_matches_torch(case, dtype):
    rng = np.random.default_rng(3)
    values = (rng.standard_normal((37, 41)) * 4).astype(np.float32)
    values[0, :4] = [0.0, -0.0, np.inf, np.nan]
    fn = _HALF_MATH[case]
    got = fn(kiln, kiln.from_numpy(values.copy()), getattr(kiln, dtype))
    want = fn(torch, torch.from_numpy(values.copy()), getattr(torch, dtype))
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    for g, w in zip(got, want, strict=True):
        assert str(g.dtype).split(".")[-1] == str(w.dtype).split(".")[-1]
        w = w.float() if w.dtype in (torch.float16, torch.bfloat16) else w
        g = g.float() if g.dtype in (kiln.float16, kiln.bfloat16) else g
        tol = (
            0
            if case in ("to", "from", "double", "relu", "max-dim", "transposed", "copy_")
            else 1e-2
        )
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=tol, atol=tol)
