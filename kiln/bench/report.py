"""Turn a :class:`~kiln.bench.runner.SuiteResult` into the printed table, Markdown or JSON.

One row per workload: median step time of each column, compiled/eager speedups, kiln/PyTorch
ratios, cold and warm-cache compile times and the number of kernels kiln generated. A column that
could not run shows why (``not installed``, ``failed: ...``); long reasons become numbered notes
under the table. The JSON holds every sample, so other tools can recompute anything.
"""

from __future__ import annotations

import dataclasses
import json
import math

from .runner import CHECK_TOLERANCE, ColumnResult, SuiteResult, WorkloadResult

__all__ = ["format_table", "format_report", "to_json", "write_json"]

_CELL_LIMIT = 26  # longer status texts move to a numbered note


def _seconds(value: float | None) -> str:
    if value is None:
        return "-"
    if value < 1e-3:
        return f"{value * 1e6:.1f} us"
    if value < 1.0:
        return f"{value * 1e3:.2f} ms"
    return f"{value:.2f} s"


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


class _Notes:
    """Numbered notes for texts too long for a cell (the same text gets one number)."""

    def __init__(self):
        self.texts: list[str] = []

    def mark(self, text: str) -> str:
        if text not in self.texts:
            self.texts.append(text)
        return f"[{self.texts.index(text) + 1}]"

    def cell(self, text: str) -> str:
        if len(text) <= _CELL_LIMIT:
            return text
        head = text.split(":")[0]
        return f"{head} {self.mark(text)}"


def _step(column: ColumnResult, notes: _Notes) -> str:
    return _seconds(column.step_seconds) if column.ok else notes.cell(column.status)


def _compile(column: ColumnResult) -> str:
    if column.cold_compile_seconds is None:
        return "-"
    return f"{_seconds(column.cold_compile_seconds)} / {_seconds(column.warm_compile_seconds)}"


# (group, heading, cell function) for every column of the table
def _layout(notes: _Notes):
    def step(key):
        return lambda w: _step(w.columns[key], notes)

    def name(w: WorkloadResult) -> str:
        marks = "".join(notes.mark(f"{w.name}: {n}") for n in w.notes)
        return w.name + (f" {marks}" if marks else "")

    return [
        ("", "workload", name),
        ("kiln", "eager", step("kiln_eager")),
        ("kiln", "compiled", step("kiln_compiled")),
        ("kiln", "speedup", lambda w: _ratio(w.kiln_speedup)),
        ("PyTorch", "eager", step("torch_eager")),
        ("PyTorch", "compiled", step("torch_compiled")),
        ("PyTorch", "speedup", lambda w: _ratio(w.torch_speedup)),
        ("kiln / PyTorch", "eager", lambda w: _ratio(w.eager_vs_torch)),
        ("kiln / PyTorch", "compiled", lambda w: _ratio(w.compiled_vs_torch)),
        ("compile: cold / warm cache", "kiln", lambda w: _compile(w.columns["kiln_compiled"])),
        (
            "compile: cold / warm cache",
            "torch.compile",
            lambda w: _compile(w.columns["torch_compiled"]),
        ),
        ("", "kernels", lambda w: "-" if w.kernels is None else str(w.kernels)),
    ]


def _plain(layout, rows: list[list[str]]) -> list[str]:
    headings = [h for _, h, _ in layout]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headings)]
    # widen the last column of each group so the group title fits over its columns
    groups: list[tuple[str, list[int]]] = []
    for i, (group, _, _) in enumerate(layout):
        if groups and groups[-1][0] == group and group:
            groups[-1][1].append(i)
        else:
            groups.append((group, [i]))
    for group, members in groups:
        span = sum(widths[i] for i in members) + 2 * (len(members) - 1)
        if len(group) > span:
            widths[members[-1]] += len(group) - span
    title = "  ".join(
        group.center(sum(widths[i] for i in members) + 2 * (len(members) - 1))
        for group, members in groups
    )

    def line(cells):
        parts = [cells[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(cells[1:], widths[1:])]
        return "  ".join(parts).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return [title.rstrip(), line(headings), rule] + [line(r) for r in rows]


def _markdown(layout, rows: list[list[str]]) -> list[str]:
    def heading(group: str, name: str) -> str:
        if group.startswith("compile"):
            return f"{'kiln.compile' if name == 'kiln' else name}, cold / warm"
        return f"{group} {name}".strip()

    headings = [heading(g, h) for g, h, _ in layout]
    out = [
        "| " + " | ".join(headings) + " |",
        "|" + "|".join(["---"] + ["---:"] * (len(headings) - 1)) + "|",
    ]
    return out + ["| " + " | ".join(r) + " |" for r in rows]


def format_table(suite: SuiteResult, markdown: bool = False) -> tuple[str, list[str]]:
    """The table (plain text or Markdown) and the notes its cells refer to."""
    notes = _Notes()
    layout = _layout(notes)
    rows = [[cell(w) for _, _, cell in layout] for w in suite.workloads]
    lines = _markdown(layout, rows) if markdown else _plain(layout, rows)
    return "\n".join(lines), notes.texts


def _startup(suite: SuiteResult) -> str:
    parts = []
    for key, label in (("kiln", "kiln"), ("torch", "torch.compile")):
        value = suite.startup.get(key)
        if isinstance(value, float):
            parts.append(f"{label} {_seconds(value)}")
        elif value is not None:
            parts.append(f"{label} {value}")
    return ", ".join(parts) or "-"


def _machine(suite: SuiteResult) -> str:
    m = suite.machine
    versions = ", ".join(
        f"{k} {m[k]}" for k in ("python", "numpy", "llvmlite", "torch") if m.get(k) is not None
    )
    load_text = "unknown"
    if m.get("load_average"):
        start, end = m.get("load_average_before") or m["load_average"], m["load_average"]
        load_text = (
            f"{'/'.join(f'{x:.2f}' for x in start)} (1/5/15 min) at start, {end[0]:.2f} at the end"
        )
    return (
        f"machine: {m['cpu']}, {m['cores']} cores, {m.get('threads', '?')} threads for compiled "
        f"kernels and PyTorch, numpy BLAS threads: {m.get('blas_threads')}; load average "
        f"{load_text}\n{versions}"
    )


def format_report(suite: SuiteResult, markdown: bool = False) -> str:
    """Table, legend, notes, machine and where the IR dumps are: what the CLI prints."""
    s = suite.settings
    table, notes = format_table(suite, markdown)
    lines = [table, ""]
    lines.append(
        f"step: median wall time of one whole step over {s['repeat']} samples after "
        f"{s['warmup']} warm-up steps ({s['device']}, {'quick' if s['quick'] else 'full'} shapes). "
        "speedup = eager / compiled (above 1: compiling helps); kiln / PyTorch = kiln time / "
        "PyTorch time (below 1: kiln is faster)."
    )
    lines.append(
        "compile: wall time of the first call of a freshly compiled function (capture, compile, "
        "one step); cold = empty on-disk cache, warm = compiled again with the cache populated. "
        f"One-time start-up, not in the table: {_startup(suite)}. kernels: kiln kernels generated "
        f"(all graphs, forward and backward). First outputs are compared (compiled vs eager, kiln "
        f"vs PyTorch; tolerance {CHECK_TOLERANCE:g} relative)."
    )
    if notes:
        lines.append("")
        lines += [f"[{i + 1}] {text}" for i, text in enumerate(notes)]
    lines += ["", _machine(suite)]
    dumped = [w for w in suite.workloads if w.debug_dir]
    if dumped:
        lines.append("")
        lines.append(
            "IR dumps (explain.txt; dynamo graph, guards, bytecode; AOT graphs; per inductor "
            "graph inductor/<n>_graph/: graph, loop IR, schedule, output_code.py, kernels):"
        )
        lines += [f"  {w.debug_dir}/  ({w.debug_files} files)" for w in dumped]
    lines.append(f"\ntotal time {suite.seconds:.1f} s")
    return "\n".join(lines)


def _finite(value):
    """JSON has no inf/nan: they become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def to_json(suite: SuiteResult) -> dict:
    """Everything measured, plus the derived ratios, as plain JSON-ready data."""
    data = dataclasses.asdict(suite)
    for record, w in zip(data["workloads"], suite.workloads):
        record.update(
            kiln_speedup=w.kiln_speedup,
            torch_speedup=w.torch_speedup,
            kiln_vs_torch_eager=w.eager_vs_torch,
            kiln_vs_torch_compiled=w.compiled_vs_torch,
        )
    return _finite(data)


def write_json(suite: SuiteResult, path: str) -> None:
    with open(path, "w") as f:
        json.dump(to_json(suite), f, indent=2, allow_nan=False)
        f.write("\n")
