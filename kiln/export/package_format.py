"""The JSON form of a package's wrapper plan (``kiln.inductor.package.wrapper_plan``).

The plan is plain data except for a few value kinds: dtypes in layouts, and the constant
arguments of matmul and eager-fallback steps (tuples, non-finite floats, dtypes, devices).
``encode`` writes those as tagged objects (``{"tuple": [...]}``, ``{"dtype": "float32"}``);
``decode`` reads them back, accepting nothing else — a package is data, never code. Buffer names
become names in the wrapper generated at load time, so they must be plain identifiers.

Version 2 adds packages whose kernels serve every size: shapes, strides, row counts and returned
sizes may be expressions over the size symbols (``{"sym": "4*s0"}``), read back as ``SizeExpr``
(checked to hold only symbols, integers, ``+ - * // %`` and ``max``/``min``). Version 1 packages
still load.
"""

from __future__ import annotations

import ast
import keyword
import math
import operator
import re
from typing import Any

from ..runtime import dtypes as dt
from ..runtime.device import device as Device
from ..runtime.symbolic import SymInt

__all__ = ["FORMAT", "FORMAT_VERSION", "encode", "decode", "check_name", "SizeExpr"]

FORMAT = "kiln.package"
# 3: a kernel compiled for every size (a transposing copy) takes its sizes after its buffers
# (the plan step's "sizes"), which a kiln reading version 2 would not pass
FORMAT_VERSION = 3
_SYMBOL = re.compile(r"s[0-9]+\Z")
_DTYPES = {d.name: d for d in dt.all_dtypes}
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
              ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod}  # fmt: skip


class SizeExpr:
    """A size that is an expression over the package's size symbols; ``value(values)`` is its
    int for one call (``values``: ``{symbol name: size}``). Read as a tree of closures over the
    checked syntax (never evaluated as Python)."""

    __slots__ = ("text", "symbols", "_fn")

    def __init__(self, text: str):
        try:
            tree = ast.parse(text, mode="eval")
        except SyntaxError:
            _bad("size expression", text)
        self.text = text
        self.symbols: set = set()
        self._fn = self._closure(tree.body)

    def _closure(self, node: ast.AST):
        if isinstance(node, ast.Constant) and type(node.value) is int:
            number = node.value
            return lambda values: number
        if isinstance(node, ast.Name) and _SYMBOL.match(node.id):
            name = node.id
            self.symbols.add(name)
            return lambda values: values[name]
        if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
            fn = _OPERATORS[type(node.op)]
            left, right = self._closure(node.left), self._closure(node.right)
            return lambda values: fn(left(values), right(values))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            inner = self._closure(node.operand)
            return lambda values: -inner(values)
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id in ("max", "min") and len(node.args) == 2
                and not node.keywords):  # fmt: skip
            fn = max if node.func.id == "max" else min
            a, b = self._closure(node.args[0]), self._closure(node.args[1])
            return lambda values: fn(a(values), b(values))
        return _bad("size expression", self.text)

    def value(self, values: dict) -> int:
        return self._fn(values)

    def __repr__(self) -> str:
        return f"SizeExpr({self.text!r})"


def check_name(name: Any) -> str:
    if not isinstance(name, str) or not _NAME.match(name) or keyword.iskeyword(name):
        raise ValueError(f"package plan: {name!r} is not a buffer name")
    return name


def encode(value: Any) -> Any:
    """``value`` as JSON with the tags above (dicts are encoded key by key)."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else {"float": repr(value)}
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return {"tuple": [encode(v) for v in value]}
    if isinstance(value, list):
        return [encode(v) for v in value]
    if isinstance(value, dict):
        return {str(k): encode(v) for k, v in value.items()}
    if isinstance(value, dt.dtype):
        return {"dtype": value.name}
    if isinstance(value, Device):
        return {"device": str(value)}
    if value.__class__ is SymInt:
        return {"sym": value.expr.code()}
    raise TypeError(f"a package cannot hold the value {value!r} ({type(value).__name__})")


_TAGS = {
    "float": lambda v: float(v) if v in ("inf", "-inf", "nan") else _bad("float", v),
    "tuple": lambda v: tuple(decode(x) for x in v) if isinstance(v, list) else _bad("tuple", v),
    "dtype": lambda v: _DTYPES[v] if v in _DTYPES else _bad("dtype", v),
    "device": lambda v: Device(v) if isinstance(v, str) else _bad("device", v),
    "sym": lambda v: SizeExpr(v) if isinstance(v, str) else _bad("size expression", v),
}


def _bad(kind: str, value: Any):
    raise ValueError(f"package plan: bad {kind} {value!r}")


def decode(value: Any) -> Any:
    """The value ``encode`` wrote; plain dicts (plan records) decode key by key."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, list):
        return [decode(v) for v in value]
    if isinstance(value, dict):
        if len(value) == 1:
            ((tag, inner),) = value.items()
            if tag in _TAGS:
                return _TAGS[tag](inner)
        return {k: decode(v) for k, v in value.items()}
    return _bad("value", value)
