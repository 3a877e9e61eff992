"""Compile a schedule's kernels into one LLVM module and run them, multithreaded.

Each kernel is emitted into a scratch module first: a kernel using something the LLVM generator
does not support (logged with the reason) runs through the numpy executor instead, so a graph
never falls back as a whole for one kernel. The rest go into one module per graph, JIT-compiled
once (and cached on disk by ``llvm.jit``). Kernels take ``(row_start, row_end, buffers)``; when the
work is large enough to pay for it, rows are cut into chunks that the calling thread and the
helper threads of ``cpu_pool`` claim one by one, in native code (no GIL, no Python per chunk).

A graph compiled before skips code generation altogether: the compiled-graph index
(``graph_index``: in memory, and on disk under ``$KILN_CACHE_DIR/llvm/graphs``) maps a key of the
lowered graph — its nodes, input layouts, schedule outline and kiln's source — to the cached
object, so a warm compile neither builds nor prints LLVM IR (which costs more than loading the
object).
"""

from __future__ import annotations

import logging
import re
import threading

from llvmlite import ir

from ...runtime import dtypes as dt
from .. import config
from ..ir import Reduction
from ..scheduler import Kernel, ScatterStep, Schedule
from . import cpu_pool, graph_index
from .cpu_pool import INDEX_ERRORS, KERNEL_TYPE, RowKernel
from .kernel_structure import EMITTED, kernel_shape, structure_key, verify_reuse
from .llvm import jit as llvm_jit
from .llvm import object_worker
from .llvm.kernel import UnsupportedInLLVM, emit_kernel, emit_scatter_kernel, release_module
from .llvm.loop_plan import plan_kernel
from .llvm.transposing_copy import TransposingCopy, copy_ir, transposing_copy

__all__ = ["CPUKernels", "bind_kernel"]

log = logging.getLogger("kiln.inductor")


class _SingleRow:
    rows = 1


def _scatter_buffer_names(buf) -> list:
    from ..scheduler import _scatter_reads

    names = [n for n in _scatter_reads(buf)]
    if buf.name not in names:
        names.append(buf.name)
    # a scatter's targets are read from an index tensor
    return [*names, INDEX_ERRORS]


def _buffer_names(kernel: Kernel, plan, sched: Schedule) -> list:
    from ..dependencies import reads_of, uses_indirect

    names = []
    gathers = False
    for node in kernel.nodes:
        index, rindex = plan.node_index[node.name]
        gathers = gathers or uses_indirect(node, index, rindex)
        for r in reads_of(node, index, rindex):
            if r.name not in names and r.name not in kernel.locals:
                names.append(r.name)
        if node.name not in kernel.locals and node.name not in names:
            names.append(node.name)
    return [*names, INDEX_ERRORS] if gathers else names


def bind_kernel(
    kernel: tuple, rows: int, work: int, names: list, plan=None, sizes=None
) -> RowKernel:
    """The callable kernel for ``(compiled module, function name)`` over buffers ``names``
    (``sizes``: those a kernel for every size is called at, ``RowKernel.sizes``)."""
    module, name = kernel
    address = module.address(name)
    fn = KERNEL_TYPE(address)
    fn._kiln_module = module  # the engine owns the machine code: keep it alive
    return RowKernel(name, fn, address, rows, work, names, plan, _sizes_of(plan, sizes))


def _sizes_of(plan, sizes=None):
    """The size arguments of a kernel: ``sizes`` given, else those of a transposing copy."""
    return plan.sizes if sizes is None and isinstance(plan, TransposingCopy) else sizes


class CPUKernels:
    """The compiled kernels of one schedule, by step index (None for steps run elsewhere).

    ``graph_key`` (from :func:`kiln.inductor.compile_fx.compile_graph`: the graph's code, its
    input layouts and kiln's own source) identifies the LLVM IR this schedule produces without
    producing it. With it, a graph compiled before (in this process or, through the on-disk
    index, an earlier one) skips emitting and printing the IR — the largest part of a warm
    compile — and loads its object directly.
    """

    def __init__(
        self,
        sched: Schedule,
        dtypes: dict,
        sizes: dict | None = None,
        graph_key: str | None = None,
        symbols: tuple = (),
    ):
        self.sched = sched
        self.by_step: dict[int, RowKernel] = {}
        self.numpy_steps: dict[int, str] = {}  # step index -> why it runs in numpy
        self._kernel_ir: list | None = []  # (function, IR) per distinct kernel; None: on disk
        self._entry: graph_index.GraphEntry | None = None
        self._index_key: str | None = None
        self._compiling = None  # the background compile's future until its result is taken
        sizes = sizes or {}
        # kernels for every size: the size symbols whose values follow the buffer pointers
        self.symbols = list(symbols)
        steps, self._twins = _plan_steps(sched, dtypes, sizes, self.symbols)
        key = None
        if graph_key is not None:
            key = llvm_jit.derived_key(
                graph_key, _signature(sched, steps, dtypes, sizes, self.symbols)
            )
            if self._load(key, steps):
                return
        # each kernel's IR alone, its function named "kernel": equal IR is one kernel, compiled
        # (or found compiled) once however often the graph, or other graphs, repeat it. LLVM
        # works on the JIT's background thread while the caller goes on (emitting the graph's
        # later kernels, the next graph, the glue): the IR goes over in pieces of about
        # ``_PIECE_BYTES`` as it is emitted, and a kernel's first call waits for the graph's
        # compile to be done and recorded (so that, once the graph has run, its cache is on disk)
        self._index_key = key
        piece: dict[str, str] = {}  # kernel key -> IR, not handed over yet
        uses = 0  # steps calling the piece's kernels (``JitStats.kernel_uses``)
        size = 0
        jobs: list = []
        step_keys: dict[int, str] = {}
        texts: dict[str, str] = {}  # every distinct kernel's IR

        cpu_pool.build_ahead()

        def hand_over():
            nonlocal piece, uses, size
            jobs.append(llvm_jit.compile_in_background(piece, uses))
            piece, uses, size = {}, 0, 0

        for i, kernel_key, text in self._emit_each(steps, dtypes, sizes):
            step_keys[i] = kernel_key
            uses += 1
            if kernel_key not in texts:
                piece[kernel_key] = texts[kernel_key] = text
                size += len(text)
            if size >= _PIECE_BYTES:
                hand_over()
        if uses:
            hand_over()
        self._compiling = llvm_jit.in_background(
            _remember_graph, jobs, step_keys, key, dict(self.numpy_steps), texts
        )
        if key is not None:
            graph_index.expect(key, self._compiling)
        for i, _, plan, work, names in steps:
            if i in step_keys:
                self.by_step[i] = _CompilingKernel(self._compiling, step_keys[i], plan, work, names)

    @property
    def index_key(self) -> str | None:
        """The key of this graph's entry in the compiled-graph index (None: not recorded; a
        graph still compiling is recorded when its kernels are)."""
        return self._entry.key if self._entry is not None else self._index_key

    @property
    def compiling(self) -> bool:
        """Whether the background compile's result has not been taken yet."""
        return self._compiling is not None

    def wait(self) -> None:
        """Wait for the background compile, raising what it raised."""
        self._compiled()

    def _compiled(self) -> None:
        """Wait for the background compile (if any) and take what it recorded."""
        if self._compiling is None:
            return
        _, self._kernel_ir, entry = self._compiling.result()
        self._compiling = None
        if entry is not None:
            self._entry = entry

    @property
    def ir_text(self) -> str:
        """The kernels' LLVM IR as generated, one module per distinct kernel (read back from the
        cache after a hit: only dumps want it)."""
        texts = self._stored_kernel_ir()
        if texts is None:
            return "; LLVM IR not kept in the cache\n"
        return "\n".join(
            f"; kernel {name}\n" + text.replace(f'@"{_KERNEL}"(', f'@"{name}"(', 1)
            for name, text in texts
        )

    @property
    def module_ir(self) -> str:
        """The kernels' LLVM IR linked into one module (for packages)."""
        texts = self._stored_kernel_ir()
        if texts is None:
            raise RuntimeError("the kernels' LLVM IR is not kept in the cache")
        return llvm_jit.linked_ir(texts)

    def _stored_kernel_ir(self) -> list | None:
        self._compiled()
        if self._kernel_ir is not None:
            return self._kernel_ir
        return self._entry.stored_ir() if self._entry is not None else None

    def _bind(self, i: int, kernel: tuple, plan, work: int, names: list) -> None:
        self.by_step[i] = bind_kernel(kernel, plan.rows, work, names, plan)

    def _load(self, key: str, steps) -> bool:
        """Take the kernels from a graph compiled before under ``key``; False when there is none."""
        entry = graph_index.recall(key)
        if entry is None:
            return False
        pending = [s for s in steps if s[0] not in entry.numpy_steps]
        if sorted(s[0] for s in pending) != sorted(entry.kernels):
            return False  # not what this schedule calls: compile it afresh
        self.numpy_steps = dict(entry.numpy_steps)
        self._kernel_ir = None if pending else []
        self._entry = entry
        for i, _, plan, work, names in pending:
            self._bind(i, entry.kernels[i], plan, work, names)
        return True

    def _emit_each(self, steps, dtypes, sizes):
        """``(step index, kernel key, IR)`` for each step, as it is emitted; a kernel the generator
        cannot handle runs in numpy (logged with the reason)."""
        triple = llvm_jit.host_target().triple
        dtypes = {**dtypes, INDEX_ERRORS: dt.int64}  # the gathers' error flag
        verify = verify_reuse()
        made: dict[int, tuple] = {}  # step index -> (kernel key, IR), for its twins
        for i, step, plan, _, names in steps:
            twin = self._twins.get(i)
            if twin is not None and not verify:
                llvm_jit.count_emitted(0, 1)
                if twin in made:
                    yield i, *made[twin]
                else:  # the first runs in numpy: so does its twin
                    self.numpy_steps[i] = self.numpy_steps[twin]
                continue
            if isinstance(plan, TransposingCopy):  # one kernel for every size
                made[i] = _copy_kernel(plan.width, triple)
                yield i, *made[i]
                continue
            local = [n.name for n in getattr(step, "nodes", ()) if n.name not in names]
            structure, traces = None, None
            if not isinstance(step, ScatterStep):
                structure, traces = structure_key(
                    plan, names, local, step.locals, dtypes, sizes, self.symbols
                )
            emitted = EMITTED.get(structure) if structure is not None else None
            llvm_jit.count_emitted(int(emitted is None), int(emitted is not None))
            if emitted is not None and not verify:
                made[i] = emitted
                yield i, *emitted
                continue
            module = ir.Module(name="kiln_kernel")
            module.triple = triple
            try:
                if isinstance(step, ScatterStep):
                    emit_scatter_kernel(
                        module, _KERNEL, step.buffer, names, dtypes, sizes, self.symbols
                    )
                else:
                    emit_kernel(
                        module,
                        _KERNEL,
                        plan,
                        names,
                        dtypes,
                        step.locals,
                        sizes,
                        self.symbols,
                        traces,
                    )
                text = str(module)
            except UnsupportedInLLVM as e:
                self.numpy_steps[i] = str(e)
                log.info("inductor: %s runs in numpy: %s", step.name, e)
                continue
            finally:
                release_module(module)
            text = _canonical_names(text, names + local)
            kernel_key = llvm_jit.kernel_key(text)
            if emitted is not None and emitted != (kernel_key, text):
                raise AssertionError(
                    f"inductor: {step.name} has the structure key of a kernel emitted before "
                    "but different IR (kernel_structure misses something the emitter reads)"
                )
            if twin is not None and made.get(twin) != (kernel_key, text):
                raise AssertionError(
                    f"inductor: {step.name} has the shape of an earlier kernel but different IR "
                    "(kernel_shape misses something the emitter reads)"
                )
            if structure is not None:
                EMITTED.put(structure, kernel_key, text)
            made[i] = (kernel_key, text)
            yield i, kernel_key, text


# IR handed to the background thread at a time: small enough that LLVM starts on a graph's
# first kernels while later ones are emitted, large enough that LLVM's cost per module (a few
# milliseconds) stays small beside the work
_PIECE_BYTES = 128 * 1024


def _remember_graph(
    jobs: list, step_keys: dict, key: str | None, numpy_steps: dict, texts: dict
) -> tuple:
    """After the graph's pieces (the background thread runs jobs in order): record it in the
    compiled-graph index under ``key``. ``({kernel key: (module, function)}, kernel IR, entry)``;
    the IR is None when the entry keeps it on disk (only dumps want it: the graph need not hold
    it in memory)."""
    compiled = {}
    for job in jobs:
        compiled.update(job.result())
    kernels = {i: compiled[k] for i, k in step_keys.items()}
    kernel_ir = sorted({(compiled[k][1], t) for k, t in texts.items()})
    entry = None
    if key is not None:
        entry = graph_index.remember(key, kernels, numpy_steps, kernel_ir)
        if entry.ir_path is not None:
            kernel_ir = None
    return compiled, kernel_ir, entry


_READY = threading.Lock()


class _CompilingKernel(RowKernel):
    """A kernel whose machine code the JIT's background thread is still making. Its first call
    waits for it and makes it a plain ``RowKernel`` (so later calls cost nothing extra); until
    then ``fn`` holds the background job and the kernel's key."""

    __slots__ = ()

    def __init__(self, job, key: str, plan, work: int, names: list):
        function = llvm_jit.kernel_function(key)
        sizes = _sizes_of(plan)
        super().__init__(function, (job, key), 0, plan.rows, work, names, plan, sizes)

    def __call__(self, pointers, rows: int | None = None, work: int = 0) -> None:
        # through the class, not ``self``: another thread's call may have made this object a
        # plain RowKernel (which has no ``ready``) since this call was dispatched
        _CompilingKernel.ready(self)
        RowKernel.__call__(self, pointers, rows, work)

    def ready(self) -> None:
        """Wait for the machine code (raising what compiling it raised) and bind it."""
        with _READY:
            if type(self) is not _CompilingKernel:
                return  # another thread bound it meanwhile
            job, key = self.fn
            bound = bind_kernel(job.result()[0][key], self.rows, self.work, self.args, self.plan)
            self.name, self.fn, self.address = bound.name, bound.fn, bound.address
            self.__class__ = RowKernel


_KERNEL = (
    object_worker.KERNEL_NAME
)  # every kernel's function name in its own IR (renamed when linked)


def _canonical_names(text: str, names: list) -> str:
    """The kernel's IR with the values named after its buffers (``%"p_buf8"``) named after their
    positions in ``names`` (arguments, then local buffers) instead, so kernels equal up to buffer
    names have equal IR. Only value names change: the key stays the very IR that is compiled."""
    positions: dict[str, int] = {}
    for position, name in enumerate(names):
        positions.setdefault(name, position)

    def renamed(match: re.Match) -> str:
        position = positions.get(match.group(2))
        return match.group(0) if position is None else f'"{match.group(1)}_#{position}"'

    # one pass over the text (a replace per buffer walked a kernel's IR twice per buffer)
    return _BUFFER_VALUE.sub(renamed, text)


_BUFFER_VALUE = re.compile(r'"(p|cols)_([^"]*)"')


def _plan_steps(sched: Schedule, dtypes: dict, sizes: dict, symbols) -> tuple[list, dict]:
    """``(index, step, plan, work, buffer names)`` for every step the LLVM generator may
    compile, and ``{step index: index of an earlier step}`` for kernels equal to an earlier one
    up to buffer names (``kernel_structure.kernel_shape``): such a twin takes the earlier one's
    plan and IR, its arguments renamed, instead of being planned, described and emitted again
    (``KILN_VERIFY_KERNEL_REUSE`` works each out anyway and compares)."""
    steps = []
    twins: dict[int, int] = {}
    first: dict[str, tuple] = {}  # shape digest -> (step index, plan, buffer names, names seen)
    verify = verify_reuse()
    for i, step in enumerate(sched.steps):
        if isinstance(step, ScatterStep):
            steps.append((i, step, _SingleRow(), 0, _scatter_buffer_names(step.buffer)))
        elif isinstance(step, Kernel):
            copy = None
            if config.copies_for_every_size and not symbols:
                copy = transposing_copy(step, dtypes)
            if copy is not None:  # compiled once for every size: no plan of its own
                steps.append((i, step, copy, _work(step), [copy.source, copy.target]))
                continue
            shape = kernel_shape(step, dtypes, sizes, symbols)
            earlier = first.get(shape[0]) if shape is not None else None
            if earlier is not None and not verify:
                j, plan, names, seen = earlier
                renamed = dict(zip(seen, shape[1]))
                twins[i] = j
                steps.append((i, step, plan, _work(step), [renamed.get(n, n) for n in names]))
                continue
            plan = plan_kernel(step)
            names = _buffer_names(step, plan, sched)
            if earlier is not None:  # verifying: the renamed arguments must be these
                renamed = dict(zip(earlier[3], shape[1]))
                if [renamed.get(n, n) for n in earlier[2]] != names:
                    raise AssertionError(
                        f"inductor: {step.name} has the shape of an earlier kernel but other "
                        "arguments (kernel_shape misses something the planner reads)"
                    )
                twins[i] = earlier[0]
            elif shape is not None:
                first[shape[0]] = (i, plan, names, shape[1])
            steps.append((i, step, plan, _work(step), names))
    return steps, twins


def _copy_kernel(width: int, triple: str) -> tuple:
    """``(kernel key, IR)`` of the transposing copy of ``width``-byte elements."""
    text = copy_ir(width, triple)
    return llvm_jit.kernel_key(text), text


def _signature(sched: Schedule, steps, dtypes: dict, sizes: dict, symbols=()) -> str:
    """What the schedule looks like from outside its kernels: names, fusion, argument order,
    row counts, buffer dtypes and sizes. Part of the cache key, so that a kernel found under a
    graph key always has the name and arguments this process will call it with."""
    lines = [step.describe() for step in sched.steps]
    lines += [
        f"{i} {plan.rows} {work} {names} {_sizes_of(plan)}" for i, _, plan, work, names in steps
    ]
    lines += [f"{n} {getattr(d, 'name', d)} {sizes.get(n)}" for n, d in sorted(dtypes.items())]
    lines += [f"{s.name} [{s.lower}, {s.upper}]" for s in symbols]
    return "\n".join(lines)


def _work(kernel: Kernel) -> int:
    n = 1
    for s in kernel.outer:
        n *= s
    for s in kernel.inner:
        n *= s
    per = sum(4 if isinstance(node.data, Reduction) else 2 for node in kernel.nodes)
    return n * per
