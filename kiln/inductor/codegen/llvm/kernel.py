"""LLVM code generation for scheduled kernels (llvmlite IR, JIT-compiled for the host CPU).

Every kernel becomes ``void kernel_N(i64 row_start, i64 row_end, i8** buffers)``: a loop over
rows (threads call it with disjoint row ranges) whose body runs the kernel's steps for one row —
per-row scalar work, and inner loops that are vectorized with explicit ``<8 x T>`` types plus a
scalar tail (see ``loop_plan`` for how loops are chosen). The loop bodies are the lowering's
``inner_fn``s run against ``LLVMOps`` (``ops_handler``), an ops handler that emits IR; the same
body is emitted twice per inner loop, once for vectors and once for the tail. A column-reduction
plan (``ColumnEmitter.emit_columns``, the base class in ``columns``) turns this around: rows are blocks of outputs, the vector lanes walk a
block's outputs and the reduction loop runs around them. Index division and modulo follow floor
semantics (what ``sym`` simplifies by) wherever a dividend may be negative.
"""

from __future__ import annotations

from llvmlite import ir

from ....runtime import dtypes as dt
from ....runtime.symbolic import SymInt
from ... import sym
from ...dependencies import RecordingHandler
from ...ir import ComputedBuffer, Pointwise, Reduction
from ...virtualized import set_ops_handler
from .columns import ColumnEmitter
from .jit import release_module
from .loop_plan import CHUNK, InnerLoop, LoopPlan
from .ops_handler import LLVMOps
from .philox import philox_words, uniform_from_word
from .prefetch import LINE_BYTES, ROW_BYTES, plan_prefetch
from .sizes import SizeValues
from .transpose_tiles import TileEmitter
from .values import (
    I8,
    I32,
    I64,
    LANES,
    UnsupportedInLLVM,
    V,
    int_vector,
    llvm_type,
    memory_type,
    reduction_identity,
)

__all__ = ["emit_kernel", "emit_scatter_kernel", "KernelEmitter", "release_module"]

# arithmetic on loop variables and sizes never wraps (see ``_no_wrap``)
_NSW = ("nsw",)
# llvm.prefetch's read/write, locality and cache arguments: a read, kept in L2 (prefetcht1).
# Into L1 (locality 3) measured the same within the noise, and would evict the current row's
# lines that the row's later loops read again (softmax: 16 KiB in, 16 KiB out fill L1).
_PREFETCH_READ_L2 = (ir.Constant(I32, 0), ir.Constant(I32, 2), ir.Constant(I32, 1))


# (measured on Zen 4, 2 threads, 4096x4096: sin(x).exp() 8.8 -> 6.6 ms, the benchmark's 10-op
# chain 17.8 -> 13.4 ms; one call per element gains nothing, so those loops keep LANES)
WIDE = 4
# independent vector accumulators of a reduction loop (see ``_emit_split_loop``)
SPLIT = 4
# rows of at most this many scalars (no vector fits), in kernels of at least this many elements,
# are unrolled (``KernelEmitter._row_unrolls``)
ROW_UNROLL_MAX = 16
ROW_UNROLL_ELEMENTS = 2**17
_MATH_OPS = frozenset(
    {"exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sin", "cos", "tan", "tanh",
     "sigmoid", "erf", "erfc", "erfinv", "pow", "atan", "atan2", "asin", "acos", "sinh", "cosh",
     "asinh", "acosh", "atanh"}
)  # fmt: skip


class _CountingMath(RecordingHandler):
    """Counts the vector-math calls of a body that cannot be recorded (``body_trace``)."""

    def __init__(self):
        super().__init__()
        self.calls = 0

    def __getattr__(self, name):
        if name in _MATH_OPS:
            self.calls += 1
        return super().__getattr__(name)


def _math_calls(emitter: KernelEmitter, step: InnerLoop) -> int:
    """How many vector-math functions one element of ``step``'s loop evaluates."""
    calls = 0
    for n in step.nodes:
        trace = emitter.trace_of(n)
        if trace is not None:
            calls += sum(1 for call in trace.calls if call[0] in _MATH_OPS)
            continue
        index, rindex = emitter.plan.node_index[n.name]
        with set_ops_handler(_CountingMath()) as counting:
            if isinstance(n.data, Pointwise):
                n.data.inner_fn(index)
            else:
                n.data.inner_fn(index, rindex)
        calls += counting.calls
    return calls


class KernelEmitter(ColumnEmitter, TileEmitter):
    """Emits one kernel function into a module (see the module docstring)."""

    def __init__(
        self,
        module: ir.Module,
        name: str,
        plan: LoopPlan,
        buffer_args: list,
        buffer_dtypes: dict,
        locals_: set,
        buffer_sizes: dict | None = None,
        symbols: tuple = (),
        traces: dict | None = None,
    ):
        self.module = module
        self.plan = plan
        # node name -> its body's recorded ops calls (``body_trace``), replayed by every loop
        self.traces: dict = {} if traces is None else traces
        self.kernel = plan.kernel
        self.buffer_args = buffer_args  # names, in the order of the i8** array
        self.buffer_dtypes = buffer_dtypes
        self.local_names = locals_
        self.locals: dict = {}
        fnty = ir.FunctionType(ir.VoidType(), [I64, I64, I8.as_pointer().as_pointer()])
        self.function = ir.Function(module, fnty, name)
        self.function.attributes.add("nounwind")
        self.start, self.end, self.args = self.function.args
        self.builder = ir.IRBuilder(self.function.append_basic_block("entry"))
        self._pointers: dict = {}
        self.j = plan.j
        self.buffer_sizes = buffer_sizes or {}
        # kernels for every size: symbol values follow the buffer pointers (``SizeValues``)
        self.sizes = SizeValues(self.builder, self.function, self._symbols_pointer, symbols)
        # column reductions: name -> (alloca of one value per column of the block, dtype)
        self.col_slots: dict = {}
        # the inner loop being emitted prefetches these (row pointer, item size) one row ahead
        self._prefetch_rows: list = []
        # indices and splats already emitted in a block: a fused kernel's loads repeat the same
        # index arithmetic (a row offset, j + lane, a channel's // and %) for every buffer they
        # read, and emitting and printing each copy cost the compile more than LLVM's CSE saves
        # (static sizes only: a symbolic coefficient's hash is only safe to take in kernel scope)
        self._memo: dict | None = None if symbols else {}

    # ------------------------------------------------------------------ helpers
    def clamp(self, offsets, expr: sym.Expr, name: str, lanes: int):
        """Keep a load inside its buffer when the index may leave it (untaken where-branches
        of padding and scatters, invalid gather indices): never read outside memory."""
        size = self.buffer_sizes.get(name)
        if size is None:
            return offsets
        lo, hi = self.index_bounds(expr)
        if (
            sym.known(">=", lo, 0)
            and sym.known("<", hi, size)
            and not any(isinstance(a, sym.Indirect) for a in _atoms_deep(expr))
        ):
            return offsets
        b = self.builder
        t = offsets.type
        zero = ir.Constant(t, None)
        last = size - 1 if size.__class__ is not int else max(size - 1, 0)
        top = self.sizes.value(last) if lanes == 1 else self.sizes.vector(last, lanes)
        offsets = b.select(b.icmp_signed("<", offsets, zero), zero, offsets)
        return b.select(b.icmp_signed(">", offsets, top), top, offsets)

    def index_bounds(self, expr: sym.Expr) -> tuple:
        """Inclusive bounds of an index over the positions the loops really visit. A flat loop
        visits ``row + j`` only below its element count (a piece ends where the rows do), which
        the variables' ranges alone do not say: bounded as one flat variable instead, an access
        that walks the loop stays provably inside its buffer (a vector load, no clamp)."""
        plan = self.plan
        if not plan.chunked:
            return expr.bounds()
        row, j = plan.row_vars[0], plan.j
        if j not in expr.free_vars():
            return expr.bounds()
        flat = sym.Var("flat", plan.total)
        return expr.subs({j: flat - sym.as_expr(row)}).bounds()

    def release(self) -> None:
        """Drop the size reader once the kernel is emitted: it calls back into the emitter (a
        cycle), which would keep the emitter and every IR value it holds for the cyclic
        collector instead of reference counting."""
        self.sizes = None

    def _symbols_pointer(self):
        ptr = self._pointers.get(None)
        if ptr is None:
            b = self.builder
            with b.goto_entry_block():
                raw = b.load(b.gep(self.args, [ir.Constant(I64, len(self.buffer_args))]))
                ptr = b.bitcast(raw, I64.as_pointer(), name="sizes")
            self._pointers[None] = ptr
        return ptr

    def pointer(self, name):
        ptr = self._pointers.get(name)
        if ptr is None:
            b = self.builder
            with b.goto_entry_block():
                idx = self.buffer_args.index(name)
                raw = b.load(b.gep(self.args, [ir.Constant(I64, idx)]))
                ptr = b.bitcast(
                    raw, memory_type(self.buffer_dtypes[name]).as_pointer(), name=f"p_{name}"
                )
            self._pointers[name] = ptr
        return ptr

    def splat(self, value, lanes):
        b = self.builder
        memo = self._memo
        if memo is not None:
            key = ("splat", b.block, id(value), lanes)
            hit = memo.get(key)
            if hit is not None:
                return hit[0]
        vec = ir.VectorType(value.type, lanes)
        undef = ir.Constant(vec, ir.Undefined)
        v = b.insert_element(undef, value, ir.Constant(I32, 0))
        out = b.shuffle_vector(v, undef, int_vector(I32, [0] * lanes))
        if memo is not None:
            memo[key] = (out, value)  # the value kept alive: its id stays its own
        return out

    def varies(self, expr: sym.Expr, env: dict) -> bool:
        """Whether an index differs between vector lanes (the inner variable, or an indirect
        index loaded as a vector)."""
        j = self.j
        if j is not None and j in expr.free_vars():
            return True
        for atom in _atoms_deep(expr):
            if isinstance(atom, sym.Indirect) and isinstance(
                getattr(env.get(atom), "type", None), ir.VectorType
            ):
                return True
        return False

    def emit_index(self, expr: sym.Expr, env: dict, lanes: int):
        """An index as i64, or as <lanes x i64> when it varies across vector lanes; an index
        emitted before in the current block (same expression, same loop values) is reused."""
        memo = self._memo
        if memo is None:
            return self._emit_index(expr, env, lanes)
        values = tuple(
            env.get(a) for a in _atoms_deep(expr) if isinstance(a, (sym.Var, sym.Indirect))
        )
        key = ("index", self.builder.block, expr, lanes, self.j, tuple(map(id, values)))
        hit = memo.get(key)
        if hit is not None:
            return hit[0]
        out = self._emit_index(expr, env, lanes)
        memo[key] = (out, values)  # the values kept alive: their ids stay their own
        return out

    def _emit_index(self, expr: sym.Expr, env: dict, lanes: int):
        b = self.builder
        if lanes > 1 and self.varies(expr, env):
            return self._emit_index_vec(expr, env, lanes)
        if lanes > 1:
            return self.splat(self.emit_index(expr, env, 1), lanes)
        flags = _no_wrap(expr)
        out = self.sizes.value(expr.const)
        for atom, c in expr.terms.items():
            if isinstance(atom, (sym.Var, sym.Indirect)):
                v = env[atom]
            else:
                v = self._div_mod(atom, self.emit_index(atom.expr, env, 1), I64)
            term = v if sym.known("==", c, 1) else b.mul(v, self.sizes.value(c), flags=flags)
            out = (
                term
                if (isinstance(out, ir.Constant) and out.constant == 0)
                else b.add(out, term, flags=flags)
            )
        return out

    def _div_mod(self, atom, value, ty):
        """``FloorDiv``/``Mod`` of an emitted dividend with floor semantics (what ``sym``
        simplifies by); a dividend that is never negative needs only the truncating one."""
        b = self.builder
        d = atom.div if isinstance(atom, sym.FloorDiv) else atom.mod
        lanes = ty.count if isinstance(ty, ir.VectorType) else 0

        def const(v):
            if v.__class__ is SymInt:
                return self.sizes.vector(v, lanes) if lanes else self.sizes.value(v)
            return int_vector(ty.element, [v] * lanes) if lanes else ir.Constant(ty, v)

        rem = b.srem(value, const(d))
        nonneg = sym.known(">=", atom.expr.bounds()[0], 0)  # else the floor fix-up, always right
        if isinstance(atom, sym.FloorDiv):
            q = b.sdiv(value, const(d))
            if nonneg:
                return q
            return b.sub(q, b.zext(b.icmp_signed("<", rem, const(0)), ty))
        if nonneg:
            return rem
        return b.select(b.icmp_signed("<", rem, const(0)), b.add(rem, const(d)), rem)

    def _emit_index_vec(self, expr: sym.Expr, env: dict, lanes: int):
        b = self.builder
        vty = ir.VectorType(I64, lanes)
        j = self.j

        def lane_varying(atom) -> bool:
            return self.varies(sym.as_expr(atom), env)

        invariant = sym.Expr(
            {a: c for a, c in expr.terms.items() if not lane_varying(a)}, expr.const
        )
        out = self.splat(self.emit_index(invariant, env, 1), lanes)
        flags = _no_wrap(expr)
        for atom, c in expr.terms.items():
            if not lane_varying(atom):
                continue
            if isinstance(atom, sym.Indirect):  # loaded per lane
                v = env[atom]
            elif isinstance(atom, sym.Var):  # the inner variable itself: j + lane
                lane = int_vector(I64, range(lanes))
                v = b.add(self.splat(env[j], lanes), lane, flags=_NSW)
            else:
                v = self._div_mod(atom, self._emit_index_vec(atom.expr, env, lanes), vty)
            term = (
                v if sym.known("==", c, 1) else b.mul(v, self.sizes.vector(c, lanes), flags=flags)
            )
            out = b.add(out, term, flags=flags)
        return out

    def loop(
        self, count, body, name: str, step: int = 1, start=None, unroll: bool = True,
        unroll_known: bool = False,
    ):  # fmt: skip
        """for (i = start; i + step <= count; i += step) body(i); returns the final index.

        A scalar loop after a vector loop (``start`` given, ``step`` 1) runs fewer than a
        vector's lanes: when its bound is a run-time size LLVM cannot see that, and unrolls it
        for long trip counts (code size and compile time for nothing), so it is told not to;
        so is a loop of a run-time count that ``unroll`` says gains nothing from it. A loop of
        a known count is never unrolled: the emitter already chose its width (wide and split
        bodies where overlapping chains pay), and LLVM's full unrolling of the rest -- a few
        vector steps over memory, scalar tails, column blocks -- was a tenth of the LLVM time
        of resnet18's training step (1.88 -> 1.70 s of CPU) for no step time (A/B in one
        process: resnet18 0.98, nanoGPT 1.00, DCGAN 1.00). A loop that cannot run (a vector
        loop over fewer elements than its step: a quarter of resnet18's training-step kernels
        had one) is not emitted at all. ``unroll_known``: a loop of a known count that LLVM may
        unroll after all (a whole row of a few scalars, ``_row_unrolls``)."""
        after_vectors = start is not None and step == 1
        start = start if start is not None else ir.Constant(I64, 0)
        if (
            isinstance(count, ir.Constant)
            and isinstance(start, ir.Constant)
            and start.constant + step > count.constant
        ):
            return start
        b = self.builder
        pre = b.block
        head = self.function.append_basic_block(f"{name}_head")
        body_bb = self.function.append_basic_block(f"{name}_body")
        done = self.function.append_basic_block(f"{name}_done")
        short = (isinstance(count, ir.Constant) or not unroll or after_vectors) and not unroll_known
        b.branch(head)
        b.position_at_end(head)
        i = b.phi(I64, name)
        i.add_incoming(start, pre)
        # no wrap: loop bounds are element counts; the flags let LLVM count the trips (and so
        # unroll and drop checks) when the count is a run-time size
        nxt = b.add(i, ir.Constant(I64, step), flags=("nuw", "nsw"))
        b.cbranch(
            b.icmp_signed("<=", nxt, count) if step > 1 else b.icmp_signed("<", i, count),
            body_bb,
            done,
        )
        b.position_at_end(body_bb)
        body(i)
        i.add_incoming(nxt, b.block)
        latch = b.branch(head)
        if short:
            latch.set_metadata("llvm.loop", self._no_unroll_loop_id())
        b.position_at_end(done)
        return i

    def _no_unroll_loop_id(self):
        """A loop ID (self-referencing, one per loop) asking LLVM not to unroll the loop."""
        module = self.module
        hint = module.add_metadata([ir.MetaDataString(module, "llvm.loop.unroll.disable")])
        # not ``add_metadata``: it would hand every loop the same node (it dedups by operands)
        loop_id = ir.values.MDValue(module, [hint], name=str(len(module.metadata)))
        loop_id.operands = (loop_id, hint)
        return loop_id

    # ------------------------------------------------------------------ emission
    def emit(self):
        b = self.builder
        plan = self.plan
        if plan.columns is not None:
            self.emit_columns()
            return

        prefetch = (
            plan_prefetch(plan, self.buffer_dtypes, lambda step: _math_calls(self, step), LANES > 1)
            if not plan.rq  # nested reduction loops: the next row is far ahead of any prefetch
            else None
        )

        def row_body(row):
            env = self.row_env(row, plan)
            self.locals = {}
            for k, step in enumerate(plan.steps):
                if isinstance(step, InnerLoop):
                    if prefetch is not None and k == prefetch.step:
                        self._prefetch_rows = self._next_row_pointers(prefetch, row, env)
                    self.emit_inner_loop(step, env, row)
                    self._prefetch_rows = []
                else:
                    self.emit_row_scalar(step[1], env)

        tile = None if plan.chunked else self.transpose_tile()
        if plan.chunked:
            self._piece_loop(row_body)
        elif tile is not None and not _math_calls(self, plan.steps[0]):
            self.tiled_row_loop(tile, row_body)
        else:
            self.loop(self.end, row_body, "row", start=self.start)
        b.ret_void()

    def _piece_loop(self, body) -> None:
        """A flat loop's rows (its elements) ``[start, end)`` in pieces, each ending at the next
        multiple of ``CHUNK`` or at ``end``: ``body(first element of the piece)``. Pieces keep
        CHUNK's alignment however the threads split the rows."""
        b = self.builder
        pre = b.block
        head = self.function.append_basic_block("piece_head")
        body_bb = self.function.append_basic_block("piece_body")
        done = self.function.append_basic_block("piece_done")
        b.branch(head)
        b.position_at_end(head)
        row = b.phi(I64, "row")
        row.add_incoming(self.start, pre)
        b.cbranch(b.icmp_signed("<", row, self.end), body_bb, done)
        b.position_at_end(body_bb)
        body(row)
        row.add_incoming(self._piece_end(row), b.block)
        b.branch(head)
        b.position_at_end(done)

    def _piece_end(self, row):
        """The first element after the piece starting at ``row``: the next multiple of CHUNK."""
        b = self.builder
        return b.add(b.or_(row, ir.Constant(I64, CHUNK - 1)), ir.Constant(I64, 1), flags=_NSW)

    def _next_row_pointers(self, prefetch, row, env) -> list:
        """(pointer to where ``row + 1`` starts reading, item size) of each prefetched load.
        The last row's point past its buffer: a prefetch never faults, and is only a hint.
        A row longer than ``ROW_BYTES`` (known only when the kernel runs) keeps this row's."""
        b = self.builder
        plan = self.plan
        after = self.row_env(b.add(row, ir.Constant(I64, 1), flags=_NSW), plan)
        short = None
        if sym.is_symbolic(plan.inner_size):
            row_bytes = b.mul(
                self.sizes.value(plan.inner_size), ir.Constant(I64, prefetch.item_bytes), flags=_NSW
            )
            short = b.icmp_signed("<=", row_bytes, ir.Constant(I64, ROW_BYTES))
        j = self.j
        out = []
        for name, expr in prefetch.loads:
            rest = expr - sym.as_expr(j) * expr.coeff(j)
            offset = self.emit_index(rest, after, 1)
            if short is not None:
                offset = b.select(short, offset, self.emit_index(rest, env, 1))
            base = b.gep(self.pointer(name), [offset])
            out.append((b.bitcast(base, I8.as_pointer()), self.buffer_dtypes[name].itemsize))
        return out

    def _emit_prefetches(self, i, width: int, offset: int = 0) -> None:
        """Prefetch the next row's lines under elements ``[i + offset, i + offset + width)``:
        one per cache line that starts there (an unrolled step of a split loop covers its
        lines once; a plain vector loop issues one each step, twice per line for float32)."""
        b = self.builder
        for base, itemsize in self._prefetch_rows:
            start, stop = offset * itemsize, (offset + width) * itemsize
            first = -(-start // LINE_BYTES) * LINE_BYTES
            for byte in range(first, stop, LINE_BYTES):
                at = b.mul(i, ir.Constant(I64, itemsize), flags=_NSW)
                if byte > start:
                    at = b.add(at, ir.Constant(I64, byte - start), flags=_NSW)
                b.call(self._prefetch_function(), [b.gep(base, [at]), *_PREFETCH_READ_L2])

    def _prefetch_function(self):
        module = self.module
        function = module.globals.get("llvm.prefetch.p0i8")
        if function is None:
            fnty = ir.FunctionType(ir.VoidType(), [I8.as_pointer(), I32, I32, I32])
            function = ir.Function(module, fnty, "llvm.prefetch.p0i8")
        return function

    def _inner_count(self, row):
        plan = self.plan
        if not plan.chunked:
            return self.sizes.value(plan.inner_size)
        b = self.builder
        stop = self._piece_end(row)
        stop = b.select(b.icmp_signed("<", self.end, stop), self.end, stop)
        return b.sub(stop, row, flags=_NSW)

    def emit_row_scalar(self, node: ComputedBuffer, env):
        index, _ = self.plan.node_index[node.name]
        handler = LLVMOps(self, 1, dict(env))
        value = self.body_value(node, handler)
        self.finish_value(node, value, index, handler, 1)

    def finish_value(self, node, value: V, index, handler, lanes):
        if value.dtype is not node.dtype:
            value = handler.to_dtype(value, node.dtype)
        if node.name in self.local_names:
            self.locals[node.name] = (value.value, node.dtype)
            return
        # later nodes of this loop body reading this buffer at this index reuse the value
        handler.forwarded[node.name] = (node.layout.offset_expr(index), value)
        if node.name in getattr(self.plan, "forward_only", ()):
            return
        self.store(node, value, index, handler, lanes)

    def store(self, node, value: V, index, handler, lanes):
        b = self.builder
        expr = node.layout.offset_expr(index)
        raw = value.value
        if node.dtype is dt.bool_:
            raw = b.zext(raw, I8 if lanes == 1 else ir.VectorType(I8, lanes))
        if lanes > 1:
            j = self.j
            coeff = expr.coeff(j)
            rest = expr - sym.as_expr(j) * coeff
            if sym.known("==", coeff, 1) and not self.varies(rest, handler.env):
                base = self.emit_index(rest, handler.env, 1)
                ptr = b.gep(b.gep(self.pointer(node.name), [base]), [handler.env[j]])
                b.store(raw, b.bitcast(ptr, raw.type.as_pointer()), align=node.dtype.itemsize)
                return
            offsets = self.emit_index(expr, handler.env, lanes)
            for lane in range(lanes):
                off = b.extract_element(offsets, ir.Constant(I32, lane))
                val = b.extract_element(raw, ir.Constant(I32, lane))
                b.store(val, b.gep(self.pointer(node.name), [off]), align=node.dtype.itemsize)
            return
        offset = self.emit_index(expr, handler.env, 1)
        b.store(raw, b.gep(self.pointer(node.name), [offset]), align=node.dtype.itemsize)

    def emit_inner_loop(self, step: InnerLoop, env, row):
        self._row_env = env
        count = self._inner_count(row)
        if self.plan.chunked:
            # a piece is CHUNK elements but where a thread's rows start or end: a loop whose
            # trip count LLVM knows keeps its constants in registers and needs no remainder (a
            # run-time count made gelu 13% slower, the same IR but for the count)
            b = self.builder
            chunk = ir.Constant(I64, CHUNK)
            with b.if_else(b.icmp_signed("==", count, chunk)) as (full, partial):
                with full:
                    self._emit_loops(step, env, chunk)
                with partial:
                    self._emit_loops(step, env, count)
            return
        self._emit_loops(step, env, count)

    def _emit_loops(self, step: InnerLoop, env, count):
        """The inner loops of ``step`` over ``count`` elements (``_emit_j_loops``), inside the
        plan's nested reduction loops when it has them: each pass over the last dim reduces
        into fresh accumulators, merged into the row's running ones after it (a scalar merge
        per pass, like the split loop's parts)."""
        reductions = [n for n in step.nodes if isinstance(n.data, Reduction)]
        lanes = LANES if step.vectorize else 1
        # accumulators: allocas in the entry block (mem2reg turns them into registers)
        accs = {n.name: self._alloc_accumulator(n, lanes) for n in reductions}
        rq = self.plan.rq
        if not rq:
            self._emit_j_loops(step, env, count, reductions, accs, lanes)
            for n in reductions:
                self._finish_reduction(n, accs[n.name])
            return
        running = {n.name: self._alloc_accumulator(n, 1) for n in reductions}
        for n in reductions:
            self._init_accumulator(n, running[n.name], 1)

        def nest(depth, loop_env):
            if depth == len(rq):
                self._emit_j_loops(step, loop_env, count, reductions, accs, lanes)
                for n in reductions:
                    self._merge_into(n, running[n.name], accs[n.name])
                return
            q = rq[depth]

            def body(i):
                nest(depth + 1, {**loop_env, q: i})

            self.loop(self.sizes.value(q.size), body, q.name, unroll=False)

        nest(0, env)
        for n in reductions:
            self._finish_reduction(n, running[n.name])

    def _merge_into(self, n, running, acc):
        """Combine one pass's finished (scalar) accumulator into the running one."""
        b = self.builder
        rtype = n.data.reduction_type
        d = acc["dtype"]
        h1 = LLVMOps(self, 1, {})
        if rtype.startswith("welford"):
            keys = ("mean", "m2", "count")
            merged = self._welford_merge(
                h1,
                tuple(V(b.load(running[k]), d) for k in keys),
                tuple(V(b.load(acc[k]), d) for k in keys),
            )
            for key, value in zip(keys, merged):
                b.store(value.value, running[key])
            return
        total = self._combine(
            rtype, h1, V(b.load(running["scalar"]), d), V(b.load(acc["scalar"]), d)
        )
        b.store(total.value, running["scalar"])

    def _emit_j_loops(self, step: InnerLoop, env, count, reductions, accs, lanes):
        """The loops over ``j`` of ``step`` for ``count`` elements: wide and vector loops, then
        a scalar tail, reducing into ``accs`` (initialized here, left in their scalar slots). A
        loop the count leaves nothing for (a constant count that the loop before divides) is
        not emitted."""
        plan = self.plan
        j = plan.j

        def body_for(width, accs=accs, offset=0):
            def body(i):
                if width > 1 and self._prefetch_rows:
                    self._emit_prefetches(i, width, offset)
                loop_env = dict(env)
                loop_env[j] = i
                handler = LLVMOps(self, width, loop_env)
                for n in step.nodes:
                    index, _ = plan.node_index[n.name]
                    value = self.body_value(n, handler)
                    if isinstance(n.data, Reduction):
                        self._accumulate(n, accs[n.name], value, handler, width, i)
                    else:
                        self.finish_value(n, value, index, handler, width)
                        if width > 1 and n.name in self.local_names:
                            raise UnsupportedInLLVM("vector local")

            return body

        known = count.constant if isinstance(count, ir.Constant) else None

        def leaves_rest(done_step: int) -> bool:
            return not done_step or known is None or known % done_step != 0

        for n in reductions:
            self._init_accumulator(n, accs[n.name], lanes)
        tail_start = ir.Constant(I64, 0)
        done_step = 0  # the step of the last loop emitted
        math_calls = _math_calls(self, step) if lanes > 1 else 0
        if lanes > 1 and not reductions and math_calls >= 2:
            # several dependent polynomial evaluations per element make the loop latency-bound:
            # a 4x wider vector gives the core four independent chains to overlap
            tail_start = self.loop(count, body_for(WIDE * lanes), "wide", step=WIDE * lanes)
            done_step = WIDE * lanes
        if (
            lanes > 1
            and SPLIT > 1
            and reductions
            and _splittable(reductions)
            and (known is None or known >= SPLIT * lanes)
        ):
            tail_start = self._emit_split_loop(reductions, accs, body_for, count, lanes)
            done_step = SPLIT * lanes
        if lanes > 1 and (reductions or leaves_rest(done_step)):
            # LLVM unrolls a vector loop of a run-time count into a second copy plus a
            # remainder loop; that pays where two copies overlap a latency-bound chain of
            # polynomial math, not for a chain through an accumulator (max, sum: each step
            # waits on the last) nor for loads and stores (the core overlaps those itself).
            # A dynamic softmax spent 40% of its LLVM time on it for a 1% faster kernel.
            tail_start = self.loop(
                count, body_for(lanes), "vec", step=lanes, start=tail_start, unroll=math_calls > 0
            )
            done_step = lanes
            for n in reductions:
                self._horizontal(n, accs[n.name], lanes)
        if leaves_rest(done_step):
            # no vector loop ran before (none fits the row): the tail is the whole row
            whole_row = isinstance(tail_start, ir.Constant) and tail_start.constant == 0
            unrolls = whole_row and self._row_unrolls(known)
            self.loop(count, body_for(1), "tail", start=tail_start, unroll_known=unrolls)

    def _row_unrolls(self, known: int | None) -> bool:
        """Whether a row that runs as scalars alone (shorter than a vector) is unrolled: in a
        kernel of many such rows, where LLVM then folds each element's masks and index
        arithmetic to constants (a 3x3 weight gradient of one live tap scattered into zeros,
        512x512x3x3: 28 -> 2.8 ms, load 8). Only there: unrolling every short row was 0.35 s
        more LLVM CPU for resnet18's training step."""
        rows = self.plan.rows
        return (
            known is not None
            and known <= ROW_UNROLL_MAX
            and rows.__class__ is int
            and rows * known >= ROW_UNROLL_ELEMENTS
        )

    # ------------------------------------------------------------------ reductions
    def _emit_split_loop(self, reductions, accs, body_for, count, lanes):
        """A loop of ``SPLIT`` vector steps per iteration, each into its own accumulators.

        One accumulator makes a row reduction a chain of dependent adds (or max, or welford
        updates): each step waits for the last one's latency, and the core runs far below the
        speed memory feeds it (softmax and layer_norm rows). ``SPLIT`` independent partial
        results overlap, and are folded into the first one afterwards, in a fixed tree order, so
        a result depends on the row length only, never on threads or timing. A sum then adds in
        another order than one chain would: the same rounding class, not the same bits. Welford
        parts share one count and step by ``delta * (1 / count)``, one division per iteration
        instead of one per part (layer_norm's row loop was bound by them: 14.7 -> 17.5 GB/s in
        cache), which rounds like the division within an ulp."""
        b = self.builder
        extra = []
        for _ in range(SPLIT - 1):
            part = {n.name: self._alloc_accumulator(n, lanes) for n in reductions}
            for n in reductions:
                self._init_accumulator(n, part[n.name], lanes)
            extra.append(part)
        parts = [accs, *extra]

        welfords = [n for n in reductions if n.data.reduction_type.startswith("welford")]

        def body(i):
            for n in welfords:
                # every part takes one step per iteration, so all count alike: one count (the
                # parts' copies are the same value, merged by LLVM: no registers spilled) and
                # one reciprocal of it serve them all, off the chain through the means
                hv = LLVMOps(self, lanes, {})
                first = accs[n.name]
                d = first["dtype"]
                counted = hv.add(V(b.load(first["vcount"]), d), hv.constant(1.0, d))
                inverse = hv.truediv(hv.constant(1.0, d), counted)
                for part in parts:
                    part[n.name]["step"] = (counted, inverse)
            for k, part in enumerate(parts):
                at = i if k == 0 else b.add(i, ir.Constant(I64, k * lanes), flags=("nuw", "nsw"))
                body_for(lanes, part, k * lanes)(at)
            for n in welfords:
                for part in parts:
                    del part[n.name]["step"]

        end = self.loop(count, body, "split", step=SPLIT * lanes, unroll=False)
        for n in reductions:
            self._merge_vector_parts(n, [p[n.name] for p in parts], lanes)
        return end

    def _merge_vector_parts(self, n, parts, lanes):
        """Fold the split loop's vector accumulators pairwise into the first (a tree: the
        neighbours first, like the lanes in ``_horizontal``)."""
        b = self.builder
        rtype = n.data.reduction_type
        d = parts[0]["dtype"]
        hv = LLVMOps(self, lanes, {})
        if rtype.startswith("welford"):
            keys = ("vmean", "vm2", "vcount")
            states = [tuple(V(b.load(p[k]), d) for k in keys) for p in parts]
            while len(states) > 1:
                states = [
                    self._welford_merge(hv, states[i], states[i + 1])
                    for i in range(0, len(states), 2)
                ]
            for key, value in zip(keys, states[0]):
                b.store(value.value, parts[0][key])
            return
        values = [V(b.load(p["vec"]), d) for p in parts]
        while len(values) > 1:
            values = [
                self._combine(rtype, hv, values[i], values[i + 1]) for i in range(0, len(values), 2)
            ]
        b.store(values[0].value, parts[0]["vec"])

    def _alloc_accumulator(self, n, lanes):
        b = self.builder
        if n.data.reduction_type.startswith("welford"):
            t = llvm_type(n.data.dtype)
            slots = {}
            with b.goto_entry_block():
                for key in ("mean", "m2", "count"):
                    slots[key] = b.alloca(t)
                    slots["v" + key] = b.alloca(ir.VectorType(t, lanes)) if lanes > 1 else None
            slots["dtype"] = n.data.dtype
            return slots
        indexed = n.data.reduction_type in ("argmax", "argmin")
        d = n.data.src_dtype if indexed else n.data.dtype
        t = llvm_type(d)
        idx_vec = idx = None  # only an arg reduction carries the index along (less IR for LLVM)
        with b.goto_entry_block():
            vec = b.alloca(ir.VectorType(t, lanes)) if lanes > 1 else None
            scalar = b.alloca(t)
            if indexed:
                idx_vec = b.alloca(ir.VectorType(I64, lanes)) if lanes > 1 else None
                idx = b.alloca(I64)
        return {"vec": vec, "scalar": scalar, "idx_vec": idx_vec, "idx": idx, "dtype": d}

    def _init_accumulator(self, n, acc, lanes):
        rtype = n.data.reduction_type
        if rtype.startswith("welford"):
            d = acc["dtype"]
            for key in ("mean", "m2", "count"):
                self.builder.store(LLVMOps(self, 1, {}).const_of(0.0, d), acc[key])
                if lanes > 1:
                    self.builder.store(LLVMOps(self, lanes, {}).const_of(0.0, d), acc["v" + key])
            return
        d = acc["dtype"]
        init = reduction_identity(rtype, d)
        h1 = LLVMOps(self, 1, {})
        self.builder.store(h1.const_of(init, d), acc["scalar"])
        if acc["idx"] is not None:
            self.builder.store(ir.Constant(I64, 0), acc["idx"])
        if lanes > 1:
            hv = LLVMOps(self, lanes, {})
            self.builder.store(hv.const_of(init, d), acc["vec"])
            if acc["idx_vec"] is not None:
                zeros = ir.Constant(ir.VectorType(I64, lanes), [0] * lanes)
                self.builder.store(zeros, acc["idx_vec"])

    def _combine(self, rtype, handler, acc_v: V, v: V):
        if rtype == "sum":
            return (
                handler.add(acc_v, v)
                if acc_v.dtype is not dt.bool_
                else handler.logical_or(acc_v, v)
            )
        if rtype == "prod":
            return handler.mul(acc_v, v)
        if rtype == "max":
            return handler.maximum(acc_v, v)
        if rtype == "min":
            return handler.minimum(acc_v, v)
        if rtype == "any":
            return handler.logical_or(acc_v, v)
        if rtype == "all":
            return handler.logical_and(acc_v, v)
        raise UnsupportedInLLVM(rtype)

    def _accumulate(self, n, acc, value: V, handler, width, i):
        b = self.builder
        rtype = n.data.reduction_type
        d = acc["dtype"]
        if value.dtype is not d:
            value = handler.to_dtype(value, d)
        if rtype.startswith("welford"):
            prefix = "v" if width > 1 else ""
            mean = V(b.load(acc[prefix + "mean"]), d)
            m2 = V(b.load(acc[prefix + "m2"]), d)
            shared = acc.get("step") if width > 1 else None
            if shared is None:
                count = handler.add(V(b.load(acc[prefix + "count"]), d), handler.constant(1.0, d))
                inverse = None
            else:
                count, inverse = shared
            delta = handler.sub(value, mean)
            step = handler.truediv(delta, count) if inverse is None else handler.mul(delta, inverse)
            mean = handler.add(mean, step)
            m2 = handler.add(m2, handler.mul(delta, handler.sub(value, mean)))
            b.store(mean.value, acc[prefix + "mean"])
            b.store(m2.value, acc[prefix + "m2"])
            b.store(count.value, acc[prefix + "count"])
            return
        slot = acc["vec"] if width > 1 else acc["scalar"]
        cur = V(b.load(slot), d)
        if rtype in ("argmax", "argmin"):
            idx_slot = acc["idx_vec"] if width > 1 else acc["idx"]
            cur_idx = b.load(idx_slot)
            index = handler.index(sym.as_expr(self.j)) if width > 1 else i
            better = self._arg_better(rtype, handler, value, cur)
            b.store(b.select(better, value.value, cur.value), slot)
            b.store(b.select(better, index, cur_idx), idx_slot)
            return
        b.store(self._combine(rtype, handler, cur, value).value, slot)

    def _arg_better(self, rtype, handler, v: V, cur: V):
        """v replaces cur: strictly better, or v is the first NaN (NaN wins, like PyTorch)."""
        b = self.builder
        op = ">" if rtype == "argmax" else "<"
        if v.dtype.is_floating_point:
            strictly = b.fcmp_ordered(op, v.value, cur.value)
            v_nan = b.fcmp_unordered("uno", v.value, v.value)
            cur_nan = b.fcmp_unordered("uno", cur.value, cur.value)
            return b.or_(strictly, b.and_(v_nan, b.not_(cur_nan)))
        return handler._cmp(v, cur, op).value

    def _welford_merge(self, h, a, b_):
        """Chan et al.'s combination of two (mean, m2, count) partial results."""
        ma, m2a, na = a
        mb, m2b, nb = b_
        n = h.add(na, nb)
        safe_n = h.where(h.eq(n, h.constant(0.0, n.dtype)), h.constant(1.0, n.dtype), n)
        delta = h.sub(mb, ma)
        frac_b = h.truediv(nb, safe_n)
        mean = h.add(ma, h.mul(delta, frac_b))
        m2 = h.add(h.add(m2a, m2b), h.mul(h.mul(delta, delta), h.mul(na, frac_b)))
        return mean, m2, n

    def _horizontal(self, n, acc, lanes):
        """Fold the vector accumulator's lanes into the scalar one (lane order = index order)."""
        b = self.builder
        rtype = n.data.reduction_type
        d = acc["dtype"]
        h1 = LLVMOps(self, 1, {})
        if rtype.startswith("welford"):
            state = tuple(V(b.load(acc[k]), d) for k in ("mean", "m2", "count"))
            vecs = [b.load(acc["v" + k]) for k in ("mean", "m2", "count")]
            for lane in range(lanes):
                part = tuple(V(b.extract_element(v, ir.Constant(I32, lane)), d) for v in vecs)
                state = self._welford_merge(h1, state, part)
            for key, value in zip(("mean", "m2", "count"), state):
                b.store(value.value, acc[key])
            return
        vec = b.load(acc["vec"])
        cur = V(b.load(acc["scalar"]), d)
        if rtype in ("argmax", "argmin"):
            idx_vec = b.load(acc["idx_vec"])
            cur_idx = b.load(acc["idx"])
            # lanes hold interleaved index classes; pick the best, smallest index on ties
            for lane in range(lanes):
                v = V(b.extract_element(vec, ir.Constant(I32, lane)), d)
                vi = b.extract_element(idx_vec, ir.Constant(I32, lane))
                better = self._arg_better(rtype, h1, v, cur)
                if d.is_floating_point:
                    tie = b.and_(
                        b.fcmp_ordered("==", v.value, cur.value), b.icmp_signed("<", vi, cur_idx)
                    )
                    both_nan = b.and_(
                        b.fcmp_unordered("uno", v.value, v.value),
                        b.fcmp_unordered("uno", cur.value, cur.value),
                    )
                    tie = b.or_(tie, b.and_(both_nan, b.icmp_signed("<", vi, cur_idx)))
                else:
                    tie = b.and_(
                        b.icmp_signed("==", v.value, cur.value), b.icmp_signed("<", vi, cur_idx)
                    )
                take = b.or_(better, tie)
                cur = V(b.select(take, v.value, cur.value), d)
                cur_idx = b.select(take, vi, cur_idx)
            b.store(cur.value, acc["scalar"])
            b.store(cur_idx, acc["idx"])
            return
        # tree reduction by halves
        width = lanes
        value = vec
        hv = LLVMOps(self, lanes, {})
        while width > 1:
            half = width // 2
            lo = b.shuffle_vector(
                value,
                ir.Constant(value.type, ir.Undefined),
                int_vector(I32, range(half)),
            )
            hi = b.shuffle_vector(
                value,
                ir.Constant(value.type, ir.Undefined),
                int_vector(I32, range(half, width)),
            )
            hv.lanes = half
            value = self._combine(rtype, hv, V(lo, d), V(hi, d)).value
            width = half
        scalar = (
            b.extract_element(value, ir.Constant(I32, 0))
            if isinstance(value.type, ir.VectorType)
            else value
        )
        b.store(self._combine(rtype, h1, cur, V(scalar, d)).value, acc["scalar"])

    def _finish_reduction(self, n, acc):
        b = self.builder
        rtype = n.data.reduction_type
        h1 = LLVMOps(self, 1, {})
        if rtype in ("argmax", "argmin"):
            value = V(b.load(acc["idx"]), dt.int64)
        elif rtype == "welford_mean":
            value = V(b.load(acc["mean"]), acc["dtype"])
        elif rtype == "welford_m2":
            value = V(b.load(acc["m2"]), acc["dtype"])
        else:
            value = V(b.load(acc["scalar"]), acc["dtype"])
        index, _ = self.plan.node_index[n.name]
        handler = LLVMOps(self, 1, dict(self._row_env))
        self.finish_value(
            n, value if value.dtype is n.dtype else h1.to_dtype(value, n.dtype), index, handler, 1
        )

    # ------------------------------------------------------------------ random
    def philox(self, handler, seed: V, offset: V):
        """Philox4x32-10 words 0 and 1 for counter ``offset`` (c0/c1 = lo/hi), key ``seed``."""
        return philox_words(self.builder, seed.value, offset.value, handler.lanes)

    def uniform(self, handler, word):
        return uniform_from_word(self.builder, word, handler.lanes)


def _splittable(reductions) -> bool:
    """Whether a loop's reductions can run as ``SPLIT`` partial results merged afterwards:
    every kind but argmax/argmin (whose ties need the index order a merge would have to
    rebuild)."""
    return all(n.data.reduction_type not in ("argmax", "argmin") for n in reductions)


def _no_wrap(expr: sym.Expr) -> tuple:
    """``nsw`` for index arithmetic that cannot wrap: loop variables and sizes only. An index
    read from memory may be anything (it is clamped afterwards), so its arithmetic keeps
    wrapping semantics: poison from an overflow would defeat the clamp."""
    if any(isinstance(a, sym.Indirect) for a in _atoms_deep(expr)):
        return ()
    return _NSW


def _atoms_deep(expr: sym.Expr):
    for atom in expr.terms:
        yield atom
        if isinstance(atom, (sym.FloorDiv, sym.Mod)):
            yield from _atoms_deep(atom.expr)


def emit_kernel(
    module: ir.Module,
    name: str,
    plan: LoopPlan,
    buffer_args: list,
    buffer_dtypes: dict,
    locals_: set,
    buffer_sizes: dict | None = None,
    symbols: tuple = (),
    traces: dict | None = None,
) -> ir.Function:
    emitter = KernelEmitter(
        module, name, plan, buffer_args, buffer_dtypes, locals_, buffer_sizes, symbols, traces
    )
    emitter.emit()
    emitter.release()
    return emitter.function


class _ScatterPlan:
    """The part of a loop plan a scatter kernel needs: no inner vector variable, one row."""

    j = None
    rows = 1
    kernel = None
    chunked = False


def emit_scatter_kernel(
    module: ir.Module,
    name: str,
    buf,
    buffer_args: list,
    buffer_dtypes: dict,
    buffer_sizes: dict,
    symbols: tuple = (),
) -> ir.Function:
    """``void name(i64, i64, i8**)``: copy the base into the output, then scatter in index order.

    Scalar code, one thread: writes land on data-dependent positions, so order matters for
    duplicate indices ("set") and lanes could collide ("add").
    """
    data = buf.data
    if data.mode == "add" and buf.dtype is dt.bfloat16:
        # the sum would add the stored bits (bfloat16 is an i16 here); numpy rounds each add
        # to bfloat16 as PyTorch's scatter_add does
        raise UnsupportedInLLVM("bfloat16 scatter-add")
    emitter = KernelEmitter(
        module, name, _ScatterPlan(), buffer_args, buffer_dtypes, set(), buffer_sizes, symbols
    )
    b = emitter.builder

    def unflatten(flat, sizes, prefix):
        env = {}
        vars_ = [sym.Var(f"{prefix}{i}", s) for i, s in enumerate(sizes)]
        rem = flat
        for v in reversed(vars_):
            if v is vars_[0]:
                env[v] = rem
            else:
                env[v] = b.srem(rem, emitter.sizes.value(v.size))
                rem = b.sdiv(rem, emitter.sizes.value(v.size))
        return vars_, env

    def total(sizes):  # symbolic sizes (kernels for every size) are read from the symbols
        n = 1
        for s in sizes:
            n *= s
        return emitter.sizes.value(n)

    def init_body(i):
        vars_, env = unflatten(i, data.base_ranges, "b")
        handler = LLVMOps(emitter, 1, env)
        with set_ops_handler(handler):
            value = data.base_fn(vars_)
        if value.dtype is not buf.dtype:
            value = handler.to_dtype(value, buf.dtype)
        emitter.store(buf, value, vars_, handler, 1)

    def scatter_body(i):
        vars_, env = unflatten(i, data.ranges, "x")
        handler = LLVMOps(emitter, 1, env)
        with set_ops_handler(handler):
            targets = data.index_fn(vars_)
            value = data.value_fn(vars_)
        if value.dtype is not buf.dtype:
            value = handler.to_dtype(value, buf.dtype)
        expr = buf.layout.offset_expr(targets)
        offset = emitter.clamp(emitter.emit_index(expr, handler.env, 1), expr, buf.name, 1)
        ptr = b.gep(emitter.pointer(buf.name), [offset])
        raw = value.value
        if buf.dtype is dt.bool_:
            raw = b.zext(raw, I8)
        if data.mode == "add":
            old = V(emitter.builder.load(ptr), buf.dtype)
            if buf.dtype is dt.bool_:
                old = V(b.icmp_unsigned("!=", old.value, ir.Constant(I8, 0)), dt.bool_)
                raw = b.zext(handler.logical_or(old, value).value, I8)
            else:
                raw = handler.add(old, value).value
        b.store(raw, ptr, align=buf.dtype.itemsize)

    emitter.loop(total(data.base_ranges), init_body, "init")
    emitter.loop(total(data.ranges), scatter_body, "scatter")
    b.ret_void()
    emitter.release()
    return emitter.function
