"""Loops over one flat, contiguous range for the eager machine-code helpers (random draws,
dtype casts): a vector body over whole vectors and a scalar tail, with the loads, stores and
splats such bodies need. Compiled kernels plan their own loops (``loop_plan.py``); these helpers
serve functions whose only shape is a length."""

from __future__ import annotations

from collections.abc import Callable

from llvmlite import ir

from .ir_loops import counted_loop, load, splat, store
from .ops_handler import LLVMOps
from .values import I64

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
