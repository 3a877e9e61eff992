"""float32 add, sub, mul and div with one operand spread along the other's rows or columns, as
machine code (``llvm/eager_broadcast.py`` through ``ops/pointwise/broadcast_rows.py``):
PyTorch's bits, dtypes and strides for each operation, operand order and spread, with NaN,
infinities, signed zeros and division by zero; the calls it leaves to numpy give the same."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.runtime import machine_code
from tests.oracle import needs_torch, torch

_OPS = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b,
}

# (full shape, small shape): rows spread ("row"), columns ("column"), odd sizes and tails
_PAIRS = [
    ((67, 131), (131,)),
    ((67, 131), (1, 131)),
    ((67, 131), (67, 1)),
    ((3, 5, 333), (5, 333)),
    ((3, 5, 333), (333,)),
    ((3, 5, 333), (3, 5, 1)),
    ((2, 4099), (4099,)),
    ((4099, 2), (4099, 1)),
    ((1, 5000), (5000,)),
    ((5000,), (1,)),
    ((70, 70), ()),
]


def _values(shape, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    scale = np.exp(rng.uniform(-30, 30, shape))
    a = np.asarray(rng.standard_normal(shape) * scale).astype(np.float32)
    flat = a.reshape(-1)
    specials = [np.nan, np.inf, -np.inf, 0.0, -0.0, 3e38, -3e38, 1e-45]
    if flat.size:
        picks = rng.integers(0, flat.size, size=min(flat.size, 40))
        flat[picks] = np.resize(np.array(specials, np.float32), picks.size)
    return a


def _bits(t) -> np.ndarray:
    return np.ascontiguousarray(t.detach().numpy() if hasattr(t, "detach") else t).view(np.int32)


def _check(op: str, first: np.ndarray, second: np.ndarray) -> None:
    fn = _OPS[op]
    k = fn(kiln.from_numpy(first.copy()), kiln.from_numpy(second.copy()))
    t = fn(torch.from_numpy(first.copy()), torch.from_numpy(second.copy()))
    assert tuple(k.shape) == tuple(t.shape) and k.dtype == kiln.float32
    assert k.stride() == t.stride()
    got, want = _bits(k), _bits(t)
    nan = np.isnan(t.numpy())
    np.testing.assert_array_equal(np.isnan(k.numpy()), nan)
    np.testing.assert_array_equal(got[~nan], want[~nan])


@needs_torch
@pytest.mark.parametrize("op", sorted(_OPS))
@pytest.mark.parametrize("full, small", _PAIRS)
def test_broadcasts_are_torchs_bits(op, full, small):
    a, b = _values(full, 1), _values(small, 2)
    _check(op, a, b)  # full operand first
    _check(op, b, a)  # spread operand first


@needs_torch
def test_dividing_by_zeros_and_infinities():
    a = np.array([[1.0, -1.0, 0.0, -0.0, np.inf, np.nan, 2.0, -2.0, 5.0]] * 600, np.float32)
    for col in (0.0, -0.0, np.inf, -np.inf, np.nan):
        b = np.full((600, 1), col, np.float32)
        for op in ("div", "mul", "sub", "add"):
            _check(op, a, b)
            _check(op, b, a)


@needs_torch
@pytest.mark.parametrize("op", ["add", "mul", "div"])
def test_non_contiguous_and_other_dtypes_keep_numpy(op):
    """Transposed or sliced operands, float64 and mixed dtypes go to numpy, as before."""
    a = _values((130, 120), 3)
    fn = _OPS[op]
    cases = [  # (full operand, spread operand) from a and a row of 130
        (lambda m: m.t(), lambda r: r),  # transposed full operand
        (lambda m: m[:, ::2], lambda r: r[:, None]),  # sliced full operand
        (lambda m: m[:, :1].expand(130, 120), lambda r: r[:120]),  # expanded full operand
        (lambda m: m.t(), lambda r: r.double()),  # promotion to float64
    ]
    for full, spread in cases:
        row = _values((130,), 4)
        k = fn(full(kiln.from_numpy(a.copy())), spread(kiln.from_numpy(row.copy())))
        t = fn(full(torch.from_numpy(a.copy())), spread(torch.from_numpy(row.copy())))
        assert k.stride() == t.stride() and str(k.dtype) == str(t.dtype).replace("torch", "kiln")
        np.testing.assert_array_equal(k.numpy(), t.numpy())


@needs_torch
def test_empty_and_mutually_broadcast_operands():
    for full, small in (((0, 300), (300,)), ((300, 0), (300, 1)), ((100, 1), (1, 100))):
        a, b = _values(full, 5), _values(small, 6)
        for op in ("add", "div"):
            _check(op, a, b)
            _check(op, b, a)


def test_the_machine_code_takes_broadcasts(monkeypatch):
    """The rows and columns spreads reach the machine code, and without it numpy gives the
    same bits."""
    kernels = machine_code.get("broadcast")
    assert kernels is not None
    calls = []

    class Counting:
        def apply(self, *args):
            calls.append(args[:3])
            return kernels.apply(*args)

    a = kiln.from_numpy(_values((80, 90), 7))
    row, col = kiln.from_numpy(_values((90,), 8)), kiln.from_numpy(_values((80, 1), 9))
    with monkeypatch.context() as m:
        m.setitem(machine_code._built, "broadcast", Counting())
        native = [a + row, col / a, a * col, row - a]
    assert calls == [
        ("add", "row", True),
        ("div", "column", False),
        ("mul", "column", True),
        ("sub", "row", False),
    ]
    with monkeypatch.context() as m:
        m.setitem(machine_code._built, "broadcast", False)
        plain = [a + row, col / a, a * col, row - a]
    for x, y in zip(native, plain, strict=True):
        np.testing.assert_array_equal(_bits(x), _bits(y))
