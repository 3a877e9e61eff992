"""``kiln.cuda``: PyTorch's ``torch.cuda`` basics for kiln's CUDA device.

Everything here asks ``kiln.runtime.cuda`` (the driver API through ctypes). ``is_available()``
never raises; the other functions raise a ``RuntimeError`` saying why when CUDA is unusable.
"""

from __future__ import annotations

import sys as _sys

from .amp.device_amp import namespace as _amp_namespace
from .runtime import cuda as _cuda
from .runtime import random as _random
from .runtime.device import device as _device

__all__ = [
    "is_available",
    "device_count",
    "current_device",
    "set_device",
    "synchronize",
    "get_device_name",
    "get_device_capability",
    "manual_seed",
    "manual_seed_all",
    "memory_allocated",
    "memory_reserved",
    "empty_cache",
    "amp",
    "OutOfMemoryError",
]

# ``torch.cuda.amp.autocast`` / ``GradScaler``: deprecated spellings of ``kiln.amp``'s
amp = _amp_namespace("cuda")
_sys.modules[__name__ + ".amp"] = amp


OutOfMemoryError = _cuda.OutOfMemoryError


def is_available() -> bool:
    return _cuda.is_available()


def device_count() -> int:
    return _cuda.device_count()


def _index(device) -> int:
    if device is None:
        return _cuda.current_device()
    if isinstance(device, int):
        return device
    return _cuda.device_index(_device(device))


def current_device() -> int:
    _cuda.require()
    return _cuda.current_device()


def set_device(device) -> None:
    """Make ``device`` what ``"cuda"`` without an index refers to."""
    _cuda.set_current_device(_index(device))


def synchronize(device=None) -> None:
    """Wait for all work queued on the device."""
    index = _index(device)
    driver = _cuda.require(index)
    driver.activate(index)
    driver.synchronize()


def get_device_name(device=None) -> str:
    index = _index(device)
    return _cuda.require(index).name(index)


def get_device_capability(device=None) -> tuple[int, int]:
    index = _index(device)
    return _cuda.require(index).capability(index)


def manual_seed(seed: int) -> None:
    """CUDA random numbers come from the same (seed, offset) Philox generator as the CPU's."""
    _random.manual_seed(seed)


manual_seed_all = manual_seed


def memory_allocated(device=None) -> int:
    """Bytes held by live cuda tensors (rounded to the allocator's size classes)."""
    return _cuda.allocator(_index(device)).allocated_bytes


def memory_reserved(device=None) -> int:
    """Bytes obtained from the driver, including cached free blocks."""
    return _cuda.allocator(_index(device)).reserved_bytes


def empty_cache() -> None:
    """Return cached free blocks to the driver."""
    if _cuda.is_available():
        for index in range(_cuda.device_count()):
            _cuda.allocator(index).empty_cache()
