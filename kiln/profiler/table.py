"""``EventList.table``: the events in the layout of PyTorch's profiler table.

Columns, widths and formats follow PyTorch so that output (and scripts that read it) look the
same: a name column as wide as the longest name plus 4 (at most ``max_name_column_width``),
12-character value columns, two spaces between columns, dashed rules, and a ``Self CPU time
total`` footer. Optional columns appear as in PyTorch: ``CPU Mem`` / ``Self CPU Mem`` with
``profile_memory``, ``Input Shapes`` when the events carry shapes (``key_averages(
group_by_input_shape=True)`` of a ``record_shapes`` profile), ``Source Location`` when they carry
stack frames.
"""

from __future__ import annotations

__all__ = ["build_table", "format_time", "format_time_share", "format_memory"]

_VALUE_WIDTH = 12
_SPACING = 2


def format_time(time_us: float) -> str:
    if time_us >= 1e6:
        return f"{time_us / 1e6:.3f}s"
    if time_us >= 1e3:
        return f"{time_us / 1e3:.3f}ms"
    return f"{time_us:.3f}us"


def format_time_share(time_us: float, total_us: float) -> str:
    if total_us == 0:
        return "NaN"
    return f"{time_us * 100.0 / total_us:.2f}%"


def format_memory(nbytes: int) -> str:
    for unit, size in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if abs(nbytes) >= size:
            return f"{nbytes / size:.2f} {unit}"
    return f"{nbytes} B"


def _in_unit(time_us: float, unit: str | None) -> str:
    scale = {"s": 1e6, "ms": 1e3, "us": 1.0}.get(unit)
    return format_time(time_us) if scale is None else f"{time_us / scale:.3f}{unit}"


def _trim_path(path: str, width: int) -> str:
    if len(path) > width:
        path = path[len(path) - width :]
        if len(path) > 3:
            path = "..." + path[3:]
    return path


def build_table(
    events,
    sort_by: str | None = None,
    row_limit: int = 100,
    max_src_column_width: int = 75,
    max_name_column_width: int = 55,
    max_shapes_column_width: int = 80,
    header: str | None = None,
    profile_memory: bool = False,
    top_level_events_only: bool = False,
    time_unit: str | None = None,
) -> str:
    """The table text (see the module docstring); "" for no events."""
    if len(events) == 0:
        return ""
    if sort_by is not None:
        attribute = sort_by.replace("cuda", "device").replace("xpu", "device")
        events = sorted(events, key=lambda e: getattr(e, attribute), reverse=True)
    has_shapes = any(e.input_shapes for e in events)
    stacks = [e.stack for e in events if e.stack]

    name_width = max(len(e.key) for e in events) + 4
    if max_name_column_width is not None:
        name_width = min(name_width, max_name_column_width)
    columns: list[tuple[str, int, str]] = [("Name", name_width, ">")]
    names = ["Self CPU %", "Self CPU", "CPU total %", "CPU total", "CPU time avg"]
    if profile_memory:
        names += ["CPU Mem", "Self CPU Mem"]
    names.append("# of Calls")
    columns += [(name, _VALUE_WIDTH, ">") for name in names]
    if has_shapes:
        width = max(len(str(e.input_shapes)) for e in events) + 4
        if max_shapes_column_width is not None:
            width = min(width, max_shapes_column_width)
        columns.append(("Input Shapes", width, ">"))
    if stacks:
        width = max(len(frame) for stack in stacks for frame in stack) + 4
        if max_src_column_width is not None:
            width = min(width, max_src_column_width)
        columns.append(("Source Location", width, "<"))

    row_format = "".join("{: " + align + str(width) + "}" + " " * _SPACING
                         for _, width, align in columns)  # fmt: skip
    rule = "".join("-" * width + " " * _SPACING for _, width, _ in columns)
    line_length = sum(width + _SPACING for _, width, _ in columns) - _SPACING
    shapes_width = columns[-1 - bool(stacks)][1] if has_shapes else 0
    src_width = columns[-1][1] if stacks else 0

    self_total = sum(e.self_cpu_time_total for e in events)
    lines = []
    if header is not None:
        lines += ["=" * line_length, header]
    if top_level_events_only:
        lines += ["=" * line_length, "This report only display top-level ops statistics"]
    lines += [rule, row_format.format(*(name for name, _, _ in columns)), rule]
    shown = 0
    for e in events:
        if shown == row_limit:
            break
        if top_level_events_only and e.cpu_parent is not None:
            continue
        shown += 1
        name = e.key
        if max_name_column_width is not None and len(name) >= max_name_column_width - 3:
            name = name[: max_name_column_width - 3] + "..."
        row = [
            name,
            format_time_share(e.self_cpu_time_total, self_total),
            _in_unit(e.self_cpu_time_total, time_unit),
            format_time_share(e.cpu_time_total, self_total),
            _in_unit(e.cpu_time_total, time_unit),
            _in_unit(e.cpu_time, time_unit),
        ]
        if profile_memory:
            row += [format_memory(e.cpu_memory_usage), format_memory(e.self_cpu_memory_usage)]
        row.append(e.count)
        if has_shapes:
            row.append(str(e.input_shapes)[:shapes_width])
        if stacks:
            row.append(_trim_path(e.stack[0], src_width) if e.stack else "")
        lines.append(row_format.format(*row))
        if stacks:
            blank = [""] * (len(columns) - 1)
            for frame in e.stack[1:]:
                lines.append(row_format.format(*blank, _trim_path(frame, src_width)))
            lines.append(row_format.format(*blank, ""))
    lines.append(rule)
    lines.append(f"Self CPU time total: {_in_unit(self_total, time_unit)}")
    return "".join(line + "\n" for line in lines)
