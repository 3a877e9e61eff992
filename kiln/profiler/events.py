"""The profile's results as PyTorch's classes: ``FunctionEvent``, ``FunctionEventAvg``, ``EventList``.

Times are in microseconds, as PyTorch's are. ``EventList.key_averages`` groups events by name (and
input shapes or stack frames when asked), ``table`` prints them in PyTorch's layout, and
``export_chrome_trace`` writes them for Perfetto / chrome://tracing. Only CPU time is measured: the
device columns PyTorch fills from CUDA kernels read zero here.
"""

from __future__ import annotations

from collections.abc import Iterable

from .recorder import Event
from .table import build_table, format_time

__all__ = ["FunctionEvent", "FunctionEventAvg", "EventList", "build_events"]


class _TimeColumns:
    """The ``*_str`` spellings PyTorch's tables and reprs use."""

    cpu_time_total: float
    self_cpu_time_total: float
    count: int

    device_time_total = 0.0
    self_device_time_total = 0.0
    cuda_time_total = 0.0
    self_cuda_time_total = 0.0

    @property
    def cpu_time(self) -> float:
        """Average time per call."""
        return self.cpu_time_total / max(self.count, 1)

    @property
    def device_time(self) -> float:
        return 0.0

    @property
    def cpu_time_str(self) -> str:
        return format_time(self.cpu_time)

    @property
    def cpu_time_total_str(self) -> str:
        return format_time(self.cpu_time_total)

    @property
    def self_cpu_time_total_str(self) -> str:
        return format_time(self.self_cpu_time_total)


class FunctionEvent(_TimeColumns):
    """One recorded interval (an op call, a ``record_function`` region, a backward node, a
    compiled kernel) with its place in the call tree."""

    def __init__(self, event: Event, id: int):
        self.id = id
        # the trace keeps each step's number; the tables add all steps up, as PyTorch's do
        self.trace_name = event.name
        self.name = "ProfilerStep*" if event.name.startswith("ProfilerStep#") else event.name
        self.category = event.category
        self.thread = event.thread
        self.time_range = (event.start_ns / 1000.0, event.end_ns / 1000.0)
        self.input_shapes = event.input_shapes if event.input_shapes is not None else []
        self.stack = list(event.stack or [])
        self.memory = event.memory
        self.count = 1
        self.cpu_parent: FunctionEvent | None = None
        self.cpu_children: list[FunctionEvent] = []
        self.cpu_memory_usage = 0
        self.self_cpu_memory_usage = 0
        self.is_async = False
        self.device_type = "CPU"

    @property
    def key(self) -> str:
        return self.name

    @property
    def cpu_time_total(self) -> float:
        start, end = self.time_range
        return end - start

    @property
    def self_cpu_time_total(self) -> float:
        return self.cpu_time_total - sum(c.cpu_time_total for c in self.cpu_children)

    def __repr__(self) -> str:
        return (
            f"<FunctionEvent id={self.id} name={self.name} cpu_time={self.cpu_time_total_str} "
            f"start_us={self.time_range[0]:.3f} input_shapes={self.input_shapes}>"
        )


class FunctionEventAvg(_TimeColumns):
    """The sum of the events sharing a key: ``count`` calls, total and self times, memory."""

    def __init__(self):
        self.key: str | None = None
        self.count = 0
        self.cpu_time_total = 0.0
        self.self_cpu_time_total = 0.0
        self.cpu_memory_usage = 0
        self.self_cpu_memory_usage = 0
        self.input_shapes: list | str | None = None
        self.stack: list[str] = []
        self.cpu_parent = None
        self.is_async = False
        self.device_type = "CPU"

    def add(self, other) -> FunctionEventAvg:
        if self.key is None:
            self.key = other.key
            self.input_shapes = other.input_shapes
            self.stack = other.stack
            self.cpu_parent = other.cpu_parent
        self.count += other.count
        self.cpu_time_total += other.cpu_time_total
        self.self_cpu_time_total += other.self_cpu_time_total
        self.cpu_memory_usage += other.cpu_memory_usage
        self.self_cpu_memory_usage += other.self_cpu_memory_usage
        return self

    __iadd__ = add

    def __repr__(self) -> str:
        return (
            f"<FunctionEventAvg key={self.key} self_cpu_time={self.self_cpu_time_total_str} "
            f"cpu_time={self.cpu_time_str} input_shapes={self.input_shapes} "
            f"cpu_memory_usage={self.cpu_memory_usage}>"
        )


class EventList(list):
    """A list of events with PyTorch's summaries."""

    def __init__(self, events: Iterable = (), profile_memory: bool = False):
        super().__init__(events)
        self._profile_memory = profile_memory

    @property
    def self_cpu_time_total(self) -> float:
        return sum(e.self_cpu_time_total for e in self)

    def key_averages(
        self, group_by_input_shapes: bool = False, group_by_stack_n: int = 0
    ) -> EventList:
        """One ``FunctionEventAvg`` per name (and per input shapes / first ``n`` stack frames
        when asked), in order of first appearance."""
        groups: dict[tuple, FunctionEventAvg] = {}
        for event in self:
            key = (event.key,)
            if group_by_input_shapes:
                key += (str(event.input_shapes),)
            if group_by_stack_n > 0:
                key += tuple(event.stack[:group_by_stack_n])
            groups.setdefault(key, FunctionEventAvg()).add(event)
        averages = EventList(groups.values(), self._profile_memory)
        for avg in averages:
            avg.stack = avg.stack[:group_by_stack_n]
            if not group_by_input_shapes:
                avg.input_shapes = ""
        return averages

    def total_average(self) -> FunctionEventAvg:
        total = FunctionEventAvg()
        for event in self:
            total.add(event)
            total.key = None
        total.key = "Total"
        return total

    def table(
        self,
        sort_by: str | None = None,
        row_limit: int = 100,
        max_src_column_width: int = 75,
        max_name_column_width: int = 55,
        max_shapes_column_width: int = 80,
        header: str | None = None,
        top_level_events_only: bool = False,
        time_unit: str | None = None,
    ) -> str:
        """The events as PyTorch's profiler table (same columns, widths and footer)."""
        return build_table(
            self,
            sort_by=sort_by,
            row_limit=row_limit,
            max_src_column_width=max_src_column_width,
            max_name_column_width=max_name_column_width,
            max_shapes_column_width=max_shapes_column_width,
            header=header,
            profile_memory=self._profile_memory,
            top_level_events_only=top_level_events_only,
            time_unit=time_unit,
        )

    def export_chrome_trace(self, path: str) -> None:
        from .chrome_trace import write_chrome_trace

        write_chrome_trace([e for e in self if isinstance(e, FunctionEvent)], path)


def build_events(raw: list[Event], profile_memory: bool) -> EventList:
    """``FunctionEvent``s of a recorder's events, linked into their call tree."""
    converted: dict[int, FunctionEvent] = {}
    out = []
    for n, event in enumerate(raw):
        fe = FunctionEvent(event, n)
        converted[id(event)] = fe
        if event.parent is not None:
            parent = converted.get(id(event.parent))
            if parent is not None:
                fe.cpu_parent = parent
                parent.cpu_children.append(fe)
        out.append(fe)
    if profile_memory:
        for fe in reversed(out):  # children before parents
            fe.self_cpu_memory_usage = fe.memory
            fe.cpu_memory_usage = fe.memory + sum(c.cpu_memory_usage for c in fe.cpu_children)
    return EventList(out, profile_memory)
