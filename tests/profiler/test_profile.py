"""``kiln.profiler`` against ``torch.profiler``: the same programs give the same events, shapes,
memory, tables (layout) and schedule behaviour; compiled graphs and backward nodes appear."""

from __future__ import annotations

import gzip
import json
import re
import threading

import pytest

import kiln
from kiln.profiler import ProfilerAction, profile, record_function, schedule
from kiln.runtime.state import per_thread

from ..oracle import needs_torch, to_torch, torch


def _run_ops(lib, a, b, x, y):
    with lib.profiler.record_function("outer"):
        lib.mm(a, b)
        x + y
        x * y


def _inputs():
    a, b = kiln.randn(4, 4), kiln.randn(4, 4)
    x, y = kiln.randn(16), kiln.randn(16)
    return (a, b, x, y), tuple(to_torch(v) for v in (a, b, x, y))


def _profiles(**options):
    """(kiln profile, torch profile) of ``_run_ops``."""
    ours, theirs = _inputs()
    with kiln.profiler.profile(**options) as kprof:
        _run_ops(kiln, *ours)
    with torch.profiler.profile(**options) as tprof:
        _run_ops(torch, *theirs)
    return kprof, tprof


def _rows(table: str) -> dict[str, list[str]]:
    """A table's rows by name: the cells split on runs of two spaces."""
    lines = table.splitlines()
    body = lines[3 : lines.index(lines[2], 3)]
    return {cells[0]: cells for cells in (re.split(r"\s{2,}", line.strip()) for line in body)}


# ---------------------------------------------------------------- events and their contents
@needs_torch
def test_eager_ops_are_recorded_with_pytorchs_names_shapes_and_memory():
    kprof, tprof = _profiles(record_shapes=True, profile_memory=True)
    ours = {(e.key, str(e.input_shapes), e.count, e.cpu_memory_usage, e.self_cpu_memory_usage)
            for e in kprof.key_averages(group_by_input_shape=True)}  # fmt: skip
    theirs = {(e.key, str(e.input_shapes), e.count, e.cpu_memory_usage, e.self_cpu_memory_usage)
              for e in tprof.key_averages(group_by_input_shape=True)}  # fmt: skip
    wanted = {"outer", "aten::mm", "aten::add", "aten::mul"}
    assert {r for r in ours if r[0] in wanted} == {r for r in theirs if r[0] in wanted}
    assert {r[0] for r in ours} == wanted  # no other events


@needs_torch
@pytest.mark.parametrize("shapes", [False, True])
@pytest.mark.parametrize("memory", [False, True])
def test_table_has_pytorchs_columns_widths_and_footer(shapes, memory):
    # without mm, whose aten op calls aten::resolve_conj: the same events in both profiles
    a, b, x, y = _inputs()[0]
    tx, ty = to_torch(x), to_torch(y)
    with kiln.profiler.profile(record_shapes=True, profile_memory=memory) as kprof:
        with record_function("outer"):
            x + y
            x * y
    with torch.profiler.profile(record_shapes=True, profile_memory=memory) as tprof:
        with torch.profiler.record_function("outer"):
            tx + ty
            tx * ty
    ours = kprof.key_averages(group_by_input_shape=shapes).table(sort_by="cpu_time_total")
    theirs = tprof.key_averages(group_by_input_shape=shapes).table(sort_by="cpu_time_total")
    ours_lines, their_lines = ours.splitlines(), theirs.splitlines()
    assert ours_lines[:3] == their_lines[:3]  # rule, header row, rule: identical text
    lengths = [len(line) for line in ours_lines[:-1]]  # the footer's number varies
    assert lengths == [len(line) for line in their_lines[:-1]]
    assert ours_lines[-1].startswith("Self CPU time total: ")
    ours_rows, their_rows = _rows(ours), _rows(theirs)
    assert set(ours_rows) == set(their_rows) == {"outer", "aten::add", "aten::mul"}
    header = re.split(r"\s{2,}", their_lines[1].strip())
    for name, cells in their_rows.items():
        mine = dict(zip(header, ours_rows[name]))
        for column, value in zip(header, cells):
            if column in ("Name", "# of Calls", "Input Shapes", "CPU Mem", "Self CPU Mem"):
                assert mine[column] == value, (name, column)
            elif column.endswith("%"):
                assert re.fullmatch(r"\d+\.\d\d%", mine[column])
            else:
                assert re.fullmatch(r"\d+\.\d{3}(us|ms|s)", mine[column])


def test_row_limit_and_sort_order():
    x = kiln.randn(64)
    with profile() as prof:
        for _ in range(3):
            x.sin()
        x.cos()
        x.exp().sum()
    averages = prof.key_averages()
    table = averages.table(sort_by="count", row_limit=2)
    rows = list(_rows(table))
    assert rows[0] == "aten::sin" and len(rows) == 2
    by_self = sorted(averages, key=lambda e: e.self_cpu_time_total, reverse=True)
    assert list(_rows(averages.table(sort_by="self_cpu_time_total"))) == [e.key for e in by_self]


def test_self_times_add_up_to_the_total():
    x = kiln.randn(8, 8, requires_grad=True)
    with profile() as prof:
        with record_function("forward"):
            y = kiln.nn.functional.softmax(x @ x, dim=-1).sum()
        y.backward()
    events = prof.events()
    top = [e for e in events if e.cpu_parent is None]
    assert sum(e.self_cpu_time_total for e in events) == pytest.approx(
        sum(e.cpu_time_total for e in top)
    )
    for e in events:
        assert e.self_cpu_time_total >= 0
        assert e.cpu_time_total >= sum(c.cpu_time_total for c in e.cpu_children)
        start, end = e.time_range
        for c in e.cpu_children:
            assert start <= c.time_range[0] <= c.time_range[1] <= end


def test_with_stack_points_at_the_users_line():
    x = kiln.randn(3)
    with profile(with_stack=True) as prof:
        x.sin()
        line = _current_line() - 1
    (sin,) = [e for e in prof.events() if e.name == "aten::sin"]
    assert sin.stack[0] == f"{__file__}({line}): test_with_stack_points_at_the_users_line"
    table = prof.key_averages(group_by_stack_n=1).table()
    assert "Source Location" in table.splitlines()[1]


def _current_line() -> int:
    import sys

    return sys._getframe(1).f_lineno


@needs_torch
def test_backward_nodes_appear_under_pytorchs_names():
    w, v = kiln.randn(3, requires_grad=True), kiln.randn(3, requires_grad=True)
    tw, tv = to_torch(w), to_torch(v)
    with profile() as kprof:
        (w * v).sum().backward()
    with torch.profiler.profile() as tprof:
        (tw * tv).sum().backward()

    def autograd_names(prof):
        return {e.key for e in prof.key_averages() if "Backward" in e.key or "autograd" in e.key}

    assert autograd_names(kprof) == autograd_names(tprof)
    (node,) = [e for e in kprof.events() if e.name == "MulBackward0"]
    assert node.cpu_parent.name == "autograd::engine::evaluate_function: MulBackward0"
    assert {c.name for c in node.cpu_children} >= {"aten::mul"}


def test_record_function_as_decorator_and_outside_a_profile():
    @record_function("helper")
    def helper(t):
        return t.cos()

    x = kiln.randn(4)
    helper(x)  # no profile: nothing to record, no error
    with record_function("idle"):
        pass
    with profile() as prof:
        helper(x)
        helper(x)
    helpers = [e for e in prof.events() if e.name == "helper"]
    assert len(helpers) == 2
    assert all([c.name for c in h.cpu_children] == ["aten::cos"] for h in helpers)


# ---------------------------------------------------------------- compiled code
@pytest.mark.parametrize("backend", ["eager", "inductor"])
def test_compiled_graph_is_a_region_named_after_the_function(backend):
    def train_step(a, b):
        return (a * b + 1).sin().sum() + a.mm(b.t()).sum()

    compiled = kiln.compile(train_step, backend=backend)
    a, b = kiln.randn(4, 4, requires_grad=True), kiln.randn(4, 4)
    compiled(a, b).backward()  # compiled before the profile starts
    with profile() as prof:
        compiled(a, b).backward()
    (region,) = [e for e in prof.events() if e.name.startswith("Compiled Region:")]
    assert re.fullmatch(r"Compiled Region: train_step_\d+", region.name)  # dynamo's graph name
    inside = [c.name for c in region.cpu_children]
    if backend == "inductor":  # the wrapper's kernels, in order, named after their graph nodes
        assert inside and all(re.fullmatch(r"(kernel\d+|buf\d+): .+", n) for n in inside)
        assert any("mm" in n for n in inside)
        backward = [e for e in prof.events() if e.name == "CompiledFunctionBackward"]
        assert backward and backward[0].cpu_children
    else:  # the graph's eager ops
        assert {"aten::mul", "aten::sin", "aten::mm"} <= set(inside)


def test_compiled_calls_go_back_to_plain_after_the_profile():
    from kiln.dynamo.compiled_region import _LIVE
    from kiln.inductor.compile_fx import _LIVE_GRAPHS

    compiled = kiln.compile(lambda t: (t * 2).sum(), backend="inductor")
    x = kiln.randn(8)
    compiled(x)
    with profile():
        compiled(x)
        assert any(r.fn is not r.compiled for r in _LIVE)
        assert any(g._call is not g._plain for g in _LIVE_GRAPHS)
    assert all(r.fn is r.compiled for r in _LIVE)
    assert all(g._call is g._plain for g in _LIVE_GRAPHS)
    assert per_thread.state.profiler is None


# ---------------------------------------------------------------- threads and lifecycle
def test_only_the_profiling_thread_is_recorded():
    x = kiln.randn(8)
    started, release = threading.Event(), threading.Event()

    def other():
        started.set()
        release.wait(10)
        for _ in range(5):
            x.tanh()

    worker = threading.Thread(target=other)
    worker.start()
    started.wait(10)
    with profile() as prof:
        release.set()
        worker.join()
        x.exp()
    names = {e.name for e in prof.events()}
    assert "aten::exp" in names and "aten::tanh" not in names


def test_one_profile_per_thread():
    with profile():
        with pytest.raises(RuntimeError, match="already enabled on this thread"):
            with profile():
                pass
    assert per_thread.state.profiler is None


def test_an_exception_inside_a_region_closes_it():
    x = kiln.randn(3)
    with profile() as prof:
        with pytest.raises(RuntimeError):
            with record_function("failing"):
                x.sin()
                kiln.mm(x, x)  # 1-d: an error
        x.cos()
    events = {e.name: e for e in prof.events()}
    assert events["aten::cos"].cpu_parent is None
    assert events["failing"].time_range[1] <= events["aten::cos"].time_range[0]


# ---------------------------------------------------------------- schedule
@needs_torch
@pytest.mark.parametrize(
    "args",
    [
        dict(wait=1, warmup=1, active=2),
        dict(wait=0, warmup=2, active=1, repeat=2),
        dict(wait=2, warmup=1, active=3, repeat=1, skip_first=2),
        dict(wait=3, warmup=1, active=1, skip_first=1, skip_first_wait=1),
    ],
)
def test_schedule_walks_pytorchs_cycle(args):
    import warnings

    steps = 14
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ours, theirs = schedule(**args), torch.profiler.schedule(**args)
    assert [ours(i).name for i in range(steps)] == [theirs(i).name for i in range(steps)]

    def run(lib, make_schedule, x):
        traces = []

        def ready(prof):
            steps = [e.trace_name for e in prof.events() if e.name == "ProfilerStep*"]
            sins = sum(e.count for e in prof.key_averages() if e.key == "aten::sin")
            traces.append((prof.step_num, steps, sins))

        with lib.profiler.profile(schedule=make_schedule, on_trace_ready=ready) as prof:
            for _ in range(steps):
                x.sin()
                prof.step()
        return traces

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        x = kiln.randn(4)
        assert run(kiln, schedule(**args), x) == run(
            torch, torch.profiler.schedule(**args), to_torch(x)
        )


def test_schedule_action_names():
    assert [a.name for a in ProfilerAction] == ["NONE", "WARMUP", "RECORD", "RECORD_AND_SAVE"]


# ---------------------------------------------------------------- traces
def _check_trace(document: dict) -> list[dict]:
    """What a trace viewer needs: complete events with numbers, properly nested per thread."""
    assert document["schemaVersion"] == 1 and isinstance(document["traceEvents"], list)
    spans = [e for e in document["traceEvents"] if e["ph"] == "X"]
    for e in spans:
        assert {"name", "cat", "pid", "tid", "ts", "dur"} <= set(e)
        assert isinstance(e["ts"], float | int) and e["dur"] >= 0
    by_thread: dict = {}
    for e in sorted(spans, key=lambda e: (e["ts"], -e["dur"])):
        open_spans = by_thread.setdefault(e["tid"], [])
        while open_spans and open_spans[-1]["ts"] + open_spans[-1]["dur"] <= e["ts"]:
            open_spans.pop()
        if open_spans:  # inside its parent, never straddling its end
            parent = open_spans[-1]
            assert e["ts"] + e["dur"] <= parent["ts"] + parent["dur"] + 1e-3
        open_spans.append(e)
    return spans


@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
def test_chrome_trace_nests_ops_in_regions(tmp_path, suffix):
    compiled = kiln.compile(lambda t: t.sin() + 1, backend="inductor")
    x = kiln.randn(16)
    compiled(x)
    with profile(record_shapes=True) as prof:
        with record_function("outer"):
            compiled(x)
            x.cos()
    path = tmp_path / f"trace{suffix}"
    prof.export_chrome_trace(str(path))
    opener = gzip.open if suffix.endswith(".gz") else open
    with opener(path, "rt") as f:
        spans = _check_trace(json.load(f))
    names = {e["name"]: e for e in spans}
    assert names["aten::cos"]["args"]["Input Dims"] == [[16]]
    assert names["aten::cos"]["cat"] == "cpu_op" and names["outer"]["cat"] == "user_annotation"
    (region,) = [e for e in spans if re.fullmatch(r"Compiled Region: <lambda>_\d+", e["name"])]
    kernels = [e for e in spans if e["cat"] == "kernel"]
    assert kernels and all(
        region["ts"] <= k["ts"] and k["ts"] + k["dur"] <= region["ts"] + region["dur"] + 1e-3
        for k in kernels
    )


def test_tensorboard_trace_handler_writes_one_trace_per_cycle(tmp_path):
    handler = kiln.profiler.tensorboard_trace_handler(str(tmp_path), worker_name="worker0")
    x = kiln.randn(4)
    with profile(schedule=schedule(wait=0, warmup=1, active=1), on_trace_ready=handler) as prof:
        for _ in range(4):
            x.sin()
            prof.step()
    files = sorted(tmp_path.iterdir())
    assert len(files) == 2
    for path in files:
        assert re.fullmatch(r"worker0\.\d+\.pt\.trace\.json", path.name)
        spans = _check_trace(json.loads(path.read_text()))
        assert any(e["name"] == "aten::sin" for e in spans)
