"""``kiln.cuda``: PyTorch's ``torch.cuda`` basics for kiln's CUDA device.

Everything here asks ``kiln.runtime.cuda`` (the driver API through ctypes). ``is_available()``
never raises; the other functions raise a ``RuntimeError`` saying why when CUDA is unusable,
except those PyTorch answers without setting CUDA up, so that GPU scripts run on a CPU-only
machine as under PyTorch: the memory counters read zero until the first cuda tensor,
``is_bf16_supported()`` is False and ``get_rng_state_all()`` empty without a device, and
``seed``/``set_rng_state`` (deferred calls in PyTorch) do nothing then.
"""

from __future__ import annotations

import sys as _sys

from .amp.device_amp import namespace as _amp_namespace
from .runtime import cuda as _cuda
from .runtime import cuda_streams as _streams
from .runtime import random as _random
from .runtime.device import device as _device

__all__ = [
    "is_available",
    "is_initialized",
    "is_bf16_supported",
    "get_arch_list",
    "device_count",
    "current_device",
    "set_device",
    "synchronize",
    "get_device_name",
    "get_device_capability",
    "manual_seed",
    "manual_seed_all",
    "seed",
    "seed_all",
    "initial_seed",
    "get_rng_state",
    "get_rng_state_all",
    "set_rng_state",
    "set_rng_state_all",
    "memory_allocated",
    "max_memory_allocated",
    "memory_reserved",
    "max_memory_reserved",
    "memory_stats",
    "memory_summary",
    "reset_peak_memory_stats",
    "reset_accumulated_memory_stats",
    "mem_get_info",
    "empty_cache",
    "Stream",
    "Event",
    "StreamContext",
    "stream",
    "current_stream",
    "default_stream",
    "set_stream",
    "amp",
    "OutOfMemoryError",
]

# ``torch.cuda.amp.autocast`` / ``GradScaler``: deprecated spellings of ``kiln.amp``'s
amp = _amp_namespace("cuda")
_sys.modules[__name__ + ".amp"] = amp


OutOfMemoryError = _cuda.OutOfMemoryError
Stream = _streams.Stream
Event = _streams.Event


def is_available() -> bool:
    return _cuda.is_available()


def is_initialized() -> bool:
    """Whether CUDA is set up in this process (kiln sets it up with the first cuda tensor)."""
    return _cuda.is_initialized()


def device_count() -> int:
    return _cuda.device_count()


def is_bf16_supported(including_emulation: bool = True) -> bool:
    """Whether the current device computes in bfloat16: natively from compute capability 8.0
    (Ampere), emulated through float32 before it; False without a device."""
    if not _cuda.is_available():
        return False
    return including_emulation or get_device_capability()[0] >= 8


def get_arch_list() -> list[str]:
    """The architectures kernels are built for: kiln builds them for the devices present when
    it runs (``sm_XY`` each), so the list is empty without a device."""
    if not _cuda.is_available():
        return []
    return sorted({"sm_{}{}".format(*get_device_capability(i)) for i in range(device_count())})


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
    """Wait for all work queued on the device, on every stream."""
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


def seed() -> None:
    """Seed from the system's entropy (the generator the CPU shares); nothing without a device,
    where PyTorch's call waits for an initialization that never comes."""
    if _cuda.is_available():
        _random.seed()


seed_all = seed


def initial_seed() -> int:
    _cuda.require()
    return _random.initial_seed()


def get_rng_state(device="cuda"):
    """The generator's state (shared with the CPU's) as a uint8 tensor."""
    _cuda.require(_index(device))
    return _random.get_rng_state()


def get_rng_state_all() -> list:
    return [get_rng_state(i) for i in range(device_count())]


def set_rng_state(new_state, device="cuda") -> None:
    if _cuda.is_available():
        _random.set_rng_state(new_state)


def set_rng_state_all(new_states) -> None:
    for index, state in enumerate(new_states):
        set_rng_state(state, index)


def memory_allocated(device=None) -> int:
    """Bytes held by live cuda tensors (blocks rounded up to 512 bytes); 0 before CUDA is set
    up, as in PyTorch (a script logging memory runs on a CPU-only machine)."""
    if not _cuda.is_initialized():
        return 0
    return _cuda.allocator(_index(device)).allocated_bytes


def max_memory_allocated(device=None) -> int:
    """The highest ``memory_allocated`` since the start or ``reset_peak_memory_stats``."""
    if not _cuda.is_initialized():
        return 0
    return _cuda.allocator(_index(device)).peak_allocated_bytes


def memory_reserved(device=None) -> int:
    """Bytes obtained from the driver (segments), including cached free blocks."""
    if not _cuda.is_initialized():
        return 0
    return _cuda.allocator(_index(device)).reserved_bytes


def max_memory_reserved(device=None) -> int:
    if not _cuda.is_initialized():
        return 0
    return _cuda.allocator(_index(device)).peak_reserved_bytes


def memory_stats(device=None) -> dict:
    """The caching allocator's counters under PyTorch's flattened names (none before CUDA is
    set up)."""
    if not _cuda.is_initialized():
        return {}
    return dict(sorted(_cuda.allocator(_index(device)).stats().items()))


def memory_summary(device=None, abbreviated: bool = False) -> str:
    """A table of the allocator's current and peak usage."""
    return _cuda.allocator(_index(device)).summary()


def reset_peak_memory_stats(device=None) -> None:
    _cuda.allocator(_index(device)).reset_peaks()


def reset_accumulated_memory_stats(device=None) -> None:
    _cuda.allocator(_index(device)).reset_accumulated()


def mem_get_info(device=None) -> tuple[int, int]:
    """(free, total) bytes of device memory, from the driver."""
    index = _index(device)
    driver = _cuda.require(index)
    driver.activate(index)
    return driver.memory_info()


def current_stream(device=None) -> Stream:
    """The stream this thread queues work on (the default stream unless one was set)."""
    return _streams.current_stream(device)


def default_stream(device=None) -> Stream:
    return _streams.default_stream(device)


def set_stream(stream: Stream) -> None:
    """Make ``stream`` current on its device for this thread."""
    _streams.set_stream(stream)


class StreamContext:
    """Makes a stream current on its device inside a ``with`` block (``torch.cuda.stream``)."""

    def __init__(self, stream: Stream | None):
        self.stream = stream
        self._previous = None

    def __enter__(self) -> Stream | None:
        if self.stream is not None:
            self._previous = _streams.current_stream(self.stream.device_index)
            _streams.set_stream(self.stream)
        return self.stream

    def __exit__(self, *exc) -> None:
        if self.stream is not None:
            _streams.set_stream(self._previous)


def stream(stream: Stream | None) -> StreamContext:
    """``with kiln.cuda.stream(s):`` queues the block's work on ``s``."""
    return StreamContext(stream)


def empty_cache() -> None:
    """Return cached free blocks to the driver."""
    if _cuda.is_available():
        for index in range(_cuda.device_count()):
            _cuda.allocator(index).empty_cache()
