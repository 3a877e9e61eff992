"""``kiln.accelerator``: PyTorch's device-agnostic accelerator API, over kiln's CUDA device.

Scripts written for any accelerator (``torch.accelerator.is_available()``,
``current_accelerator()``, ``device_count()`` ...) run unchanged: kiln's accelerator is CUDA when
a driver and a device are usable, and there is none otherwise -- then the functions that need
one raise PyTorch's ``RuntimeError`` and ``current_accelerator()`` is None. Streams are not
modelled (kiln's work on a device runs in order), so the stream functions are absent.
"""

from __future__ import annotations

from collections import OrderedDict

from .runtime import cuda as _cuda
from .runtime.device import device as _device

__all__ = [
    "is_available",
    "current_accelerator",
    "device_count",
    "current_device_index",
    "current_device_idx",
    "set_device_index",
    "set_device_idx",
    "device_index",
    "synchronize",
    "get_device_capability",
    "empty_cache",
    "empty_host_cache",
    "memory_allocated",
    "memory_reserved",
    "max_memory_allocated",
    "max_memory_reserved",
    "memory_stats",
    "reset_peak_memory_stats",
    "reset_accumulated_memory_stats",
    "get_memory_info",
]

_NONE = "Cannot access accelerator device when none is available."


def is_available() -> bool:
    """True when an accelerator (a usable CUDA device) is present; never raises."""
    return _cuda.is_available()


def current_accelerator(check_available: bool = False) -> _device | None:
    """``kiln.device('cuda')`` when CUDA is usable, else None (index unset, as PyTorch's)."""
    return _device("cuda") if _cuda.is_available() else None


def device_count() -> int:
    return _cuda.device_count()


def _require() -> None:
    if not _cuda.is_available():
        raise RuntimeError(_NONE)


def _index(device, optional: bool = True) -> int:
    """An index from an int, a ``"cuda:1"`` string or a device (None: the current one)."""
    _require()
    if device is None:
        if not optional:
            raise ValueError("Expected a torch.device with a specified index or an integer")
        return _cuda.current_device()
    if isinstance(device, int):
        return device
    dev = _device(device)
    if dev.type != "cuda":
        raise ValueError(
            f"{dev.type} doesn't match the current accelerator cuda (kiln.accelerator's only one)"
        )
    return _cuda.device_index(dev)


def current_device_index() -> int:
    _require()
    return _cuda.current_device()


current_device_idx = current_device_index  # PyTorch's older (deprecated) spelling


def set_device_index(device, /) -> None:
    """Make ``device`` the one ``"cuda"`` without an index means (negative: no change)."""
    index = _index(device, optional=False)
    if index >= 0:
        _cuda.set_current_device(index)


set_device_idx = set_device_index


class device_index:  # noqa: N801 - PyTorch's name
    """Context manager: ``set_device_index`` for a ``with`` block (None: no change)."""

    def __init__(self, device: int | None, /):
        self.idx = device
        self.prev_idx = -1

    def __enter__(self) -> None:
        if self.idx is not None:
            self.prev_idx = current_device_index()
            set_device_index(self.idx)

    def __exit__(self, *exc) -> None:
        if self.idx is not None:
            set_device_index(self.prev_idx)


def synchronize(device=None, /) -> None:
    """Wait for all work queued on the device."""
    index = _index(device)
    driver = _cuda.require(index)
    driver.activate(index)
    driver.synchronize()


def get_device_capability(device=None, /) -> dict:
    """``{"supported_dtypes": {...}}``: the dtypes kiln allocates on the device."""
    from .runtime import dtypes

    _index(device)
    return {"supported_dtypes": set(dtypes.all_dtypes)}


def _allocator(device):
    return _cuda.allocator(_index(device))


def empty_cache() -> None:
    """Return cached free device blocks to the driver."""
    if _cuda.is_available():
        for index in range(_cuda.device_count()):
            _cuda.allocator(index).empty_cache()


def empty_host_cache() -> None:
    """Nothing to do: kiln keeps no pinned host memory."""


def memory_allocated(device_index=None, /) -> int:
    return _allocator(device_index).allocated_bytes


def memory_reserved(device_index=None, /) -> int:
    return _allocator(device_index).reserved_bytes


def max_memory_allocated(device_index=None, /) -> int:
    return _allocator(device_index).peak_allocated_bytes


def max_memory_reserved(device_index=None, /) -> int:
    return _allocator(device_index).peak_reserved_bytes


def memory_stats(device_index=None, /) -> OrderedDict:
    """The caching allocator's counters under PyTorch's flattened names."""
    if not _cuda.is_available():
        return OrderedDict()
    return OrderedDict(sorted(_allocator(device_index).stats().items()))


def reset_peak_memory_stats(device_index=None, /) -> None:
    _allocator(device_index).reset_peaks()


def reset_accumulated_memory_stats(device_index=None, /) -> None:
    _allocator(device_index).reset_accumulated()


def get_memory_info(device_index=None, /) -> tuple[int, int]:
    """(free, total) bytes of device memory, from the driver."""
    index = _index(device_index)
    driver = _cuda.require(index)
    driver.activate(index)
    return driver.memory_info()
