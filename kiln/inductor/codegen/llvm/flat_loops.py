"""Loops over one flat, contiguous range for the eager machine-code helpers (random draws,
dtype casts): a vector body over whole vectors and a scalar tail, with the loads, stores and
splats such bodies need. Compiled kernels plan their own loops (``loop_plan.py``); these helpers
serve functions whose only shape is a length."""

from __future__ import annotations

from collections.abc import Callable

from llvmlite import ir

from .ops_handler import LLVMOps
from .values import I32, I64

__all__ = [
    "LANES", "counted_loop", "flat_loop", "float_ops", "load", "splat", "store", "vector_loop",
]  # fmt: skip

LANES = 8  # elements per vector iteration: eight 32-bit values fill one AVX2 register


def flat_loop(
    fn: ir.Function,
    n: ir.Value,
    body: Callable[[ir.IRBuilder, ir.Value, int], None],
    lanes: int = LANES,
) -> None:
    """Give ``fn`` a body that calls ``body(builder, index, lanes)`` for index = 0, L, 2L, ...
    while a whole vector of ``lanes`` fits, then once per remaining element with lanes = 1,
    and returns."""
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    whole = b.and_(n, ir.Constant(I64, -lanes))
    counted_loop(b, whole, lambda i: body(b, i, lanes), step=lanes)
    counted_loop(b, n, lambda i: body(b, i, 1), start=whole)
    b.ret_void()


def vector_loop(
    b: ir.IRBuilder,
    n: ir.Value,
    body: Callable[[LLVMOps, ir.Value, int], None],
    lanes: int = LANES,
) -> None:
    """``body(ops, index, lanes)`` over 0 .. n - 1 from the builder's current block: whole
    vectors of ``lanes`` (a power of two), then the scalar tail, each with the ``float_ops``
    of its width. An elementwise body gives the same bits at any width; reductions fold their
    lanes, so their sets keep ``LANES``."""
    ops = {lanes: float_ops(b, lanes), 1: float_ops(b, 1)}
    whole = b.and_(n, ir.Constant(I64, -lanes))
    counted_loop(b, whole, lambda i: body(ops[lanes], i, lanes), step=lanes)
    counted_loop(b, n, lambda i: body(ops[1], i, 1), start=whole)


class _BuilderOnly:
    """What ``LLVMOps`` asks of an emitter for plain float math: the builder."""

    def __init__(self, builder: ir.IRBuilder):
        self.builder = builder


def float_ops(b: ir.IRBuilder, lanes: int) -> LLVMOps:
    """The compiled kernels' ops handler over ``b`` for plain float math of ``lanes`` lanes (no
    buffers, no loop variables)."""
    return LLVMOps(_BuilderOnly(b), lanes, {})


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
