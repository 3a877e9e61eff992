"""Symbolic sizes: ``SymInt`` values, the ``ShapeEnv`` that owns their symbols, and guards.

While a graph is captured, a dynamic size is a ``SymInt``: an expression over size symbols
(``s0``, ``4*s1``) plus its *hint*, the value it has for the inputs seen. Arithmetic builds
expressions; a comparison (``==``, ``<``, ``bool``) answers from the symbols' known ranges when
they decide it, else from the hints, and then records a *guard* (``s0 != 5``) in the env: the
captured graph is valid exactly while its guards hold. Every conversion that loses the symbol
(``__index__``, ``__int__``, ``__float__``, ``__hash__``) records a *specialization*
(``s0 == 8``) and returns the plain value, so code that is not symbol-aware stays correct: it
specializes that size instead of baking a wrong constant.

``SymInt`` is deliberately not a subclass of ``int``: CPython reads an int subclass's value
directly wherever it needs an index (``range(n)``, ``seq[n]``, slicing, ``np.zeros((n,))``)
without calling ``__index__``, which would bake the hint in silently. As a plain class every such
use goes through ``__index__`` and specializes; it is registered as a ``numbers.Integral`` and
library code accepts it where sizes are expected (``is_int_like``).

Backed symbols (read from an input's shape) have a hint and range ``[1, inf)`` (size 0 is never
made symbolic; size 1 is allowed where nothing captured depended on it, which the guards
record). Unbacked symbols (``u0``: ``nonzero``'s row count, ``.item()``) have no hint: a
comparison their range cannot decide raises ``GuardOnDataDependentError`` (the capture breaks
the graph there), while a check that only validates (``n >= 0`` for a size) becomes a run-time
assertion in the graph. This module knows no graphs: the tracer turns SymInts into graph nodes.
"""

from __future__ import annotations

import itertools
import math
import numbers
import operator
from collections.abc import Callable
from dataclasses import dataclass

from .sym_expr import (
    INF,
    Expr,
    FloorDiv,
    Max,
    Min,
    Symbol,
    as_expr,
    const,
    floordiv,
    floordivs_expanded,
    maximum,
    minimum,
    mod,
    shifted_bounds,
)

__all__ = [
    "SymInt",
    "ShapeEnv",
    "shape_env_of",
    "SymGuard",
    "GuardOnDataDependentError",
    "SizeDependentError",
    "ConstraintViolationError",
    "is_symbolic",
    "is_int_like",
    "has_symbols",
    "hint_int",
    "active_env",
    "env_stack",
    "sym_int",
    "sym_float",
    "sym_max",
    "sym_min",
    "sym_not",
    "sym_ite",
    "constrain_as_size",
    "sym_constrain_range",
    "statically_known_true",
    "size_oblivious_known_less",
    "fold_pinned",
    "expect_true",
    "SymBool",
    "check",
    "check_is_size",
]

_SERIAL = itertools.count()

# the envs of the captures running now (innermost last): meta functions of data-dependent ops
# make their unbacked symbols in ``active_env()``
env_stack: list = []


def active_env() -> ShapeEnv | None:
    return env_stack[-1] if env_stack else None


class GuardOnDataDependentError(RuntimeError):
    """A decision depends on a value only known when the graph runs (an unbacked symbol)."""

    def __init__(self, message: str, symbols: tuple = ()):
        super().__init__(message)
        self.symbols = symbols


class SizeDependentError(RuntimeError):
    """Kernels for every size (``ShapeEnv.kernel_scope``) were asked to decide something that
    depends on the sizes' values: the compiler takes another route for that graph."""


class ConstraintViolationError(RuntimeError):
    """A size violates a range the user declared (``mark_dynamic(min=, max=)``,
    ``sym_constrain_range``, ``constrain_as_size``)."""


_NEGATE = {"==": "!=", "!=": "==", "<": ">=", ">=": "<", "<=": ">", ">": "<="}
_OPS = {
    "==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le,
    ">": operator.gt, ">=": operator.ge,
}  # fmt: skip


def _decide(op: str, lo, hi) -> bool | None:
    """``diff op 0`` for every ``diff`` in ``[lo, hi]``: True, False, or None if it depends."""
    if op == "==":
        if lo == hi == 0:
            return True
        return False if lo > 0 or hi < 0 else None
    if op == "!=":
        r = _decide("==", lo, hi)
        return None if r is None else not r
    if op == "<":
        return True if hi < 0 else (False if lo >= 0 else None)
    if op == "<=":
        return True if hi <= 0 else (False if lo > 0 else None)
    if op == ">":
        return True if lo > 0 else (False if hi <= 0 else None)
    return True if lo >= 0 else (False if hi < 0 else None)  # ">="


def _decide_exprs(op: str, lhs: Expr, rhs: Expr) -> bool | None:
    """``lhs op rhs`` for every value of the symbols, or None: from the bounds of the
    difference, else (for products of sizes, which intervals cannot relate) from an exact
    ratio: ``a <= a*q`` when ``a >= 0`` and ``q >= 1``."""
    diff = lhs - rhs
    result = _decide(op, *diff.bounds())
    if result is None:  # floor divisions by constants, related to their dividends
        expanded = floordivs_expanded(diff)
        if expanded is not diff:
            result = _decide(op, *expanded.bounds())
    if result is None and any(len(m) > 1 for m in diff.terms):
        # products: each atom as its lower bound plus a non-negative part
        result = _decide(op, *shifted_bounds(diff))
    if result is not None or op in ("==", "!="):
        return result
    a, b = (lhs, rhs) if op in ("<", "<=") else (rhs, lhs)  # the question is a < b or a <= b
    strict = op in ("<", ">")
    q = b.exact_quotient(a) if a.terms else None
    if q is not None:  # b == a*q
        alo = a.bounds()[0]
        qlo, qhi = q.bounds()
        if alo >= 0 and qlo >= 1 and (not strict or (alo >= 1 and qlo >= 2)):
            return True
        if alo >= 1 and (qhi < 1 or (strict and qhi <= 1)):
            return False
    q = a.exact_quotient(b) if b.terms else None
    if q is not None:  # a == b*q
        blo = b.bounds()[0]
        qlo, qhi = q.bounds()
        if blo >= 1 and qhi <= 0:
            return True
        if blo >= 0 and qlo >= 1 and (strict or (blo >= 1 and qlo >= 2)):
            return False
    return None


@dataclass
class SymGuard:
    """One recorded relation ``lhs op rhs`` over symbols. ``kind``: "relation" (a comparison
    code made), "specialize" (a size turned into a plain int), "user" (a range the user
    declared: violating it is an error, not a recompile). ``origin``: the user's file:line."""

    op: str
    lhs: Expr
    rhs: Expr
    kind: str = "relation"
    origin: str | None = None
    message: str | None = None

    def code(self, name_of: Callable) -> str:
        return f"{self.lhs.code(name_of)} {self.op} {self.rhs.code(name_of)}"

    def text(self) -> str:
        return self.code(lambda s: s.name)

    def holds(self, values: dict) -> bool:
        return _OPS[self.op](self.lhs.evaluate(values), self.rhs.evaluate(values))


@dataclass
class RuntimeAssert:
    """A check on unbacked values the graph must make when it runs (``u0 >= 0``)."""

    guard: SymGuard
    message: str


class ShapeEnv:
    """The symbols of one capture and the guards recorded on them (see the module docstring)."""

    def __init__(self):
        self.symbols: list[Symbol] = []
        self.guards: list[SymGuard] = []
        self._guard_keys: set = set()
        self._backed = 0
        self._unbacked = 0
        self._suppressed = 0
        self._kernel_scope = 0
        self._decisions: dict | None = None  # (op, lhs, rhs) -> decision, in a kernel scope
        # the user's "file:line" now (the capture frontend sets it): guards and errors name it
        self.location: Callable[[], str | None] | None = None
        # run-time assertions on unbacked symbols, taken by the tracer into the graph
        self.pending_asserts: list[RuntimeAssert] = []
        self.frozen = False
        self._oblivious = 0
        self._user_code = 0
        # symbols a guard pinned to one value (``s2 == 8``): folded into new expressions
        self.fixed: dict = {}
        # bumped when ``fixed`` gains a symbol: a SymInt whose ``folded`` equals it holds no
        # pinned symbol, so arithmetic on it need not look for one (``_make``)
        self.fold_epoch = 0
        # guards collected by ``deferring()`` (None outside it), and those kept until an alias
        # they decide is observed (``defer_until_aliased``)
        self._deferring: list | None = None
        self._aliasing: list = []

    # ------------------------------------------------------------------ symbols
    def create_symbol(
        self, hint: int, origin: str, lower: int = 1, upper=INF, user_range=None
    ) -> Symbol:
        """A backed symbol standing for a size read from an input (``origin`` names it)."""
        symbol = Symbol(f"s{self._backed}", next(_SERIAL), hint, lower, upper, False, origin)
        symbol.user_range = user_range
        self._backed += 1
        self.symbols.append(symbol)
        return symbol

    def create_unbacked(self, origin: str, lower=-INF, upper=INF) -> Symbol:
        """An unbacked symbol: a value the graph computes at run time (no hint)."""
        symbol = Symbol(f"u{self._unbacked}", next(_SERIAL), None, lower, upper, True, origin)
        self._unbacked += 1
        self.symbols.append(symbol)
        return symbol

    def symint(self, symbol: Symbol) -> SymInt:
        return SymInt(Expr({(symbol,): 1}, 0), symbol.hint, self)

    def unbacked_size(self, origin: str, upper=INF) -> SymInt:
        """A fresh unbacked size (``nonzero``'s row count): range ``[0, upper]``."""
        symbol = self.create_unbacked(origin, 0, upper)
        symbol.size_like = True
        return self.symint(symbol)

    def backed_symbols(self) -> list[Symbol]:
        return [s for s in self.symbols if not s.unbacked]

    # ------------------------------------------------------------------ decisions
    def suppress_guards(self):
        """``with env.suppress_guards():`` comparisons answer from hints without recording
        guards (printing, logging: nothing the compiled code relies on)."""
        return _Suppressed(self)

    def evaluate(self, op: str, lhs: Expr, rhs: Expr, lhint, rhint):
        """``lhs op rhs``: from the ranges when they decide it, else from the hints (guarded);
        on a value only known when the graph runs, a ``SymBool`` (``kiln._check`` takes it,
        ``bool()`` of it decides or raises)."""
        if self.fixed:
            lhs, rhs = _fold_fixed(self, lhs), _fold_fixed(self, rhs)
        result = _decide_remembered(self, op, lhs, rhs)
        if result is not None:
            return result
        if self._kernel_scope:
            raise SizeDependentError(f"{lhs.code()} {op} {rhs.code()} depends on the sizes")
        if lhint is None or rhint is None:
            return SymBool(op, lhs, rhs, self)
        result = _OPS[op](lhint, rhint)
        if not self._suppressed:
            self.add_guard(SymGuard(op if result else _NEGATE[op], lhs, rhs))
        return result

    def kernel_scope(self):
        """``with env.kernel_scope():`` a compiler builds code valid for every value of the
        backed symbols from 2 up (its caller checks that at run time, sizes 0 and 1 taking
        another route): a comparison the ranges leave open, or a conversion to a plain int,
        raises ``SizeDependentError`` instead of guarding on the sizes seen, and SymInts hash
        by expression (sizes as dict keys)."""
        return _KernelScope(self)

    def size_oblivious(self):
        """``with env.size_oblivious():`` library code (meta functions, decompositions) runs:
        an undecidable comparison on unbacked *sizes* is decided as if each were at least 2,
        as PyTorch's size-oblivious reasoning does (the code's general path is the one a size
        of 0 or 1 also takes when the graph runs the op). That is the default; user code
        (``user_code()``) is never so decided, except in the library calls it makes."""
        return _Oblivious(self)

    def user_code(self):
        """``with env.user_code():`` the capture frontend evaluates the user's own code."""
        return _UserCode(self)

    def decide_unbacked(self, b: SymBool) -> bool:
        """``bool()`` of a relation on values only known when the graph runs (decided
        size-obliviously in library code: code running under a dispatch mode is kiln's)."""
        if self._oblivious or not self._user_code:
            raised = []
            for s in (b.lhs - b.rhs).symbols():
                if s.unbacked and s.size_like and s.lower < 2:
                    raised.append((s, s.lower))
                    s.lower = 2
            try:
                # rebuilt under the raised ranges: ``max(1, u0)`` (a contiguous stride made
                # while u0 could be 0) is ``u0`` once u0 >= 2
                result = _decide_fresh(b.op, b.lhs, b.rhs)
            finally:
                for s, lower in raised:
                    s.lower = lower
            if result is not None:
                return result
        unbacked = tuple(s for s in (b.lhs - b.rhs).symbols() if s.unbacked)
        raise GuardOnDataDependentError(
            f"could not decide {b}: it depends on "
            f"{', '.join(f'{s.name} ({s.origin})' for s in unbacked)}, known only when "
            "the graph runs",
            unbacked,
        )

    def specialize(self, value: SymInt) -> int:
        """The plain int ``value`` stands for, guarding that it stays that."""
        if self._kernel_scope:
            raise SizeDependentError(f"{value} is needed as a plain int")
        if value.hint is None:
            raise GuardOnDataDependentError(
                f"{value} is needed as a Python int (a loop bound, an index, int()), but it is "
                "only known when the graph runs",
                tuple(s for s in value.expr.symbols() if s.unbacked),
            )
        if not self._suppressed:
            self.add_guard(SymGuard("==", value.expr, const(value.hint), "specialize"))
        return value.hint

    def add_guard(self, guard: SymGuard) -> None:
        guard.lhs, guard.rhs = _normalized(guard.lhs, guard.rhs)
        if self._deferring is not None:
            if guard.origin is None and self.location is not None:
                guard.origin = self.location()
            self._deferring.append(guard)
            return
        key = (guard.op, guard.lhs, guard.rhs)
        if key in self._guard_keys:
            return
        if self.frozen:
            raise RuntimeError(
                f"internal error: guard {guard.text()} recorded after the guards were compiled"
            )
        self._guard_keys.add(key)
        if guard.origin is None and self.location is not None:
            guard.origin = self.location()
        self.guards.append(guard)
        self._narrow(guard)

    def _narrow(self, guard: SymGuard) -> None:
        """Tighten a symbol's range from a guard ``±s + c op 0`` (the guard keeps it true), or
        a lower bound from ``f(s) >= c`` with ``f`` non-decreasing (a pooled size
        ``((s + 1) // 2) // 2 >= 1``, which a size check records, gives ``s >= 3``)."""
        diff = guard.lhs - guard.rhs
        if len(diff.terms) != 1:
            self._narrow_monotone(guard.op, diff)
            return
        ((m, c),) = diff.terms.items()
        if len(m) != 1 or type(m[0]) is not Symbol or c not in (1, -1):
            self._narrow_monotone(guard.op, diff)
            return
        s, k = m[0], diff.const
        op = guard.op
        if c == -1:  # -s + k op 0  <=>  s - k (op mirrored) 0
            k = -k
            op = {"<": ">", "<=": ">=", ">": "<", ">=": "<="}.get(op, op)
        value = -k  # s op value
        if op == "==":
            s.lower = s.upper = value
            if not s.unbacked:
                self.fixed[s] = value  # later expressions fold it in (``_make``)
                self.fold_epoch += 1
        elif op == "!=":
            if s.lower == value:
                s.lower = value + 1
            if s.upper == value:
                s.upper = value - 1
        elif op == "<":
            s.upper = min(s.upper, value - 1)
        elif op == "<=":
            s.upper = min(s.upper, value)
        elif op == ">":
            s.lower = max(s.lower, value + 1)
        elif op == ">=":
            s.lower = max(s.lower, value)

    def _narrow_monotone(self, op: str, diff: Expr) -> None:
        """``diff op 0`` for ``diff`` non-decreasing in its one backed symbol ``s``: the least
        value of ``s`` from its lower bound up to its hint (where the guard holds) that keeps
        it true is a new lower bound (a binary search: ``diff`` is monotone)."""
        if op not in (">=", ">"):
            return
        symbols = diff.symbols()
        if len(symbols) != 1:
            return
        (s,) = symbols
        if s.unbacked or s.hint is None or s.lower == -INF or not _non_decreasing(diff):
            return
        holds = _OPS[op]
        lo, hi = s.lower, s.hint
        if not holds(diff.evaluate({s: hi}), 0):
            return
        while lo < hi:
            mid = (lo + hi) // 2
            if holds(diff.evaluate({s: mid}), 0):
                hi = mid
            else:
                lo = mid + 1
        s.lower = max(s.lower, lo)

    def deferring(self):
        """``with env.deferring() as guards:`` the guards recorded inside are collected in
        ``guards`` instead of applied (no range is narrowed): the caller applies them
        (``add_guard``) or keeps them for ``defer_until_aliased``."""
        return _Deferring(self)

    def defer_until_aliased(self, guards: list, source, result) -> None:
        """Keep ``guards`` (the sizes for which ``result`` would have been ``source`` itself, as
        eager code returns it: ``contiguous()`` of a tensor contiguous only at size 1) until the
        capture ends: they are recorded only when that aliasing would be observable there
        (``settle_aliasing``), so the graph's copy serves those sizes too."""
        storages = [t._get_storage() for t in (source, result)]
        versions = [s.version for s in storages]
        self._aliasing.append((guards, storages, versions))

    def settle_aliasing(self, outputs) -> None:
        """The capture is over with ``outputs`` (tensors leaving the graph): record the deferred
        guards whose tensors were mutated since, or whose copy leaves the graph (where eager
        code would see one tensor, the graph gives two)."""
        leaving = {id(t._get_storage()) for t in outputs}
        for guards, storages, versions in self._aliasing:
            mutated = any(s.version != v for s, v in zip(storages, versions))
            if mutated or id(storages[1]) in leaving:
                for guard in guards:
                    self.add_guard(guard)
        self._aliasing = []

    def range_guards(self) -> list[SymGuard]:
        """The range of every backed symbol as guards (what the decisions from ranges assumed);
        a range the user declared is a "user" guard carrying their message."""
        out = []
        for s in self.backed_symbols():
            e = Expr({(s,): 1}, 0)
            kind, origin, message = "relation", None, None
            if s.user_range is not None:
                kind, origin, message = "user", s.user_range[2], s.user_range[3]
            if s.lower > -INF:
                out.append(SymGuard(">=", e, const(s.lower), kind, origin, message))
            if s.upper < INF:
                out.append(SymGuard("<=", e, const(s.upper), kind, origin, message))
        return out

    def freeze(self) -> None:
        """The guards are compiled: a decision recorded after this would not be checked."""
        self.frozen = True

    # ------------------------------------------------------------------ user constraints
    def constrain(self, value: SymInt, lower, upper, what: str) -> None:
        """``sym_constrain_range`` / ``constrain_as_size`` on a symbolic value."""
        symbol = value.expr.as_symbol()
        where = self.location() if self.location is not None else None
        shown = f"[{lower}, {'inf' if upper == INF else upper}]"
        if symbol is None:
            raise ConstraintViolationError(
                f"{what}: {value} is not a single size symbol; only a size read from an input "
                "or an unbacked value (.item(), nonzero) can be constrained"
            )
        message = (
            f"{what}({symbol.name}, min={lower}, max={'inf' if upper == INF else upper})"
            f"{f' at {where}' if where else ''}: {symbol.name} = {symbol.origin} must lie in "
            f"{shown}"
        )
        if symbol.unbacked:
            symbol.lower = max(symbol.lower, lower)
            symbol.upper = min(symbol.upper, upper)
            e = Expr({(symbol,): 1}, 0)
            if lower > -INF:
                self._add_assert(SymGuard(">=", e, const(lower), "user", where), message)
            if upper < INF:
                self._add_assert(SymGuard("<=", e, const(upper), "user", where), message)
            return
        if not lower <= symbol.hint <= upper:
            raise ConstraintViolationError(f"{message}, but it is {symbol.hint} for these inputs")
        symbol.lower = max(symbol.lower, lower)
        symbol.upper = min(symbol.upper, upper)
        symbol.user_range = (symbol.lower, symbol.upper, where, message)

    def expect_true(self, op: str, lhs: Expr, rhs: Expr, message: str) -> bool:
        """A validity check (``n >= 0`` for a size): decided when possible; on unbacked values a
        run-time assertion the graph makes, assumed true meanwhile."""
        diff = lhs - rhs
        result = _decide_exprs(op, lhs, rhs)
        if result is not None:
            return result
        if all(not s.unbacked for s in diff.symbols()):
            return self.evaluate(op, lhs, rhs, _hint(lhs), _hint(rhs))
        where = self.location() if self.location is not None else None
        guard = SymGuard(op, lhs, rhs, "relation", where)
        self._add_assert(guard, message)
        self._narrow(guard)
        return True

    def _add_assert(self, guard: SymGuard, message: str) -> None:
        self.pending_asserts.append(RuntimeAssert(guard, message))


def _normalized(lhs: Expr, rhs: Expr) -> tuple[Expr, Expr]:
    """``lhs op rhs`` as ``terms op constant`` divided by the terms' common factor (``8*s1 !=
    8`` is ``s1 != 1``; the factor is positive, so every relation keeps its direction)."""
    diff = lhs - rhs
    if not diff.terms:
        return lhs, rhs
    g = 0
    for c in diff.terms.values():
        g = math.gcd(g, c)
    if g > 1 and diff.const % g == 0:
        diff = Expr({m: c // g for m, c in diff.terms.items()}, diff.const // g)
    return Expr(diff.terms, 0), const(-diff.const)


def _hint(e: Expr):
    try:
        return e.evaluate(_HintValues())
    except LookupError:
        return None


class _HintValues(dict):
    def __missing__(self, symbol):
        if symbol.hint is None:
            raise LookupError(symbol.name)
        return symbol.hint


class _Oblivious:
    def __init__(self, env: ShapeEnv):
        self.env = env

    def __enter__(self):
        self.env._oblivious += 1

    def __exit__(self, *exc):
        self.env._oblivious -= 1


class _UserCode:
    def __init__(self, env: ShapeEnv):
        self.env = env

    def __enter__(self):
        self.env._user_code += 1

    def __exit__(self, *exc):
        self.env._user_code -= 1


class SymBool:
    """A relation on values only known when the graph runs (``u0 >= 0``): ``kiln._check``
    turns it into a run-time check the capture may rely on; ``bool()`` decides it only where
    library code may reason size-obliviously, else raises ``GuardOnDataDependentError``."""

    __slots__ = ("op", "lhs", "rhs", "env")

    def __init__(self, op: str, lhs: Expr, rhs: Expr, env: ShapeEnv):
        self.op, self.lhs, self.rhs, self.env = op, lhs, rhs, env

    def __bool__(self) -> bool:
        return self.env.decide_unbacked(self)

    def negated(self) -> SymBool:
        return SymBool(_NEGATE[self.op], self.lhs, self.rhs, self.env)

    def __repr__(self) -> str:
        return f"{self.lhs} {self.op} {self.rhs}"


class _KernelScope:
    def __init__(self, env: ShapeEnv):
        self.env = env
        self.lowered: list = []

    def __enter__(self):
        self.env._kernel_scope += 1
        for s in self.env.backed_symbols():
            if s.lower < 2:
                self.lowered.append((s, s.lower))
                s.lower = 2
        if self.env._kernel_scope == 1:  # ranges hold still until the scope ends (no guards)
            self.env._decisions = {}
        return self

    def __exit__(self, *exc):
        for s, lower in self.lowered:
            s.lower = lower
        self.env._kernel_scope -= 1
        if not self.env._kernel_scope:
            self.env._decisions = None


class _Deferring:
    def __init__(self, env: ShapeEnv):
        self.env = env
        self.outer = None
        self.guards: list = []

    def __enter__(self) -> list:
        self.outer, self.env._deferring = self.env._deferring, self.guards
        return self.guards

    def __exit__(self, *exc):
        self.env._deferring = self.outer


class _Suppressed:
    def __init__(self, env: ShapeEnv):
        self.env = env

    def __enter__(self):
        self.env._suppressed += 1

    def __exit__(self, *exc):
        self.env._suppressed -= 1


# ------------------------------------------------------------------------------ SymInt


def _operand(x):
    """``(expr, hint)`` of an int-like operand, or None."""
    cls = x.__class__
    if cls is SymInt:
        return x.expr, x.hint
    if cls is int or cls is bool:
        return const(int(x)), int(x)
    if isinstance(x, numbers.Integral) and not isinstance(x, SymInt):
        v = int(x)
        return const(v), v
    return None


def _hint_op(fn, a, b):
    return None if a is None or b is None else fn(a, b)


def _make(env: ShapeEnv, expr: Expr, hint, folded: bool = False):
    """A SymInt, or the plain int when the expression simplified to a constant. ``folded``:
    the expression was built from operands that hold no pinned symbol (then neither does it:
    arithmetic and simplification bring in no symbol their operands lack)."""
    if not expr.terms:
        return expr.const
    if env.fixed and not folded:
        expr = _fold_fixed(env, expr)
        if not expr.terms:
            return expr.const
    return SymInt(expr, hint, env, env.fold_epoch)


def _fold_fixed(env: ShapeEnv, expr: Expr) -> Expr:
    """``expr`` with the symbols a guard pinned to one value replaced by that value. Every
    SymInt operation asks this (a symbolic compile, tens of thousands of times): the atoms are
    looked at where they stand, without gathering the expression's symbols into a set."""
    fixed = env.fixed
    for monomial in expr.terms:
        for atom in monomial:
            if (
                atom in fixed
                if atom.__class__ is Symbol
                else any(s in fixed for s in atom.symbols())
            ):
                symbols = expr.symbols()
                return expr.subs({s: fixed[s] for s in symbols if s in fixed})
    return expr


def _float_relation(op: str, value: float):
    """``s op value`` for a float ``value`` as a relation to an int, for integer ``s``."""
    if math.isnan(value):
        return None
    if value in (INF, -INF):
        return None
    if value == int(value):
        return op, int(value)
    lo = math.floor(value)
    if op in ("==", "!="):
        return None
    return {"<": ("<=", lo), "<=": ("<=", lo), ">": (">", lo), ">=": (">", lo)}[op]


class SymInt:
    """An int-like value that is an expression over size symbols (see the module docstring)."""

    __slots__ = ("expr", "hint", "env", "folded")

    def __init__(self, expr: Expr, hint, env: ShapeEnv, folded: int = -1):
        self.expr = expr
        self.hint = hint  # the value for the inputs seen (None: unbacked)
        self.env = env
        # ``env.fold_epoch`` when ``expr`` was last known to hold no pinned symbol (-1: not
        # known); pins are only added, so the mark holds until the epoch moves
        self.folded = folded

    # ---------------------------------------------------------------- arithmetic
    def _arith(self, other, expr_fn, int_fn, reflected: bool = False):
        o = _operand(other)
        if o is None:
            if isinstance(other, float):
                value = float(self)
                return int_fn(other, value) if reflected else int_fn(value, other)
            return NotImplemented
        oexpr, ohint = o
        env = self.env
        folded = self.folded == env.fold_epoch and (
            other.__class__ is not SymInt or (other.env is env and other.folded == self.folded)
        )
        if reflected:
            return _make(env, expr_fn(oexpr, self.expr), _hint_op(int_fn, ohint, self.hint), folded)
        return _make(env, expr_fn(self.expr, oexpr), _hint_op(int_fn, self.hint, ohint), folded)

    def _int_arith(self, expr: Expr, k: int, int_fn):
        """The result of ``self`` and a plain int ``k`` whose expression is ``expr`` (the
        common case, an int times a size: no operand expression to build)."""
        env = self.env
        hint = self.hint
        return _make(
            env,
            expr,
            None if hint is None else int_fn(hint, k),
            self.folded == env.fold_epoch,
        )

    def __add__(self, other):
        if other.__class__ is int:
            return self._int_arith(self.expr + other, other, operator.add)
        return self._arith(other, operator.add, operator.add)

    def __radd__(self, other):
        if other.__class__ is int:
            return self._int_arith(self.expr + other, other, operator.add)
        return self._arith(other, operator.add, operator.add, True)

    def __sub__(self, other):
        if other.__class__ is int:
            return self._int_arith(self.expr + (-other), other, operator.sub)
        return self._arith(other, operator.sub, operator.sub)

    def __rsub__(self, other):
        return self._arith(other, operator.sub, operator.sub, True)

    def __mul__(self, other):
        if other.__class__ is int:
            return self._int_arith(self.expr * other, other, operator.mul)
        return self._arith(other, operator.mul, operator.mul)

    def __rmul__(self, other):
        if other.__class__ is int:
            return self._int_arith(self.expr * other, other, operator.mul)
        return self._arith(other, operator.mul, operator.mul, True)

    def __floordiv__(self, other):
        return self._arith(other, floordiv, operator.floordiv)

    def __rfloordiv__(self, other):
        return self._arith(other, floordiv, operator.floordiv, True)

    def __mod__(self, other):
        return self._arith(other, mod, operator.mod)

    def __rmod__(self, other):
        return self._arith(other, mod, operator.mod, True)

    def __divmod__(self, other):
        return (self // other, self % other)

    def __rdivmod__(self, other):
        return (other // self, other % self)

    def __truediv__(self, other):
        return float(self) / other

    def __rtruediv__(self, other):
        return other / float(self)

    def __pow__(self, other, modulo=None):
        if modulo is None and other.__class__ is int and other >= 0:
            out = 1
            for _ in range(other):
                out = self * out
            return out
        return pow(int(self), other if modulo is None else int(other), modulo)

    def __rpow__(self, other):
        return other ** int(self)

    def __neg__(self):
        env = self.env
        hint = self.hint
        return _make(
            env, -self.expr, None if hint is None else -hint, self.folded == env.fold_epoch
        )

    def __pos__(self):
        return self

    def __abs__(self):
        return self if self >= 0 else -self

    def __trunc__(self):
        return self

    __floor__ = __ceil__ = __trunc__

    def __round__(self, ndigits=None):
        return self

    # bit operations have no size meaning here: they specialize
    def __and__(self, other):
        return int(self) & other

    def __or__(self, other):
        return int(self) | other

    def __xor__(self, other):
        return int(self) ^ other

    def __lshift__(self, other):
        return int(self) << other

    def __rshift__(self, other):
        return int(self) >> other

    def __invert__(self):
        return ~int(self)

    __rand__ = __and__
    __ror__ = __or__
    __rxor__ = __xor__

    # ---------------------------------------------------------------- comparisons
    def _compare(self, op: str, other):
        o = _operand(other)
        if o is None:
            if isinstance(other, float):
                rel = _float_relation(op, other)
                if rel is None:
                    return _OPS[op](float(self), other) if not math.isnan(other) else op == "!="
                op, other = rel
                o = (const(other), other)
            else:
                return NotImplemented
        return self.env.evaluate(op, self.expr, o[0], self.hint, o[1])

    def __eq__(self, other):
        return self._compare("==", other)

    def __ne__(self, other):
        return self._compare("!=", other)

    def __lt__(self, other):
        return self._compare("<", other)

    def __le__(self, other):
        return self._compare("<=", other)

    def __gt__(self, other):
        return self._compare(">", other)

    def __ge__(self, other):
        return self._compare(">=", other)

    def __bool__(self):
        # an unbacked size compares to a SymBool, which decides (or refuses) itself
        return bool(self._compare("!=", 0))

    # ---------------------------------------------------------------- conversions
    def __index__(self):
        return self.env.specialize(self)

    __int__ = __index__

    def __float__(self):
        return float(self.env.specialize(self))

    def __complex__(self):
        return complex(self.env.specialize(self))

    def __hash__(self):
        if self.env._kernel_scope:
            return hash(self.expr)
        return hash(self.env.specialize(self))

    def __repr__(self):
        return self.expr.code()

    __str__ = __repr__

    def __format__(self, spec: str) -> str:
        if not spec:
            return repr(self)
        return format(self.hint, spec) if self.hint is not None else repr(self)

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self

    def __reduce__(self):
        raise TypeError(f"a symbolic size ({self}) cannot be pickled; it exists while capturing")

    # ---------------------------------------------------------------- PyTorch's SymInt API
    def node_hint(self):
        return self.hint

    def is_integer(self) -> bool:
        return True


numbers.Integral.register(SymInt)

INT_LIKE = (int, SymInt)


def is_symbolic(x) -> bool:
    return x.__class__ is SymInt


def is_int_like(x) -> bool:
    """An int (not a bool) or a SymInt: what a size or an index argument may be."""
    cls = x.__class__
    return cls is int or cls is SymInt or (isinstance(x, int) and cls is not bool)


def has_symbols(values) -> bool:
    """Whether a tuple/list (nested) holds a SymInt."""
    for v in values:
        cls = v.__class__
        if cls is SymInt:
            return True
        if (cls is tuple or cls is list) and has_symbols(v):
            return True
    return False


def hint_int(x, fallback: int = 8192) -> int:
    """The int a size has for the inputs seen, with no guard (cost models, buffer estimates);
    ``fallback`` for unbacked values, which have no hint."""
    if x.__class__ is SymInt:
        return x.hint if x.hint is not None else fallback
    return int(x)


def fold_pinned(size):
    """``size`` with the symbols a guard pinned to one value (``s2 == 64``, a dim broadcast
    against a parameter's) replaced by that value: a plain int when no other symbol remains.
    A size read from an input before the guard still holds its symbol; compilers fold it so
    that code for every size uses the constant the guard makes certain."""
    if size.__class__ is not SymInt:
        return size
    env = size.env
    if not env.fixed or size.folded == env.fold_epoch:
        return size
    expr = _fold_fixed(env, size.expr)
    if expr is size.expr:
        size.folded = env.fold_epoch
        return size
    return expr.const if not expr.terms else SymInt(expr, size.hint, env, env.fold_epoch)


def statically_known_true(op: str, a, b) -> bool:
    """Whether ``a op b`` holds for every value the symbols may take (no guard recorded)."""
    if a.__class__ is int and b.__class__ is int:  # eager code's sizes: nothing symbolic
        return _OPS[op](a, b)
    if a is b and a.__class__ is SymInt:  # the same size: its difference is 0
        return _OPS[op](0, 0)
    oa, ob = _operand(a), _operand(b)
    if oa is None or ob is None:
        return bool(_OPS[op](a, b))
    lhs, rhs = oa[0], ob[0]
    env = a.env if a.__class__ is SymInt else (b.env if b.__class__ is SymInt else None)
    if env is None:
        return _decide_exprs(op, lhs, rhs) is True
    if env.fixed:
        epoch = env.fold_epoch
        if a.__class__ is not SymInt or a.folded != epoch:
            lhs = _fold_fixed(env, lhs)
        if b.__class__ is not SymInt or b.folded != epoch:
            rhs = _fold_fixed(env, rhs)
    return _decide_remembered(env, op, lhs, rhs) is True


_UNDECIDED = object()


def _decide_remembered(env: ShapeEnv, op: str, lhs: Expr, rhs: Expr) -> bool | None:
    """``_decide_exprs``, remembered inside a kernel scope, where the symbols' ranges hold
    still: a symbolic compile asks the same few hundred questions thousands of times (the
    index algebra of every load and store), and each answer builds a difference and its
    bounds."""
    memo = env._decisions
    if memo is None:
        return _decide_fresh(op, lhs, rhs)
    key = (op, lhs, rhs)
    result = memo.get(key, _UNDECIDED)
    if result is _UNDECIDED:
        result = memo[key] = _decide_fresh(op, lhs, rhs)
    return result


def _non_decreasing(e: Expr) -> bool:
    """Whether ``e`` provably never decreases as any of its symbols grows within their ranges:
    positive coefficients on products of non-negative, non-decreasing atoms (symbols, floor
    divisions by positive constants, maxima and minima of such)."""
    for monomial, c in e.terms.items():
        if c < 0 or not all(_rising_atom(atom) for atom in monomial):
            return False
    return True


def _rising_atom(atom) -> bool:
    if atom.bounds()[0] < 0:
        return False
    if atom.__class__ is Symbol:
        return True
    if atom.__class__ is FloorDiv:
        return atom.b.is_const and atom.b.const > 0 and _non_decreasing(atom.a)
    if atom.__class__ in (Max, Min):
        return _non_decreasing(atom.a) and _non_decreasing(atom.b)
    return False


def _decide_fresh(op: str, lhs: Expr, rhs: Expr) -> bool | None:
    """``_decide_exprs``, asked again of the expressions rebuilt under the symbols' present
    ranges when that leaves it open: one built before a range narrowed (``max(1, s // 2)``
    made while ``s`` could be 1, asked in a kernel scope where every symbol is at least 2)
    may simplify now."""
    result = _decide_exprs(op, lhs, rhs)
    if result is None and (_compound(lhs) or _compound(rhs)):
        fresh_lhs, fresh_rhs = lhs.subs({}), rhs.subs({})
        if fresh_lhs != lhs or fresh_rhs != rhs:
            result = _decide_exprs(op, fresh_lhs, fresh_rhs)
    return result


def _compound(e: Expr) -> bool:
    """Whether ``e`` holds an atom other than a plain symbol (``max``, ``//``, ``%``)."""
    return any(atom.__class__ is not Symbol for monomial in e.terms for atom in monomial)


def expect_true(op: str, a, b, message: str) -> bool:
    """A validity check ``a op b``: plain values compare; symbolic ones are decided, guarded,
    or (unbacked) asserted when the graph runs."""
    env = a.env if a.__class__ is SymInt else (b.env if b.__class__ is SymInt else None)
    if env is None:
        return bool(_OPS[op](a, b))
    return env.expect_true(op, as_expr(_operand(a)[0]), as_expr(_operand(b)[0]), message)


# ------------------------------------------------------------------------------ torch.sym_*


def sym_int(x):
    """``torch.sym_int``: an int from an int-like or float value (truncating a float)."""
    if x.__class__ is SymInt:
        return x
    return int(x)


def sym_float(x) -> float:
    """``torch.sym_float``: a float of ``x``. kiln has no symbolic floats: a symbolic size
    becomes its (guarded) value."""
    return float(x)


def _sym_pair(a, b, combine, plain):
    oa, ob = _operand(a), _operand(b)
    if oa is None or ob is None or (a.__class__ is not SymInt and b.__class__ is not SymInt):
        return plain(a, b)
    env = a.env if a.__class__ is SymInt else b.env
    return _make(env, combine(oa[0], ob[0]), _hint_op(plain, oa[1], ob[1]))


def sym_max(a, b):
    """``torch.sym_max``: the larger of two ints without a guard on which one it is."""
    return _sym_pair(a, b, maximum, max)


def sym_min(a, b):
    """``torch.sym_min``: the smaller of two ints without a guard on which one it is."""
    return _sym_pair(a, b, minimum, min)


def sym_not(a):
    """``torch.sym_not`` (comparisons of capture-time sizes are already guarded bools)."""
    if a.__class__ is SymBool:
        return a.negated()
    return not a


def sym_ite(condition, true_value, false_value):
    """``torch.sym_ite``: ``true_value if condition else false_value``."""
    return true_value if condition else false_value


def _check_range(value, lower, upper, what: str) -> None:
    if lower is not None and upper is not None and lower > upper:
        raise ValueError(f"{what}: min={lower} is larger than max={upper}")
    lo = -INF if lower is None else lower
    hi = INF if upper is None else upper
    if value.__class__ is SymInt:
        value.env.constrain(value, lo, hi, what)
        return
    if not lo <= value <= hi:
        raise RuntimeError(f"Invalid value range for {value} between [{lower}, {upper}].")


def sym_constrain_range(value, min=None, max=None) -> None:  # noqa: A002 - PyTorch's names
    """``torch.sym_constrain_range``: declare that ``value`` lies in ``[min, max]``. On a plain
    int it checks now; on a symbolic size the captured graph relies on it, and a call that
    violates it raises an error naming the size, the symbol and this line."""
    _check_range(value, min, max, "sym_constrain_range")


def constrain_as_size(value, min=None, max=None) -> None:  # noqa: A002
    """``torch._constrain_as_size``: ``value`` is a size (at least 0, or ``min``)."""
    _check_range(value, 0 if min is None else min, max, "constrain_as_size")
    if value.__class__ is SymInt:
        symbol = value.expr.as_symbol()
        if symbol is not None:
            symbol.size_like = True


def check(condition, message=None) -> None:
    """``torch._check``: raise ``RuntimeError`` unless ``condition``. On a relation over values
    only known when the graph runs (``kiln._check(n >= 0)`` with ``n = t.item()``) the graph
    checks it when it runs and the capture relies on it meanwhile."""
    if condition.__class__ is SymBool:
        text = message() if callable(message) else message
        where = condition.env.location() if condition.env.location is not None else None
        condition.env.expect_true(
            condition.op,
            condition.lhs,
            condition.rhs,
            f"kiln._check({condition}) failed{f' at {where}' if where else ''}"
            + (f": {text}" if text else ""),
        )
        return
    if not condition:
        text = message() if callable(message) else message
        raise RuntimeError(text or "Expected cond to be True, but got False. (Could this error "
                           "message be improved? If so, please report an enhancement request "
                           "to PyTorch.)")  # fmt: skip


def check_is_size(value) -> None:
    """``torch._check_is_size``: ``value`` is a size (``>= 0``)."""
    constrain_as_size(value)


def is_size_one(size) -> bool:
    """``size == 1`` for a size, *size-obliviously*: a symbolic size not 1 when captured counts
    as not 1 without a guard. Only for decisions whose outcome for a size of 1 agrees with the
    general one (view strides: a view valid for larger sizes is valid for 1, its strides then
    differing only on that size-1 dim), never for ones that change shapes or aliasing."""
    if size.__class__ is SymInt:
        lo, hi = size.expr.bounds()
        if lo == hi == 1:
            return True
        if lo > 1 or hi < 1 or size.hint != 1:
            return False
    return size == 1


def size_oblivious_known_less(a, b) -> bool:
    """Whether ``a < b`` for sizes or strides holds for every value of the size symbols from
    2 up (what the compiled kernels assume), as ``statically_known_true`` decides: no guard,
    False where it depends (two unrelated symbols), as PyTorch's ``guard_or_false``. For
    orderings that matter only along dims longer than one (TensorIterator's order of dims)."""
    if a.__class__ is not SymInt and b.__class__ is not SymInt:
        return a < b
    lhs, rhs = _operand(a)[0], _operand(b)[0]
    raised = [
        (s, s.lower)
        for s in (lhs - rhs).symbols()
        if s.lower < 2 <= s.upper and (not s.unbacked or s.size_like)
    ]
    for s, _ in raised:
        s.lower = 2
    try:
        return _decide_exprs("<", lhs, rhs) is True
    finally:
        for s, lower in raised:
            s.lower = lower


def size_or_one(s):
    """``max(s, 1)`` for a size, without a guard where the range decides it."""
    if s.__class__ is SymInt:
        env = s.env
        hint = s.hint
        if (
            (not env.fixed or s.folded == env.fold_epoch)
            and (hint is None or hint >= 1)
            and s.expr.bounds()[0] >= 1
        ):
            return s  # what ``sym_max`` makes of it, without building the result anew
        return sym_max(s, 1)
    return max(s, 1)


def hashable(value):
    """``value`` (an int-like, or nested tuples of them) usable as a dict key without
    specializing: SymInts become their expressions (hashing a SymInt itself guards its value)."""
    cls = value.__class__
    if cls is SymInt:
        return value.expr
    if cls is tuple or cls is list:
        return tuple(hashable(v) for v in value)
    return value


def as_int(value):
    """An int argument (a size, a count) as the value to use: a SymInt stays symbolic, anything
    else goes through ``__index__`` (``int(value)`` would specialize a SymInt)."""
    if value.__class__ is SymInt or value.__class__ is int:
        return value
    return value.__index__()


def is_negative(size) -> bool:
    """``size < 0`` for a size being validated: an unbacked size gets a run-time check instead
    (``u0 >= 0``), and counts as non-negative meanwhile."""
    if size.__class__ is SymInt:
        return not size.env.expect_true(
            ">=", size.expr, const(0), f"a size computed from data must be >= 0: {size}"
        )
    return size < 0


def known_same_shape(a, b) -> bool:
    """Whether two shapes are equal for every value of their symbols (no guard). For fast paths
    whose slow path gives the same result on equal shapes (``sum_to_size``, ``expand``)."""
    if a is b:
        return True
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if x is y:
            continue
        if x.__class__ is SymInt or y.__class__ is SymInt:
            if not statically_known_true("==", x, y):
                return False
        elif x != y:
            return False
    return True


def same_shape(a, b) -> bool:
    """``tuple(a) == tuple(b)`` comparing the ranks first (a tuple compares items before
    lengths: ``(s0, 32) == (32,)`` would guard ``s0 != 32``)."""
    if len(a) != len(b):
        return False
    return known_same_shape(a, b) or tuple(a) == tuple(b)


def shape_env_of(values) -> ShapeEnv | None:
    """The ``ShapeEnv`` of the first symbolic size among ``values`` (tensors' sizes and strides,
    int-like values); None when all are concrete."""
    for value in values:
        shape = getattr(value, "_shape", None)  # a tensor (this module sits below Tensor)
        sizes = (*shape, *value.stride()) if shape is not None else (value,)
        for size in sizes:
            if size.__class__ is SymInt:
                return size.env
    return None
