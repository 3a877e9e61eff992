"""CUDA streams and events (``torch.cuda.Stream`` / ``Event``) over kiln's driver layer.

Kernels and device-to-device copies are queued on the *current stream* of their device, which is
per thread (PyTorch's semantics): the device's default stream unless a ``Stream`` was made current
(``set_stream`` or the ``stream`` context manager of ``kiln.cuda``). An ``Event`` recorded on a
stream completes when the work queued there before it has; ``elapsed_time`` measures between two
timing events. The host-memory stand-in driver runs everything at once, so there every stream is
idle and events complete when recorded; the API's answers and errors are PyTorch's.
"""

from __future__ import annotations

import threading

from . import cuda
from .device import device as Device

__all__ = ["Stream", "Event", "current_stream", "default_stream", "set_stream"]


class Stream:
    """A queue of device work (``torch.cuda.Stream``); ``cuda_stream`` is the driver handle."""

    def __init__(self, device=None, priority: int = 0, *, _handle: int | None = None):
        index = _device_index(device)
        self._driver = cuda.require(index)
        self.device_index = index
        self.priority = priority
        if _handle is None:
            self._driver.activate(index)
            _handle = self._driver.stream_create(priority)
            self._owned = True
        else:
            self._owned = False
        self.cuda_stream = _handle

    @property
    def device(self) -> Device:
        return Device("cuda", self.device_index)

    def synchronize(self) -> None:
        """Wait until the work queued on this stream has finished."""
        self._driver.activate(self.device_index)
        self._driver.stream_synchronize(self.cuda_stream)

    def query(self) -> bool:
        """Whether all work queued on this stream has finished."""
        return self._driver.stream_query(self.cuda_stream)

    def wait_event(self, event: Event) -> None:
        """Make later work on this stream wait for ``event``."""
        if event._handle is not None:
            self._driver.stream_wait_event(self.cuda_stream, event._handle)

    def wait_stream(self, stream: Stream) -> None:
        """Make later work on this stream wait for the work queued on ``stream`` so far."""
        self.wait_event(stream.record_event())

    def record_event(self, event: Event | None = None) -> Event:
        event = event if event is not None else Event()
        event.record(self)
        return event

    def __eq__(self, other) -> bool:
        return (
            isinstance(other, Stream)
            and other.device_index == self.device_index
            and other.cuda_stream == self.cuda_stream
        )

    def __hash__(self) -> int:
        return hash((self.device_index, self.cuda_stream))

    def __repr__(self) -> str:
        return (
            f"<kiln.cuda.Stream device=cuda:{self.device_index} cuda_stream={self.cuda_stream:#x}>"
        )

    def __del__(self):
        if getattr(self, "_owned", False) and cuda.loaded_driver() is self._driver:
            try:
                self._driver.stream_destroy(self.cuda_stream)
            except Exception:  # noqa: BLE001 - interpreter shutdown
                pass


class Event:
    """A marker in a stream's work (``torch.cuda.Event``)."""

    def __init__(
        self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False
    ):
        self.enable_timing = enable_timing
        self.blocking = blocking
        self.interprocess = interprocess
        self._handle = None  # created on the first record (on the recording stream's device)
        self._driver = None
        self.device_index: int | None = None

    def record(self, stream: Stream | None = None) -> None:
        """Mark the current point of ``stream`` (the current stream by default)."""
        stream = stream if stream is not None else current_stream()
        if self._handle is None:
            self._driver = stream._driver
            self.device_index = stream.device_index
            self._driver.activate(stream.device_index)
            self._handle = self._driver.event_create(self.enable_timing)
        elif stream.device_index != self.device_index:
            raise RuntimeError(
                f"Event device cuda:{self.device_index} does not match recording stream's device "
                f"cuda:{stream.device_index}."
            )
        self._driver.event_record(self._handle, stream.cuda_stream)

    def wait(self, stream: Stream | None = None) -> None:
        """Make later work on ``stream`` (the current stream by default) wait for this event."""
        (stream if stream is not None else current_stream()).wait_event(self)

    def query(self) -> bool:
        """Whether the work before the recorded point has finished (True if never recorded)."""
        return self._handle is None or self._driver.event_query(self._handle)

    def synchronize(self) -> None:
        """Wait for the work before the recorded point."""
        if self._handle is not None:
            self._driver.event_synchronize(self._handle)

    def elapsed_time(self, end_event: Event) -> float:
        """Milliseconds between this event and ``end_event`` (both recorded, both timing)."""
        if not (self.enable_timing and end_event.enable_timing):
            raise RuntimeError("Both events must be created with argument 'enable_timing=True'.")
        if self._handle is None or end_event._handle is None:
            raise RuntimeError("Both events must be recorded before calculating elapsed time.")
        return self._driver.event_elapsed_ms(self._handle, end_event._handle)

    def __repr__(self) -> str:
        state = "unrecorded" if self._handle is None else f"{self._handle:#x}"
        return f"<kiln.cuda.Event {state}>"

    def __del__(self):
        if self._handle is not None and cuda.loaded_driver() is self._driver:
            try:
                self._driver.event_destroy(self._handle)
            except Exception:  # noqa: BLE001 - interpreter shutdown
                pass


# ------------------------------------------------------------------------------ current stream


class _Current(threading.local):
    def __init__(self):
        self.streams: dict = {}  # (driver id, device index) -> Stream


_current = _Current()
_defaults: dict = {}  # (driver id, device index) -> the default Stream


def _device_index(device) -> int:
    if device is None:
        return cuda.current_device()
    if isinstance(device, int):
        return device
    if isinstance(device, str):
        device = Device(device)
    if isinstance(device, Stream):
        return device.device_index
    if device.type != "cuda":
        raise ValueError(f"Expected a cuda device, but got: {device}")
    return cuda.device_index(device)


def default_stream(device=None) -> Stream:
    """The device's default (legacy NULL) stream."""
    index = _device_index(device)
    driver = cuda.require(index)
    key = (id(driver), index)
    s = _defaults.get(key)
    if s is None or s._driver is not driver:
        s = _defaults[key] = Stream(index, _handle=0)
    return s


def current_stream(device=None) -> Stream:
    """The stream this thread queues work on for ``device``."""
    index = _device_index(device)
    driver = cuda.require(index)
    s = _current.streams.get((id(driver), index))
    if s is None or s._driver is not driver:
        return default_stream(index)
    return s


def current_stream_for_allocator(index: int):
    """The allocator's view of the current stream: None when it is the default stream."""
    driver = cuda.require(index)
    s = _current.streams.get((id(driver), index))
    return None if s is None or s._driver is not driver or s.cuda_stream == 0 else s


def set_stream(stream: Stream | None) -> None:
    """Make ``stream`` current on its device for this thread."""
    if stream is None:
        return
    _current.streams[(id(stream._driver), stream.device_index)] = stream
