"""PyTorch's ``torch.sym_*`` helpers, which code written for symbolic shapes calls on sizes.

kiln's sizes are plain Python ints (shapes are specialized when compiled), so each helper is the
ordinary arithmetic with PyTorch's result types: ``sym_max(2, 1.5)`` is a float, as in PyTorch.
The range constraints have nothing to constrain and only check their arguments.
"""

from __future__ import annotations

import builtins
import math
import numbers

__all__ = [
    "sym_float", "sym_int", "sym_max", "sym_min", "sym_not", "sym_sqrt", "sym_sum", "sym_ite",
    "sym_fresh_size", "sym_constrain_range", "sym_constrain_range_for_size",
]  # fmt: skip


def _number(value, name: str):
    if isinstance(value, bool) or not isinstance(value, numbers.Number):
        if not hasattr(value, "__index__") and not hasattr(value, "__float__"):
            raise TypeError(f"{name}: expected a number, got {type(value).__name__}")
    return value


def sym_float(a) -> float:
    return float(a)


def sym_int(a) -> int:
    """Truncation toward zero, as ``int()`` of a float."""
    return math.trunc(a) if isinstance(a, float) else int(a)


def _float_if_any(a, b, result):
    return float(result) if isinstance(a, float) or isinstance(b, float) else result


def sym_max(a, b):
    return _float_if_any(a, b, builtins.max(_number(a, "sym_max"), _number(b, "sym_max")))


def sym_min(a, b):
    return _float_if_any(a, b, builtins.min(_number(a, "sym_min"), _number(b, "sym_min")))


def sym_not(a):
    """Logical not of a bool (of each element, for a tensor)."""
    if hasattr(a, "logical_not"):
        return a.logical_not()
    return not a


def sym_sqrt(a) -> float:
    return math.sqrt(a)


def sym_sum(args):
    return builtins.sum(args)


def sym_ite(b, t, f):
    """``t if b else f``."""
    return t if b else f


def sym_fresh_size(expr):
    return expr


def sym_constrain_range(size, *, min=None, max=None) -> None:  # noqa: A002 - PyTorch's names
    if min is not None and size < min or max is not None and size > max:
        raise RuntimeError(f"Invalid value range for {size} between [{min}, {max}]")


def sym_constrain_range_for_size(size, *, min=None, max=None) -> None:  # noqa: A002
    sym_constrain_range(size, min=min, max=max)
