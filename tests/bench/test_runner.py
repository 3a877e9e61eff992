"""The harness's logic with small fake workloads: interleaving, spread, load warnings, memory and
bandwidth columns (what is measured and how it is summarised, never how fast anything is)."""

from __future__ import annotations

import numpy as np
import pytest

from kiln.bench import machine
from kiln.bench.report import to_json
from kiln.bench.runner import (
    COPY_REFERENCE,
    ColumnResult,
    Settings,
    WorkloadResult,
    _Column,
    _Runner,
    _timed_first_calls,
    balanced_order,
    load_warnings,
    run_suite,
    spread,
)
from kiln.bench.workload_types import Instance, Workload


class _HostLibrary:
    def synchronize(self) -> None:
        pass


def test_compile_time_counts_a_recompile_on_the_second_call():
    """A compiled step that recompiles on its second call (state its first call made) has not
    finished compiling after one call: the second call's time beyond a steady call counts."""
    import time

    calls = []

    def step(x):
        calls.append(x)
        time.sleep({1: 0.05, 2: 0.08}.get(len(calls), 0.0))  # compile, recompile, steady
        return x + 1

    seconds, first = _timed_first_calls(_HostLibrary(), step, Instance(step, (1,)))
    assert first == 2 and len(calls) == 4
    assert 0.13 <= seconds < 0.13 + 0.05


def test_spread_is_the_median_quartiles_and_extremes_numpy_computes():
    samples = [5.0, 1.0, 4.0, 2.0, 3.0, 10.0, 7.0]
    median, (q1, q3), (low, high) = spread(samples)
    assert median == np.median(samples)
    assert (q1, q3) == tuple(np.percentile(samples, [25, 75]))
    assert (low, high) == (1.0, 10.0)


def test_one_sample_has_no_spread():
    assert spread([2.0]) == (2.0, (2.0, 2.0), (2.0, 2.0))
    column = ColumnResult(step_seconds=2.0, quartiles=(2.0, 2.0))
    assert column.relative_spread == 0.0


def test_relative_spread_is_half_the_interquartile_range_over_the_median():
    column = ColumnResult(step_seconds=0.01, quartiles=(0.009, 0.013))
    assert column.relative_spread == pytest.approx(0.2)


def _runner(**settings) -> _Runner:
    defaults = dict(torch=False, memory=False, debug_dir=None, sample_budget=0.0)
    return _Runner(Settings(**(defaults | settings)), lambda _: None, [])


def _recording_column(log: list, name: str, arg_sets=((),)) -> _Column:
    def step(*args):
        log.append((name, *args))

    return _Column(None, Instance(step, arg_sets=arg_sets), step)


def _result(name="fake") -> WorkloadResult:
    return WorkloadResult(name, "fake", {key: ColumnResult() for key in ("a", "b", "c")})


def _fake_workload(name="fake") -> Workload:
    return Workload(name, "fake", lambda lib, quick, device: None)


def test_rounds_run_every_column_once_in_a_rotating_order():
    log: list = []
    runner = _runner(repeat=3, max_rounds=3)
    try:
        columns = {key: _recording_column(log, key) for key in ("a", "b", "c")}
        result = _result()
        runner._sample(_fake_workload(), columns, result)
    finally:
        runner.close()
    order = [entry[0] for entry in log]
    assert order == ["a", "b", "c", "b", "c", "a", "c", "a", "b"]
    assert all(len(result.columns[key].samples) == 3 for key in "abc")


def test_a_short_step_runs_several_times_per_sample_and_arg_sets_advance_alike():
    log: list = []
    runner = _runner(repeat=2, max_rounds=2)
    try:
        arg_sets = ((0,), (1,), (2,))
        columns = {key: _recording_column(log, key, arg_sets) for key in ("a", "b")}
        columns["a"].calls = 2
        columns["b"].calls = 2
        runner._sample(_fake_workload(), columns, _result())
    finally:
        runner.close()
    # round 0: steps 0, 1 in each column; round 1 (b first): steps 2, 3 -> argument sets 2, 0
    assert log == [("a", 0), ("a", 1), ("b", 0), ("b", 1), ("b", 2), ("b", 0), ("a", 2), ("a", 0)]


def test_sampling_goes_on_while_the_budget_lasts_and_stops_at_max_rounds():
    runner = _runner(repeat=3, max_rounds=10, sample_budget=1.0)
    try:
        assert runner._rounds(2, elapsed=5.0)  # the first ``repeat`` rounds always run
        assert not runner._rounds(3, elapsed=5.0)  # budget spent
        assert runner._rounds(3, elapsed=0.5)
        assert not runner._rounds(10, elapsed=0.0)  # max_rounds
    finally:
        runner.close()


def test_the_copy_reference_is_timed_in_the_same_rounds_but_is_no_column():
    log: list = []
    runner = _runner(repeat=4, max_rounds=4)
    try:
        columns = {"a": _recording_column(log, "a"), COPY_REFERENCE: _recording_column(log, "c")}
        result = _result()
        result.moved_bytes = 1000
        runner._sample(_fake_workload(), columns, result)
    finally:
        runner.close()
    assert [entry[0] for entry in log].count("c") == 4
    assert result.copy_seconds is not None and COPY_REFERENCE not in result.columns


def _workload_result(name: str, load: float | None, busy: float | None = None):
    result = _result(name)
    result.load_average, result.others_busy_cores = load, busy
    return result


def test_no_warning_on_a_quiet_machine():
    machine_info = {"cores": 2, "load_average_before": [0.5, 0.4, 0.3]}
    assert load_warnings(machine_info, [_workload_result("w", 1.2, 0.1)]) == []


def test_a_load_average_above_the_core_count_warns_with_the_worst_reading():
    machine_info = {"cores": 2, "load_average_before": [0.5, 0.4, 0.3]}
    results = [_workload_result("w1", 1.0), _workload_result("w2", 3.5)]
    (warning,) = load_warnings(machine_info, results)
    assert "exceeded the 2 cores" in warning and "3.50 after w2" in warning
    assert "1 of 3 readings" in warning


def test_busy_neighbours_during_timing_are_named():
    machine_info = {"cores": 4, "load_average_before": [1.0, 1.0, 1.0]}
    results = [_workload_result("quiet", 1.0, 0.1), _workload_result("noisy", 1.0, 1.5)]
    (warning,) = load_warnings(machine_info, results)
    assert "noisy 1.5" in warning and "quiet" not in warning


def test_others_busy_cores_is_all_cpu_time_minus_ours_over_wall_time():
    start = machine.CpuSnapshot(wall=10.0, busy_seconds=100.0, own_seconds=5.0)
    end = machine.CpuSnapshot(wall=12.0, busy_seconds=104.0, own_seconds=6.0)
    assert machine.others_busy_cores(start, end) == pytest.approx(1.5)
    no_proc = machine.CpuSnapshot(wall=12.0, busy_seconds=None, own_seconds=6.0)
    assert machine.others_busy_cores(start, no_proc) is None


@pytest.mark.skipif(not machine.StepPeak.available(), reason="needs Linux /proc/self/clear_refs")
def test_step_peak_sees_a_temporary_allocation():
    peak = machine.StepPeak()
    peak.start()
    temporary = np.ones(32 * 2**20 // 8)  # 32 MB, every page touched
    del temporary
    assert peak.stop() >= 30 * 2**20


def _build_scaled(lib, quick, device):
    def scaled(x):
        return x * 2.0

    return Instance(scaled, arg_sets=((lib.ones(64, device=device),), (lib.ones(96),)))


def test_a_suite_of_a_fake_workload_fills_every_column_it_can(monkeypatch, tmp_path):
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path))
    workload = Workload("scaled", "x * 2", _build_scaled, moved_bytes=lambda quick: 512)
    settings = Settings(quick=True, repeat=3, max_rounds=3, torch=False, debug_dir=None)
    suite = run_suite([workload], settings)
    (result,) = suite.workloads
    eager, compiled = result.columns["kiln_eager"], result.columns["kiln_compiled"]
    assert eager.ok and compiled.ok and len(eager.samples) == len(compiled.samples) == 3
    assert result.columns["torch_eager"].status.startswith("skipped")
    assert set(compiled.compile_stages) == {"dynamo", "aot", "inductor", "codegen"}
    assert result.check["kiln_compiled vs kiln_eager"] == 0.0
    assert result.moved_bytes == 512 and result.copy_seconds > 0
    # batches of 64 and 96: a capture for each, the second one after a guard failed
    assert result.captures == 2 and result.recompiles == 1
    assert result.dynamic_seconds > 0 and result.check["kiln_dynamic vs kiln_eager"] == 0.0
    assert "kiln_dynamic" not in result.columns
    assert result.load_average is not None
    if machine.StepPeak.available():
        assert eager.held_bytes is not None and compiled.step_peak_bytes is not None
    data = to_json(suite)
    assert data["workloads"][0]["bandwidth"]["kiln_compiled"] > 0
    assert isinstance(data["warnings"], list)


def test_every_workload_but_a_changing_program_gets_the_dynamic_column(monkeypatch, tmp_path):
    """dynamic=True is measured beside the default compile for every workload (memory-bound
    or not); a program whose shapes change is dynamic in both after its first recompile."""
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path))
    plain = Workload("scaled", "x * 2", _build_scaled)
    program = Workload("scaled_program", "x * 2", _build_scaled, end_to_end=True)
    settings = Settings(quick=True, repeat=3, max_rounds=3, torch=False, debug_dir=None)
    first, second = run_suite([plain, program], settings).workloads
    assert first.moved_bytes is None and first.dynamic_seconds > 0
    assert first.check["kiln_dynamic vs kiln_eager"] == 0.0
    assert second.dynamic_seconds is None


def _build_stateful(lib, quick, device):
    state = lib.zeros(4, device=device)

    def accumulate(x):
        state.add_(x)
        return state * 1.0

    return Instance(accumulate, (lib.ones(4, device=device),))


def test_a_training_steps_dynamic_column_compares_its_first_step(monkeypatch, tmp_path):
    """A step that changes its state (a training step) gives another output each call: the
    dynamic column's first output is its first step's, as the compiled column's is."""
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path))
    workload = Workload("stateful", "state += x", _build_stateful)
    settings = Settings(quick=True, repeat=3, max_rounds=3, torch=False, debug_dir=None)
    (result,) = run_suite([workload], settings).workloads
    assert result.check["kiln_compiled vs kiln_eager"] == 0.0
    assert result.check["kiln_dynamic vs kiln_eager"] == 0.0
    assert not [n for n in result.notes if "first outputs differ" in n]


@pytest.mark.parametrize("n", [2, 3, 4, 5, 6])
def test_every_column_follows_every_other_equally_often_over_a_cycle(n):
    """A column that slows the next one (PyTorch's spinning OpenMP threads) slows each alike."""
    columns = list(range(n))
    cycle = n if n % 2 == 0 else 2 * n
    follows: dict = {}
    for r in range(cycle):
        row = balanced_order(columns, r)
        assert sorted(row) == columns
        for a, b in zip(row, row[1:]):
            follows[(a, b)] = follows.get((a, b), 0) + 1
    assert len(follows) == n * (n - 1) and len(set(follows.values())) == 1
