"""Ops whose tensor operands have different dtypes: PyTorch casts every operand to the promoted
dtype before computing (a bfloat16 operand beside float32 ones is not multiplied in bfloat16),
so kiln must give the same values, not just the same result dtype."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from tests.oracle import assert_close, needs_torch, torch

pytestmark = needs_torch

_RNG = np.random.default_rng(0)
_X, _A, _B = (_RNG.standard_normal((5, 5)) * 30 for _ in range(3))


def _operands(lib, dtypes):
    return [lib.tensor(v, dtype=getattr(lib, d)) for v, d in zip((_X, _A, _B), dtypes)]


CASES = {
    "addcmul": lambda lib, x, a, b: lib.addcmul(x, a, b, value=3.14),
    "addcdiv": lambda lib, x, a, b: lib.addcdiv(x, a, b.abs() + 1, value=-3.14),
    "addcmul-method": lambda lib, x, a, b: x.addcmul(a, b, value=3),
}
DTYPES = [
    ("float32", "bfloat16", "float32"),
    ("float32", "float16", "float16"),
    ("float64", "float32", "bfloat16"),
    ("bfloat16", "bfloat16", "float32"),
]


@pytest.mark.parametrize("dtypes", DTYPES, ids="-".join)
@pytest.mark.parametrize("name", sorted(CASES))
def test_operands_cast_to_the_result_dtype_first(name, dtypes):
    got = CASES[name](kiln, *_operands(kiln, dtypes))
    want = CASES[name](torch, *_operands(torch, dtypes))
    assert_close(got, want)


# true division and atan2 of a 16-bit float tensor: the other operand (an int64 tensor, a 0-d
# float32 one) is rounded to the 16-bit dtype first, so values past its range become inf
_WIDE = [0.0, 1.0, -3.0, 7e4, -1e6, 2.0**62, 3e38, -3e38]
_HALF = [1.0, -2.0, float("inf"), float("-inf"), 0.5, float("-inf"), 3.0, -0.0]
DIVISIONS = {
    "div-int64": lambda lib, h: h / lib.tensor([int(v) for v in _WIDE[:6]] + [5, -5]),
    "div-int64-left": lambda lib, h: lib.tensor([int(v) for v in _WIDE[:6]] + [5, -5]) / h,
    "div-0d-float32": lambda lib, h: lib.div(h, lib.tensor(3e38)),
    "atan2-float32-0d": lambda lib, h: lib.atan2(h, lib.tensor(-3e38)),
    "atan2-int64": lambda lib, h: lib.atan2(h, lib.tensor([2**62] * 8)),
    "true_divide-float32-0d": lambda lib, h: lib.true_divide(lib.tensor(1e6), h),
}


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("name", sorted(DIVISIONS))
def test_sixteen_bit_division_rounds_the_other_operand_first(name, dtype):
    got = DIVISIONS[name](kiln, kiln.tensor(_HALF, dtype=getattr(kiln, dtype)))
    want = DIVISIONS[name](torch, torch.tensor(_HALF, dtype=getattr(torch, dtype)))
    assert_close(got, want, equal_nan=True)
