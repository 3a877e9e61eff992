"""``kiln.cpu``: PyTorch's ``torch.cpu`` namespace (device queries and ``torch.cpu.amp``).

The CPU is always there and has one device; synchronizing is a no-op since CPU kernels finish
before they return. ``Stream``, ``Event`` and ``stream`` exist, as in PyTorch, for device-agnostic
code (``kiln.get_device_module(device).stream(s)``): CPU work is never queued, so they only keep
track of which stream is current.
"""

from __future__ import annotations

import sys as _sys

from ..amp.device_amp import namespace as _amp_namespace

__all__ = [
    "is_available",
    "is_initialized",
    "device_count",
    "current_device",
    "synchronize",
    "set_device",
    "Stream",
    "Event",
    "StreamContext",
    "stream",
    "current_stream",
    "amp",
]


def is_available() -> bool:
    return True


def is_initialized() -> bool:
    return True


def device_count() -> int:
    return 1


def current_device() -> str:
    return "cpu"


def synchronize(device=None) -> None:
    """CPU work is done when the call returns: nothing to wait for."""


def set_device(device) -> None:
    """There is one CPU device: nothing to select."""


class Stream:
    """A CPU "stream": work runs when called, so there is nothing to order or wait for."""

    def __init__(self, priority: int = -1) -> None:
        pass

    def wait_stream(self, stream) -> None:
        pass

    def record_event(self) -> None:
        pass

    def wait_event(self, event) -> None:
        pass


class Event:
    """A CPU "event": always complete."""

    def query(self) -> bool:
        return True

    def record(self, stream=None) -> None:
        pass

    def synchronize(self) -> None:
        pass

    def wait(self, stream=None) -> None:
        pass


_default_stream = Stream()
_current = [_default_stream]


def current_stream(device=None) -> Stream:
    """The stream ``stream(...)`` selected, else the default one (``device`` is ignored)."""
    return _current[0]


class StreamContext:
    """Makes ``stream`` current inside a ``with`` block (``None``: leaves it as it is)."""

    def __init__(self, stream: Stream | None):
        self.stream = stream
        self.prev_stream = _default_stream

    def __enter__(self) -> None:
        if self.stream is not None:
            self.prev_stream = _current[0]
            _current[0] = self.stream

    def __exit__(self, *exc) -> None:
        if self.stream is not None:
            _current[0] = self.prev_stream


def stream(stream: Stream | None) -> StreamContext:
    return StreamContext(stream)


amp = _amp_namespace("cpu")
_sys.modules[__name__ + ".amp"] = amp
