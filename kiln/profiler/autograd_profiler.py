"""``kiln.autograd.profiler``: PyTorch's older profiler API, over ``kiln.profiler``.

Programs written before ``torch.profiler`` existed (and many still) use
``torch.autograd.profiler.profile(enabled=..., use_cuda=...)``, read ``prof.function_events``
and print ``prof.key_averages().table(...)``; ``record_function`` is the very class
``kiln.profiler`` has, so regions it marks in compiled code leave the graph whole. The facade
installs this module as ``kiln.autograd.profiler`` (autograd sits below the profiler).
"""

from __future__ import annotations

from collections.abc import Callable

from .events import EventList, FunctionEvent, FunctionEventAvg
from .profile import ProfilerActivity
from .profile import profile as _profile
from .record_function import record_function

__all__ = [
    "profile",
    "record_function",
    "emit_nvtx",
    "EventList",
    "FunctionEvent",
    "FunctionEventAvg",
]


class profile(_profile):
    """``torch.autograd.profiler.profile``: records from ``__enter__`` to ``__exit__`` unless
    ``enabled`` is False; the results are ``function_events`` (also ``table()``,
    ``key_averages()``, ``total_average()`` and ``export_chrome_trace()`` on the profile)."""

    def __init__(
        self,
        enabled: bool = True,
        *,
        use_cuda: bool = False,
        use_device: str | None = None,
        record_shapes: bool = False,
        with_flops: bool = False,
        profile_memory: bool = False,
        with_stack: bool = False,
        with_modules: bool = False,
        use_kineto: bool = False,
        use_cpu: bool = True,
        experimental_config=None,
        acc_events: bool = False,
        custom_trace_id_callback: Callable | None = None,
    ):
        activities = {ProfilerActivity.CPU} if use_cpu else set()
        if use_cuda or use_device == "cuda":
            activities.add(ProfilerActivity.CUDA)
        super().__init__(
            activities=activities,
            record_shapes=record_shapes,
            profile_memory=profile_memory,
            with_stack=with_stack,
            with_flops=with_flops,
            with_modules=with_modules,
            acc_events=acc_events,
        )
        self.enabled = enabled

    def __enter__(self) -> profile | None:
        if not self.enabled:
            return None  # (PyTorch's disabled profile binds None to ``as``)
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        if self.enabled:
            self.stop()

    @property
    def function_events(self) -> EventList | None:
        """The recorded events (None before the profile has recorded, as PyTorch's)."""
        return self._events

    def table(self, *args, **kwargs) -> str:
        return self._checked_events().table(*args, **kwargs)

    def total_average(self) -> FunctionEventAvg:
        return self._checked_events().total_average()

    @property
    def self_cpu_time_total(self) -> float:
        return self._checked_events().self_cpu_time_total

    def _checked_events(self) -> EventList:
        if self._events is None:
            raise RuntimeError("Profiler didn't finish running")
        return self._events

    def __str__(self) -> str:
        return self.table() if self._events is not None else "<unfinished profile>"


class emit_nvtx:
    """``torch.autograd.profiler.emit_nvtx``: NVTX ranges for nvprof; kiln emits none, so the
    block runs unchanged."""

    def __init__(self, enabled: bool = True, record_shapes: bool = False):
        self.enabled = enabled

    def __enter__(self) -> emit_nvtx:
        return self

    def __exit__(self, *exc) -> None:
        return None
