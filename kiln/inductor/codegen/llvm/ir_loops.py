"""Builder-level pieces of hand-written LLVM loops: a counted loop, vector loads and stores at an
element index, a splat. They need nothing but a builder, so machine code that the lowering
reaches (``channels_last_weight_grad``) builds on them without the ops handler that
``flat_loops`` adds on top."""

from __future__ import annotations

from collections.abc import Callable

from llvmlite import ir

from .values import I32, I64

__all__ = ["counted_loop", "load", "splat", "store"]


def splat(b: ir.IRBuilder, value: ir.Value, lanes: int) -> ir.Value:
    """``value`` in every lane (itself for scalar code)."""
    if lanes == 1:
        return value
    vec = ir.VectorType(value.type, lanes)
    one = b.insert_element(ir.Constant(vec, ir.Undefined), value, ir.Constant(I32, 0))
    zeros = ir.Constant(ir.VectorType(I32, lanes), [0] * lanes)
    return b.shuffle_vector(one, ir.Constant(vec, ir.Undefined), zeros)


def _pointer(b: ir.IRBuilder, base: ir.Value, i: ir.Value, lanes: int) -> ir.Value:
    ptr = b.gep(base, [i])
    if lanes > 1:
        ptr = b.bitcast(ptr, ir.VectorType(base.type.pointee, lanes).as_pointer())
    return ptr


def _element_bytes(t: ir.Type) -> int:
    if isinstance(t, ir.IntType):
        return max(1, t.width // 8)
    return {ir.HalfType: 2, ir.FloatType: 4, ir.DoubleType: 8}[type(t)]


def load(b: ir.IRBuilder, base: ir.Value, i: ir.Value, lanes: int) -> ir.Value:
    """Elements i .. i + lanes - 1 of the array at ``base`` (aligned to its element only)."""
    return b.load(_pointer(b, base, i, lanes), align=_element_bytes(base.type.pointee))


def store(b: ir.IRBuilder, value: ir.Value, base: ir.Value, i: ir.Value, lanes: int) -> None:
    """Write ``value`` (``lanes`` elements) at elements i .. of the array at ``base``."""
    b.store(value, _pointer(b, base, i, lanes), align=_element_bytes(base.type.pointee))


def counted_loop(
    b: ir.IRBuilder,
    count: ir.Value,
    body: Callable[[ir.Value], None],
    start: ir.Value | None = None,
    step: int = 1,
) -> None:
    """``for i in range(start, count, step): body(i)`` (start 0 by default), in new blocks after
    the builder's current one; the builder is left after the loop."""
    fn = b.function
    head = fn.append_basic_block("head")
    loop = fn.append_basic_block("body")
    done = fn.append_basic_block("done")
    before = b.block
    b.branch(head)
    b.position_at_end(head)
    i = b.phi(I64)
    i.add_incoming(ir.Constant(I64, 0) if start is None else start, before)
    b.cbranch(b.icmp_signed("<", i, count), loop, done)
    b.position_at_end(loop)
    body(i)
    i.add_incoming(b.add(i, ir.Constant(I64, step)), b.block)
    b.branch(head)
    b.position_at_end(done)
