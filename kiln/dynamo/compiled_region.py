"""The handle through which transformed code calls a compiled graph, and its profiler region.

Transformed code calls ``region.fn(*inputs)``. ``fn`` is the backend's callable itself, except
while a ``kiln.profiler.profile`` records somewhere: then every live region's ``fn`` becomes a
wrapper that, in a recording thread, times the call as an event named after the user's function
(``Compiled Region: train_step_0``), with whatever the backend reports (kernels) inside it. The
swap happens when recording starts and stops, so a call with no profiler pays one attribute load.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable

from ..profiler import add_activation_listener
from ..runtime.state import per_thread

__all__ = ["CompiledRegion"]

_LIVE: weakref.WeakSet = weakref.WeakSet()
_profiling = [False]


class CompiledRegion:
    """A compiled graph as the transformed code sees it (see the module docstring)."""

    __slots__ = ("fn", "compiled", "name", "__weakref__")

    def __init__(self, compiled: Callable, name: str):
        self.compiled = compiled
        # named after the user's function: a method keeps its class, a nested function its name
        self.name = f"Compiled Region: {name.rsplit('<locals>.', 1)[-1]}"
        self.fn = _profiled(compiled, self.name) if _profiling[0] else compiled
        _LIVE.add(self)

    def __repr__(self) -> str:
        return f"<{self.name}>"


def _profiled(compiled: Callable, name: str) -> Callable:
    def region(*args):
        recorder = per_thread.state.profiler
        if recorder is None:  # another thread records, not this one
            return compiled(*args)
        event = recorder.begin(name, "compiled_region")
        try:
            return compiled(*args)
        finally:
            recorder.end(event)

    return region


def _on_recording(active: bool) -> None:
    _profiling[0] = active
    for region in list(_LIVE):
        region.fn = _profiled(region.compiled, region.name) if active else region.compiled


add_activation_listener(_on_recording)
