"""Machine code for small float32 row sums added in PyTorch's order (``ops/reductions/sum_order``).

Small sums (``layer_norm``'s and ``softmax``'s rows, a loss's mean) are replayed in PyTorch's
addition order so they print PyTorch's digits; in numpy that replay is a dozen array calls, 30 us
for an 8x16 block against 3 us for numpy's own sum, paid twice by every small ``layer_norm``. Here
each row is one loop doing the additions ``sum_order._contiguous_rows`` does, the 32 running sums
as four 8-lane vectors (PyTorch's own vectors: a 256 x 256 ``x.sum(-1)`` in 4 us, where numpy's
pairwise sums take 15-30 us, so larger tensors take these rows too):

- fewer than 8 elements: added in sequence (for 5-7 elements the first, then the fifth on, then
  the second to fourth, as PyTorch's four interleaved partial sums leave them), then + 0.0;
- otherwise 8-lane vectors: 32 running sums over whole groups of four vectors (then + 0.0), the
  first 8 taking the remaining vectors, the four partial vectors combined in order, and from +0.0
  the scalar tail followed by the 8 lanes.

Rows of 512 elements or more (where PyTorch's cascade starts) stay with the numpy replay.
"""

from __future__ import annotations

import ctypes

import numpy as np
from llvmlite import ir

from .ir_loops import counted_loop, load
from .jit import compile_module, data_address
from .values import F32, I32, I64

__all__ = ["MAX_ROW", "NativeSums", "build"]

MAX_ROW = 512  # elements per row below which no cascade block completes
_VOID = ir.VoidType()
_VECTOR = ir.VectorType(F32, 8)


def _module() -> ir.Module:
    module = ir.Module(name="kiln_eager_sums")
    f32p = F32.as_pointer()
    fn = ir.Function(
        module, ir.FunctionType(_VOID, [I64, I64, f32p, f32p]), "kiln_torch_order_rows"
    )
    rows, n, x, out = fn.args
    for p in (x, out):
        p.add_attribute("noalias")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    # in the entry block, one slot for every row: the running sum and the four 8-lane vectors
    # of partial sums (registers once LLVM promotes them)
    total = b.alloca(F32)
    partials = [b.alloca(_VECTOR) for _ in range(4)]
    zero_vector = ir.Constant(_VECTOR, [0.0] * 8)

    def i64(v: int) -> ir.Constant:
        return ir.Constant(I64, v)

    zero_f = ir.Constant(F32, 0.0)

    def at(base, offset):
        return b.load(b.gep(x, [b.add(base, offset)]))

    def vector_at(base, offset: int):
        return load(b, x, b.add(base, i64(offset)), 8)

    def row(r):
        base = b.mul(r, n)
        short = b.icmp_signed("<", n, i64(8))
        with b.if_else(short) as (then, otherwise):
            with then:
                # position j of the order: 0, then 4 .. n-1, then 1, 2, 3 (identity for n <= 4)
                lead = b.sub(n, i64(4))  # positions 1 .. n-4 read elements 4 .. n-1

                def order(j):
                    if_reordered = b.icmp_signed(">", n, i64(4))
                    middle = b.icmp_signed("<=", j, lead)
                    reordered = b.select(middle, b.add(j, i64(3)), b.sub(j, lead))
                    picked = b.select(if_reordered, reordered, j)
                    return b.select(b.icmp_signed("==", j, i64(0)), i64(0), picked)

                b.store(at(base, i64(0)), total)
                counted_loop(
                    b,
                    n,
                    lambda j: b.store(b.fadd(b.load(total), at(base, order(j))), total),
                    start=i64(1),
                )
                b.store(b.fadd(b.load(total), zero_f), b.gep(out, [r]))
            with otherwise:
                count = b.lshr(n, i64(3))
                whole = b.lshr(count, i64(2))
                has_groups = b.icmp_signed(">", whole, i64(0))
                for slot in partials:  # no groups: the first vector starts from +0.0
                    b.store(zero_vector, slot)

                def group(g):  # four 8-lane running sums over a group of 32 elements
                    start = b.add(base, b.mul(g, i64(32)))
                    for part, slot in enumerate(partials):
                        b.store(b.fadd(b.load(slot), vector_at(start, part * 8)), slot)

                with b.if_then(has_groups):
                    for part, slot in enumerate(partials):
                        b.store(vector_at(base, part * 8), slot)
                    counted_loop(b, whole, group, start=i64(1))
                    for slot in partials:
                        b.store(b.fadd(b.load(slot), zero_vector), slot)

                first = partials[0]

                def vector(k):
                    b.store(
                        b.fadd(b.load(first), vector_at(b.add(base, b.mul(k, i64(8))), 0)), first
                    )

                counted_loop(b, count, vector, start=b.mul(whole, i64(4)))
                with b.if_then(has_groups):
                    combined = b.load(first)
                    for slot in partials[1:]:
                        combined = b.fadd(combined, b.load(slot))
                    b.store(combined, first)
                b.store(zero_f, total)
                counted_loop(
                    b,
                    n,
                    lambda t: b.store(b.fadd(b.load(total), at(base, t)), total),
                    start=b.mul(count, i64(8)),
                )
                lanes = b.load(first)
                value = b.load(total)
                for lane in range(8):
                    value = b.fadd(value, b.extract_element(lanes, ir.Constant(I32, lane)))
                b.store(value, b.gep(out, [r]))

    counted_loop(b, rows, row)
    b.ret_void()
    return module


class NativeSums:
    """``rows(block)``: the float32 sums of a C-contiguous (rows, n) float32 block."""

    def __init__(self, compiled):
        self._rows = compiled.cfunc(
            "kiln_torch_order_rows", None, ctypes.c_int64, ctypes.c_int64, *[ctypes.c_void_p] * 2
        )

    def rows(self, block: np.ndarray) -> np.ndarray | None:
        """The sums, or None for rows of ``MAX_ROW`` or more (the caller replays those)."""
        rows, n = block.shape
        if n >= MAX_ROW:
            return None
        out = np.empty(rows, np.float32)
        self._rows(rows, n, data_address(block), data_address(out))
        return out


def build() -> NativeSums:
    """Compile (or load from the object cache) the row sums."""
    return NativeSums(compile_module(_module(), opt_level=3))
