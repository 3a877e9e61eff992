"""What the machine is and what it is doing while the bench measures: versions, load, the CPU time
other processes take, resident memory, and the bandwidth of a plain copy.

Figures from a loaded machine mislead (a neighbour process can make one column look many times
slower), so the runner records the load average and, on Linux, how many cores other processes
kept busy while each workload was timed. Memory is the process's resident set (``/proc``), the
same measure for kiln and PyTorch whatever allocator they use.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc
import os
import platform
import sys

import numpy as np

from ..runtime.cpu_load import CpuSnapshot, cpu_snapshot, others_busy_cores

__all__ = [
    "machine_info",
    "load_average",
    "CpuSnapshot",
    "cpu_snapshot",
    "others_busy_cores",
    "resident_bytes",
    "StepPeak",
    "copy_arrays",
]

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def machine_info(threads: int | None = None) -> dict:
    """The machine and software a table was measured with (for the report and the JSON)."""
    info = {
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "load_average": load_average() or [],
        "platform": platform.platform(),
        "python": platform.python_version(),
        "numpy": np.__version__,
    }
    try:
        import llvmlite

        info["llvmlite"] = llvmlite.__version__
    except ImportError:
        pass
    torch = sys.modules.get("torch")
    info["torch"] = getattr(torch, "__version__", None)
    # numpy's BLAS (kiln eager matmuls, kiln's extern mm) takes its thread count at start-up
    info["blas_threads"] = os.environ.get("OPENBLAS_NUM_THREADS") or "all cores (default)"
    if threads is not None:
        info["threads"] = threads
    return info


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def load_average() -> list[float] | None:
    """The 1, 5 and 15 minute load averages, or None where the system has none."""
    if not hasattr(os, "getloadavg"):
        return None
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def _status_kib(field: str) -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


@functools.cache
def _malloc_trim():
    """glibc's ``malloc_trim``, or None (another C library, or none found)."""
    try:
        return ctypes.CDLL(ctypes.util.find_library("c")).malloc_trim
    except (OSError, AttributeError, TypeError):
        return None


def _trim_heap() -> None:
    """Collect garbage and hand freed heap pages back (glibc), so resident memory is what is
    alive now, not what earlier columns freed."""
    gc.collect()
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


def resident_bytes() -> int | None:
    """Bytes resident now, after a garbage collection and a heap trim (None: unknown here)."""
    _trim_heap()
    kib = _status_kib("VmRSS")
    return None if kib is None else kib * 1024


class StepPeak:
    """The most resident memory one call adds on top of what is resident before it, from the
    kernel's high-water mark (reset through ``/proc/self/clear_refs``; Linux only)."""

    def __init__(self):
        self.before: int | None = None

    @staticmethod
    def available() -> bool:
        return os.access("/proc/self/clear_refs", os.W_OK) and _status_kib("VmHWM") is not None

    def start(self) -> None:
        self.before = resident_bytes()
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # the high-water mark becomes the current resident size

    def stop(self) -> int | None:
        peak = _status_kib("VmHWM")
        if peak is None or self.before is None:
            return None
        return max(0, peak * 1024 - self.before)


def copy_arrays(nbytes: int) -> tuple[np.ndarray, np.ndarray]:
    """A source and a destination for a plain copy that moves ``nbytes`` (half read, half
    written), both touched so page faults stay out of the timing."""
    n = max(1, nbytes // 8)
    source = np.ones(n, dtype=np.float32)
    return source, np.zeros_like(source)
