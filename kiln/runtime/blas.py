"""numpy's OpenBLAS, owned by kiln: how many threads it may use for each product.

OpenBLAS brings its own thread pool and a process-wide thread count. A multithreaded call waits
at a barrier for every worker, so on a busy machine a product that would take 60 us on one core
waits milliseconds for a descheduled worker (an LSTM language model's 20x200x800 step products
measured ~100 ms each under a load average of 14), and after each call the workers spin ~100 ms,
taking a core from whatever runs next. So kiln decides per call: eager products below
``EAGER_PARALLEL_MACS`` run on the calling thread alone (``matmul``), larger ones may use
OpenBLAS's threads while other processes leave a core spare (``spare_cores``), at most
``kiln.set_num_threads`` of them (the products inside convolution
and batch norm kernels, which come several to a call, count the whole call: ``kernel_matmul``);
the inductor runs its large products as single-threaded blocks on its own kernel threads
(``inductor/extern_matmul.py``) under ``BLAS`` used as a context manager. Without numpy's ILP64
OpenBLAS (another BLAS vendor) products run as numpy runs them.
"""

from __future__ import annotations

import ctypes
import glob
import os
import sys
import sysconfig
import threading

import numpy as np

from . import cpu_load, flags

__all__ = [
    "BLAS",
    "OpenBlas",
    "EAGER_PARALLEL_MACS",
    "matmul",
    "products",
    "kernel_matmul",
]

# an eager product of fewer multiply-adds (~3 ms on one core) runs single-threaded: a second
# OpenBLAS thread saves less than a stalled barrier costs on a shared machine, and once started
# its workers spin on the other core for ~100 ms. An LSTM language model's 700x64x1000 decoder
# products (45M multiply-adds, ~1.1 ms each) took the main thread 31 ms a training step with
# OpenBLAS's threads against 23 ms without, and the process 61 against 33 ms (2 threads, load 10)
EAGER_PARALLEL_MACS = 1 << 27


class OpenBlas:
    """numpy's OpenBLAS, bound with ctypes: its thread count, its ILP64 ``gemm`` entry points.

    Used as a context manager it keeps OpenBLAS single-threaded (and its idle workers stopped)
    while the inductor's split products run on the kernel threads; ``single_call`` lowers the
    count without stopping the workers, for one small eager product.

    The thread count is OpenBLAS's ``blas_cpu_number``, written directly: its setter function
    re-creates the worker threads when raising the count back, and a new worker spins too.
    After a multithreaded call (eager code's matmuls), OpenBLAS's workers spin ~100 ms waiting
    for the next one — one of the two cores busy doing nothing while the compiled step runs.
    Entering stops them (``blas_thread_shutdown_``, what OpenBLAS itself does around ``fork``);
    OpenBLAS starts them again on its next multithreaded call. Only when every Python thread
    is this one or a kernel thread (no other thread can be inside OpenBLAS then), and only
    for an OpenBLAS with its own thread server (not OpenMP) recent enough to restart it lazily.
    """

    def __init__(self):
        self.lock = threading.Lock()
        self.depth = 0
        self.saved = 1
        self.count = None  # ctypes int: blas_cpu_number
        self.server = None  # ctypes int: blas_server_avail
        self.shutdown = None
        self.get = self.set = None
        self.gemm = None  # (sgemm, dgemm) addresses of OpenBLAS's ILP64 cblas functions
        self.loaded = False
        self.ceiling = 1  # the thread count OpenBLAS started with: never raised above it

    def load(self) -> bool:
        if not self.loaded:
            self.loaded = True
            libs = os.path.join(os.path.dirname(np.__file__), "..", "numpy.libs")
            for path in sorted(glob.glob(os.path.join(libs, "libscipy_openblas*.so*"))):
                try:
                    self._bind(ctypes.CDLL(path))
                except (OSError, ValueError):
                    continue
                if self.get is not None or self.count is not None:
                    break
            if self.get is not None or self.count is not None:
                self.ceiling = self._read()
                self._follow(flags.get_num_threads())
                flags.on_num_threads_change(self._follow)
        return self.get is not None or self.count is not None

    def _bind(self, lib) -> None:
        for suffix in ("64_", ""):
            get = getattr(lib, f"scipy_openblas_get_num_threads{suffix}", None)
            put = getattr(lib, f"scipy_openblas_set_num_threads{suffix}", None)
            if get is not None and put is not None:
                put.argtypes = [ctypes.c_int]
                put.restype = None
                get.restype = ctypes.c_int
                self.get, self.set = get, put
                break
        sgemm = getattr(lib, "scipy_cblas_sgemm64_", None)
        dgemm = getattr(lib, "scipy_cblas_dgemm64_", None)
        if sgemm is not None and dgemm is not None:  # 64-bit integer arguments (ILP64)
            self.gemm = tuple(ctypes.cast(f, ctypes.c_void_p).value for f in (sgemm, dgemm))
        try:
            self.count = ctypes.c_int.in_dll(lib, "blas_cpu_number")
        except ValueError:
            self.count = None
        try:
            self.server = ctypes.c_int.in_dll(lib, "blas_server_avail")
            shutdown = lib.blas_thread_shutdown_
            if _threaded_server(lib):
                shutdown.restype = ctypes.c_int
                self.shutdown = shutdown
        except (AttributeError, ValueError):
            self.shutdown = None

    def _read(self) -> int:
        return self.count.value if self.count is not None else self.get()

    def _write(self, n: int) -> None:
        if self.count is not None:
            self.count.value = n
        else:
            self.set(n)

    def _follow(self, n: int) -> None:
        """``kiln.set_num_threads(n)`` bounds OpenBLAS's threads too, as PyTorch's bounds its
        BLAS: at most ``n``, never more than OpenBLAS started with."""
        with self.lock:
            n = max(1, min(n, self.ceiling))
            if self.depth:
                self.saved = n
            else:
                self._write(n)

    def _lower(self, stop_workers: bool) -> None:
        with self.lock:
            if self.depth == 0:
                self.saved = self._read()
                if self.saved != 1:
                    self._write(1)
                if (
                    stop_workers
                    and self.shutdown is not None
                    and self.server.value
                    and _only_kernel_threads()
                ):
                    self.shutdown()
            self.depth += 1

    def _restore(self) -> None:
        with self.lock:
            self.depth -= 1
            if self.depth == 0 and self.saved != 1:
                self._write(self.saved)

    def __enter__(self):
        self._lower(stop_workers=True)

    def __exit__(self, *exc):
        self._restore()


def _threaded_server(lib) -> bool:
    """OpenBLAS with its pthreads server (``get_parallel() == 1``), 0.3.20 or newer."""
    for suffix in ("64_", ""):
        config = getattr(lib, f"scipy_openblas_get_config{suffix}", None)
        parallel = getattr(lib, f"scipy_openblas_get_parallel{suffix}", None)
        if config is not None and parallel is not None:
            config.restype = ctypes.c_char_p
            parallel.restype = ctypes.c_int
            words = (config() or b"").decode(errors="replace").split()
            try:
                version = tuple(int(x) for x in words[1].split(".")[:3])
            except (IndexError, ValueError):
                return False
            return parallel() == 1 and version >= (0, 3, 20)
    return False


_STDLIB = os.path.normcase(sysconfig.get_paths()["stdlib"])
# where an idle thread of the standard library waits (a thread pool's worker waiting for work,
# a condition, a queue, a selector): such a thread cannot be inside OpenBLAS
_PARKED = frozenset(
    {"_worker", "wait", "get", "select", "poll", "join", "_wait_for_tstate_lock", "acquire",
     "accept", "recv", "recv_into", "readinto", "_handle_workers", "serve_forever", "run"}
)  # fmt: skip


def _only_kernel_threads() -> bool:
    """Whether every other Python thread is a kernel thread or parked in the standard library
    (a thread pool waiting for work, torch.compile's included): then none is inside OpenBLAS
    and its workers may be stopped. A thread anywhere else counts as busy."""
    me = threading.get_ident()
    kernel = {t.ident for t in threading.enumerate() if t.name.startswith("kiln-kernel")}
    for ident, frame in sys._current_frames().items():
        if ident == me or ident in kernel:
            continue
        code = frame.f_code
        if code.co_name not in _PARKED or not os.path.normcase(code.co_filename).startswith(
            _STDLIB
        ):
            return False
    return True


BLAS = OpenBlas()


class _SingleCall:
    """OpenBLAS at one thread for one eager product (its idle workers left as they are)."""

    __slots__ = ()

    def __enter__(self):
        BLAS._lower(stop_workers=False)

    def __exit__(self, *exc):
        BLAS._restore()


_SINGLE = _SingleCall()


# OpenBLAS runs a product on the calling thread alone below a size of its own: ``gemm`` when
# m * n * k <= 65536 * GEMM_MULTITHREAD_THRESHOLD (4 unless built otherwise), ``gemv`` (one row
# or one column) when m * n < 2304 * that threshold. Below these bounds (taken for a threshold
# of 1, and per matrix of a batch, which numpy multiplies one at a time) lowering OpenBLAS's
# thread count changes nothing and costs more than a small product itself.
_SERIAL_GEMM_MACS = 1 << 16
_SERIAL_GEMV_MACS = 2304


class _AsNumpy:
    """Products run as numpy runs them (too small for OpenBLAS to thread, or large enough to)."""

    __slots__ = ()

    def __enter__(self):
        pass

    def __exit__(self, *exc):
        pass


_AS_NUMPY = _AsNumpy()


def spare_cores() -> bool:
    """Whether the machine has a core to spare for OpenBLAS's workers: other processes keep
    less than half a core busy beyond the ones this thread leaves (``cpu_load``; this process's
    own threads, OpenBLAS's spinning workers included, do not count). On a busy machine a
    two-thread product waits at OpenBLAS's barrier for a descheduled worker: a 512x512x512
    product took 36 ms at two threads against 10 ms at one under a load average of 5 (PyTorch
    at one thread: 11 ms)."""
    return cpu_load.others_busy_now() < cpu_load.cores() - 1.5


def _policy(m: int, k: int, n: int, outputs: int):
    """The context one product of ``outputs`` results, each of ``k`` multiply-adds (a matrix
    of it ``m x k`` by ``k x n``), runs under."""
    macs = m * n * k
    if macs <= (_SERIAL_GEMV_MACS if m == 1 or n == 1 else _SERIAL_GEMM_MACS) or not BLAS.load():
        return _AS_NUMPY
    if outputs * k >= EAGER_PARALLEL_MACS and flags.get_num_threads() > 1 and spare_cores():
        return _AS_NUMPY
    return _SINGLE


def products(m: int, k: int, n: int):
    """A context manager under which a kernel's loop of ``np.matmul`` calls of one size
    (``m x k`` by ``k x n``) follows kiln's thread policy, as ``matmul`` would call by call: a
    recurrent layer's ~35 per-step products pay the thread-count switch once instead of per
    product (~1.5 us each, against ~20 us for the product itself)."""
    return _policy(m, k, n, m * n)


def matmul(x: np.ndarray, y: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """``np.matmul(x, y, out=out)`` under kiln's thread policy (see the module docstring)."""
    if x.ndim < 2 or y.ndim < 2 or x.dtype.kind not in "fc":
        return np.matmul(x, y, out=out)
    m, k = x.shape[-2:]
    n = y.shape[-1]
    if m * n * k <= (_SERIAL_GEMV_MACS if m == 1 or n == 1 else _SERIAL_GEMM_MACS):
        # ``_policy``'s first case, taken before counting outputs and entering a context: the
        # wrapper cost more than a small MLP's 8x16x32 product itself
        return np.matmul(x, y, out=out)
    outputs = max(x.size // max(k, 1) * y.shape[-1], y.size // max(y.shape[-2], 1) * x.shape[-2])
    with _policy(m, k, n, outputs):
        return np.matmul(x, y, out=out)


def kernel_matmul(x: np.ndarray, y: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """``np.matmul(x, y, out=out)`` for kernels whose products come several to a call (a
    convolution's per-kernel-row or per-phase products, a batch norm's per-channel sums by a
    product with ones; ``y`` may be a vector): on the calling thread alone below
    ``EAGER_PARALLEL_MACS`` (the whole call's), as ``kiln.set_num_threads`` allows above it.

    Handing a product of a millisecond or less to OpenBLAS's second thread saves a fraction of
    it on an idle machine, but leaves the worker spinning ~100 ms for the next call, and waits
    at the barrier for it whenever another thread holds the core: the benchmark's ResNet CNN
    step (three products of ~0.6 ms, threaded while the bound was 2^24, and batch norm's sums,
    which OpenBLAS threads as products with a vector) took 150 ms at 2 threads against 60 ms at 1
    under a load average of 6; on a quiet machine it measured 36 ms, against 21 ms of CPU time
    at 1 thread."""
    if x.dtype.kind not in "fc" or not BLAS.load():
        return np.matmul(x, y, out=out)
    m = x.shape[-2] if x.ndim > 1 else 1
    k = x.shape[-1]
    n = y.shape[-1] if y.ndim > 1 else 1
    macs = m * n * k
    if macs <= (_SERIAL_GEMV_MACS if m == 1 or n == 1 else _SERIAL_GEMM_MACS):
        return np.matmul(x, y, out=out)  # OpenBLAS runs these on this thread anyway
    batch = max(x.size // max(m * k, 1), y.size // max(k * n, 1), 1)  # matrices in the call
    if macs * batch >= EAGER_PARALLEL_MACS and flags.get_num_threads() > 1 and spare_cores():
        return np.matmul(x, y, out=out)
    with _SINGLE:
        return np.matmul(x, y, out=out)
