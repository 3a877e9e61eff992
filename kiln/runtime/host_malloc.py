"""Keep mid-size host allocations in the C heap instead of mapping and unmapping them per use.

numpy takes every array buffer from glibc ``malloc``. glibc serves a request above its mmap
threshold (128 KiB at start, then adjusted to the largest block freed so far) with a fresh
``mmap`` and unmaps it on ``free``; when the free space at the top of the heap exceeds its trim
threshold it hands that back to the OS too. An eager training step of a small model makes
thousands of 100 KiB - 1 MiB temporaries, so each one page-faults its memory in again: measured on
nanoGPT (2 layers, width 64) this was about a fifth of the step's CPU time. kiln's own
``BufferPool`` only keeps buffers of 1 MiB and more (and only those kiln allocates, not numpy's
temporaries).

``tune_host_malloc`` therefore fixes glibc's mmap threshold at 4 MiB and its trim threshold at
32 MiB, once, when kiln is imported: freed blocks below 4 MiB go back to malloc's free lists and
are reused without faults, and at most 32 MiB of free heap top is kept from the OS. This is what
setting ``MALLOC_MMAP_THRESHOLD_`` / ``MALLOC_TRIM_THRESHOLD_`` in the environment does; a
setting the user made there is left alone, and ``KILN_HOST_MALLOC=default`` turns the tuning off.
Other C libraries (musl, macOS, Windows) are not touched.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform

__all__ = ["tune_host_malloc", "MMAP_THRESHOLD", "TRIM_THRESHOLD"]

MMAP_THRESHOLD = 4 << 20
TRIM_THRESHOLD = 32 << 20

# glibc's mallopt parameter numbers (malloc.h)
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3

_SETTINGS = (
    ("MALLOC_MMAP_THRESHOLD_", _M_MMAP_THRESHOLD, MMAP_THRESHOLD),
    ("MALLOC_TRIM_THRESHOLD_", _M_TRIM_THRESHOLD, TRIM_THRESHOLD),
)

_applied: dict[str, int] | None = None


def tune_host_malloc() -> dict[str, int]:
    """Apply the thresholds above (once per process); returns the settings made, by env name."""
    global _applied
    if _applied is not None:
        return _applied
    _applied = {}
    if os.environ.get("KILN_HOST_MALLOC", "") == "default":
        return _applied
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return _applied
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return _applied
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    for env, param, value in _SETTINGS:
        if env in os.environ:  # the user's own choice wins
            continue
        if mallopt(param, value) == 1:
            _applied[env] = value
    return _applied
