"""Index expressions: small integer affine expressions with floor division and modulo.

An ``Expr`` is a sum of integer-weighted *atoms* plus a constant. Atoms are loop variables
(``Var``, with a known range), ``FloorDiv(expr, d)`` and ``Mod(expr, d)`` (from reshapes), and
``Indirect`` (a value loaded at run time, for gather/embedding). Expressions are immutable,
hashable and simplified on construction using variable ranges (``(i * 4 + j) // 4 == i`` when
``j < 4``), which keeps reshaped views as cheap as the original indexing. Building them is fast:
compile time matters more than generality, which is why this is not sympy.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..runtime.symbolic import (
    SizeDependentError,
    SymInt,
    fold_pinned,
    size_or_one,
    statically_known_true,
    sym_max,
)

__all__ = [
    "index_key",
    "size_value",
    "same_size",
    "known_contiguous",
    "broadcasts",
    "is_symbolic",
    "Expr",
    "Var",
    "FloorDiv",
    "Mod",
    "Indirect",
    "const",
    "as_expr",
    "ZERO",
    "ONE",
]


class Atom:
    """A non-linear building block of an expression (variable, division, modulo, indirect)."""

    __slots__ = ("_hash",)

    def bounds(self) -> tuple[int, int]:
        """Inclusive (min, max) of the atom's value."""
        raise NotImplementedError

    def free_vars(self) -> set:
        raise NotImplementedError

    def subs(self, mapping: Mapping) -> Expr:
        raise NotImplementedError

    # atoms take part in arithmetic as one-term expressions
    def __add__(self, other):
        return as_expr(self) + other

    __radd__ = __add__

    def __sub__(self, other):
        return as_expr(self) - other

    def __rsub__(self, other):
        return as_expr(other) - as_expr(self)

    def __mul__(self, other):
        return as_expr(self) * other

    __rmul__ = __mul__

    def __neg__(self):
        return -as_expr(self)

    def __floordiv__(self, other):
        return as_expr(self) // other

    def __mod__(self, other):
        return as_expr(self) % other


def size_value(size):
    """A loop size as kept here: a plain int, or a ``SymInt`` when the kernel is compiled for
    every size (``ShapeEnv.kernel_scope``: comparisons of it decide from the symbols' ranges or
    stop that compile)."""
    return fold_pinned(size) if isinstance(size, SymInt) else int(size)


def same_size(a, b) -> bool:
    """Whether two loop sizes are provably equal (plain ints compare; symbolic ones must be
    the same expression): code that fuses or merges loops by size uses this, so symbolic
    sizes that merely might be equal are kept apart instead of guarding on their values."""
    if a.__class__ is int and b.__class__ is int:
        return a == b
    return statically_known_true("==", a, b)


def known_contiguous(shape, stride) -> bool:
    """Contiguous for every size (symbolic strides are the sizes' products, as tensors make
    them): asked without deciding whether a symbolic size is 0 or 1, which ``is_contiguous``
    must and a compile for every size cannot. A stride may be the plain product of the sizes
    after it (a view's) or count an empty dim as 1 (a new tensor's): the two differ only for
    an empty tensor, which any strides describe."""
    expected = plain = 1
    for size, st in zip(reversed(shape), reversed(stride)):
        if not (
            statically_known_true("==", st, expected)
            or statically_known_true("==", st, plain)
            or statically_known_true("==", size, 1)
        ):
            return False
        expected, plain = expected * size_or_one(size), plain * size
    return True


def broadcasts(size, out_size) -> bool:
    """Whether a dim of ``size`` is broadcast to ``out_size`` (read at index 0 whatever the
    output index). A dim of size 1 is: where ``out_size`` is 1 too, index 0 is the only index
    anyway, so nothing needs to know whether it is. That leaves a symbolic output size that is 1
    for some values only (a stride-2 convolution's ``(s + 1) // 2`` at ``s == 2``) undecided
    instead of stopping the compile for every size; a symbolic ``size`` not provably equal to
    ``out_size`` must still be decided (``size == 1`` asks the symbols' ranges)."""
    if same_size(size, out_size):
        return False
    return size == 1


_COMPARE = {
    "==": lambda a, b: a == b,
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
}


def known(op: str, a, b) -> bool:
    """``a op b`` for every value of the size symbols (plain ints simply compare): the index
    simplifications ask this, so a symbolic size that might or might not allow one leaves the
    expression as it is instead of deciding on the size seen."""
    if a.__class__ is int and b.__class__ is int:
        return _COMPARE[op](a, b)
    return statically_known_true(op, a, b)


def last_index(size):
    """The largest value of a variable ranging over ``[0, size)`` (0 for an empty range)."""
    if size.__class__ is int:
        return max(size - 1, 0)
    if known(">=", size, 1):
        return size - 1
    return sym_max(size - 1, 0)  # a size that is 0 for some values only (``s0 // 3``)


def is_symbolic(value) -> bool:
    """Whether a size (or a tuple of them) holds a ``SymInt``."""
    if isinstance(value, tuple):
        return any(v.__class__ is SymInt for v in value)
    return value.__class__ is SymInt


class Var(Atom):
    """A loop variable ranging over [0, size)."""

    __slots__ = ("name", "size")

    def __init__(self, name: str, size: int):
        self.name = name
        self.size = size_value(size)
        self._hash = hash(("var", name))

    def __hash__(self):
        return self._hash

    def __eq__(self, other):
        return isinstance(other, Var) and other.name == self.name

    def __repr__(self):
        return self.name

    def bounds(self):
        return (0, last_index(self.size))

    def free_vars(self):
        return {self}

    def subs(self, mapping):
        return as_expr(mapping[self]) if self in mapping else Expr({self: 1}, 0)


class FloorDiv(Atom):
    __slots__ = ("expr", "div")

    def __init__(self, expr: Expr, div: int):
        self.expr = expr
        self.div = div
        self._hash = hash(("fdiv", expr, div))

    def __hash__(self):
        return self._hash

    def __eq__(self, other):
        return (
            isinstance(other, FloorDiv)
            and same_size(other.div, self.div)
            and other.expr == self.expr
        )

    def __repr__(self):
        return f"({self.expr} // {self.div})"

    def bounds(self):
        lo, hi = self.expr.bounds()
        return (lo // self.div, hi // self.div)

    def free_vars(self):
        return self.expr.free_vars()

    def subs(self, mapping):
        return self.expr.subs(mapping) // self.div


class Mod(Atom):
    __slots__ = ("expr", "mod")

    def __init__(self, expr: Expr, mod: int):
        self.expr = expr
        self.mod = mod
        self._hash = hash(("mod", expr, mod))

    def __hash__(self):
        return self._hash

    def __eq__(self, other):
        return isinstance(other, Mod) and same_size(other.mod, self.mod) and other.expr == self.expr

    def __repr__(self):
        return f"({self.expr} % {self.mod})"

    def bounds(self):
        lo, hi = self.expr.bounds()
        if known(">=", lo, 0) and known("<", hi, self.mod):
            return (lo, hi)
        return (0, self.mod - 1)

    def free_vars(self):
        return self.expr.free_vars()

    def subs(self, mapping):
        return self.expr.subs(mapping) % self.mod


class Indirect(Atom):
    """An index read from a tensor at run time (``table[ids[i]]``), known to be in [0, size)."""

    __slots__ = ("name", "size")

    def __init__(self, name: str, size: int):
        self.name = name
        self.size = size
        self._hash = hash(("indirect", name))

    def __hash__(self):
        return self._hash

    def __eq__(self, other):
        return isinstance(other, Indirect) and other.name == self.name

    def __repr__(self):
        return self.name

    def bounds(self):
        return (0, last_index(self.size))

    def free_vars(self):
        return set()

    def subs(self, mapping):
        return as_expr(mapping[self]) if self in mapping else Expr({self: 1}, 0)


class Expr:
    """``sum(coeff * atom) + const`` with integer coefficients (see the module docstring); in
    kernels compiled for every size, coefficients and the constant may be ``SymInt``s (strides
    over symbolic sizes)."""

    # ``_index_key``: ``_expr_key``'s answer, set when first asked (expressions are immutable)
    __slots__ = ("terms", "const", "_hash", "_index_key")

    def __init__(self, terms: dict | None = None, const: int = 0):
        # a SymInt coefficient is kept without asking whether it is 0: one that simplified to
        # 0 is a plain int, and asking decides over the symbols' ranges (a quarter of the
        # decisions of a GPT block's symbolic compile were such questions)
        self.terms = {a: c for a, c in (terms or {}).items() if c.__class__ is not int or c != 0}
        self.const = size_value(const)
        self._hash = None

    # ---------------------------------------------------------------- identity
    def __hash__(self):
        if self._hash is None:
            self._hash = hash((frozenset(self.terms.items()), self.const))
        return self._hash

    def __eq__(self, other):
        # structural equality: symbolic constants and coefficients must be the same expression
        # (asking whether they might be equal would decide over the symbols' ranges)
        if isinstance(other, int):
            return not self.terms and same_size(self.const, other)
        if not isinstance(other, Expr) or not same_size(other.const, self.const):
            return False
        terms = self.terms
        if other.terms.keys() != terms.keys():
            return False
        return all(same_size(c, terms[a]) for a, c in other.terms.items())

    def __repr__(self):
        # a SymInt coefficient or constant is printed, never compared (comparing decides over
        # the symbols' ranges, and may not be decidable)
        parts = []
        for atom, c in self.terms.items():
            parts.append(repr(atom) if c.__class__ is int and c == 1 else f"{c}*{atom!r}")
        const = self.const
        if const.__class__ is not int or const != 0 or not parts:
            parts.append(str(const))
        return " + ".join(parts)

    @property
    def is_const(self) -> bool:
        return not self.terms

    def free_vars(self) -> set:
        out = set()
        for a in self.terms:
            out |= a.free_vars()
        return out

    def atoms(self):
        return self.terms.keys()

    def coeff(self, atom: Atom) -> int:
        return self.terms.get(atom, 0)

    def bounds(self) -> tuple[int, int]:
        lo = hi = self.const
        for a, c in self.terms.items():
            alo, ahi = a.bounds()
            if c >= 0:
                lo += c * alo
                hi += c * ahi
            else:
                lo += c * ahi
                hi += c * alo
        return lo, hi

    # ---------------------------------------------------------------- arithmetic
    def __add__(self, other):
        if other.__class__ is not Expr:
            other = as_expr(other)
        terms = dict(self.terms)
        for a, c in other.terms.items():
            c = terms.get(a, 0) + c
            if c.__class__ is int and c == 0:
                del terms[a]
            else:
                terms[a] = c
        const = self.const + other.const
        # the terms are kept as ``Expr()`` would keep them (the sums' zeros are dropped)
        out = _made(terms, const if const.__class__ is int else size_value(const))
        return _recombine(out) if len(terms) > 1 else out

    __radd__ = __add__

    def __neg__(self):
        return Expr({a: -c for a, c in self.terms.items()}, -self.const)

    def __sub__(self, other):
        return self + (-as_expr(other))

    def __rsub__(self, other):
        return as_expr(other) - self

    def __mul__(self, other):
        if isinstance(other, Expr):
            if other.is_const:
                other = other.const
            elif self.is_const:
                return other * self.const
            else:
                raise TypeError(
                    f"index expressions are affine: cannot multiply ({self}) by ({other})"
                )
        k = other if other.__class__ is int else size_value(other)
        if k.__class__ is int and k != 0 and self.const.__class__ is int:
            # no coefficient becomes 0 and the constant stays a plain int: no filtering
            return _made({a: c * k for a, c in self.terms.items()}, self.const * k)
        return Expr({a: c * k for a, c in self.terms.items()}, self.const * k)

    __rmul__ = __mul__

    def __floordiv__(self, d):
        d = size_value(d.const if isinstance(d, Expr) else d)
        if known("==", d, 1):
            return self
        if not known(">", d, 0):
            if d.__class__ is SymInt:  # a symbolic divisor whose sign the ranges leave open
                raise SizeDependentError(f"index floor division by {d}, not known positive")
            raise ValueError("index floor division needs a positive divisor")
        if not self.terms:
            return Expr({}, self.const // d)
        inner = self._single_atom()
        if isinstance(inner, FloorDiv):  # (E // a) // d == E // (a*d), a and d positive
            return inner.expr // (inner.div * d)
        lo, hi = self.bounds()
        nonneg = known(">=", lo, 0)
        if nonneg and known("<", hi, d):
            return Expr({}, 0)
        if (
            nonneg
            and known("==", self.const % d, 0)
            and all(known("==", c % d, 0) for c in self.terms.values())
        ):
            return Expr({a: c // d for a, c in self.terms.items()}, self.const // d)
        # floor((d*q + r) / d) == q + floor(r / d): split off the part divisible by d (only when
        # r >= 0, since generated code divides with truncation)
        whole = {a: c for a, c in self.terms.items() if known("==", c % d, 0)}
        rest = Expr({a: c for a, c in self.terms.items() if a not in whole}, self.const % d)
        rlo, rhi = rest.bounds()
        if whole and known(">=", rlo, 0):
            q = Expr({a: c // d for a, c in whole.items()}, self.const // d)
            return q if known("<", rhi, d) else q + rest // d
        split = _factor_split(self, d)
        if split is not None:  # (g*Q + R) // (g*m) == Q // m when 0 <= R < g
            _, q, _, ratio = split
            return q // ratio
        return Expr({FloorDiv(self, d): 1}, 0)

    def __mod__(self, m):
        m = size_value(m.const if isinstance(m, Expr) else m)
        if known("==", m, 1):
            return Expr({}, 0)
        if not self.terms:
            return Expr({}, self.const % m)
        if m.__class__ is int and self.const.__class__ is int and not 0 <= self.const < m:
            # (E + k*m) % m == E % m under floor semantics: a constant in [0, m) leaves the
            # dividend non-negative wherever E is (a cat's ``(x - 512) % 256`` is ``x % 256``)
            return Expr(self.terms, self.const % m) % m
        lo, hi = self.bounds()
        nonneg = known(">=", lo, 0)
        if nonneg and known("<", hi, m):
            return self
        # drop terms that are multiples of m (non-negative expressions only; a modulus that is
        # 0 for some sizes, an empty view's, has no multiples to test: its loops never run)
        if nonneg and known(">", m, 0):
            kept = Expr(
                {a: c for a, c in self.terms.items() if not known("==", c % m, 0)}, self.const % m
            )
            klo, khi = kept.bounds()
            if known(">=", klo, 0) and known("<", khi, m):
                return kept
            if kept != self:
                return kept % m
            split = _factor_split(self, m)
            if split is not None:  # (g*Q + R) % (g*m') == g*(Q % m') + R when 0 <= R < g
                g, q, r, ratio = split
                return (q % ratio) * g + r
        return Expr({Mod(self, m): 1}, 0)

    def _single_atom(self):
        """The atom when this expression is exactly one atom (coefficient 1, no constant)."""
        if len(self.terms) != 1 or self.const.__class__ is not int or self.const != 0:
            return None
        ((atom, c),) = self.terms.items()
        return atom if c.__class__ is int and c == 1 else None

    def subs(self, mapping: Mapping) -> Expr:
        """Replace atoms (variables) by expressions or ints."""
        out = Expr({}, self.const)
        for a, c in self.terms.items():
            out = out + a.subs(mapping) * c
        return out


def _factor_split(e: Expr, d: int):
    """``(g, Q, R, d // g)`` with ``e == g*Q + R``, ``g`` a divisor of ``d`` above 1 and
    ``0 <= R < g`` (the largest such ``g``), or None. Reshapes produce these: flattening
    ``[.., n]`` and splitting again by a multiple of ``n`` gives ``(n*i + j) // (n*k)`` with
    ``j < n``, which is ``i // k`` — keeping the inner variable out of the division lets the loop
    stay contiguous (and vectorized). Floor semantics hold for negative ``Q`` too (code
    generators emit floor division and modulo where a dividend may be negative)."""
    import math

    if any(c.__class__ is not int for c in e.terms.values()):
        return _symbolic_factor_split(e, d)
    if d.__class__ is int:
        candidates = sorted({math.gcd(c, d) for c in e.terms.values()}, reverse=True)
    else:  # a symbolic divisor (``1024*s1``): the coefficients that provably divide it
        candidates = sorted(
            {c for c in e.terms.values() if c > 1 and same_size(d // c * c, d)}, reverse=True
        )
    for g in candidates:
        if g <= 1 or (d.__class__ is int and g >= d):
            continue
        big = {a: c // g for a, c in e.terms.items() if c % g == 0}
        if not big:
            continue
        r = Expr({a: c for a, c in e.terms.items() if c % g != 0}, e.const % g)
        rlo, rhi = r.bounds()
        if not (known(">=", rlo, 0) and known("<", rhi, g)):
            continue
        return g, Expr(big, e.const // g), r, d // g
    return None


def _symbolic_factor_split(e: Expr, d):
    """``_factor_split`` where coefficients are symbolic: ``g`` is a coefficient that ``d`` and
    some others are provable whole multiples of (``(X*X*m0 + X*m1 + m2) // (4*X*X)`` over loops
    of sizes ``(4*s0, X, X)`` is ``m0 // 4``). Without it the split stayed standing or not
    depending on the order a view's body built the index, so two kernels with equal bodies over
    their own loops could merge their loops differently."""
    if d.__class__ is int or e.const.__class__ is not int:
        return None
    candidates = {c for c in e.terms.values() if c.__class__ is SymInt}
    for g in sorted(candidates, key=lambda c: -c.hint if c.hint is not None else 0):
        ratio = _whole_multiple(d, g)
        if ratio is None:
            continue
        big = {}
        for a, c in e.terms.items():
            k = _whole_multiple(c, g)
            if k is not None:
                big[a] = k
        r = Expr({a: c for a, c in e.terms.items() if a not in big}, e.const)
        rlo, rhi = r.bounds()
        if big and known(">=", rlo, 0) and known("<", rhi, g):
            return g, Expr(big, 0), r, ratio
    return None


def _whole_multiple(c, g) -> int | None:
    """The positive int ``k`` with ``c == k*g`` for every size (``g`` symbolic), else None. The
    sizes seen propose ``k``; the symbols' algebra must prove it."""
    if c.__class__ is int or c.hint is None or not g.hint or c.hint % g.hint:
        return None
    k = c.hint // g.hint
    return k if k >= 1 and same_size(g * k, c) else None


def _recombine(e: Expr) -> Expr:
    """Undo the split of one index into digits, as a flattened loop's unflattening makes them:
    ``c*(E % a) + c*a*(E // a)`` is ``c*E`` and ``c*(E % a) + c*a*((E // a) % b)`` is
    ``c*(E % (a*b))`` (both for floor and truncating division by positive ``a``, ``b``). Applied
    innermost digit first, ``s1*s2*(f // (s1*s2)) + s2*((f // s2) % s1) + f % s2`` becomes
    ``f``: with symbolic sizes each digit left standing costs a division in every lane."""
    mods = [(a, c) for a, c in e.terms.items() if isinstance(a, Mod)]
    if not mods:
        return e
    for m, c in mods:
        nested = m.expr._single_atom()
        if isinstance(nested, FloorDiv):  # (E // a) % b: its quotient is E // (a*b)
            div = FloorDiv(nested.expr, nested.div * m.mod)
        else:
            div = FloorDiv(m.expr, m.mod)
        coeff = e.terms.get(div)
        if coeff is not None and same_size(coeff, c * m.mod):
            terms = dict(e.terms)
            del terms[m]
            del terms[div]
            return Expr(terms, e.const) + m.expr * c
        for m2, c2 in mods:
            inner = m2.expr._single_atom() if m2 is not m else None
            if (
                isinstance(inner, FloorDiv)
                and inner.expr == m.expr
                and same_size(inner.div, m.mod)
                and same_size(c2, c * m.mod)
            ):
                terms = dict(e.terms)
                del terms[m]
                del terms[m2]
                return Expr(terms, e.const) + (m.expr % (m.mod * m2.mod)) * c
    return e


def const(v: int) -> Expr:
    return Expr({}, int(v))


def _made(terms: dict, const) -> Expr:
    """``Expr(terms, const)`` for terms without a zero coefficient and a constant that is
    already a size value (the arithmetic's hot paths: ``Expr()`` copies and filters)."""
    e = _NEW(Expr)
    e.terms = terms
    e.const = const
    e._hash = None
    return e


_NEW = object.__new__


def as_expr(v) -> Expr:
    cls = v.__class__
    if cls is Expr:
        return v
    if cls is int:
        return _made({}, v)
    if isinstance(v, Expr):
        return v
    if isinstance(v, Atom):
        return Expr({v: 1}, 0)
    return Expr({}, size_value(v))


ZERO = const(0)
ONE = const(1)


def index_key(*indices) -> tuple | None:
    """A hashable stand-in for index lists, for memos of work done on them: equal keys mean the
    very same expressions over loop variables of the same names *and sizes* (``Var`` compares
    by name alone, and a size can change what a simplification may do). Plain ints, constants
    and affine expressions over such variables, and over their floor divisions and moduli by
    plain ints (a pooling's or a reshape's index), have one; anything else (an indirect index,
    a symbolic size) gives None: not remembered."""
    key: list = []
    for index in indices:
        for v in index or ():
            cls = v.__class__
            if cls is Var:
                if v.size.__class__ is not int:
                    return None
                key.append((v.name, v.size))
            elif cls is int:
                key.append(v)
            elif cls is Expr:
                v = _expr_key(v)
                if v is None:
                    return None
                key.append(v)
            else:
                return None
        key.append(None)  # where one list ends
    return tuple(key)


def _expr_key(e: Expr) -> tuple | None:
    """``index_key``'s part for one expression: ``(constant, frozenset of terms)``, a term
    ``(name, size, coefficient)`` for a variable and ``(atom's key, coefficient)`` for a
    division or modulo, whose key is ``("//" or "%", its expression's key, divisor)``.

    Kept on the expression: the bodies' loaders hand the same expressions on from view to view
    and the memos ask for each again (a ResNet training step's compile asked ~36k times for
    ~5k expressions)."""
    try:
        return e._index_key
    except AttributeError:
        pass
    e._index_key = key = _new_expr_key(e)
    return key


def _new_expr_key(e: Expr) -> tuple | None:
    if e.const.__class__ is not int:
        return None
    terms = []
    for a, c in e.terms.items():
        if c.__class__ is not int:
            return None
        cls = a.__class__
        if cls is Var:
            if a.size.__class__ is not int:
                return None
            terms.append((a.name, a.size, c))
            continue
        if cls is FloorDiv:
            op, divisor = "//", a.div
        elif cls is Mod:
            op, divisor = "%", a.mod
        else:
            return None
        inner = _expr_key(a.expr)
        if inner is None or divisor.__class__ is not int:
            return None
        terms.append(((op, inner, divisor), c))
    return (e.const, frozenset(terms))
