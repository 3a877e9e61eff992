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
