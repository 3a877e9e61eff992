"""Chrome trace-event JSON of a profile: what Perfetto (ui.perfetto.dev) and chrome://tracing load.

Each event is a complete event (``"ph": "X"``) with microsecond ``ts`` and ``dur`` on the thread
that ran it; nesting is by time, which is how the viewers draw ops inside regions and kernels
inside compiled graphs. ``args`` carries what PyTorch's traces carry: ``Input Dims`` (with
``record_shapes``), ``Call stack`` (with ``with_stack``). Metadata events name the process and the
threads. A path ending in ``.gz`` is written gzip-compressed (viewers open both).
"""

from __future__ import annotations

import gzip
import json
import os

__all__ = ["write_chrome_trace", "trace_document"]


def trace_document(events: list, trace_name: str = "") -> dict:
    """The JSON object of ``events`` (``FunctionEvent``s)."""
    pid = os.getpid()
    threads = sorted({e.thread for e in events})
    out: list[dict] = [
        {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": "python"}},
        {"ph": "M", "name": "process_labels", "pid": pid, "tid": 0, "args": {"labels": "CPU"}},
    ]
    for tid in threads:
        out.append(
            {"ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
             "args": {"name": f"thread {tid} (python)"}}
        )  # fmt: skip
    for e in events:
        start, end = e.time_range
        args: dict = {"External id": e.id}
        if e.input_shapes:
            args["Input Dims"] = e.input_shapes
        if e.stack:
            args["Call stack"] = ";".join(e.stack)
        out.append(
            {"ph": "X", "cat": e.category, "name": e.trace_name, "pid": pid, "tid": e.thread,
             "ts": round(start, 3), "dur": round(end - start, 3), "args": args}
        )  # fmt: skip
    return {
        "schemaVersion": 1,
        "deviceProperties": [],
        "displayTimeUnit": "ms",
        "traceName": trace_name,
        "traceEvents": out,
    }


def write_chrome_trace(events: list, path: str) -> None:
    text = json.dumps(trace_document(events, os.path.basename(path)))
    if path.endswith(".gz"):
        with gzip.open(path, "wt", encoding="utf-8") as f:
            f.write(text)
    else:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
