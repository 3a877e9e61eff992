"""Process-wide numerics flags PyTorch scripts set at start-up, with PyTorch's validation.

``set_float32_matmul_precision``, ``use_deterministic_algorithms`` (and its debug-mode twin) and
``set_warn_always`` are read back by the getters and by ``kiln.backends`` (``cuda.matmul.allow_tf32``
is the same switch as the matmul precision, as in PyTorch). kiln's matmuls are IEEE float32 and
its CPU kernels are deterministic, so the flags change no results: scripts that set them run
unchanged and read back what they set.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable

from . import cpu_load

__all__ = [
    "set_float32_matmul_precision",
    "get_float32_matmul_precision",
    "use_deterministic_algorithms",
    "are_deterministic_algorithms_enabled",
    "is_deterministic_algorithms_warn_only_enabled",
    "set_deterministic_debug_mode",
    "get_deterministic_debug_mode",
    "set_warn_always",
    "is_warn_always_enabled",
    "set_num_threads",
    "get_num_threads",
    "init_num_threads",
    "on_num_threads_change",
    "set_num_interop_threads",
    "get_num_interop_threads",
    "require_bool",
    "set_flush_denormal",
]

_MATMUL_PRECISIONS = ("highest", "high", "medium")
_DEBUG_MODES = {"default": 0, "warn": 1, "error": 2}

# one dict so that the backends namespaces and these functions read the same switches
STATE: dict = {
    "float32_matmul_precision": "highest",
    "deterministic": False,
    "deterministic_warn_only": False,
    "warn_always": False,
    "interop_threads": None,  # None until set: then the number of usable cores
}


def require_bool(setter: str, value) -> bool:
    """PyTorch's check on boolean global flags: ``RuntimeError`` naming the setter and the type."""
    if not isinstance(value, bool):
        raise RuntimeError(f"{setter} expects a bool, but got {type(value).__name__}")
    return value


def set_float32_matmul_precision(precision: str) -> None:
    """``"highest"`` (IEEE float32), ``"high"`` or ``"medium"`` (TF32/bf16 allowed on GPUs).

    An unknown string warns and changes nothing, as PyTorch does."""
    if not isinstance(precision, str):
        raise RuntimeError(
            f"set_float32_matmul_precision expects a str, but got {type(precision).__name__}"
        )
    if precision not in _MATMUL_PRECISIONS:
        warnings.warn(
            f"{precision} is not one of 'highest', 'high', or 'medium'; the current "
            "set_float32_matmul_precision call has no effect.",
            UserWarning,
            stacklevel=2,
        )
        return
    STATE["float32_matmul_precision"] = precision


def get_float32_matmul_precision() -> str:
    return STATE["float32_matmul_precision"]


def use_deterministic_algorithms(mode: bool, *, warn_only: bool = False) -> None:
    """Record the request for deterministic kernels (kiln's are deterministic already)."""
    for name, value, where in (("mode", mode, " (position 1)"), ("warn_only", warn_only, "")):
        if not isinstance(value, bool):
            raise TypeError(
                f"use_deterministic_algorithms(): argument '{name}'{where} must be bool, "
                f"not {type(value).__name__}"
            )
    STATE["deterministic"] = mode
    STATE["deterministic_warn_only"] = warn_only


def are_deterministic_algorithms_enabled() -> bool:
    return STATE["deterministic"]


def is_deterministic_algorithms_warn_only_enabled() -> bool:
    return STATE["deterministic_warn_only"]


def set_deterministic_debug_mode(debug_mode: str | int) -> None:
    """0/"default": off; 1/"warn": deterministic, warn only; 2/"error": deterministic."""
    if isinstance(debug_mode, str):
        if debug_mode not in _DEBUG_MODES:
            raise RuntimeError(
                "invalid value of debug_mode, expected one of `default`, `warn`, `error`, but got "
                f"{debug_mode}"
            )
        debug_mode = _DEBUG_MODES[debug_mode]
    elif isinstance(debug_mode, int) and not isinstance(debug_mode, bool):
        if debug_mode not in (0, 1, 2):
            raise RuntimeError(
                f"invalid value of debug_mode, expected 0, 1, or 2, but got {debug_mode}"
            )
    else:
        raise TypeError(f"debug_mode must be str or int, but got {type(debug_mode)}")
    use_deterministic_algorithms(debug_mode != 0, warn_only=debug_mode == 1)


def get_deterministic_debug_mode() -> int:
    if not STATE["deterministic"]:
        return 0
    return 1 if STATE["deterministic_warn_only"] else 2


def set_warn_always(b: bool) -> None:
    """Ask for warnings PyTorch gives once per process to be given every time."""
    STATE["warn_always"] = require_bool("setWarnOnlyOnce", b)


def is_warn_always_enabled() -> bool:
    return STATE["warn_always"]


# threads of kiln's own kernels (compiled CPU code); whoever keeps threads for them listens here
def _default_num_threads() -> int:
    """OMP_NUM_THREADS when set to a positive number, at most the number of cores (as PyTorch
    reads it; the distributed launcher sets 1 per rank), else the number of cores."""
    cores = os.cpu_count() or 1
    value = os.environ.get("OMP_NUM_THREADS", "")
    if value.isdigit() and int(value) > 0:
        return min(int(value), cores)
    return cores


_num_threads = [_default_num_threads()]
_num_threads_listeners: list[Callable[[int], None]] = []


def set_num_threads(n: int) -> None:
    """Threads used by kiln's CPU kernels (default: the number of cores)."""
    if not isinstance(n, int) or isinstance(n, bool) or n <= 0:
        raise RuntimeError("set_num_threads expects a positive integer")
    _num_threads[0] = n
    for listener in _num_threads_listeners:
        listener(n)


def get_num_threads() -> int:
    return _num_threads[0]


def init_num_threads() -> None:
    """Nothing to initialise: kiln's kernel threads start when first used."""


def on_num_threads_change(listener: Callable[[int], None]) -> None:
    """Call ``listener(n)`` after every ``set_num_threads(n)`` (a thread pool resizes itself)."""
    _num_threads_listeners.append(listener)


def set_num_interop_threads(n: int) -> None:
    """Threads for running independent ops concurrently; settable once, as in PyTorch (kiln
    runs ops one after another, so the number is only recorded)."""
    if not isinstance(n, int) or isinstance(n, bool) or n <= 0:
        raise RuntimeError("set_num_interop_threads expects a positive integer")
    if STATE["interop_threads"] is not None:
        raise RuntimeError(
            "Error: cannot set number of interop threads after parallel work has started or "
            "set_num_interop_threads called"
        )
    STATE["interop_threads"] = n


def get_num_interop_threads() -> int:
    value = STATE["interop_threads"]
    return cpu_load.cores() if value is None else value


def set_flush_denormal(mode: bool) -> bool:
    """Whether flushing denormals to zero could be switched: kiln's kernels (numpy and the
    generated code) keep IEEE denormals, so this reports False, as PyTorch does on a CPU without
    the control."""
    require_bool("set_flush_denormal", mode)
    return False
