"""``VariableTracker``: what the symbolic evaluator knows about one Python value.

Subclasses model tensors (graph proxies), constants, containers, functions, modules... Each
knows how to answer the operations bytecode performs on it (attribute reads, calls, iteration,
truth) and how to ``reconstruct`` itself as bytecode when the transformed code must hand the real
value back to Python (a return value, a local at a graph break, a side effect).

Guards are lazy for constants: a value read from a source is only guarded when the evaluator
needs it (``as_python_constant``); a value merely passed through (``self.step = self.step + 1``)
is rebuilt from its source at run time instead, so a step counter does not recompile each call.
"""

from __future__ import annotations

import math
import operator
import threading
import types
from fractions import Fraction
from typing import Any

import numpy as np

from ...runtime.device import device
from ...runtime.dtypes import dtype
from ...runtime.symbolic import SymBool, SymInt
from ..exc import unsupported
from ..sources import Source

__all__ = [
    "VariableTracker",
    "ConstantVariable",
    "NullVariable",
    "active_output",
    "push_output",
    "pop_output",
    "is_constant_value",
    "BoundMethodVariable",
    "FixedObjectVariable",
    "container_method",
]


class _Capturing(threading.local):
    """The OutputGraphs this thread is building (a stack: a backend may itself compile while
    we capture); per thread, as each thread's capture is its own."""

    def __init__(self):
        self.outputs: list = []


_capturing = _Capturing()


def active_output():
    return _capturing.outputs[-1]


def push_output(output) -> None:
    _capturing.outputs.append(output)


def pop_output() -> None:
    _capturing.outputs.pop()


class VariableTracker:
    """Base class: every operation is unsupported unless a subclass models it."""

    source: Source | None = None
    mutable = False

    def python_type(self) -> type:
        raise unsupported("unsupported_object", f"type of {self} is unknown")

    def is_python_constant(self) -> bool:
        return False

    def as_python_constant(self) -> Any:
        raise unsupported("unsupported_object", f"{self} is not a Python constant")

    def reconstruct(self, cg) -> None:
        if self.source is None:
            raise unsupported("unsupported_object", f"cannot rebuild {self} as a Python value")
        self.source.reconstruct(cg)

    def var_getattr(self, tx, name: str) -> VariableTracker:
        raise unsupported("unsupported_object", f"attribute {name!r} of {self}")

    def call_function(self, tx, args: list, kwargs: dict) -> VariableTracker:
        raise unsupported("unsupported_object", f"calling {self}")

    def call_method(self, tx, name: str, args: list, kwargs: dict) -> VariableTracker:
        return self.var_getattr(tx, name).call_function(tx, args, kwargs)

    def unpack(self, tx) -> list:
        """The items of an iterable, in order."""
        raise unsupported("unsupported_object", f"iterating over {self}")

    def truth(self, tx) -> bool:
        raise unsupported("unsupported_object", f"truth value of {self}")

    def store_attr(self, tx, name: str, value: VariableTracker) -> None:
        raise unsupported("side_effect", f"setting attribute {name!r} of {self}")

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


_CONSTANT_TYPES = (
    int,
    float,
    bool,
    str,
    bytes,
    complex,
    type(None),
    type(Ellipsis),
    type(NotImplemented),
    range,
    slice,
    np.bool_,  # numpy scalars (``arr.sum()``, ``np.float32(0.5)``) fold like Python numbers
    np.number,
    SymInt,  # a symbolic size (``x.shape[0] * 2``): folded into an expression
    SymBool,  # a relation on data-dependent sizes (``n >= 0``)
    dtype,
    device,
)


def is_constant_value(value: Any) -> bool:
    """Immutable values the evaluator folds: scalars, strings, None, ranges, slices, tuples,
    frozensets of those, dtypes, devices, sizes and code objects."""
    if isinstance(value, _CONSTANT_TYPES):
        if isinstance(value, slice):
            return all(is_constant_value(v) for v in (value.start, value.stop, value.step))
        return True
    if isinstance(value, (tuple, frozenset)):
        return all(is_constant_value(v) for v in value)
    return isinstance(value, types.CodeType)


class ConstantVariable(VariableTracker):
    """An immutable Python value. ``source``: where it was read (guarded when used);
    ``recipe``: ``(binary_operator, a, b)`` when it was computed from unguarded values."""

    def __init__(self, value: Any, source: Source | None = None, recipe=None):
        self.value = value
        self.source = source
        self.recipe = recipe
        self._guarded = source is None

    def python_type(self) -> type:
        return int if self.value.__class__ is SymInt else type(self.value)

    def is_python_constant(self) -> bool:
        return True

    def guard(self) -> None:
        """Install the guards that make ``value`` safe to bake into the graph or the code."""
        if not self._guarded:
            output = active_output()
            if self.source.name() in output.dynamic_scalars:
                raise unsupported(
                    "dynamic_scalar",
                    f"{self.source.name()} changes between calls (it was {self.value!r})",
                )
            self._guarded = True
            output.guards.constant(self.source, self.value)
        if self.recipe is not None:
            _, a, b = self.recipe
            for part in (a, b):
                part.guard()
                if part.value.__class__ is SymInt:  # a size over a number: its value decides
                    part.value.env.specialize(part.value)
            self.recipe = None

    def as_python_constant(self) -> Any:
        self.guard()
        return self.value

    def is_dynamic_scalar(self) -> bool:
        """A number read from a source whose value changed too often to bake in (reading its
        value would be a graph break), not yet guarded or computed from others."""
        return (
            type(self.value) in (int, float)
            and not self._guarded
            and self.recipe is None
            and self.source is not None
            and self.source.name() in active_output().dynamic_scalars
        )

    def is_dynamic_number(self) -> bool:
        """An int or float that depends on a number read from a source whose value changed
        between calls (``self.step + 1`` too), not yet baked in: arithmetic with a tensor takes
        it as a graph input (``tensorize_number`` in ``symbolic_convert``)."""
        if type(self.value) not in (int, float):
            return False
        if self.recipe is not None:
            parts = self.recipe[1:]
            return all(type(p.value) in (int, float) for p in parts) and any(
                p.is_dynamic_number() for p in parts
            )
        return (
            not self._guarded
            and self.source is not None
            and self.source.name() in active_output().changing_scalars
        )

    def reconstruct(self, cg) -> None:
        if not self._guarded:
            self.source.reconstruct(cg)
        elif self.value.__class__ in (SymInt, SymBool) or (
            isinstance(self.value, (tuple, list)) and _holds_symint(self.value)
        ):
            from ..symbolic_shapes import reconstruct_symbolic

            reconstruct_symbolic(cg, self.value, active_output())
        elif self.recipe is not None:
            fn, a, b = self.recipe
            cg.load_callable(fn)
            cg.load(a)
            cg.load(b)
            cg.call(2)
        else:
            cg.load_const(self.value)

    def var_getattr(self, tx, name: str) -> VariableTracker:
        try:
            value = getattr(self.as_python_constant(), name)
        except AttributeError as e:
            raise unsupported("user_exception", f"AttributeError: {e}") from None
        if callable(value) and not isinstance(value, type):
            from .misc import ConstantMethodVariable

            return ConstantMethodVariable(self, name)
        from .builder import wrap_constant_result

        return wrap_constant_result(value)

    def unpack(self, tx) -> list:
        value = self.as_python_constant()
        try:
            items = list(value)
        except TypeError as e:
            raise unsupported("user_exception", f"TypeError: {e}") from None
        from .builder import wrap_constant_result

        return [wrap_constant_result(v) for v in items]

    def truth(self, tx) -> bool:
        if self.is_dynamic_scalar():  # ``if momentum:``: the truth is guarded, not the value
            return _guarded_comparison(operator.ne, self, 0).value
        return bool(self.as_python_constant())

    def __repr__(self) -> str:
        return f"ConstantVariable({self.value!r})"


def _holds_symint(values) -> bool:
    for v in values:
        if v.__class__ is SymInt or (isinstance(v, (tuple, list)) and _holds_symint(v)):
            return True
    return False


def fold_binary(op, a: ConstantVariable, b: ConstantVariable) -> ConstantVariable:
    """``op(a, b)`` on constants. Ints/floats read from sources stay unguarded (with a recipe)
    so a pass-through update like ``self.step + 1`` is rebuilt at run time, not guarded; one
    that changes too often to bake in, compared with a constant, guards the comparison."""
    numeric = (int, float)
    if op in _COMPARISONS:
        if a.is_dynamic_scalar() and _fixed_number(b):
            return _guarded_comparison(op, a, b.as_python_constant())
        if b.is_dynamic_scalar() and _fixed_number(a):
            return _guarded_comparison(_FLIPPED[op], b, a.as_python_constant())
    if (
        op in _RECIPE_OPS
        and type(a.value) in numeric
        and type(b.value) in numeric
        and (not a._guarded or a.recipe is not None or not b._guarded or b.recipe is not None)
    ):
        value = op(a.value, b.value)
        return ConstantVariable(value, recipe=(op, a, b))
    if op in _SCALING_OPS:
        scaled = _scaled_size(op, a, b)
        if scaled is not None:
            return scaled
    return ConstantVariable(op(a.as_python_constant(), b.as_python_constant()))


_SCALING_OPS = (operator.mul, operator.imul, operator.truediv, operator.itruediv)


def _plain_number(vt: ConstantVariable):
    """The value of an int or float constant computed from nothing symbolic, else None."""
    if vt.recipe is not None or type(vt.value) not in (int, float):
        return None
    return vt.as_python_constant()


def _size_and_factor(vt: ConstantVariable) -> tuple[SymInt, Fraction, bool] | None:
    """``(size, factor, divided)`` when ``vt`` is a symbolic size times numbers whose float
    products are exact (ints, floats with a small power-of-two denominator: ``1.5 * n``),
    then at most one division by a positive whole number (``divided``); None otherwise.
    Rounding such a float gives what rounding the exact fraction gives (one rounding of a
    quotient of exact values cannot cross an integer), so it can be a size's quotient."""
    if vt.recipe is None:
        return (vt.value, Fraction(1), False) if vt.value.__class__ is SymInt else None
    op, a, b = vt.recipe
    left = _size_and_factor(a) if isinstance(a, ConstantVariable) else None
    if op in (operator.truediv, operator.itruediv):
        divisor = _plain_number(b)
        if left is None or left[2] or divisor is None:
            return None
        if not divisor > 0 or not float(divisor).is_integer():
            return None
        return left[0], left[1] / int(divisor), True
    if op not in (operator.mul, operator.imul):
        return None
    size_side, number = (left, _plain_number(b)) if left is not None else (None, None)
    if size_side is None:
        size_side, number = _size_and_factor(b), _plain_number(a)
    if size_side is None or size_side[2] or number is None or not math.isfinite(number):
        return None
    factor = Fraction(number)
    if factor.denominator > 1 << 16:
        return None
    return size_side[0], size_side[1] * factor, False


def _scaled_size(op, a: ConstantVariable, b: ConstantVariable) -> ConstantVariable | None:
    """A symbolic size times a float or over a number (Swin's ``windows.shape[0] / (H * W /
    ws / ws)``, Switch's ``capacity_factor * num_tokens / num_experts``): a float whose
    recipe keeps the size, so ``int``/``math.floor``/``math.ceil`` of it stay symbolic
    (``rounded_quotient``, as PyTorch's ``sym_int``) while any other use of the float
    specializes the size, as reading it did before."""
    multiply = op in (operator.mul, operator.imul)
    if multiply and _size_and_factor(a) is None:
        a, b = b, a
    found = _size_and_factor(a)
    if found is None or found[0].hint is None:
        return None
    if multiply and a.value.__class__ is SymInt and type(b.value) is not float:
        return None  # a size times an int is a size already
    number = _plain_number(b)
    if number is None:
        return None
    base = a.value.hint if a.value.__class__ is SymInt else a.value
    candidate = ConstantVariable(op(base, number), recipe=(op, a, b))
    return candidate if _size_and_factor(candidate) is not None else None


def rounded_quotient(vt: VariableTracker, rounding: str) -> ConstantVariable | None:
    """``int``/``math.trunc`` (``rounding="trunc"``), ``math.floor`` or ``math.ceil`` of a
    float made by ``_scaled_size``, as a symbolic size without a guard; None for other values
    (and for a negative factor, or a truncation whose size may be negative)."""
    from ...runtime.symbolic import statically_known_true

    if not isinstance(vt, ConstantVariable) or vt.recipe is None:
        return None
    found = _size_and_factor(vt)
    if found is None or found[1] <= 0:
        return None
    size, factor, _ = found
    scaled = size * factor.numerator
    if rounding == "ceil":
        return ConstantVariable((scaled + (factor.denominator - 1)) // factor.denominator)
    if rounding == "trunc" and not statically_known_true(">=", size, 0):
        return None
    return ConstantVariable(scaled // factor.denominator)


_COMPARISONS = {
    operator.eq: "==", operator.ne: "!=", operator.lt: "<", operator.le: "<=",
    operator.gt: ">", operator.ge: ">=",
}  # fmt: skip
_FLIPPED = {
    operator.eq: operator.eq, operator.ne: operator.ne, operator.lt: operator.gt,
    operator.le: operator.ge, operator.gt: operator.lt, operator.ge: operator.le,
}  # fmt: skip


def _fixed_number(vt: ConstantVariable) -> bool:
    return type(vt.value) in (int, float, bool) and not vt.is_dynamic_scalar()


def _guarded_comparison(op, dynamic: ConstantVariable, other) -> ConstantVariable:
    result = bool(op(dynamic.value, other))
    active_output().guards.comparison(dynamic.source, _COMPARISONS[op], other, result)
    return ConstantVariable(result)


_RECIPE_OPS = frozenset(
    {operator.add, operator.sub, operator.mul, operator.iadd, operator.isub, operator.imul}
)


class FixedObjectVariable(VariableTracker):
    """An object that exists at capture time and is its own constant (a function, a module, a
    class): guarded by identity when read from a source, rebuilt from it or as a constant."""

    def __init__(self, value: Any, source: Source | None = None):
        self.value = value
        self.source = source

    def python_type(self) -> type:
        return type(self.value)

    def is_python_constant(self) -> bool:
        return True

    def as_python_constant(self) -> Any:
        return self.value

    def reconstruct(self, cg) -> None:
        if self.source is not None:
            self.source.reconstruct(cg)
        else:
            cg.load_const(self.value)

    def __repr__(self) -> str:
        name = getattr(self.value, "__qualname__", None) or getattr(self.value, "__name__", None)
        return f"{type(self).__name__}({name or self.value!r})"


class BoundMethodVariable(VariableTracker):
    """``obj.name`` for a method that ``obj``'s variable models in ``call_method``."""

    def __init__(self, obj: VariableTracker, name: str):
        self.obj = obj
        self.name = name

    def call_function(self, tx, args: list, kwargs: dict) -> VariableTracker:
        return self.obj.call_method(tx, self.name, args, kwargs)

    def reconstruct(self, cg) -> None:
        cg.load(self.obj)
        cg.append_load_attr(self.name)

    def __repr__(self) -> str:
        return f"BoundMethodVariable({self.obj!r}.{self.name})"


def container_method(vt: VariableTracker, name: str) -> VariableTracker:
    """``vt.name`` for containers: a bound method if the Python type has that method."""
    attr = getattr(vt.python_type(), name, None)
    if attr is None or not callable(attr):
        raise unsupported(
            "user_exception",
            f"AttributeError: '{vt.python_type().__name__}' object has no attribute '{name}'",
        )
    return BoundMethodVariable(vt, name)


class NullVariable(VariableTracker):
    """The NULL slot that calls leave under a callable (3.11+); rebuilt with ``PUSH_NULL``."""

    def reconstruct(self, cg) -> None:
        from bytecode import Instr

        cg.append(Instr("PUSH_NULL"))

    def __repr__(self) -> str:
        return "NULL"
