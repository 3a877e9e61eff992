"""``kiln.profiler``: PyTorch's ``torch.profiler`` API over kiln's eager ops and compiled code.

``with profile(record_shapes=True) as prof: ...`` records, in the entering thread, every eager op
(as ``aten::<name>`` with its input shapes), ``record_function`` regions, autograd backward nodes,
and each compiled graph as a region named after the user's function with its kernels inside.
``prof.key_averages().table(sort_by="cpu_time_total", row_limit=10)`` prints PyTorch's table;
``prof.export_chrome_trace("trace.json")`` writes a trace for Perfetto or chrome://tracing.
While nothing records, the instrumentation costs one ``is None`` check per op.
"""

from .events import EventList, FunctionEvent, FunctionEventAvg
from .profile import (
    ProfilerAction,
    ProfilerActivity,
    profile,
    schedule,
    supported_activities,
    tensorboard_trace_handler,
)
from .record_function import record_function
from .recorder import add_activation_listener

__all__ = [
    "profile",
    "record_function",
    "schedule",
    "ProfilerAction",
    "ProfilerActivity",
    "supported_activities",
    "tensorboard_trace_handler",
    "EventList",
    "FunctionEvent",
    "FunctionEventAvg",
    "add_activation_listener",
]
