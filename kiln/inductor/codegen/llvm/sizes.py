"""Sizes as IR values: plain ints become constants, symbolic ones are computed from the symbols.

A kernel compiled for every size (``symbolic_compile``) reads its size symbols' values from an
int64 array whose pointer follows the buffer pointers; ``SizeValues`` emits each size expression
(``s0``, ``8*s0*s1``, ``(s1 + 4095) // 4096``) once, in the kernel's entry block, so loop bounds,
strides and clamps use it wherever the loops need it.
"""

from __future__ import annotations

from llvmlite import ir

from ....runtime import sym_expr
from ....runtime.symbolic import SymInt, fold_pinned
from .values import int_vector

__all__ = ["SizeValues"]

I64 = ir.IntType(64)
_NSW = ("nsw",)  # sizes and strides are far from 2**63: telling LLVM lets it reason on them


class SizeValues:
    """The i64 values of a kernel's sizes (see the module docstring).

    ``builder`` emits into ``function``; ``symbols_pointer()`` gives the i64* of the symbol
    array (loaded on first need); ``symbols`` orders the symbols as the array holds them."""

    def __init__(self, builder: ir.IRBuilder, function: ir.Function, symbols_pointer, symbols):
        self.b = builder
        self.function = function
        self.symbols_pointer = symbols_pointer
        self.index = {s: k for k, s in enumerate(symbols)}
        self._values: dict = {}

    def value(self, size) -> ir.Value:
        """An i64 for ``size`` (an int or a ``SymInt``; a pinned symbol is its constant)."""
        size = fold_pinned(size)
        if size.__class__ is not SymInt:
            return ir.Constant(I64, int(size))
        expr = size.expr
        v = self._values.get(expr.key())
        if v is None:
            pointer = self.symbols_pointer()  # positions the builder itself: not nested below
            with self.b.goto_block(self.function.entry_basic_block):
                v = self._expr(expr, pointer)
            self._values[expr.key()] = v
        return v

    def vector(self, size, lanes: int) -> ir.Value:
        """``size`` in every lane of a ``<lanes x i64>``."""
        size = fold_pinned(size)
        if size.__class__ is not SymInt:
            return int_vector(I64, [int(size)] * lanes)
        b = self.b
        undef = ir.Constant(ir.VectorType(I64, lanes), ir.Undefined)
        v = b.insert_element(undef, self.value(size), ir.Constant(ir.IntType(32), 0))
        mask = ir.Constant(ir.VectorType(ir.IntType(32), lanes), [0] * lanes)
        return b.shuffle_vector(v, undef, mask)

    def _expr(self, expr: sym_expr.Expr, pointer) -> ir.Value:
        b = self.b
        out = ir.Constant(I64, int(expr.const))
        for monomial, coeff in expr.terms.items():
            term = None
            for atom in monomial:
                v = self._atom(atom, pointer)
                term = v if term is None else b.mul(term, v, flags=_NSW)
            if coeff != 1:
                term = b.mul(term, ir.Constant(I64, int(coeff)), flags=_NSW)
            zero = isinstance(out, ir.Constant) and out.constant == 0
            out = term if zero else b.add(out, term, flags=_NSW)
        return out

    def _atom(self, atom, pointer) -> ir.Value:
        b = self.b
        if isinstance(atom, sym_expr.Symbol):
            if atom not in self.index:
                raise KeyError(f"size symbol {atom.name} is not an argument of this kernel")
            ptr = b.gep(pointer, [ir.Constant(I64, self.index[atom])])
            return b.load(ptr, name=atom.name)
        a, d = self._expr(atom.a, pointer), self._expr(atom.b, pointer)
        if isinstance(atom, (sym_expr.Max, sym_expr.Min)):
            op = ">" if isinstance(atom, sym_expr.Max) else "<"
            return b.select(b.icmp_signed(op, a, d), a, d)
        # Python's floor division and modulo (the divisor's sign) from the truncating ones
        q, r = b.sdiv(a, d), b.srem(a, d)
        zero = ir.Constant(I64, 0)
        fix = b.and_(
            b.icmp_signed("!=", r, zero),
            b.icmp_signed("!=", b.icmp_signed("<", r, zero), b.icmp_signed("<", d, zero)),
        )
        if isinstance(atom, sym_expr.FloorDiv):
            return b.sub(q, b.zext(fix, I64))
        return b.select(fix, b.add(r, d), r)
