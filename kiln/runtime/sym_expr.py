"""Size expressions: integer polynomials over size symbols, with floor division, modulo, max, min.

An ``Expr`` is ``sum(coeff * monomial) + const``; a monomial is a sorted tuple of *atoms*: size
symbols (``Symbol``, each with a known range) and the non-polynomial pieces sizes need
(``FloorDiv``, ``Mod``, ``Max``, ``Min``). Strides are products of sizes (``s1*s2``), so the class
is polynomial, not affine. Expressions are immutable and hashable; construction simplifies with
the symbols' ranges (``(4*s0 + 3) // 4 == s0``, ``(s0*s1) // s1 == s0``), evaluation takes a
mapping of symbol values, and ``code`` writes a Python expression (guards, dumps).

Compile time matters more than generality, which is why this is not sympy: a few dict operations
per arithmetic step. The inductor's loop-index expressions (``inductor/sym.py``) are the affine
special case over loop variables; its planned rework for symbolic kernels should build on this
class (its ``Var`` and ``Indirect`` become atoms here) so there is one expression system.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

__all__ = [
    "Atom",
    "Symbol",
    "FloorDiv",
    "floordivs_expanded",
    "shifted_bounds",
    "Mod",
    "Max",
    "Min",
    "Expr",
    "as_expr",
    "floordiv",
    "mod",
    "maximum",
    "minimum",
    "INF",
    "expr_to_data",
    "expr_from_data",
]

INF = math.inf


def _mul_bound(x, y):
    if x == 0 or y == 0:  # 0 * inf is 0 here (a size of 0 times anything)
        return 0
    return x * y


def _mul_interval(a: tuple, b: tuple) -> tuple:
    products = (
        _mul_bound(a[0], b[0]),
        _mul_bound(a[0], b[1]),
        _mul_bound(a[1], b[0]),
        _mul_bound(a[1], b[1]),
    )
    return min(products), max(products)


def _floordiv_bound(x, k: int):
    return x if x in (INF, -INF) else x // k


class Atom:
    """A building block of monomials; ``key`` orders atoms so monomials have one spelling."""

    __slots__ = ("key", "_hash")

    def bounds(self) -> tuple:
        """Inclusive (low, high) of the atom's value (``INF`` where unbounded)."""
        raise NotImplementedError

    def evaluate(self, values: Mapping) -> int:
        raise NotImplementedError

    def code(self, name_of: Callable) -> str:
        raise NotImplementedError

    def symbols(self) -> set:
        raise NotImplementedError

    def subs(self, mapping: Mapping) -> Expr:
        raise NotImplementedError

    def __hash__(self):
        return self._hash

    def __lt__(self, other: Atom) -> bool:
        return self.key < other.key

    def __repr__(self) -> str:
        return self.code(_own_name)


def _own_name(symbol: Symbol) -> str:
    return symbol.name


def _operand_code(e: Expr, name_of: Callable) -> str:
    """``e`` as an operand of ``//`` or ``%``: parenthesized unless it is a single factor."""
    text = e.code(name_of)
    if e.const and e.terms or len(e.terms) > 1 or (e.terms and e.const == 0 and "*" in text):
        return f"({text})"
    if text.startswith("-"):
        return f"({text})"
    return text


class Symbol(Atom):
    """A size symbol: ``s0`` (backed: its value is read from an input at every call; ``hint``
    is the value seen when capturing) or ``u0`` (unbacked: computed by the graph at run time,
    no hint). ``lower``/``upper`` bound it; guards and user constraints narrow them."""

    __slots__ = (
        "name", "index", "hint", "lower", "upper", "unbacked", "origin", "user_range", "size_like",
    )  # fmt: skip

    def __init__(self, name: str, index: int, hint, lower, upper, unbacked: bool, origin: str):
        self.name = name
        self.index = index
        self.hint = hint
        self.lower = lower
        self.upper = upper
        self.unbacked = unbacked
        self.origin = origin  # what the symbol stands for: "L['x'].size()[0]", "nonzero(...)"
        self.user_range = None  # (lower, upper, where, message) of a user's constraint
        self.size_like = not unbacked  # an unbacked size: library code may treat it as >= 2
        self.key = (0, unbacked, index)
        self._hash = hash(self.key) ^ id(self)

    def __eq__(self, other):
        return self is other

    __hash__ = Atom.__hash__

    def bounds(self):
        return (self.lower, self.upper)

    def evaluate(self, values):
        return values[self]

    def code(self, name_of):
        return name_of(self)

    def symbols(self):
        return {self}

    def subs(self, mapping):
        if self in mapping:
            return as_expr(mapping[self])
        return Expr({(self,): 1}, 0)


class _Binary(Atom):
    """An atom over two expressions (``kind`` orders the atom kinds)."""

    __slots__ = ("a", "b")
    kind = 0

    def __init__(self, a: Expr, b: Expr):
        self.a = a
        self.b = b
        self.key = (self.kind, a.key(), b.key())
        self._hash = hash(self.key)

    def __eq__(self, other):
        return type(other) is type(self) and other.key == self.key

    __hash__ = Atom.__hash__

    def symbols(self):
        return self.a.symbols() | self.b.symbols()


class FloorDiv(_Binary):
    """``a // b`` (Python's floor division)."""

    __slots__ = ()
    kind = 1

    def bounds(self):
        (alo, ahi), (blo, bhi) = self.a.bounds(), self.b.bounds()
        if blo == bhi and blo > 0:
            return (_floordiv_bound(alo, blo), _floordiv_bound(ahi, blo))
        if alo >= 0 and blo >= 1:
            return (0 if bhi == INF else alo // bhi, _floordiv_bound(ahi, blo))
        return (-INF, INF)

    def evaluate(self, values):
        return self.a.evaluate(values) // self.b.evaluate(values)

    def code(self, name_of):
        return f"({_operand_code(self.a, name_of)} // {_operand_code(self.b, name_of)})"

    def subs(self, mapping):
        return floordiv(self.a.subs(mapping), self.b.subs(mapping))


class Mod(_Binary):
    """``a % b`` (Python's modulo: the sign of ``b``)."""

    __slots__ = ()
    kind = 2

    def bounds(self):
        (alo, ahi), (blo, bhi) = self.a.bounds(), self.b.bounds()
        if blo >= 1:
            hi = bhi - 1
            if alo >= 0:
                hi = min(hi, ahi)
            return (0, hi)
        return (-INF, INF)

    def evaluate(self, values):
        return self.a.evaluate(values) % self.b.evaluate(values)

    def code(self, name_of):
        return f"({_operand_code(self.a, name_of)} % {_operand_code(self.b, name_of)})"

    def subs(self, mapping):
        return mod(self.a.subs(mapping), self.b.subs(mapping))


class Max(_Binary):
    __slots__ = ()
    kind = 3

    def bounds(self):
        (alo, ahi), (blo, bhi) = self.a.bounds(), self.b.bounds()
        return (max(alo, blo), max(ahi, bhi))

    def evaluate(self, values):
        return max(self.a.evaluate(values), self.b.evaluate(values))

    def code(self, name_of):
        return f"max({self.a.code(name_of)}, {self.b.code(name_of)})"

    def subs(self, mapping):
        return maximum(self.a.subs(mapping), self.b.subs(mapping))


class Min(_Binary):
    __slots__ = ()
    kind = 4

    def bounds(self):
        (alo, ahi), (blo, bhi) = self.a.bounds(), self.b.bounds()
        return (min(alo, blo), min(ahi, bhi))

    def evaluate(self, values):
        return min(self.a.evaluate(values), self.b.evaluate(values))

    def code(self, name_of):
        return f"min({self.a.code(name_of)}, {self.b.code(name_of)})"

    def subs(self, mapping):
        return minimum(self.a.subs(mapping), self.b.subs(mapping))


def _degree_order(monomial: tuple) -> tuple:
    """Monomials ordered by degree, then by their atoms: long division's leading term."""
    return len(monomial), monomial


def _monomial_product(m1: tuple, m2: tuple) -> tuple:
    if not m1:
        return m2
    if not m2:
        return m1
    return tuple(sorted(m1 + m2))


def _contains(outer: tuple, inner: tuple) -> tuple | None:
    """``outer`` without the atoms of ``inner`` (multisets), or None if ``inner`` is not in it."""
    rest = list(outer)
    for a in inner:
        for i, b in enumerate(rest):
            if b == a:
                del rest[i]
                break
        else:
            return None
    return tuple(rest)


class Expr:
    """``sum(coeff * monomial) + const`` over atoms (see the module docstring). Immutable."""

    __slots__ = ("terms", "const", "_hash", "_key")

    def __init__(self, terms: dict, const: int = 0):
        self.terms = terms  # monomial (sorted tuple of atoms) -> nonzero int coefficient
        self.const = const
        self._hash = None
        self._key = None

    # ---------------------------------------------------------------- identity
    def key(self) -> tuple:
        k = self._key
        if k is None:
            k = self._key = (
                tuple(sorted((tuple(a.key for a in m), c) for m, c in self.terms.items())),
                self.const,
            )
        return k

    def __hash__(self):
        h = self._hash
        if h is None:
            h = self._hash = hash((frozenset(self.terms.items()), self.const))
        return h

    def __eq__(self, other):
        if isinstance(other, int):
            return not self.terms and self.const == other
        return isinstance(other, Expr) and other.const == self.const and other.terms == self.terms

    @property
    def is_const(self) -> bool:
        return not self.terms

    def as_symbol(self) -> Symbol | None:
        """The symbol this expression is exactly (``s0``), else None."""
        if self.const or len(self.terms) != 1:
            return None
        ((m, c),) = self.terms.items()
        if c == 1 and len(m) == 1 and type(m[0]) is Symbol:
            return m[0]
        return None

    def symbols(self) -> set:
        out = set()
        for m in self.terms:
            for a in m:
                out |= a.symbols()
        return out

    # ---------------------------------------------------------------- values
    def bounds(self) -> tuple:
        # the intervals of the monomials times their (nonzero int) coefficients: a symbolic
        # compile asks this thousands of times, mostly of one-atom monomials, so the products
        # of intervals are only formed for monomials of several atoms
        lo = hi = self.const
        for m, c in self.terms.items():
            if len(m) == 1:
                mlo, mhi = m[0].bounds()
                if mhi < mlo:
                    mlo, mhi = mhi, mlo
            else:
                ivl = (1, 1)
                for a in m:
                    ivl = _mul_interval(ivl, a.bounds())
                mlo, mhi = ivl
            if c > 0:
                lo += mlo * c
                hi += mhi * c
            else:
                lo += mhi * c
                hi += mlo * c
        return lo, hi

    def evaluate(self, values: Mapping) -> int:
        total = self.const
        for m, c in self.terms.items():
            v = c
            for a in m:
                v *= a.evaluate(values)
            total += v
        return total

    def subs(self, mapping: Mapping) -> Expr:
        """Replace symbols by expressions or ints (``mapping``: Symbol -> Expr | int)."""
        out = Expr({}, self.const)
        for m, c in self.terms.items():
            term = const(c)
            for a in m:
                term = term * a.subs(mapping)
            out = out + term
        return out

    def code(self, name_of: Callable = _own_name) -> str:
        """A Python expression (``name_of(symbol)`` names each symbol)."""
        parts = []
        for m, c in sorted(self.terms.items(), key=lambda t: (-len(t[0]), [a.key for a in t[0]])):
            body = "*".join(a.code(name_of) for a in m)
            if c == 1:
                text = body
            elif c == -1:
                text = "-" + body
            else:
                text = f"{c}*{body}"
            parts.append(text)
        if self.const or not parts:
            parts.append(str(self.const))
        out = parts[0]
        for p in parts[1:]:
            out += f" - {p[1:]}" if p.startswith("-") else f" + {p}"
        return out

    def __repr__(self) -> str:
        return self.code()

    # ---------------------------------------------------------------- arithmetic
    def __add__(self, other) -> Expr:
        if isinstance(other, int):
            return self if other == 0 else Expr(self.terms, self.const + other)
        if not other.terms:
            return Expr(self.terms, self.const + other.const) if other.const else self
        if not self.terms:
            return Expr(other.terms, other.const + self.const) if self.const else other
        terms = dict(self.terms)
        for m, c in other.terms.items():
            v = terms.get(m, 0) + c
            if v:
                terms[m] = v
            else:
                del terms[m]
        return Expr(terms, self.const + other.const)

    __radd__ = __add__

    def __neg__(self) -> Expr:
        return Expr({m: -c for m, c in self.terms.items()}, -self.const)

    def __sub__(self, other) -> Expr:
        return self + (-as_expr(other))

    def __rsub__(self, other) -> Expr:
        return as_expr(other) + (-self)

    def __mul__(self, other) -> Expr:
        if isinstance(other, int):
            if other == 0:
                return ZERO
            if other == 1:
                return self
            return Expr({m: c * other for m, c in self.terms.items()}, self.const * other)
        if not other.terms:
            return self * other.const
        if not self.terms:
            return other * self.const
        terms: dict = {}
        for m1, c1 in self.terms.items():
            for m2, c2 in other.terms.items():
                m = _monomial_product(m1, m2)
                v = terms.get(m, 0) + c1 * c2
                if v:
                    terms[m] = v
                else:
                    terms.pop(m, None)
        if self.const:
            for m, c in other.terms.items():
                v = terms.get(m, 0) + c * self.const
                if v:
                    terms[m] = v
                else:
                    terms.pop(m, None)
        if other.const:
            for m, c in self.terms.items():
                v = terms.get(m, 0) + c * other.const
                if v:
                    terms[m] = v
                else:
                    terms.pop(m, None)
        return Expr(terms, self.const * other.const)

    __rmul__ = __mul__

    def exact_quotient(self, d: Expr) -> Expr | None:
        """``self / d`` when ``d`` divides ``self`` exactly: term by term for a one-term ``d``,
        by long division otherwise (a size inferred for a view's -1, ``(16*b*h*w + 16*b) //
        (b*h*w + b)``, is 16 for every size)."""
        if d.const or len(d.terms) != 1:
            return self._long_division(d) if d.terms else None
        if self.const:
            return None
        ((dm, dc),) = d.terms.items()
        terms = {}
        for m, c in self.terms.items():
            if c % dc:
                return None
            rest = _contains(m, dm)
            if rest is None:
                return None
            terms[rest] = terms.get(rest, 0) + c // dc
        quotient = Expr({m: c for m, c in terms.items() if m and c}, terms.get((), 0))
        return quotient

    def _long_division(self, d: Expr) -> Expr | None:
        """``self / d`` by polynomial long division: the remainder's largest term over ``d``'s,
        one quotient term at a time, until nothing remains (None if a step does not divide or
        the terms run out: a quotient that exists may be missed, never a wrong one given)."""
        lead = max(d.terms, key=_degree_order)
        lead_coeff = d.terms[lead]
        quotient, rest = ZERO, self
        for _ in range(len(self.terms) + 1):
            if not rest.terms:
                return quotient if rest.const == 0 else None
            m = max(rest.terms, key=_degree_order)
            c = rest.terms[m]
            factor = _contains(m, lead)
            if c % lead_coeff or factor is None:
                return None
            term = Expr({factor: c // lead_coeff}, 0) if factor else const(c // lead_coeff)
            quotient, rest = quotient + term, rest - term * d
        return None


def floordivs_expanded(e: Expr, limit: int = 4) -> Expr:
    """``k * e`` for some ``k >= 1`` with each term ``c * (a // k)`` (a constant ``k > 0``)
    written as ``c * (a - a % k)``: the same sign as ``e``, with bounds that keep what
    intervals lose. ``s - 2 * ((s + 1) // 2) + 2`` bounds to anything from intervals over ``s``
    and ``(s + 1) // 2`` separately, but expanded it is ``2 + 2 * ((s + 1) % 2)``, in
    ``[2, 4]``: the relations of a stride-2 convolution's output size to its input size
    decide for every size. At most ``limit`` divisions are expanded (compile time)."""
    for _ in range(limit):
        m = next((m for m in e.terms if _constant_division(m)), None)
        if m is None:
            break
        a, d = m[0].a, m[0].b
        rest = Expr({n: v for n, v in e.terms.items() if n != m}, e.const)
        e = rest * d.const + (a - mod(a, d)) * e.terms[m]
    return e


def shifted_bounds(e: Expr, longest: int = 6) -> tuple:
    """Bounds of ``e`` from each atom written as its lower bound plus a non-negative part:
    ``a = lo_a + t_a``. Expanded, a polynomial whose every term in the ``t``'s has a
    non-negative coefficient is at least its constant (and at most it when every one is
    non-positive). Intervals lose the relation between a product and its factors: ``s1 * q -
    s1`` (a batch times an output size, less the batch) bounds to anything, though with
    ``q >= 1`` it is ``s1 * (q - 1) >= 0``; shifted, it is ``lo_s1 * t_q + t_s1 * t_q``. Only
    atoms with a finite lower bound, and monomials of at most ``longest`` atoms (2^n terms
    each), are expanded; otherwise ``(-INF, INF)``."""
    shifted: dict = {}
    constant = e.const
    for m, c in e.terms.items():
        if len(m) > longest:
            return -INF, INF
        lows = []
        for a in m:
            lo = a.bounds()[0]
            if lo == -INF:
                return -INF, INF
            lows.append(lo)
        # every subset of the monomial's positions takes its t's; the others their lower bounds
        for mask in range(1 << len(m)):
            coeff = c
            atoms = []
            for i, (a, lo) in enumerate(zip(m, lows)):
                if mask >> i & 1:
                    atoms.append(a)
                else:
                    coeff *= lo
            if coeff == 0:
                continue
            if not atoms:
                constant += coeff
            else:
                key = tuple(atoms)
                shifted[key] = shifted.get(key, 0) + coeff
    coeffs = [c for c in shifted.values() if c != 0]
    lo = constant if all(c > 0 for c in coeffs) else -INF
    hi = constant if all(c < 0 for c in coeffs) else INF
    return lo, hi


def _constant_division(monomial: tuple) -> bool:
    """Whether a monomial is one ``a // k`` with a constant ``k > 0``."""
    if len(monomial) != 1 or type(monomial[0]) is not FloorDiv:
        return False
    d = monomial[0].b
    return d.is_const and d.const > 0


def const(c: int) -> Expr:
    return Expr({}, c)


ZERO = const(0)
ONE = const(1)


def as_expr(value) -> Expr:
    if isinstance(value, Expr):
        return value
    if isinstance(value, Atom):
        return Expr({(value,): 1}, 0)
    return Expr({}, int(value))


def _atom(atom: Atom) -> Expr:
    return Expr({(atom,): 1}, 0)


def floordiv(e: Expr, d: Expr) -> Expr:
    """``e // d``, simplified (floor semantics, as Python's ``//``)."""
    if d.is_const:
        k = d.const
        if k == 0:
            raise ZeroDivisionError("integer division or modulo by zero")
        if e.is_const:
            return const(e.const // k)
        if k == 1:
            return e
        if k < 0:
            return _atom(FloorDiv(e, d))
        # floor((k*q + r) / k) == q + floor(r / k) for integer q: split off what k divides
        whole, rest = {}, {}
        for m, c in e.terms.items():
            if c % k == 0:
                whole[m] = c // k
            else:
                rest[m] = c
        q = Expr(whole, e.const // k)
        if not rest:
            return q
        r = Expr(rest, e.const % k)
        lo, hi = r.bounds()
        if lo >= 0 and hi < k:
            return q
        return q + _atom(FloorDiv(r, d))
    if e == d:
        return ONE
    q = e.exact_quotient(d)
    if q is not None:
        return q
    lo, hi = e.bounds()
    dlo = d.bounds()[0]
    if lo >= 0 and dlo >= 1 and hi < dlo:
        return ZERO
    if dlo >= 1:  # (d*q + r) // d == q + r // d: split off the terms d divides
        whole, rest = [], {}
        for m, c in e.terms.items():
            part = Expr({m: c}, 0).exact_quotient(d)
            if part is None:
                rest[m] = c
            else:
                whole.append(part)
        if whole:
            q = sum(whole[1:], whole[0])
            r = Expr(rest, e.const)
            rlo, rhi = r.bounds()
            if rlo >= 0 and rhi < dlo:
                return q
            if rhi < 0 and rlo >= -dlo:
                return q + -1
            return q + floordiv(r, d)
    return _atom(FloorDiv(e, d))


def mod(e: Expr, d: Expr) -> Expr:
    """``e % d``, simplified (Python's modulo)."""
    if d.is_const:
        k = d.const
        if k == 0:
            raise ZeroDivisionError("integer division or modulo by zero")
        if e.is_const:
            return const(e.const % k)
        if k in (1, -1):
            return ZERO
        if k < 0:
            return _atom(Mod(e, d))
        # (k*q + r) % k == r % k for integer q
        rest = {m: c % k for m, c in e.terms.items() if c % k}
        r = Expr(rest, e.const % k)
        if not rest:
            return r
        lo, hi = r.bounds()
        if lo >= 0 and hi < k:
            return r
        return _atom(Mod(r, d))
    if e == d or e.exact_quotient(d) is not None:
        return ZERO
    if _is_mod_by(e, d):  # (a % d) % d == a % d: a remainder taken again stays as it is
        return e
    lo, hi = e.bounds()
    dlo = d.bounds()[0]
    if lo >= 0 and dlo >= 1 and hi < dlo:
        return e
    return _atom(Mod(e, d))


def _is_mod_by(e: Expr, d: Expr) -> bool:
    """Whether ``e`` is exactly one ``a % d`` (coefficient 1, no constant)."""
    if e.const != 0 or len(e.terms) != 1:
        return False
    ((monomial, coeff),) = e.terms.items()
    return coeff == 1 and len(monomial) == 1 and type(monomial[0]) is Mod and monomial[0].b == d


def maximum(a: Expr, b: Expr) -> Expr:
    if a == b:
        return a
    (alo, ahi), (blo, bhi) = a.bounds(), b.bounds()
    if alo >= bhi:
        return a
    if blo >= ahi:
        return b
    if b.key() < a.key():
        a, b = b, a
    return _atom(Max(a, b))


def minimum(a: Expr, b: Expr) -> Expr:
    if a == b:
        return a
    (alo, ahi), (blo, bhi) = a.bounds(), b.bounds()
    if ahi <= blo:
        return a
    if bhi <= alo:
        return b
    if b.key() < a.key():
        a, b = b, a
    return _atom(Min(a, b))


_BINARY_KINDS = {cls.kind: cls for cls in (FloorDiv, Mod, Max, Min)}


def expr_to_data(e: Expr) -> tuple:
    """``e`` as nested tuples of ints and symbol names, for a record on disk: symbols are not
    stored (their identity and ranges belong to the process that made them) but named, so
    ``expr_from_data`` can rebuild the expression over another capture's symbols."""
    return (
        tuple((tuple(_atom_to_data(a) for a in m), c) for m, c in e.terms.items()),
        e.const,
    )


def _atom_to_data(atom: Atom) -> tuple:
    if atom.__class__ is Symbol:
        return ("s", atom.name)
    if isinstance(atom, _Binary) and atom.kind in _BINARY_KINDS:
        return (atom.kind, expr_to_data(atom.a), expr_to_data(atom.b))
    raise TypeError(f"cannot store the size atom {atom!r}")


def expr_from_data(data: tuple, symbols: Mapping[str, Symbol]) -> Expr:
    """The expression ``expr_to_data`` described, over ``symbols`` (name -> symbol): built as
    it was stored, not simplified again, so it evaluates as the stored one did. A name missing
    from ``symbols`` or a malformed record raises ``ValueError``."""
    try:
        terms, constant = data
        rebuilt = {}
        for monomial, coeff in terms:
            atoms = tuple(sorted(_atom_from_data(a, symbols) for a in monomial))
            if not atoms or coeff.__class__ is not int or atoms in rebuilt:
                raise ValueError("a malformed term")
            rebuilt[atoms] = coeff
        if constant.__class__ is not int:
            raise ValueError("a malformed constant")
    except (TypeError, KeyError) as why:
        raise ValueError(f"not a stored size expression: {why}") from None
    return Expr(rebuilt, constant)


def _atom_from_data(data: tuple, symbols: Mapping[str, Symbol]) -> Atom:
    kind = data[0]
    if kind == "s":
        symbol = symbols.get(data[1])
        if symbol is None:
            raise ValueError(f"no size symbol named {data[1]!r}")
        return symbol
    cls = _BINARY_KINDS.get(kind)
    if cls is None or len(data) != 3:
        raise ValueError(f"unknown size atom {kind!r}")
    return cls(expr_from_data(data[1], symbols), expr_from_data(data[2], symbols))
