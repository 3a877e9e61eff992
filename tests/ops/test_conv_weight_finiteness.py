"""``weight_is_finite`` on weights too large to scan element by element every call: its answer
is numpy's element check, whether the weight's sum overflows, cancels to NaN or is finite, and
it follows in-place writes (the storage's version)."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.ops.nn.conv_padding import weight_is_finite

SHAPE = (64, 128, 3, 3)  # above the size checked on every call


def _filled(value: float, dtype=np.float32) -> np.ndarray:
    return np.full(SHAPE, value, dtype)


CASES = {
    "ones": lambda: _filled(1.0),
    "finite but the sum overflows": lambda: _filled(3e38),
    "float64 near its maximum": lambda: _filled(1e308, np.float64),
    "one NaN": lambda: _with(_filled(1.0), (5, 7, 1, 1), np.nan),
    "one infinity at a border tap": lambda: _with(_filled(-2.0), (0, 3, 0, 2), np.inf),
    "infinities that cancel": lambda: _with(
        _with(_filled(0.5), (1, 1, 0, 0), np.inf), (2, 2, 2, 2), -np.inf
    ),
    "random normal": lambda: np.random.default_rng(0).standard_normal(SHAPE).astype(np.float32),
}


def _with(a: np.ndarray, at: tuple, value: float) -> np.ndarray:
    a[at] = value
    return a


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("transposed", [False, True])
def test_large_weights_are_finite_exactly_when_every_element_is(case, transposed):
    data = CASES[case]()
    w = kiln.tensor(data)
    if transposed:
        w, data = w.transpose(0, 1), data.transpose(1, 0, 2, 3)
    assert weight_is_finite(w) == bool(np.isfinite(data).all())


def test_an_in_place_write_is_seen_at_the_next_check():
    w = kiln.tensor(_filled(1.0))
    assert weight_is_finite(w)
    w[3, 4, 1, 1] = float("nan")
    assert not weight_is_finite(w)
    w.fill_(2.0)
    assert weight_is_finite(w)
