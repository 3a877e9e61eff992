"""Compile a schedule's kernels into one LLVM module and run them, multithreaded.

Each kernel is emitted into a scratch module first: a kernel using something the LLVM generator
does not support (logged with the reason) runs through the numpy executor instead, so a graph
never falls back as a whole for one kernel. The rest go into one module per graph, JIT-compiled
once (and cached on disk by ``llvm_jit``). Kernels take ``(row_start, row_end, buffers)``; rows are
split across a thread pool when the work is large enough to pay for the split (ctypes releases
the GIL during the call).
"""

from __future__ import annotations

import ctypes
import logging
import os
import threading
from concurrent.futures import ThreadPoolExecutor

from llvmlite import ir

from ..ir import Reduction
from ..scheduler import Kernel, ScatterStep, Schedule
from . import llvm_jit
from .llvm import UnsupportedInLLVM, emit_kernel, emit_scatter_kernel
from .loop_plan import plan_kernel

__all__ = ["CPUKernels", "set_num_threads", "get_num_threads"]

log = logging.getLogger("kiln.inductor")

_threads = [os.cpu_count() or 1]
_pool: list = [None]
_pool_lock = threading.Lock()

# below this many element-operations a kernel runs on the calling thread (a split costs ~100 us)
_SPLIT_WORK = 1 << 18


def set_num_threads(n: int) -> None:
    """Threads used by compiled CPU kernels (default: the number of cores)."""
    if n < 1:
        raise ValueError("set_num_threads needs a positive number")
    with _pool_lock:
        _threads[0] = int(n)
        if _pool[0] is not None:
            _pool[0].shutdown(wait=False)
            _pool[0] = None


def get_num_threads() -> int:
    return _threads[0]


def _executor() -> ThreadPoolExecutor:
    pool = _pool[0]
    if pool is None:
        with _pool_lock:
            if _pool[0] is None:
                _pool[0] = ThreadPoolExecutor(
                    max_workers=_threads[0], thread_name_prefix="kiln-kernel"
                )
            pool = _pool[0]
    return pool


_KERNEL_TYPE = ctypes.CFUNCTYPE(
    None, ctypes.c_int64, ctypes.c_int64, ctypes.POINTER(ctypes.c_void_p)
)


class _LLVMKernel:
    __slots__ = ("name", "fn", "rows", "work", "args", "plan")

    def __init__(self, name, fn, rows, work, args, plan):
        self.name = name
        self.fn = fn
        self.rows = rows
        self.work = work
        self.args = args  # buffer names in pointer-array order
        self.plan = plan

    def __call__(self, pointers) -> None:
        rows = self.rows
        n = _threads[0]
        if n == 1 or rows < 2 or self.work < _SPLIT_WORK:
            self.fn(0, rows, pointers)
            return
        parts = min(n, rows)
        step = (rows + parts - 1) // parts
        futures = [
            _executor().submit(self.fn, s, min(s + step, rows), pointers)
            for s in range(step, rows, step)
        ]
        self.fn(0, min(step, rows), pointers)
        for f in futures:
            f.result()


class _SingleRow:
    rows = 1


def _scatter_buffer_names(buf) -> list:
    from ..scheduler import _scatter_reads

    names = [n for n in _scatter_reads(buf)]
    if buf.name not in names:
        names.append(buf.name)
    return names


def _buffer_names(kernel: Kernel, plan, sched: Schedule) -> list:
    from ..dependencies import reads_of

    names = []
    for node in kernel.nodes:
        index, rindex = plan.node_index[node.name]
        for r in reads_of(node, index, rindex):
            if r.name not in names and r.name not in kernel.locals:
                names.append(r.name)
        if node.name not in kernel.locals and node.name not in names:
            names.append(node.name)
    return names


class CPUKernels:
    """The compiled kernels of one schedule, by step index (None for steps run elsewhere)."""

    def __init__(self, sched: Schedule, dtypes: dict, sizes: dict | None = None):
        self.sched = sched
        self.by_step: dict[int, _LLVMKernel] = {}
        self.numpy_steps: dict[int, str] = {}  # step index -> why it runs in numpy
        self.ir_text = ""
        self.compiled = None
        sizes = sizes or {}
        # emit every kernel into one module; a kernel the generator cannot handle is dropped
        # (it runs in numpy) and the module is rebuilt without it — rare, so emitted once usually
        while True:
            module, pending, failed = self._emit_all(sched, dtypes, sizes)
            if failed is None:
                break
            self.numpy_steps[failed[0]] = failed[1]
            log.info("inductor: %s runs in numpy: %s", sched.steps[failed[0]].name, failed[1])
        if pending:
            self.ir_text = str(module)
            self.compiled = llvm_jit.compile_module(self.ir_text)
            for i, name, plan, work, names in pending:
                fn = _KERNEL_TYPE(self.compiled.address(name))
                fn._kiln_module = self.compiled  # the engine owns the machine code: keep it alive
                self.by_step[i] = _LLVMKernel(name, fn, plan.rows, work, names, plan)

    def _emit_all(self, sched, dtypes, sizes):
        module = ir.Module(name="kiln_graph")
        module.triple = llvm_jit.host_target().triple
        pending = []
        for i, step in enumerate(sched.steps):
            if i in self.numpy_steps:
                continue
            try:
                if isinstance(step, ScatterStep):
                    names = _scatter_buffer_names(step.buffer)
                    emit_scatter_kernel(module, step.name, step.buffer, names, dtypes, sizes)
                    pending.append((i, step.name, _SingleRow(), 0, names))
                elif isinstance(step, Kernel):
                    plan = plan_kernel(step)
                    names = _buffer_names(step, plan, sched)
                    emit_kernel(module, step.name, plan, names, dtypes, step.locals, sizes)
                    pending.append((i, step.name, plan, _work(step), names))
            except UnsupportedInLLVM as e:
                return None, None, (i, str(e))
        return module, pending, None


def _work(kernel: Kernel) -> int:
    n = 1
    for s in kernel.outer:
        n *= s
    for s in kernel.inner:
        n *= s
    per = sum(4 if isinstance(node.data, Reduction) else 2 for node in kernel.nodes)
    return n * per
