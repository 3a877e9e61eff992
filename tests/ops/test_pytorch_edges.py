"""Eager edge cases where kiln once differed from PyTorch: the sign of NaN, products with
zero-sized dims, lerp's refusal to promote, meta tensors mixed with CPU ones, interpolate's size
checks, permute/movedim argument errors and factory sizes too large to store. Each case runs the
same code on both libraries and compares values, or exception types and messages."""

from __future__ import annotations

import math

import pytest

import kiln
from tests.oracle import assert_close, needs_torch, torch

pytestmark = needs_torch

NAN, INF = math.nan, math.inf


def _outcome(lib, fn):
    """(result, None) or (None, (exception type name, message))."""
    try:
        return fn(lib), None
    except Exception as e:  # noqa: BLE001 - the exception itself is what is compared
        message = str(e)
        if "\nException raised from" in message:  # PyTorch's C++ backtrace inside the message
            head, _, tail = message.partition("\nException raised from")
            message = head + ('"' if tail.endswith('"') else "")
        return None, (type(e).__name__, message)


def _assert_same_error(fn, match_message=True):
    k_out, k_err = _outcome(kiln, fn)
    t_out, t_err = _outcome(torch, fn)
    assert t_err is not None, "the case must make PyTorch raise"
    assert k_err is not None, f"kiln returned {k_out!r} where PyTorch raised {t_err}"
    if match_message:
        assert k_err == t_err
    else:
        assert k_err[0] == t_err[0], (k_err, t_err)


# ------------------------------------------------------------------------------ sign of NaN


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
@pytest.mark.parametrize("op", ["sign", "sgn"])
def test_sign_of_nan_is_zero(op, dtype):
    values = [NAN, -INF, -2.0, -0.0, 0.0, 3.0, INF]
    k = getattr(kiln, op)(kiln.tensor(values, dtype=getattr(kiln, dtype)))
    t = getattr(torch, op)(torch.tensor(values, dtype=getattr(torch, dtype)))
    assert_close(k, t, equal_nan=False)


def test_sign_of_a_nan_scalar_and_of_integers():
    assert kiln.sign(kiln.tensor(NAN)).item() == 0.0
    assert_close(kiln.sign(kiln.tensor([-3, 0, 2])), torch.sign(torch.tensor([-3, 0, 2])))
