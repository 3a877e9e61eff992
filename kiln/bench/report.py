"""Turn a :class:`~kiln.bench.runner.SuiteResult` into the printed tables, Markdown or JSON.

Warnings first (a loaded machine), then one row per workload in each table: step time with its
spread, speedups and kiln/PyTorch ratios; compile times (cold, warm, kiln's cold compile by
stage, captures, recompiles, graphs and kernels); resident memory per column; GB/s of
memory-bound workloads against a numpy copy; the steady-state cost of ``dynamic=True`` beside
the step times;
programs whose shapes change, end to end (compile included) against eager. A column that could not run shows why (``not installed``, ``failed: ...``); long
reasons become numbered notes under the tables. The JSON holds every sample, so other tools can
recompute anything.
"""

from __future__ import annotations

import dataclasses
import json
import math

from .runner import CHECK_TOLERANCE, ColumnResult, SuiteResult, WorkloadResult

__all__ = ["format_table", "format_tables", "format_report", "to_json", "write_json"]

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
    if not column.ok:
        return notes.cell(column.status)
    spread = column.relative_spread
    text = _seconds(column.step_seconds)
    return text if spread is None else f"{text} ±{spread * 100:.0f}%"


def _compile(column: ColumnResult, which: str) -> str:
    return _seconds(getattr(column, f"{which}_compile_seconds"))


def _stage(column: ColumnResult, stage: str) -> str:
    if column.cold_compile_seconds is None:
        return "-"
    if stage == "run":  # what no stage claimed: running the step, kiln's own Python glue
        return _seconds(max(0.0, column.cold_compile_seconds - sum(column.compile_stages.values())))
    return _seconds(column.compile_stages.get(stage, 0.0))


def _megabytes(value: int | None) -> str:
    return "-" if value is None else f"{value / 2**20:.1f}"


def _memory(column: ColumnResult) -> str:
    if column.held_bytes is None and column.step_peak_bytes is None:
        return "-"
    return f"{_megabytes(column.held_bytes)} + {_megabytes(column.step_peak_bytes)}"


def _count(value: int | None) -> str:
    return "-" if value is None else str(value)


def _gbps(value: float | None) -> str:
    return "-" if value is None else f"{value / 1e9:.1f}"


def _of_copy(w: WorkloadResult, key: str) -> str:
    ours, copy = w.bandwidth(key), w.copy_bandwidth
    return "-" if ours is None or not copy else f"{100 * ours / copy:.0f}%"


# (group, heading, cell function) for every column of each table
def _layouts(notes: _Notes) -> dict[str, list]:
    def step(key):
        return lambda w: _step(w.columns[key], notes)

    def name(w: WorkloadResult) -> str:
        marks = "".join(notes.mark(f"{w.name}: {n}") for n in w.notes)
        return w.name + (f" {marks}" if marks else "")

    def compiled(key, which):
        return lambda w: _compile(w.columns[key], which)

    def stage(which):
        return lambda w: _stage(w.columns["kiln_compiled"], which)

    def memory(key):
        return lambda w: _memory(w.columns[key])

    def bandwidth(key):
        return lambda w: _gbps(w.bandwidth(key))

    return {
        "time": [
            ("", "workload", name),
            ("kiln", "eager", step("kiln_eager")),
            ("kiln", "compiled", step("kiln_compiled")),
            ("kiln", "speedup", lambda w: _ratio(w.kiln_speedup)),
            ("PyTorch", "eager", step("torch_eager")),
            ("PyTorch", "compiled", step("torch_compiled")),
            ("PyTorch", "speedup", lambda w: _ratio(w.torch_speedup)),
            ("kiln / PyTorch", "eager", lambda w: _ratio(w.eager_vs_torch)),
            ("kiln / PyTorch", "compiled", lambda w: _ratio(w.compiled_vs_torch)),
            ("kiln", "dynamic/static", lambda w: _ratio(w.dynamic_vs_static)),
        ],
        "compile": [
            ("", "workload", lambda w: w.name),
            ("kiln.compile", "cold", compiled("kiln_compiled", "cold")),
            ("kiln.compile", "warm", compiled("kiln_compiled", "warm")),
            ("kiln cold compile by stage", "dynamo", stage("dynamo")),
            ("kiln cold compile by stage", "aot", stage("aot")),
            ("kiln cold compile by stage", "inductor", stage("inductor")),
            ("kiln cold compile by stage", "codegen", stage("codegen")),
            ("kiln cold compile by stage", "run", stage("run")),
            ("torch.compile", "cold", compiled("torch_compiled", "cold")),
            ("torch.compile", "warm", compiled("torch_compiled", "warm")),
            ("", "captures", lambda w: _count(w.captures)),
            ("", "recompiles", lambda w: _count(w.recompiles)),
            ("", "graphs", lambda w: _count(w.graphs)),
            ("", "kernels", lambda w: _count(w.kernels)),
        ],
        "end_to_end": [
            ("", "workload", name),
            ("kiln", "eager run", step("kiln_eager")),
            ("kiln compiled", "first run", compiled("kiln_compiled", "cold")),
            ("kiln compiled", "warm cache", compiled("kiln_compiled", "warm")),
            ("kiln compiled", "later runs", step("kiln_compiled")),
            ("kiln", "end to end", lambda w: _ratio(w.end_to_end_speedup)),
            ("kiln", "captures", lambda w: _count(w.captures)),
            ("kiln", "recompiles", lambda w: _count(w.recompiles)),
            ("kiln", "graphs", lambda w: _count(w.graphs)),
            ("PyTorch", "eager run", step("torch_eager")),
            ("PyTorch", "first run", compiled("torch_compiled", "cold")),
            ("PyTorch", "end to end", lambda w: _ratio(w.torch_end_to_end_speedup)),
        ],
        "memory": [
            ("", "workload", lambda w: w.name),
            ("kiln", "eager", memory("kiln_eager")),
            ("kiln", "compiled", memory("kiln_compiled")),
            ("PyTorch", "eager", memory("torch_eager")),
            ("PyTorch", "compiled", memory("torch_compiled")),
        ],
        "bandwidth": [
            ("", "workload", lambda w: w.name),
            ("", "MB moved", lambda w: _megabytes(w.moved_bytes)),
            ("", "numpy copy", lambda w: _gbps(w.copy_bandwidth)),
            ("kiln", "eager", bandwidth("kiln_eager")),
            ("kiln", "compiled", bandwidth("kiln_compiled")),
            ("kiln", "of copy", lambda w: _of_copy(w, "kiln_compiled")),
            ("PyTorch", "eager", bandwidth("torch_eager")),
            ("PyTorch", "compiled", bandwidth("torch_compiled")),
            ("PyTorch", "of copy", lambda w: _of_copy(w, "torch_compiled")),
        ],
    }


def _rows(kind: str, suite: SuiteResult) -> list[WorkloadResult]:
    """The workloads a table has a row for."""
    if kind == "bandwidth":
        return [w for w in suite.workloads if w.moved_bytes is not None]
    if kind == "memory":
        return [
            w
            for w in suite.workloads
            if any(c.held_bytes is not None or c.step_peak_bytes is not None
                   for c in w.columns.values())
        ]  # fmt: skip
    if kind == "compile":
        return [w for w in suite.workloads if w.columns["kiln_compiled"].ok]
    if kind == "end_to_end":
        return [w for w in suite.workloads if w.end_to_end]
    return suite.workloads


TABLE_TITLES = {
    "time": "Step time (median ±half the interquartile range, as % of the median)",
    "compile": "Compile time (first call of a fresh compile; kiln's cold compile by stage)",
    "memory": "Resident memory, MB: held after warm-up + peak one more step adds",
    "bandwidth": "Memory-bound workloads: GB/s of compulsory bytes, against a numpy copy",
    "end_to_end": (
        "Shapes that change between calls, end to end (one step = the whole program; first run "
        "= every capture and compile included)"
    ),
}


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
    headings = [f"{group} {name}".strip() for group, name, _ in layout]
    out = [
        "| " + " | ".join(headings) + " |",
        "|" + "|".join(["---"] + ["---:"] * (len(headings) - 1)) + "|",
    ]
    return out + ["| " + " | ".join(r) + " |" for r in rows]


def format_tables(
    suite: SuiteResult, markdown: bool = False
) -> tuple[list[tuple[str, str]], list[str]]:
    """Every table with rows (title, plain text or Markdown) and the notes their cells refer to.
    The step-time table always comes first."""
    notes = _Notes()
    tables = []
    for kind, layout in _layouts(notes).items():
        workloads = _rows(kind, suite)
        if not workloads and kind != "time":
            continue
        rows = [[cell(w) for _, _, cell in layout] for w in workloads]
        lines = _markdown(layout, rows) if markdown else _plain(layout, rows)
        tables.append((TABLE_TITLES[kind], "\n".join(lines)))
    return tables, notes.texts


def format_table(suite: SuiteResult, markdown: bool = False) -> tuple[str, list[str]]:
    """The step-time table and the notes its cells refer to."""
    tables, notes = format_tables(suite, markdown)
    return tables[0][1], notes


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
    """Warnings, tables, legend, notes, machine and where the IR dumps are: what the CLI
    prints."""
    s = suite.settings
    tables, notes = format_tables(suite, markdown)
    lines = [f"WARNING: {text}" for text in suite.warnings]
    if lines:
        lines.append("")
    for title, table in tables:
        lines += [f"{'### ' if markdown else ''}{title}", "", table, ""]
    lines.append(
        f"step: median wall time of one whole step, columns interleaved round by round (at "
        f"least {s['repeat']} rounds after {s['warmup']} warm-up steps; {s['device']}, "
        f"{'quick' if s['quick'] else 'full'} shapes); ±: half the interquartile range of the "
        "samples over the median (the JSON has every sample, quartiles and extremes). speedup = "
        "eager / compiled (above 1: compiling helps); kiln / PyTorch = kiln time / PyTorch time "
        "(below 1: kiln is faster); dynamic/static: kiln's median step compiled with "
        "dynamic=True (symbolic sizes, kernels for every size) over its default compile's "
        "(sizes of the first call), timed in the same rounds (above 1: symbolic kernels are "
        "slower)."
    )
    lines.append(
        "compile: wall time of the first call of a freshly compiled function (capture, compile, "
        "one step; every batch size of a varying-batch workload) plus what its second call "
        "takes beyond a steady one (a recompile there); cold = empty on-disk cache, "
        "warm = compiled again with the cache populated. Stages: dynamo = bytecode capture and "
        "guards, aot = AOT autograd (functionalize, joint graph, partition), inductor = "
        "lowering, scheduling and kernel source, codegen = LLVM optimization and machine code "
        "(on a background thread and a helper process, overlapping the other stages: the wall "
        "time while either works; stages may add up to more than cold), run = what the stages "
        "leave of cold (the step itself, glue). "
        f"One-time start-up, not in the table: {_startup(suite)}. captures: graphs dynamo "
        "captured, recompiles: captures after a guard failed, graphs: graphs the inductor "
        "compiled, kernels: kiln kernels generated (all graphs, forward and backward). First outputs are compared (compiled vs "
        f"eager, kiln vs PyTorch; tolerance {CHECK_TOLERANCE:g} relative)."
    )
    lines.append(
        "memory: resident set of the process (Linux), one column at a time; held = growth from "
        "before the column was built until after its warm-up (parameters, optimizer state, "
        "pools, compiled code; garbage collected and the heap trimmed first), peak = the most "
        "one more step adds on top. GB/s: the workload's compulsory bytes (inputs read once, "
        "outputs written once) over its median step; numpy copy = np.copyto of as many bytes, "
        "timed in the same rounds."
    )
    if any(w.end_to_end for w in suite.workloads):
        lines.append(
            "end to end: one step runs the whole program, whose shapes change from call to call; "
            "eager run = its median eager step; first run = the compiled program's first run "
            "with an empty on-disk cache, every capture and compile included (warm cache: "
            "compiled again, cache populated; later runs: median step once compiled); end to "
            "end = eager run / first run (above 1: compiling pays for itself in one run); "
            "captures, recompiles and graphs: as in the compile table, for the first run."
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
    if isinstance(value, (list, tuple)):
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
            bandwidth={key: w.bandwidth(key) for key in w.columns},
            copy_bandwidth=w.copy_bandwidth,
            end_to_end_speedup=w.end_to_end_speedup,
            torch_end_to_end_speedup=w.torch_end_to_end_speedup,
            dynamic_vs_static=w.dynamic_vs_static,
        )
    return _finite(data)


def write_json(suite: SuiteResult, path: str) -> None:
    with open(path, "w") as f:
        json.dump(to_json(suite), f, indent=2, allow_nan=False)
        f.write("\n")
