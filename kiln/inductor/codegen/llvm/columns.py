"""Column reductions in LLVM: ``KernelEmitter``'s code for ``loop_plan._column_plan`` plans.

A row of such a plan is a block of outputs whose innermost dimension is contiguous in memory.
Each reduction keeps one accumulator per output of the block (``col_slots``: a small array that
stays in L1); the reduction loop runs around a vector loop over the block's outputs, so every
load is a contiguous vector — where the usual loops would gather one element per lane, a
cache line per element, when reducing over a strided dimension (``x.sum(0)``). Per-output
pointwise work after the reductions runs vectorized over the block too. Locals of the kernel
(values only this kernel reads) live in their slots; ``LLVMOps.load`` reads them from there.
"""

from __future__ import annotations

from llvmlite import ir

from ...ir import Reduction
from ...virtualized import set_ops_handler
from ..body_trace import NotRecordable, record, replay
from .loop_plan import InnerLoop
from .ops_handler import LLVMOps
from .values import LANES, V, llvm_type, reduction_identity

__all__ = ["ColumnEmitter"]

I32 = ir.IntType(32)
I64 = ir.IntType(64)


class ColumnEmitter:
    """Mixin of ``llvm.KernelEmitter`` (its builder, plan, ``traces``, ``loop``, ``store``,
    ``_combine``)."""

    def trace_of(self, n):
        """``n``'s body over the plan's index for it as recorded ops calls (``body_trace``),
        recorded on first use; None for a body that cannot be recorded."""
        trace = self.traces.get(n.name)
        if trace is None and n.name not in self.traces:
            index, rindex = self.plan.node_index[n.name]
            try:
                trace = record(n, index, rindex)
            except NotRecordable:
                trace = None
            self.traces[n.name] = trace
        return trace

    def body_value(self, n, handler):
        """``n``'s body emitted by ``handler``: its record replayed, or (a body that cannot be
        recorded) run directly."""
        trace = self.trace_of(n)
        if trace is not None:
            return replay(trace, handler)
        index, rindex = self.plan.node_index[n.name]
        with set_ops_handler(handler):
            if isinstance(n.data, Reduction):
                return n.data.inner_fn(index, rindex)
            return n.data.inner_fn(index)

    def emit_columns(self):
        """Rows are blocks of columns; per block, every reduction keeps one accumulator per
        column (``col_slots``, a small array that stays in L1) and the reduction loop runs
        outside a vector loop over the block's columns (see ``loop_plan._column_plan``)."""
        b = self.builder
        plan = self.plan
        n_cols, block = plan.columns
        for step in plan.steps:
            nodes = step.nodes if isinstance(step, InnerLoop) else [step[1]]
            for n in nodes:
                if isinstance(n.data, Reduction) or n.name in self.local_names:
                    d = n.data.dtype if isinstance(n.data, Reduction) else n.dtype
                    with b.goto_entry_block():
                        slot = b.alloca(ir.ArrayType(llvm_type(d), block), name=f"cols_{n.name}")
                    self.col_slots[n.name] = (slot, d)
        xb = plan.row_vars[-1]

        def row_body(row):
            env = self.row_env(row, plan)
            if n_cols % block == 0:
                count = ir.Constant(I64, block)
            else:
                left = b.sub(ir.Constant(I64, n_cols), b.mul(env[xb], ir.Constant(I64, block)))
                count = b.select(
                    b.icmp_signed("<", left, ir.Constant(I64, block)),
                    left,
                    ir.Constant(I64, block),
                )
            self._row_env = env
            for step in plan.steps:
                if isinstance(step, InnerLoop):
                    self._column_reduce(step.nodes, env, count)
                else:
                    self._columns(
                        env, count, lambda h, w, ci, n=step[1]: self._column_value(n, h, w)
                    )

        self.loop(self.end, row_body, "row", start=self.start)
        b.ret_void()

    def row_env(self, row, plan) -> dict:
        """The row variables' values at flat row index ``row`` (the outermost takes what is
        left after the inner ones' remainders)."""
        b = self.builder
        env = {}
        rem = row
        for v in reversed(plan.row_vars):
            if v is plan.row_vars[0]:
                env[v] = rem
            else:
                env[v] = b.srem(rem, self.sizes.value(v.size))
                rem = b.sdiv(rem, self.sizes.value(v.size))
        return env

    def slot_load(self, name, ci, lanes):
        b = self.builder
        slot, d = self.col_slots[name]
        ptr = b.gep(slot, [ir.Constant(I32, 0), ci])
        if lanes > 1:
            ptr = b.bitcast(ptr, ir.VectorType(llvm_type(d), lanes).as_pointer())
        return b.load(ptr, align=d.itemsize)

    def _slot_store(self, name, ci, value, lanes):
        b = self.builder
        slot, d = self.col_slots[name]
        ptr = b.gep(slot, [ir.Constant(I32, 0), ci])
        if lanes > 1:
            ptr = b.bitcast(ptr, ir.VectorType(llvm_type(d), lanes).as_pointer())
        b.store(value, ptr, align=d.itemsize)

    def _columns(self, env, count, body, extra=None):
        """``body(handler, width, column)`` for the block's columns: vectors, then a tail."""
        c = self.j

        def for_width(width):
            def run(ci):
                loop_env = dict(env)
                if extra:
                    loop_env.update(extra)
                loop_env[c] = ci
                body(LLVMOps(self, width, loop_env), width, ci)

            return run

        tail = self.loop(count, for_width(LANES), "cvec", step=LANES)
        self.loop(count, for_width(1), "ctail", start=tail)

    def _column_value(self, n, h, width):
        """Per-column pointwise work after the reductions: computed, then stored or kept."""
        index, _ = self.plan.node_index[n.name]
        value = self.body_value(n, h)
        if value.dtype is not n.dtype:
            value = h.to_dtype(value, n.dtype)
        if n.name in self.col_slots:
            self._slot_store(n.name, h.env[self.j], value.value, width)
        else:
            self.store(n, value, index, h, width)

    def _column_reduce(self, nodes, env, count):
        plan = self.plan
        block = plan.columns[1]
        full = ir.Constant(I64, block)

        def init(h, width, ci):
            for n in nodes:
                d = self.col_slots[n.name][1]
                ident = h.const_of(reduction_identity(n.data.reduction_type, d), d)
                self._slot_store(n.name, ci, ident, width)

        self._columns(env, full, init)

        def accumulate(h, width, ci):
            for n in nodes:
                value = self.body_value(n, h)
                d = self.col_slots[n.name][1]
                if value.dtype is not d:
                    value = h.to_dtype(value, d)
                cur = V(self.slot_load(n.name, ci, width), d)
                new = self._combine(n.data.reduction_type, h, cur, value)
                self._slot_store(n.name, ci, new.value, width)

        r = plan.rvar
        self.loop(
            self.sizes.value(r.size),
            lambda ri: self._columns(env, count, accumulate, {r: ri}),
            "red",
        )

        def finish(h, width, ci):
            for n in nodes:
                if n.name in self.local_names:
                    continue  # read back from its slot by later steps
                d = self.col_slots[n.name][1]
                value = V(self.slot_load(n.name, ci, width), d)
                if d is not n.dtype:
                    value = h.to_dtype(value, n.dtype)
                index, _ = plan.node_index[n.name]
                self.store(n, value, index, h, width)

        self._columns(env, count, finish)
