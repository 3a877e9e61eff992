"""The table of pointwise prims: every elementwise function a loop body may call on ``ops``.

One ``Prim`` per function: its name (the ``ops.<name>`` method), arity, dtype rule, and — where
one formula serves every backend — that formula, written against an ops handler. The table
feeds ``virtualized`` (the protocol's lists of methods), the generic pointwise lowering (a kiln
op that is a prim lowers to one ``ops`` call) and every ops handler: a handler computes a prim
with code of its own where it has some (an instruction, a libdevice call, a numpy function) and
with the shared formula otherwise. ``tests/inductor/test_prims.py`` fails when a handler can do
neither.

Adding a pointwise prim: its ``Prim`` here (with a formula when other prims express it), its
eager op in ``kiln/ops``, and one line in each backend that needs a formula of its own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

__all__ = [
    "Prim",
    "PRIMS",
    "UNARY_OPS",
    "PREDICATES",
    "BINARY_OPS",
    "COMPARISONS",
    "shared_formula",
]


@dataclass(frozen=True)
class Prim:
    """One elementwise function of the loop IR.

    ``result``: "same" when the result has the operands' dtype (operands share one; lowering
    casts first), "bool" for predicates and comparisons. ``domain``: the operand dtypes handlers
    must accept — "float" (lowering computes integer inputs in a float dtype), "integer" (ints
    and bools) or "any". ``formula(handler, dtype, *operands)``: the prim in terms of other prims
    on operands of kiln dtype ``dtype``, for handlers without code of their own. ``op``: the kiln op the generic pointwise lowering maps
    onto this prim (by default the prim's own name, when such an op exists; None for none).
    """

    name: str
    arity: int
    result: str = "same"
    domain: str = "any"
    formula: Callable | None = None
    op: str | None = ""

    @property
    def op_name(self) -> str | None:
        return self.name if self.op == "" else self.op


# ------------------------------------------------------------------------------ shared formulas


def _spherical_bessel_j0(o, d, x):
    """sin(x) / x, by its Taylor series below |x| = 1/2 (where sin(x) / x loses digits and 0/0
    waits at 0) and 0 at +-inf, as PyTorch's kernel computes it."""
    square = o.mul(x, x)
    series = o.constant(1.0 / 6227020800.0, d)
    for coefficient in (-1.0 / 39916800.0, 1.0 / 362880.0, -1.0 / 5040.0, 1.0 / 120.0, -1.0 / 6.0):
        series = o.add(o.constant(coefficient, d), o.mul(square, series))
    series = o.add(o.constant(1.0, d), o.mul(square, series))
    quotient = o.truediv(o.sin(x), x)
    small = o.lt(o.abs(x), o.constant(0.5, d))
    return o.where(o.isinf(x), o.constant(0.0, d), o.where(small, series, quotient))


# ------------------------------------------------------------------------------ the table


def _unary(names: str, domain: str = "float") -> list[Prim]:
    return [Prim(n, 1, domain=domain) for n in names.split()]


def _binary(names: str, domain: str = "any", result: str = "same") -> list[Prim]:
    return [Prim(n, 2, result=result, domain=domain) for n in names.split()]


_TABLE: list[Prim] = [
    *_unary("neg abs floor ceil trunc round sign", domain="any"),
    *_unary(
        "exp exp2 expm1 log log2 log10 log1p sqrt rsqrt sin cos tan asin acos atan sinh cosh "
        "tanh asinh acosh atanh sigmoid erf erfc erfinv reciprocal"
    ),
    Prim("bitwise_not", 1, domain="integer"),
    Prim(
        "spherical_bessel_j0",
        1,
        formula=_spherical_bessel_j0,
        domain="float",
        op="special_spherical_bessel_j0",
    ),
    *[
        Prim(n, 1, result="bool")
        for n in "isnan isinf isfinite isposinf isneginf signbit logical_not".split()
    ],
    *_binary("add sub mul remainder fmod pow maximum minimum"),
    # division as the lowering spells it (div and its rounding modes); true division of integers
    # is computed in a float dtype
    Prim("truediv", 2, domain="float", op=None),
    *[Prim(n, 2, op=None) for n in ("floordiv", "truncdiv")],
    *_binary("atan2 hypot copysign", domain="float"),
    *_binary(
        "bitwise_and bitwise_or bitwise_xor bitwise_left_shift bitwise_right_shift",
        domain="integer",
    ),
    *_binary("eq ne lt le gt ge logical_and logical_or logical_xor", result="bool"),
]

PRIMS: dict[str, Prim] = {p.name: p for p in _TABLE}

UNARY_OPS = [p.name for p in _TABLE if p.arity == 1 and p.result == "same"]
PREDICATES = [p.name for p in _TABLE if p.arity == 1 and p.result == "bool"]
BINARY_OPS = [p.name for p in _TABLE if p.arity == 2 and p.result == "same"]
COMPARISONS = [p.name for p in _TABLE if p.arity == 2 and p.result == "bool"]


def shared_formula(handler, name: str) -> Callable | None:
    """``name`` computed by ``handler`` through the prim's shared formula (None: it has none)."""
    prim = PRIMS.get(name)
    if prim is None or prim.formula is None:
        return None
    formula = prim.formula
    return lambda *operands: formula(handler, handler.dtype_of(operands[0]), *operands)
