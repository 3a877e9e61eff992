"""The threads that share compiled CPU work, driven from native code.

A compiled step hands work to helper threads every few hundred microseconds (each kernel, each
matmul). Two things make that slow when the helpers are ordinary Python threads on a shared
machine: a helper sleeping between handoffs must be woken, and a helper returning to Python
must take the GIL (another sleep and wake-up). The OS places a woken thread next to the thread
that woke it when the other core looks busy, and both then share one core for a scheduler tick
or two: a 3 ms matmul split in two measured 6 ms half the time at load 0.5.

So the work loop is native (a few functions of LLVM IR, JIT-compiled once per process outside
``llvm.jit``'s counters): a job is a small int64 record — a generated kernel over row chunks,
or a table of BLAS ``gemm`` calls — and chunks are claimed with an atomic counter by the posting
thread and by helpers, which never touch Python while they work. A helper spins on its slot
(``pause``, ~2 ms by the cycle counter) after each job, so it stays on its core through a step,
and only then returns to Python to sleep on a lock. The posting thread waits for helpers still
inside a chunk; a helper that has not taken the job yet has it taken back, so a thread the OS
runs late costs its chunk, never a wait for it to start. Without LLVM, jobs run on the calling
thread alone.
"""

from __future__ import annotations

import ctypes
import threading

import numpy as np

from ...runtime import cpu_load, flags
from .. import config

__all__ = [
    "Pool", "KERNEL", "SGEMM", "DGEMM", "GEMM_FIELDS", "thread_pool", "RowKernel", "KERNEL_TYPE",
    "build_ahead", "INDEX_ERRORS", "index_flag", "index_error",
]  # fmt: skip

# cycles a helper spins for the next job before it sleeps (~2 ms at 2.5-3.5 GHz)
SPIN_CYCLES = 6_000_000

KERNEL, SGEMM, DGEMM = 1, 2, 3
# per gemm chunk: transA, transB, M, N, K, A, lda, B, ldb, C, ldc (row-major cblas arguments)
GEMM_FIELDS = 11
_JOB_WORDS = 8  # kind, count, next, fn, rows | table, step, pointers, -

_native: list = []  # [run_main, helper_run, engine] once built; [None] if it cannot be
_native_lock = threading.Lock()


def native():
    """(main_run, helper_run) ctypes functions, or None without LLVM."""
    if not _native:
        with _native_lock:
            if not _native:
                try:
                    _native.extend(_build())
                except Exception:  # noqa: BLE001 - no LLVM (or no x86): single-threaded jobs
                    _native.append(None)
    return None if _native[0] is None else (_native[0], _native[1])


def build_ahead() -> None:
    """Have the JIT's background thread build the native work loop before the kernels it is
    about to compile: built on demand instead, by the first kernel call, it waited behind
    those compiles for LLVM's lock (0.28 s of a nanoGPT step's cold compile)."""
    if not _native:
        from .llvm import jit as llvm_jit

        llvm_jit.in_background(native)


def _build():
    import llvmlite.binding as llvm
    import llvmlite.ir as ir

    from .llvm import jit as llvm_jit

    i32, i64 = ir.IntType(32), ir.IntType(64)
    f32, f64 = ir.FloatType(), ir.DoubleType()
    p64 = i64.as_pointer()
    m = ir.Module(name="kiln_pool")
    m.triple = llvm_jit.host_target().triple
    cycles = ir.Function(m, ir.FunctionType(i64, []), "llvm.readcyclecounter")
    x86 = m.triple.startswith(("x86_64", "i386", "i686"))
    pause_fn = (
        ir.Function(m, ir.FunctionType(ir.VoidType(), []), "llvm.x86.sse2.pause") if x86 else None
    )

    def pause(b):  # a spin-wait hint to the core (x86 only; elsewhere a plain re-read)
        if x86:
            b.call(pause_fn, [])

    kernel_ty = ir.FunctionType(ir.VoidType(), [i64, i64, ir.IntType(8).as_pointer().as_pointer()])

    def gemm_ty(t):
        args = [i32, i32, i32, i64, i64, i64, t, t.as_pointer(), i64, t.as_pointer(), i64]
        return ir.FunctionType(ir.VoidType(), args + [t, t.as_pointer(), i64])

    def word(b, base, k):
        return b.load(b.gep(base, [ir.Constant(i64, k)]))

    # void run_chunk(i64* job, i64 i)
    run_chunk = ir.Function(m, ir.FunctionType(ir.VoidType(), [p64, i64]), "run_chunk")
    job, i = run_chunk.args
    b = ir.IRBuilder(run_chunk.append_basic_block("entry"))
    kind = word(b, job, 0)
    kern_bb = run_chunk.append_basic_block("kernel")
    gemm_bb = run_chunk.append_basic_block("gemm")
    b.cbranch(b.icmp_signed("==", kind, ir.Constant(i64, KERNEL)), kern_bb, gemm_bb)
    b.position_at_end(kern_bb)
    fn = b.inttoptr(word(b, job, 3), kernel_ty.as_pointer())
    rows, step = word(b, job, 4), word(b, job, 5)
    start = b.mul(i, step)
    end = b.add(start, step)
    end = b.select(b.icmp_signed("<", end, rows), end, rows)
    ptrs = b.inttoptr(word(b, job, 6), kernel_ty.args[2])
    b.call(fn, [start, end, ptrs])
    b.ret_void()
    b.position_at_end(gemm_bb)
    row = b.gep(b.inttoptr(word(b, job, 4), p64), [b.mul(i, ir.Constant(i64, GEMM_FIELDS))])
    f = [word(b, row, k) for k in range(GEMM_FIELDS)]
    single_bb = run_chunk.append_basic_block("sgemm")
    double_bb = run_chunk.append_basic_block("dgemm")
    b.cbranch(b.icmp_signed("==", kind, ir.Constant(i64, SGEMM)), single_bb, double_bb)
    for bb, t in ((single_bb, f32), (double_bb, f64)):
        b.position_at_end(bb)
        gemm = b.inttoptr(word(b, job, 3), gemm_ty(t).as_pointer())
        ptr = t.as_pointer()
        b.call(
            gemm,
            [ir.Constant(i32, 101), b.trunc(f[0], i32), b.trunc(f[1], i32), f[2], f[3], f[4],
             ir.Constant(t, 1.0), b.inttoptr(f[5], ptr), f[6], b.inttoptr(f[7], ptr), f[8],
             ir.Constant(t, 0.0), b.inttoptr(f[9], ptr), f[10]],
        )  # fmt: skip
        b.ret_void()

    # void work(i64* job): claim chunks until none is left
    work = ir.Function(m, ir.FunctionType(ir.VoidType(), [p64]), "work")
    (job,) = work.args
    b = ir.IRBuilder(work.append_basic_block("entry"))
    loop = work.append_basic_block("loop")
    body = work.append_basic_block("body")
    done = work.append_basic_block("done")
    b.branch(loop)
    b.position_at_end(loop)
    claimed = b.atomic_rmw("add", b.gep(job, [ir.Constant(i64, 2)]), ir.Constant(i64, 1), "seq_cst")
    b.cbranch(b.icmp_signed("<", claimed, word(b, job, 1)), body, done)
    b.position_at_end(body)
    b.call(run_chunk, [job, claimed])
    b.branch(loop)
    b.position_at_end(done)
    b.ret_void()

    # i64 helper_run(i64* slot, i64 budget): run posted jobs; 0 after ``budget`` idle cycles,
    # 1 when told to stop. slot[0]: job address (bit 0 set once taken), slot[1]: stop
    helper = ir.Function(m, ir.FunctionType(i64, [p64, i64]), "helper_run")
    slot, budget = helper.args
    b = ir.IRBuilder(helper.append_basic_block("entry"))
    entry = b.block
    t0 = b.call(cycles, [])
    head = helper.append_basic_block("head")
    check = helper.append_basic_block("check")
    take = helper.append_basic_block("take")
    run = helper.append_basic_block("run")
    idle = helper.append_basic_block("idle")
    stop = helper.append_basic_block("stop")
    timeout = helper.append_basic_block("timeout")
    b.branch(head)
    b.position_at_end(head)
    since = b.phi(i64)
    since.add_incoming(t0, entry)
    stop_flag = b.load_atomic(b.gep(slot, [ir.Constant(i64, 1)]), "acquire", 8)
    b.cbranch(b.icmp_signed("!=", stop_flag, ir.Constant(i64, 0)), stop, check)
    b.position_at_end(check)
    posted = b.load_atomic(slot, "acquire", 8)
    free = b.and_(
        b.icmp_signed("!=", posted, ir.Constant(i64, 0)),
        b.icmp_signed("==", b.and_(posted, ir.Constant(i64, 1)), ir.Constant(i64, 0)),
    )
    b.cbranch(free, take, idle)
    b.position_at_end(take)
    pair = b.cmpxchg(slot, posted, b.or_(posted, ir.Constant(i64, 1)), "acq_rel", "acquire")
    b.cbranch(b.extract_value(pair, 1), run, idle)
    b.position_at_end(run)
    b.call(work, [b.inttoptr(posted, p64)])
    b.store_atomic(ir.Constant(i64, 0), slot, "release", 8)
    since.add_incoming(b.call(cycles, []), run)
    b.branch(head)
    b.position_at_end(idle)
    pause(b)
    now = b.call(cycles, [])
    since.add_incoming(since, idle)
    b.cbranch(b.icmp_unsigned("<", b.sub(now, since), budget), head, timeout)
    b.position_at_end(stop)
    b.ret(ir.Constant(i64, 1))
    b.position_at_end(timeout)
    b.ret(ir.Constant(i64, 0))

    # void main_run(i64* job, i64* slots, i64 n): work, then for each helper slot posted the
    # job: take it back if untaken, else wait until the helper is done with it
    main = ir.Function(m, ir.FunctionType(ir.VoidType(), [p64, p64, i64]), "main_run")
    job, slots, n = main.args
    b = ir.IRBuilder(main.append_basic_block("entry"))
    entry = b.block
    b.call(work, [job])
    addr = b.ptrtoint(job, i64)
    outer = main.append_basic_block("outer")
    poll = main.append_basic_block("poll")
    retract = main.append_basic_block("retract")
    wait = main.append_basic_block("wait")
    next_bb = main.append_basic_block("next")
    finish = main.append_basic_block("finish")
    b.branch(outer)
    b.position_at_end(outer)
    k = b.phi(i64)
    k.add_incoming(ir.Constant(i64, 0), entry)
    b.cbranch(b.icmp_signed("<", k, n), poll, finish)
    b.position_at_end(poll)
    s = b.inttoptr(b.load(b.gep(slots, [k])), p64)
    v = b.load_atomic(s, "acquire", 8)
    b.cbranch(b.icmp_signed("==", v, addr), retract, wait)
    b.position_at_end(retract)
    back = b.cmpxchg(s, addr, ir.Constant(i64, 0), "acq_rel", "acquire")
    b.cbranch(b.extract_value(back, 1), next_bb, poll)
    b.position_at_end(wait)
    busy = b.icmp_signed("!=", v, ir.Constant(i64, 0))
    spin_bb = main.append_basic_block("spin")
    b.cbranch(busy, spin_bb, next_bb)
    b.position_at_end(spin_bb)
    pause(b)
    b.branch(poll)
    b.position_at_end(next_bb)
    k.add_incoming(b.add(k, ir.Constant(i64, 1)), next_bb)
    b.branch(outer)
    b.position_at_end(finish)
    b.ret_void()

    with llvm_jit._LOCK:
        parsed = llvm.parse_assembly(str(m))
        parsed.verify()
        engine = llvm.create_mcjit_compiler(parsed, llvm_jit._new_target_machine(2))
        engine.finalize_object()
        main_fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)(
            engine.get_function_address("main_run")
        )
        helper_fn = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64)(
            engine.get_function_address("helper_run")
        )
    return [main_fn, helper_fn, engine]


class _Helper:
    """A helper thread: ``helper_run`` (native) until idle, then asleep on ``wake``."""

    def __init__(self, name: str, run):
        self.run = run
        self.slot = np.zeros(2, np.int64)  # posted job address, stop flag
        self.addr = self.slot.ctypes.data
        self.sleeping = False
        self.wake = threading.Lock()
        self.wake.acquire()
        self.thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self.thread.start()

    def poke(self) -> None:
        if self.sleeping:
            try:
                self.wake.release()
            except RuntimeError:  # released already: the helper wakes anyway
                pass

    def _loop(self) -> None:
        while not self.run(self.addr, SPIN_CYCLES):
            self.sleeping = True
            if not self.slot[0] and not self.slot[1]:
                self.wake.acquire()
            self.sleeping = False


class Pool:
    """``threads - 1`` helpers; the thread calling ``run_job`` is the other one."""

    def __init__(self, threads: int):
        self.threads = threads
        fns = native()
        self.main, run = fns if fns is not None else (None, None)
        self.busy = threading.Lock()  # one job at a time; a concurrent caller runs alone
        self.helpers = []
        if run is not None:
            self.helpers = [_Helper(f"kiln-kernel_{i}", run) for i in range(threads - 1)]
        self.slots = np.array([h.addr for h in self.helpers], np.int64)
        self._cores = cpu_load.cores()
        self._spare = True

    @property
    def parallel(self) -> bool:
        """Whether to hand work to the helpers now: they exist, and the machine has a core
        for them (see ``_cores_spare``)."""
        return bool(self.helpers) and self._cores_spare()

    def _cores_spare(self) -> bool:
        """OpenMP's dynamic thread rule (``OMP_DYNAMIC``): on a machine whose other processes
        keep its cores busy (``cpu_load``: their CPU time, not this process's threads), a
        helper is descheduled in the middle of its chunk and the posting thread waits a
        scheduler tick for it: a GPT step of 5 ms took 15-30 ms at load 6 on 2 cores, twice its
        time on one thread. Jobs then run on the calling thread alone. Read every
        ``cpu_load.CHECK_SECONDS``; switching back needs the others to leave a little more room
        than switching off."""
        if not config.threads_follow_load:
            return True
        free = self._cores - 1 - cpu_load.others_busy_now()  # after the calling thread
        self._spare = free >= len(self.helpers) - (0.75 if self._spare else 0.5)
        return self._spare

    def shutdown(self) -> None:
        for h in self.helpers:
            h.slot[1] = 1
            h.poke()

    def run_job(self, job: np.ndarray) -> None:
        """Run a job record (``KERNEL``/``SGEMM``/``DGEMM``) on this thread and the helpers.
        The record (and whatever it points to) must stay alive until this returns."""
        count = int(job[1])
        helpers = self.helpers[: max(count - 1, 0)]
        if not helpers or not self.parallel or not self.busy.acquire(blocking=False):
            self.main(job.ctypes.data, self.slots.ctypes.data, 0)  # alone
            return
        try:
            addr = job.ctypes.data
            for h in helpers:
                h.slot[0] = addr
                h.poke()
            self.main(addr, self.slots.ctypes.data, len(helpers))
        finally:
            self.busy.release()

    @staticmethod
    def kernel_job(fn_address: int, rows: int, step: int, pointers_address: int) -> np.ndarray:
        job = np.zeros(_JOB_WORDS, np.int64)
        job[0], job[1] = KERNEL, -(-rows // step)
        job[3], job[4], job[5], job[6] = fn_address, rows, step, pointers_address
        return job

    @staticmethod
    def gemm_job(kind: int, gemm_address: int, table: np.ndarray) -> np.ndarray:
        job = np.zeros(_JOB_WORDS, np.int64)
        job[0], job[1] = kind, len(table)
        job[3], job[4] = gemm_address, table.ctypes.data
        return job


_pool: list = [None]
_pool_lock = threading.Lock()


def _drop_pool(n: int) -> None:
    """``kiln.set_num_threads``: the pool is made again, of the new size, when next needed."""
    with _pool_lock:
        if _pool[0] is not None:
            _pool[0].shutdown()
            _pool[0] = None


flags.on_num_threads_change(_drop_pool)


def thread_pool() -> Pool:
    """The helper threads of compiled CPU code (kernels, matmuls and packages), made on first
    use: one pool per process, so two users never put two sets of threads on the cores."""
    pool = _pool[0]
    if pool is None:
        with _pool_lock:
            if _pool[0] is None:
                _pool[0] = Pool(flags.get_num_threads())
            pool = _pool[0]
    return pool


# below this many element-operations a kernel runs on the calling thread alone
SPLIT_WORK = 1 << 18

# work is cut into this many chunks per thread, each taken by whichever thread is free: a thread
# the OS runs late (its core shared with another process) then costs a chunk, not half the work
CHUNKS_PER_THREAD = 4

# a generated kernel: void kernel(i64 row_start, i64 row_end, void** buffers)
KERNEL_TYPE = ctypes.CFUNCTYPE(
    None, ctypes.c_int64, ctypes.c_int64, ctypes.POINTER(ctypes.c_void_p)
)

# the argument a kernel with gathers gets after its buffers: one int64 it sets to nonzero when
# an index read from memory was out of range; the wrapper (or a package's) checks it after the
# call and raises, as eager and PyTorch's compiled code raise
INDEX_ERRORS = "_index_errors"


def index_flag() -> np.ndarray:
    """A fresh error flag for one call of a kernel with gathers (threads running the same graph
    do not share one)."""
    return np.zeros(1, np.int64)


def index_error(
    where: str,
    names: tuple = (),
    lines: dict | None = None,
    error: type[Exception] = RuntimeError,
):
    """Raise ``error`` for an index outside its dimension: the type the op raises eagerly, as
    PyTorch's (``IndexError`` for ``x[idx]``, ``take``, ``embedding``; ``RuntimeError`` for
    ``gather``), so compiled code is caught where eager code is (``dependencies.
    index_error_type``); ``where`` names the kernel, and ``names`` the graph nodes it
    computes, each with its user line from ``lines``."""
    if names:
        lines = lines or {}
        where += ": " + ", ".join(f"{n}@{lines[n]}" if n in lines else n for n in names)
    raise error(
        "index out of bounds: an index tensor holds a value outside the dimension it indexes "
        f"(in compiled code, {where})"
    )


class RowKernel:
    """A compiled kernel over rows, called with its buffers' pointer array: on the calling
    thread alone, or cut into chunks the pool's threads claim when the work pays for it."""

    __slots__ = (
        "name", "fn", "address", "rows", "work", "args", "plan", "split", "sizes", "_size_array",
        "size_address",
    )  # fmt: skip

    def __init__(self, name, fn, address, rows, work, args, plan=None, sizes=None):
        self.name = name
        self.fn = fn
        self.address = address  # of the machine code, for the native thread pool
        self.rows = rows
        self.work = work
        self.args = args  # buffer names in pointer-array order
        self.plan = plan
        self.split = (0, 0)  # (threads, rows per chunk) worked out for; 0 rows: not split
        # a kernel compiled for every size and called at one (``llvm.transposing_copy``): its
        # sizes, whose int64 array's address the caller puts after the buffer pointers
        self.sizes = None if sizes is None else tuple(int(s) for s in sizes)
        self._size_array = None if sizes is None else (ctypes.c_int64 * len(sizes))(*sizes)
        self.size_address = 0 if sizes is None else ctypes.addressof(self._size_array)

    def __call__(self, pointers, rows: int | None = None, work: int = 0) -> None:
        """Run all rows; ``rows``/``work``: this call's, for a kernel compiled for every size
        (else the compiled ones, with the split worked out once per thread count)."""
        n = flags.get_num_threads()
        if rows is None:
            rows = self.rows
            threads, step = self.split
            if threads != n:
                step = _rows_per_chunk(n, rows, self.work)
                self.split = (n, step)
        else:
            step = _rows_per_chunk(n, rows, work)
        if not step:
            self.fn(0, rows, pointers)
            return
        pool = thread_pool()
        if not pool.parallel:
            self.fn(0, rows, pointers)
            return
        job = Pool.kernel_job(self.address, rows, step, ctypes.addressof(pointers))
        pool.run_job(job)


def _rows_per_chunk(threads: int, rows: int, work: int) -> int:
    """Rows per chunk the pool's threads take, or 0 to run on the calling thread alone."""
    if threads > 1 and rows > 1 and work >= SPLIT_WORK:
        return -(-rows // min(rows, threads * CHUNKS_PER_THREAD))
    return 0
