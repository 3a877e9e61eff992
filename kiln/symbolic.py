"""PyTorch's ``torch.sym_*`` helpers, which code written for symbolic shapes calls on sizes.

On plain numbers each helper is the ordinary arithmetic with PyTorch's result types:
``sym_max(2, 1.5)`` is a float, as in PyTorch. On symbolic sizes (``SymInt``, while
``kiln.compile`` captures a graph with dynamic shapes) they build expressions without guarding on
the outcome (``sym_max(s0, s1)`` stays ``Max(s0, s1)``) and the range constraints become part of
the graph's guards: the work is done by ``kiln.runtime.symbolic``.
"""

from __future__ import annotations

import builtins
import math
import numbers

from .runtime import symbolic as _symbolic
from .runtime.symbolic import SymBool, SymInt

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
    """Truncation toward zero, as ``int()`` of a float; a symbolic size stays symbolic."""
    if a.__class__ is SymInt:
        return a
    return math.trunc(a) if isinstance(a, float) else int(a)


def _float_if_any(a, b, result):
    return float(result) if isinstance(a, float) or isinstance(b, float) else result


def sym_max(a, b):
    if a.__class__ is SymInt or b.__class__ is SymInt:
        return _symbolic.sym_max(a, b)
    return _float_if_any(a, b, builtins.max(_number(a, "sym_max"), _number(b, "sym_max")))


def sym_min(a, b):
    if a.__class__ is SymInt or b.__class__ is SymInt:
        return _symbolic.sym_min(a, b)
    return _float_if_any(a, b, builtins.min(_number(a, "sym_min"), _number(b, "sym_min")))


def sym_not(a):
    """Logical not of a bool (of each element, for a tensor; a relation on symbolic sizes
    stays one)."""
    if a.__class__ is SymBool:
        return a.negated()
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
    """``size`` lies in ``[min, max]``: checked now on an int; on a symbolic size the captured
    graph relies on it, and a call that violates it raises an error naming the size, the symbol
    and the caller's line."""
    _symbolic.sym_constrain_range(size, min=min, max=max)


def sym_constrain_range_for_size(size, *, min=None, max=None) -> None:  # noqa: A002
    """``size`` is a size (at least 0, or ``min``) within ``max``."""
    _symbolic.constrain_as_size(size, min=min, max=max)
