"""Transposing copies in LLVM: ``KernelEmitter``'s tiles for loads that run across its lanes.

A pointwise kernel's vector lanes walk its last dimension ``j``; an input read with a stride
along ``j`` (a weight permuted for a convolution, a tensor turned channels-last, the transpose
of a matrix) is then gathered, one element and one cache line per lane. Worse, a power-of-two
stride maps every lane's line to the same few sets of the L1 cache: a compiled
``w.permute(1, 2, 3, 0).contiguous()`` of a 64x32x4x4 weight moved 1.8 GB/s (70 us, against
3 us for a plain copy of it), and such copies are a sixth of a compiled DCGAN step.

When that input is contiguous along the innermost row variable ``r`` instead, the kernel takes
rows ``LANES`` at a time: per step of ``j`` it loads ``LANES`` vectors along ``r`` (whole cache
lines), transposes them in registers (``log2(LANES)`` rounds of interleaving shuffles, one
instruction each on AVX-512) and runs the body of each of the tile's rows with its column in
place of the gather (``LLVMOps.forwarded``). Rows a tile does not cover (a thread's range
starting mid-tile, the end of ``r``) run the usual loop. The body is replayed once per row of
a tile, so only cheap bodies (no vector math functions, at most a few nodes) are tiled.
"""

from __future__ import annotations

from dataclasses import dataclass

from llvmlite import ir

from ... import sym
from ...dependencies import reads_of
from ...ir import Reduction
from .loop_plan import InnerLoop
from .ops_handler import LLVMOps
from .values import LANES, V, memory_type

__all__ = ["TileEmitter", "TransposeTile"]

I1 = ir.IntType(1)
I32 = ir.IntType(32)
I64 = ir.IntType(64)
_NSW = ("nsw",)

# a tiled body is emitted once per row of the tile: kernels of more nodes keep the gathers
MAX_TILED_NODES = 3


@dataclass(frozen=True)
class TransposeTile:
    row_var: sym.Var  # the innermost row variable, along which the loads are contiguous
    loads: tuple  # (buffer name, index expression) read across the lanes, one per buffer


def interleave_transpose(builder: ir.IRBuilder, rows: list) -> list:
    """The columns of the square matrix whose rows are the vectors ``rows`` (as many as each
    has lanes, a power of two): ``log2(n)`` rounds, each pairing row ``i`` with row
    ``i + n / 2`` into their interleaved low and high halves."""
    n = len(rows)
    half = n // 2
    low = ir.Constant(ir.VectorType(I32, n), [k // 2 + (n if k % 2 else 0) for k in range(n)])
    high = ir.Constant(
        ir.VectorType(I32, n), [half + k // 2 + (n if k % 2 else 0) for k in range(n)]
    )
    for _ in range(n.bit_length() - 1):
        mixed = []
        for i in range(half):
            a, b = rows[i], rows[i + half]
            mixed.append(builder.shuffle_vector(a, b, low))
            mixed.append(builder.shuffle_vector(a, b, high))
        rows = mixed
    return rows


class TileEmitter:
    """Mixin of ``llvm.KernelEmitter`` (its builder, plan, ``loop``, ``row_env``,
    ``emit_index``, ``body_value``, ``finish_value``, ``pointer``)."""

    def transpose_tile(self) -> TransposeTile | None:
        """The tile plan of this kernel, or None where its loops stay as they are: a pointwise
        kernel of static sizes with one vectorized inner loop of whole vectors, rows of at
        least ``LANES`` along its innermost row variable, and an input that moves by a
        constant stride (not 0 or 1) along ``j`` and by 1 along that row variable. (The
        caller also leaves bodies with vector math functions untiled.)"""
        plan = self.plan
        j = self.j
        if (
            LANES < 4
            or self._memo is None  # sizes of a symbolic kernel: not tiled
            or j is None
            or plan.chunked
            or plan.columns is not None
            or plan.rq
            or not plan.row_vars
            or len(plan.steps) != 1
        ):
            return None
        step = plan.steps[0]
        if not isinstance(step, InnerLoop) or not step.vectorize:
            return None
        inner, r = plan.inner_size, plan.row_vars[-1]
        if not isinstance(inner, int) or inner % LANES or not isinstance(r.size, int):
            return None
        if r.size < LANES or len(step.nodes) > MAX_TILED_NODES:
            return None
        if any(isinstance(n.data, Reduction) for n in step.nodes):
            return None
        produced = {n.name for n in step.nodes}
        loads: dict = {}
        for n in step.nodes:
            if n.name in self.local_names:
                return None
            index, rindex = plan.node_index[n.name]
            if n.layout.offset_expr(index).coeff(j) != 1:
                return None  # stores across the lanes: not a copy into a contiguous output
            for read in reads_of(n, index, rindex):
                if read.name in produced or read.name in loads:
                    continue
                if self._tileable(read.name, read.index, r):
                    loads[read.name] = read.index
        if not loads:
            return None
        return TransposeTile(r, tuple(loads.items()))

    def _tileable(self, name: str, expr: sym.Expr, r: sym.Var) -> bool:
        j = self.j
        if any(not isinstance(a, sym.Var) for a in expr.atoms()):
            return False  # divisions, remainders, indirect indices
        step = expr.coeff(j)
        if not isinstance(step, int) or step in (0, 1) or expr.coeff(r) != 1:
            return False
        lo, hi = self.index_bounds(expr)
        size = self.buffer_sizes.get(name)
        return sym.known(">=", lo, 0) and (size is None or sym.known("<", hi, size))

    def tiled_row_loop(self, tile: TransposeTile, row_body) -> None:
        """Rows ``[start, end)``: a tile of ``LANES`` rows where one starts at a multiple of
        ``LANES`` along the row variable and fits in it and in the range, else one row."""
        b = self.builder
        r = tile.row_var
        pre = b.block
        head = self.function.append_basic_block("tile_row_head")
        check = self.function.append_basic_block("tile_row_check")
        tiled = self.function.append_basic_block("tile_rows")
        single = self.function.append_basic_block("tile_single_row")
        done = self.function.append_basic_block("tile_row_done")
        b.branch(head)
        b.position_at_end(head)
        row = b.phi(I64, "row")
        row.add_incoming(self.start, pre)
        b.cbranch(b.icmp_signed("<", row, self.end), check, done)

        b.position_at_end(check)
        lanes = ir.Constant(I64, LANES)
        along = b.srem(row, ir.Constant(I64, r.size))
        aligned = b.icmp_signed(
            "==", b.and_(along, ir.Constant(I64, LANES - 1)), ir.Constant(I64, 0)
        )
        fits_r = b.icmp_signed("<=", b.add(along, lanes, flags=_NSW), ir.Constant(I64, r.size))
        after = b.add(row, lanes, flags=_NSW)
        fits_range = b.icmp_signed("<=", after, self.end)
        b.cbranch(b.and_(aligned, b.and_(fits_r, fits_range)), tiled, single)

        b.position_at_end(tiled)
        self._emit_tile(tile, row)
        row.add_incoming(after, b.block)
        b.branch(head)

        b.position_at_end(single)
        row_body(row)
        row.add_incoming(b.add(row, ir.Constant(I64, 1), flags=_NSW), b.block)
        b.branch(head)
        b.position_at_end(done)

    def _emit_tile(self, tile: TransposeTile, row) -> None:
        b = self.builder
        plan = self.plan
        step = plan.steps[0]
        j, r = self.j, tile.row_var
        first = self.row_env(row, plan)
        self.locals = {}
        envs = []
        for k in range(LANES):
            env = dict(first)
            if k:
                env[r] = b.add(first[r], ir.Constant(I64, k), flags=_NSW)
            envs.append(env)

        def body(i):
            columns = {}
            for name, expr in tile.loads:
                d = self.buffer_dtypes[name]
                vector = ir.VectorType(memory_type(d), LANES).as_pointer()
                # row t of the tile starts ``t`` steps of j after row 0's: one index, then adds
                base = self.emit_index(expr, {**first, j: i}, 1)
                stride = expr.coeff(j)
                rows = []
                for t in range(LANES):
                    offset = (
                        base if not t else b.add(base, ir.Constant(I64, t * stride), flags=_NSW)
                    )
                    pointer = b.bitcast(b.gep(self.pointer(name), [offset]), vector)
                    rows.append(b.load(pointer, align=d.itemsize))
                columns[name] = (interleave_transpose(b, rows), d, expr)
            for k, env in enumerate(envs):
                handler = LLVMOps(self, LANES, {**env, j: i})
                for name, (cols, d, expr) in columns.items():
                    handler.forwarded[name] = (expr, V(handler._from_memory(cols[k], d), d))
                for n in step.nodes:
                    index, _ = plan.node_index[n.name]
                    value = self.body_value(n, handler)
                    self.finish_value(n, value, index, handler, LANES)

        self.loop(ir.Constant(I64, plan.inner_size), body, "tile_vec", step=LANES, unroll=False)
