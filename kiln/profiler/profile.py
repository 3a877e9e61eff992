"""``profile``: PyTorch's profiler context manager, its ``schedule`` and trace handlers.

A ``profile`` records the thread that starts it. With a ``schedule`` it walks PyTorch's cycle of
actions step by step (``prof.step()``): wait (nothing recorded), warm up (recorded, then
dropped), record, and at the cycle's last step hand the trace to ``on_trace_ready``. Without one
it records from ``__enter__`` to ``__exit__``. Results are read as in PyTorch: ``events()``,
``key_averages(...).table(...)``, ``export_chrome_trace(path)``.
"""

from __future__ import annotations

import enum
import os
import socket
import time
import warnings
from collections.abc import Callable, Iterable

from .events import EventList, build_events
from .record_function import record_function
from .recorder import Recorder, install, uninstall

__all__ = [
    "profile",
    "schedule",
    "ProfilerAction",
    "ProfilerActivity",
    "supported_activities",
    "tensorboard_trace_handler",
]


class ProfilerActivity(enum.Enum):
    """What to record: host-side (CPU) work, and device (CUDA) work."""

    CPU = 0
    CUDA = 1


def supported_activities() -> set[ProfilerActivity]:
    """The activities this build can record. CUDA work is timed on the host side (the launch
    and the synchronisations kiln does), not by device counters."""
    from ..runtime import cuda

    found = {ProfilerActivity.CPU}
    if cuda.is_available():
        found.add(ProfilerActivity.CUDA)
    return found


class ProfilerAction(enum.Enum):
    NONE = 0
    WARMUP = 1
    RECORD = 2
    RECORD_AND_SAVE = 3


def schedule(
    *, wait: int, warmup: int, active: int, repeat: int = 0, skip_first: int = 0,
    skip_first_wait: int = 0,
) -> Callable[[int], ProfilerAction]:  # fmt: skip
    """PyTorch's schedule: after ``skip_first`` steps, cycles of ``wait`` idle steps, ``warmup``
    steps and ``active`` recorded steps (``repeat`` cycles, 0 = until the profile ends);
    ``skip_first_wait`` leaves out the first cycle's wait."""
    if wait < 0 or warmup < 0 or active <= 0 or repeat < 0 or skip_first < 0:
        raise AssertionError(
            f"Invalid profiler schedule arguments. Got wait={wait} (need >= 0), warmup={warmup} "
            f"(need >= 0), active={active} (need > 0), repeat={repeat} (need >= 0), "
            f"skip_first={skip_first} (need >= 0)."
        )
    if warmup == 0:
        warnings.warn(
            "Profiler won't be using warmup, this can skew profiler results", stacklevel=2
        )
    cycle = wait + warmup + active

    def action(step: int) -> ProfilerAction:
        if step < 0:
            raise AssertionError(f"Step must be non-negative. Got {step}.")
        if step < skip_first:
            return ProfilerAction.NONE
        step -= skip_first
        if skip_first_wait:
            step += wait
        if repeat > 0 and step / cycle >= repeat:
            return ProfilerAction.NONE
        position = step % cycle
        if position < wait:
            return ProfilerAction.NONE
        if position < wait + warmup:
            return ProfilerAction.WARMUP
        return ProfilerAction.RECORD if position < cycle - 1 else ProfilerAction.RECORD_AND_SAVE

    return action


_NONE, _WARMUP = ProfilerAction.NONE, ProfilerAction.WARMUP
_RECORD, _SAVE = ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE
# (previous action, next action or None at the end) -> what to do, in order (PyTorch's table)
_TRANSITIONS: dict[tuple, tuple[str, ...]] = {
    (_NONE, _WARMUP): ("prepare",),
    (_NONE, _RECORD): ("prepare", "start"),
    (_NONE, _SAVE): ("prepare", "start"),
    (_WARMUP, _NONE): ("start", "stop"),
    (_WARMUP, _RECORD): ("start",),
    (_WARMUP, _SAVE): ("start",),
    (_RECORD, _NONE): ("stop", "ready"),
    (_RECORD, _WARMUP): ("stop", "ready", "prepare"),
    (_SAVE, _NONE): ("stop", "ready"),
    (_SAVE, _WARMUP): ("stop", "ready", "prepare"),
    (_SAVE, _RECORD): ("stop", "ready", "prepare", "start"),
    (_SAVE, _SAVE): ("stop", "ready", "prepare", "start"),
    (_WARMUP, None): ("start", "stop"),
    (_RECORD, None): ("stop", "ready"),
    (_SAVE, None): ("stop", "ready"),
}


def _always_record(step: int) -> ProfilerAction:
    return ProfilerAction.RECORD


def tensorboard_trace_handler(
    dir_name: str, worker_name: str | None = None, use_gzip: bool = False
) -> Callable[[profile], None]:
    """An ``on_trace_ready`` that writes each trace into ``dir_name`` as
    ``<worker>.<time ns>.pt.trace.json[.gz]`` (the name TensorBoard's profiler plugin reads)."""

    def handler(prof: profile) -> None:
        nonlocal worker_name
        try:
            os.makedirs(dir_name, exist_ok=True)
        except OSError as e:
            raise RuntimeError("Can't create directory: " + dir_name) from e
        if not worker_name:
            worker_name = f"{socket.gethostname()}_{os.getpid()}"
        file_name = f"{worker_name}.{time.time_ns()}.pt.trace.json" + (".gz" if use_gzip else "")
        prof.export_chrome_trace(os.path.join(dir_name, file_name))

    return handler


class profile:
    """Record eager ops (with input shapes and Python stacks on request), ``record_function``
    regions, autograd backward nodes, and compiled graphs with their kernels, in the thread
    that enters it. See the module docstring for the schedule."""

    def __init__(
        self,
        activities: Iterable[ProfilerActivity] | None = None,
        schedule: Callable[[int], ProfilerAction] | None = None,
        on_trace_ready: Callable[[profile], None] | None = None,
        record_shapes: bool = False,
        profile_memory: bool = False,
        with_stack: bool = False,
        with_flops: bool = False,
        with_modules: bool = False,
        acc_events: bool = False,
    ):
        self.activities = set(activities) if activities is not None else supported_activities()
        unknown = [a for a in self.activities if not isinstance(a, ProfilerActivity)]
        if unknown:
            raise ValueError(f"unknown profiler activities {unknown}; use ProfilerActivity.*")
        if with_flops or with_modules:
            warnings.warn(
                "kiln.profiler does not record FLOPs or module hierarchy: with_flops and "
                "with_modules add nothing to the results",
                stacklevel=2,
            )
        self.record_shapes = record_shapes
        self.profile_memory = profile_memory
        self.with_stack = with_stack
        self.acc_events = acc_events
        self.schedule = schedule or _always_record
        self.record_steps = schedule is not None  # ``ProfilerStep#n`` regions in the trace
        self.on_trace_ready = on_trace_ready
        self.step_num = 0
        self.current_action = self.schedule(0)
        self._recorder: Recorder | None = None
        self._keep = False  # the recorder's events are the trace (RECORD), not a warm-up
        self._events: EventList | None = None
        self._step_region: record_function | None = None

    # ------------------------------------------------------------------ lifecycle
    def __enter__(self) -> profile:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        self.step_num = 0
        self.current_action = self.schedule(0)
        self._transit(ProfilerAction.NONE, self.current_action)
        self._open_step_region()

    def stop(self) -> None:
        self._close_step_region()
        self._transit(self.current_action, None)

    def step(self) -> None:
        """End the current step and start the next (moving along the schedule)."""
        self._close_step_region()
        previous = self.current_action
        self.step_num += 1
        self.current_action = self.schedule(self.step_num)
        self._transit(previous, self.current_action)
        self._open_step_region()

    def _open_step_region(self) -> None:
        if self.record_steps and self._recorder is not None:
            self._step_region = record_function(f"ProfilerStep#{self.step_num}")
            self._step_region.__enter__()

    def _close_step_region(self) -> None:
        if self._step_region is not None:
            self._step_region.__exit__(None, None, None)
            self._step_region = None

    def _transit(self, previous: ProfilerAction, current: ProfilerAction | None) -> None:
        """Run PyTorch's steps between two schedule actions (``current`` None: the end)."""
        for step in _TRANSITIONS.get((previous, current), ()):
            if step == "prepare":  # warm-up: record, to be dropped
                self._start_trace(keep=False)
            elif step == "start":
                self._start_trace(keep=True)
            elif step == "stop":
                self._stop_trace()
            else:
                self._trace_ready()

    def _start_trace(self, keep: bool) -> None:
        if self._recorder is not None:  # a warm-up's events are dropped
            uninstall(self._recorder)
        self._recorder = Recorder(self.record_shapes, self.with_stack, self.profile_memory)
        self._keep = keep
        install(self._recorder)

    def _stop_trace(self) -> None:
        recorder, self._recorder = self._recorder, None
        if recorder is None:
            return
        uninstall(recorder)
        if self._keep:
            events = recorder.events if ProfilerActivity.CPU in self.activities else []
            new = build_events(events, self.profile_memory)
            if self.acc_events and self._events is not None:
                new = EventList([*self._events, *new], self.profile_memory)
            self._events = new

    def _trace_ready(self) -> None:
        if self.on_trace_ready is not None:
            self.on_trace_ready(self)

    # ------------------------------------------------------------------ results
    def events(self) -> EventList:
        """The events of the last recorded cycle (all of them with ``acc_events``)."""
        if self._events is None:
            raise RuntimeError("the profiler has no results: it has not recorded a step yet")
        return self._events

    def key_averages(
        self, group_by_input_shape: bool = False, group_by_stack_n: int = 0
    ) -> EventList:
        return self.events().key_averages(group_by_input_shape, group_by_stack_n)

    def export_chrome_trace(self, path: str) -> None:
        self.events().export_chrome_trace(path)
