"""Transposing copies compiled once for every size: one kernel per element width, its sizes and
strides read at run time.

A copy that only changes a layout (a convolution's weight put in (C, KH, KW, O) order, an output
gradient made channels-last for the channels-last weight gradient, that gradient put back in
the weight's order, a permute made contiguous) is scheduled as a kernel of its own at each
layer's sizes, and each was emitted and optimized by LLVM on its own: resnet18's training step
had nine of them (about 25 KB of IR and 22 ms of LLVM each, 0.2 s of the step's 2 s of LLVM
CPU). Once the dims that move together are merged, every one of them is

    out[b, r, c] = in[offset + b * batch_stride + r + c * column_stride]

over a contiguous ``out`` of shape (B, R, C) (B = 1 for a plain transpose), so one kernel serves
them all: ``(B, R, C, offset, batch_stride, column_stride)`` come in an int64 array whose
pointer follows the two buffer pointers (``RowKernel.sizes``). A row is one ``b`` and ``TILE``
values of ``r``: ``TILE`` x ``TILE`` tiles loaded along ``r`` and transposed in registers as
``transpose_tiles`` does, scalar copies for the columns and rows the tiles leave.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
from llvmlite import ir

from ... import sym
from ...ir import Pointwise
from ..body_trace import NotRecordable, Token, record
from .ir_loops import load, store
from .transpose_tiles import interleave_transpose
from .values import I8, I64

__all__ = ["TransposingCopy", "transposing_copy", "copy_ir"]

# element widths (bytes) the kernel is built for: a copy moves bits, whatever the dtype
_WIDTHS = (1, 2, 4, 8)

# the side of a tile transposed in registers
TILE = 8


@dataclass(frozen=True)
class TransposingCopy:
    """A kernel found to be a transposing copy: what its call needs (the plan of a kernel run
    by ``copy_ir``'s code, in place of ``loop_plan``'s)."""

    source: str  # the buffer read
    target: str  # the buffer written
    width: int  # bytes per element
    sizes: tuple  # (B, R, C, offset, batch_stride, column_stride)

    @property
    def rows(self) -> int:
        batch, rows = self.sizes[0], self.sizes[1]
        return batch * -(-rows // TILE)


def transposing_copy(kernel, dtypes: dict) -> TransposingCopy | None:
    """``kernel`` (a scheduled ``Kernel``) as a transposing copy, or None where it is anything
    else: one pointwise node of static sizes stored densely in its own memory, whose body loads
    one buffer of its dtype and returns the value, at an index that is, after merging dims,
    ``(b, r, c) -> offset + b * sb + r + c * sc`` with ``c`` not contiguous."""
    if len(kernel.nodes) != 1 or kernel.locals or kernel.aliases or kernel.inner:
        return None
    node = kernel.nodes[0]
    if not isinstance(node.data, Pointwise) or sym.is_symbolic(tuple(kernel.outer)):
        return None
    width = np.dtype(node.dtype.np).itemsize
    if width not in _WIDTHS or not node.layout.is_contiguous():
        return None
    outer = tuple(kernel.outer)
    loop_vars = [sym.Var(f"o{i}", s) for i, s in enumerate(outer)]
    index, _ = kernel.node_vars(node, loop_vars, [])
    try:
        trace = record(node, index, [])
    except NotRecordable:
        return None
    if len(trace.calls) != 1 or trace.result.__class__ is not Token:
        return None
    op, args, kwargs, _ = trace.calls[0]
    if op != "load" or kwargs or dtypes.get(args[0]) != node.dtype:
        return None
    stored = node.layout.offset_expr(index)
    read = sym.as_expr(args[1])
    dims = _merged(outer, loop_vars, stored, read)
    if dims is None:
        return None
    offset = read.const
    if len(dims) == 2:
        dims = [(1, 0), *dims]
    if len(dims) != 3 or dims[1][1] != 1 or dims[2][1] in (0, 1) or offset.__class__ is not int:
        return None
    (batch, batch_stride), (rows, _), (columns, column_stride) = dims
    sizes = (batch, rows, columns, offset, batch_stride, column_stride)
    return TransposingCopy(args[0], node.name, width, sizes)


def _merged(outer: tuple, loop_vars: list, stored: sym.Expr, read: sym.Expr) -> list | None:
    """``[(size, read stride)]`` of the kernel's dims of size > 1, adjacent ones merged where
    the read moves over them as over one; None unless the store is dense in the loops' order
    and the read is a sum of loop variables by positive integer strides."""
    if set(read.terms) - set(loop_vars) or set(stored.terms) - set(loop_vars):
        return None
    if stored.const != 0 or any(c.__class__ is not int or c <= 0 for c in read.terms.values()):
        return None
    dims: list = []
    dense = 1
    for size, var in reversed(list(zip(outer, loop_vars))):
        if size == 1:
            continue
        if stored.terms.get(var) != dense:
            return None
        dense *= size
        stride = read.terms.get(var, 0)
        if stride == 0:
            return None  # a broadcast read: not a copy of one element per element
        if dims and stride == dims[0][1] * dims[0][0]:  # goes on where the next dim ends
            dims[0] = (size * dims[0][0], dims[0][1])
        else:
            dims.insert(0, (size, stride))
    return dims


@functools.cache
def copy_ir(width: int, triple: str) -> str:
    """The LLVM IR of the copy kernel for elements of ``width`` bytes (function ``kernel``)."""
    element = ir.IntType(8 * width)
    module = ir.Module(name="kiln_transposing_copy")
    module.triple = triple
    pointers = I8.as_pointer().as_pointer()
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [I64, I64, pointers]), "kernel")
    start, end, args = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))

    def argument(k: int, pointee):
        return b.bitcast(b.load(b.gep(args, [ir.Constant(I64, k)])), pointee.as_pointer())

    source, target, sizes = argument(0, element), argument(1, element), argument(2, I64)
    batch_size, rows, columns, offset, batch_stride, column_stride = (
        b.load(b.gep(sizes, [ir.Constant(I64, k)]), name=name)
        for k, name in enumerate(("B", "R", "C", "offset", "sb", "sc"))
    )
    lanes = ir.Constant(I64, TILE)
    blocks = b.udiv(b.add(rows, ir.Constant(I64, TILE - 1)), lanes)
    whole_columns = b.and_(columns, ir.Constant(I64, -TILE))

    def copy_one(read_base, write_base, r, c):
        value = load(b, source, b.add(read_base, b.add(b.mul(c, column_stride), r)), 1)
        store(b, value, target, b.add(write_base, b.add(b.mul(r, columns), c)), 1)

    def row(q):
        sample = b.udiv(q, blocks)
        r0 = b.mul(b.urem(q, blocks), lanes)
        read_base = b.add(b.add(offset, b.mul(sample, batch_stride)), r0)
        write_base = b.mul(b.add(b.mul(sample, rows), r0), columns)
        whole = b.icmp_signed("<=", b.add(r0, lanes), rows)
        with b.if_else(whole) as (tiles, edge):
            with tiles:

                def tile(c0):
                    vectors = [
                        load(
                            b,
                            source,
                            b.add(read_base, b.mul(b.add(c0, _i64(k)), column_stride)),
                            TILE,
                        )  # fmt: skip
                        for k in range(TILE)
                    ]
                    for m, column in enumerate(interleave_transpose(b, vectors)):
                        at = b.add(write_base, b.add(b.mul(_i64(m), columns), c0))
                        store(b, column, target, at, TILE)

                counted_loop(b, whole_columns, tile, step=TILE)

                def column_tail(c):
                    counted_loop(b, lanes, lambda r: copy_one(read_base, write_base, r, c))

                counted_loop(b, columns, column_tail, start=whole_columns)
            with edge:
                left = b.sub(rows, r0)
                counted_loop(
                    b,
                    left,
                    lambda r: counted_loop(
                        b, columns, lambda c: copy_one(read_base, write_base, r, c)
                    ),
                )

    counted_loop(b, end, row, start=start)
    b.ret_void()
    return str(module)


def _i64(v: int) -> ir.Constant:
    return ir.Constant(I64, v)


def counted_loop(b: ir.IRBuilder, count, body, start=None, step: int = 1) -> None:
    """``ir_loops.counted_loop`` with LLVM's unroller asked to leave the loop alone."""
    fn = b.function
    head, loop, done = (fn.append_basic_block(n) for n in ("head", "body", "done"))
    before = b.block
    b.branch(head)
    b.position_at_end(head)
    i = b.phi(I64)
    i.add_incoming(_i64(0) if start is None else start, before)
    b.cbranch(b.icmp_signed("<", i, count), loop, done)
    b.position_at_end(loop)
    body(i)
    i.add_incoming(b.add(i, _i64(step)), b.block)
    latch = b.branch(head)
    module = fn.module
    hint = module.add_metadata([ir.MetaDataString(module, "llvm.loop.unroll.disable")])
    loop_id = ir.values.MDValue(module, [hint], name=str(len(module.metadata)))
    loop_id.operands = (loop_id, hint)
    latch.set_metadata("llvm.loop", loop_id)
    b.position_at_end(done)
