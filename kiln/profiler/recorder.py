"""The recorder a running ``kiln.profiler.profile`` installs in its thread, and the events it keeps.

The recorder sits in the thread's ``ThreadState.profiler`` slot. The dispatcher, the autograd
engine, ``record_function`` and compiled code (through ``add_activation_listener``) find it there
and report to it; with the slot empty they do nothing else, so profiling that is off costs one
``is None`` check. Events are kept in the order they began, each with its parent (the event open
when it began), so self times, tables and traces come from one flat list.

Times come from ``time.perf_counter_ns``. Memory (``profile_memory=True``) follows PyTorch's
accounting: a buffer is counted as allocated by the first op that hands it back (kiln's CPU
tensors are numpy buffers allocated inside kernels, so the op's result is where the recorder sees
them), and its release, seen through a weak reference, counts as a free of the event open at that
moment. An event's self memory is its allocations minus its frees; its total adds its children's.
"""

from __future__ import annotations

import os
import sys
import threading
import weakref
from collections.abc import Callable
from time import perf_counter_ns
from typing import Any

import numpy as np

from ..ops.core.dispatch import dispatch
from ..runtime.state import per_thread
from ..runtime.tensor import Tensor

__all__ = ["Event", "Recorder", "add_activation_listener", "install", "uninstall"]

# frames of kiln's own machinery: a ``with_stack`` stack starts at the user's code (and kiln's
# PyTorch-level modules such as ``kiln.nn``, as PyTorch's stacks show ``torch.nn``)
_KILN_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_MACHINERY = tuple(
    os.path.join(_KILN_DIR, part) + os.sep
    for part in ("ops", "runtime", "autograd", "amp", "profiler", "dynamo", "aot", "inductor")
)


class Event:
    """One timed interval: an op, a ``record_function`` region, a backward node or a kernel."""

    __slots__ = (
        "name", "category", "start_ns", "end_ns", "parent", "input_shapes", "stack",
        "memory", "thread", "index",
    )  # fmt: skip

    def __init__(self, name: str, category: str, parent: Event | None, thread: int, index: int):
        self.name = name
        self.category = category
        self.parent = parent
        self.thread = thread
        self.index = index
        self.input_shapes: list | None = None
        self.stack: list[str] | None = None
        self.memory = 0  # bytes allocated minus bytes freed while it was the innermost event
        self.start_ns = 0
        self.end_ns = 0


class Recorder:
    """Collects one thread's events while a profile records (see the module docstring)."""

    def __init__(self, record_shapes: bool = False, with_stack: bool = False,
                 profile_memory: bool = False):  # fmt: skip
        self.record_shapes = record_shapes
        self.with_stack = with_stack
        self.profile_memory = profile_memory
        self.thread = threading.get_native_id()
        self.events: list[Event] = []
        self.open: list[Event] = []
        self._buffers: dict[int, weakref.finalize] = {}  # buffers counted, until they are freed

    def begin(self, name: str, category: str = "user_annotation") -> Event:
        """Open an event; ``end`` closes it (and any event left open inside it)."""
        event = Event(
            name, category, self.open[-1] if self.open else None, self.thread, len(self.events)
        )
        if self.with_stack:
            event.stack = _user_stack()
        self.events.append(event)
        self.open.append(event)
        event.start_ns = perf_counter_ns()
        return event

    def end(self, event: Event) -> None:
        now = perf_counter_ns()
        while self.open:  # events an exception left open end with the one that holds them
            top = self.open.pop()
            top.end_ns = now
            if top is event:
                return

    def record_op(self, op, args: tuple):
        """Run ``op`` through the dispatcher as an ``aten::<name>`` event (PyTorch's names, so
        code that looks events up by name finds them)."""
        event = self.begin(op.qualname, "cpu_op")
        if self.record_shapes:
            event.input_shapes = [_shape(a) for a in args]
        try:
            out = dispatch(op, args, True)
        finally:
            self.end(event)
        if self.profile_memory:
            self._count_allocations(event, out)
        return out

    def _count_allocations(self, event: Event, out) -> None:
        """Count the buffers ``out`` lives in that no op returned before as ``event``'s, and
        watch for their release."""
        for t in _tensors(out if isinstance(out, (tuple, list)) else (out,)):
            root, nbytes = _buffer(t)
            key = id(root)
            if key in self._buffers:
                continue
            try:
                self._buffers[key] = weakref.finalize(root, self._freed, key, nbytes)
            except TypeError:  # a buffer that cannot be watched is not counted
                continue
            event.memory += nbytes

    def _freed(self, key: int, nbytes: int) -> None:
        self._buffers.pop(key, None)
        if self.open and threading.get_native_id() == self.thread:
            self.open[-1].memory -= nbytes

    def record_node(self, name: str, fn: Callable, *args) -> Any:
        """``fn(*args)`` for the backward node ``name``, inside PyTorch's two events for it."""
        outer = self.begin(f"autograd::engine::evaluate_function: {name}", "cpu_op")
        inner = self.begin(name, "cpu_op")
        try:
            return fn(*args)
        finally:
            self.end(inner)
            self.end(outer)

    def close(self) -> None:
        """End the events still open (the profile stopped inside them) and stop watching
        buffers."""
        if self.open:
            self.end(self.open[0])
        for watch in self._buffers.values():
            watch.detach()
        self._buffers.clear()


def _shape(value) -> list:
    """An argument as PyTorch's ``Input Shapes`` lists it: a tensor's sizes, a list of tensors'
    sizes, ``[]`` for anything else."""
    if isinstance(value, Tensor):
        return list(value.shape)
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, Tensor) for v in value):
        return [list(v.shape) for v in value]
    return []


def _buffer(t: Tensor) -> tuple[object, int]:
    """``(buffer, bytes)``: the memory ``t`` lives in (views share their base's)."""
    storage = t._storage
    root = storage.base if storage is not None else t._data
    if root is None:  # device memory: the storage object stands for it
        storage = t._get_storage()
        return storage, storage.nbytes()
    while isinstance(root.base, np.ndarray):
        root = root.base
    return root, root.nbytes


def _tensors(values) -> list[Tensor]:
    found = []
    for v in values:
        if isinstance(v, Tensor):
            found.append(v)
        elif isinstance(v, (list, tuple)):
            found.extend(x for x in v if isinstance(x, Tensor))
    return found


def _user_stack() -> list[str]:
    """``file(line): function`` of the calling frames outside kiln's machinery, innermost first
    (PyTorch's ``with_stack`` format)."""
    frames = []
    frame = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not filename.startswith(_MACHINERY):
            frames.append(f"{filename}({frame.f_lineno}): {frame.f_code.co_name}")
        frame = frame.f_back
    return frames


# ---------------------------------------------------------------------- installing a recorder

_listeners: list[Callable[[bool], None]] = []
_recording_threads = 0
_lock = threading.Lock()


def add_activation_listener(listener: Callable[[bool], None]) -> None:
    """Call ``listener(True)`` when a first thread starts recording and ``listener(False)`` when
    the last one stops. Compiled code registers here (the profiler never imports the compiler)
    and swaps in instrumented variants of its calls only while some profile records; those still
    check their own thread's recorder."""
    with _lock:
        _listeners.append(listener)
        if _recording_threads:
            listener(True)


def install(recorder: Recorder) -> None:
    """Make ``recorder`` the calling thread's (one profile records per thread, as in PyTorch)."""
    global _recording_threads
    state = per_thread.state
    if state.profiler is not None:
        raise RuntimeError("Profiler is already enabled on this thread")
    state.profiler = recorder
    with _lock:
        _recording_threads += 1
        if _recording_threads == 1:
            for listener in _listeners:
                listener(True)


def uninstall(recorder: Recorder) -> None:
    global _recording_threads
    state = per_thread.state
    if state.profiler is not recorder:
        return
    recorder.close()
    state.profiler = None
    with _lock:
        _recording_threads -= 1
        if _recording_threads == 0:
            for listener in _listeners:
                listener(False)
