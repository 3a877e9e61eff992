"""The printed table, its notes and the JSON, from hand-made results (no timing involved)."""

from __future__ import annotations

import json
import math

import pytest

from kiln.bench import report
from kiln.bench.runner import ColumnResult, SuiteResult, WorkloadResult


def _suite(torch_status: str = "ok") -> SuiteResult:
    def ok(step, cold=None, warm=None, stages=None):
        return ColumnResult(step_seconds=step, samples=[step], calls_per_sample=1,
                            quartiles=(0.9 * step, 1.1 * step), extremes=(0.8 * step, 2 * step),
                            cold_compile_seconds=cold, warm_compile_seconds=warm,
                            compile_stages=stages or {}, held_bytes=3 * 2**20,
                            step_peak_bytes=2**20)  # fmt: skip

    torch_eager = ok(0.004) if torch_status == "ok" else ColumnResult(status=torch_status)
    torch_compiled = (
        ok(0.001, 3.0, 0.2) if torch_status == "ok" else ColumnResult(status=torch_status)
    )
    chain = WorkloadResult(
        "pointwise_chain",
        "10 ops",
        {
            "kiln_eager": ok(0.010),
            "kiln_compiled": ok(
                0.002, 0.15, 0.02, {"dynamo": 0.01, "aot": 0.02, "inductor": 0.04, "codegen": 0.05}
            ),
            "torch_eager": torch_eager,
            "torch_compiled": torch_compiled,
        },
        kernels=1,
        graphs=1,
        check={"kiln_compiled vs kiln_eager": 1e-7, "kiln_eager vs torch_eager": math.inf},
        moved_bytes=8 * 10**6,
        copy_seconds=0.0005,
    )
    broken = WorkloadResult(
        "softmax",
        "softmax",
        {
            "kiln_eager": ok(0.5e-3),
            "kiln_compiled": ColumnResult(status="failed: LoweringError: no lowering for op foo"),
            "torch_eager": torch_eager,
            "torch_compiled": torch_compiled,
        },
    )
    return SuiteResult(
        machine={"cpu": "Test CPU", "cores": 2, "threads": 2, "load_average": [0.1, 0.2, 0.3]},
        settings={"repeat": 5, "warmup": 2, "device": "cpu", "quick": True},
        startup={"kiln": 0.05},
        workloads=[chain, broken],
        seconds=1.0,
    )


def test_ratios_are_eager_over_compiled_and_kiln_over_torch():
    chain = _suite().workloads[0]
    assert chain.kiln_speedup == pytest.approx(5.0)
    assert chain.torch_speedup == pytest.approx(4.0)
    assert chain.eager_vs_torch == pytest.approx(2.5)
    assert chain.compiled_vs_torch == pytest.approx(2.0)


def test_a_ratio_with_a_missing_column_is_none():
    broken = _suite().workloads[1]
    assert broken.kiln_speedup is None and broken.compiled_vs_torch is None


def _row(table: str, name: str) -> str:
    return next(line for line in table.splitlines() if line.startswith(name))


def test_time_table_has_one_row_per_workload_with_times_spreads_and_ratios():
    table, _ = report.format_table(_suite())
    chain = _row(table, "pointwise_chain")
    for text in ("10.00 ms ±10%", "2.00 ms ±10%", "5.00x", "4.00x", "2.50x", "2.00x"):
        assert text in chain
    assert "kiln / PyTorch" in table.splitlines()[0]


def _tables(suite=None, markdown=False) -> dict[str, str]:
    tables, _ = report.format_tables(suite or _suite(), markdown)
    return {title.split()[0]: text for title, text in tables}


def test_compile_table_splits_kilns_cold_compile_by_stage():
    chain = _row(_tables()["Compile"], "pointwise_chain")
    # cold, warm, dynamo, aot, inductor, codegen, and the 30 ms no stage claimed
    for text in ("150.00 ms", "20.00 ms", "10.00 ms", "40.00 ms", "50.00 ms", "30.00 ms"):
        assert text in chain
    assert "3.00 s" in chain and "200.00 ms" in chain  # torch.compile cold / warm


def test_a_workload_whose_compile_failed_has_no_compile_row():
    assert "softmax" not in _tables()["Compile"]


def test_memory_table_shows_held_and_step_peak_per_column():
    chain = _row(_tables()["Resident"], "pointwise_chain")
    assert chain.count("3.0 + 1.0") == 4


def test_bandwidth_table_reads_each_column_against_the_numpy_copy():
    table = _tables()["Memory-bound"]
    chain = _row(table, "pointwise_chain")
    # 8 MB moved: copy 16 GB/s; kiln compiled 4 GB/s = 25% of it, torch.compile 8 GB/s = 50%
    for text in ("8.0", "16.0", "0.8", "4.0", "25%", "2.0", "50%"):
        assert f" {text}" in chain
    assert "softmax" not in table  # no compulsory bytes named: no row


def test_load_warnings_come_first_in_the_report():
    suite = _suite()
    suite.warnings = ["the load average exceeded the 2 cores"]
    assert report.format_report(suite).startswith("WARNING: the load average exceeded")


def test_long_failure_goes_to_a_numbered_note():
    table, notes = report.format_table(_suite())
    softmax = next(line for line in table.splitlines() if line.startswith("softmax"))
    assert "failed [1]" in softmax
    assert notes == ["failed: LoweringError: no lowering for op foo"]


def test_missing_pytorch_says_not_installed_in_both_columns():
    table, _ = report.format_table(_suite("not installed"))
    chain = next(line for line in table.splitlines() if line.startswith("pointwise_chain"))
    assert chain.count("not installed") == 2


def test_report_names_machine_load_and_settings():
    text = report.format_report(_suite())
    assert "Test CPU, 2 cores" in text and "0.10/0.20/0.30" in text
    assert "at least 5 rounds after 2 warm-up steps" in text and "quick shapes" in text
    assert not text.startswith("WARNING")


def test_markdown_table_has_a_header_rule_and_a_row_per_workload():
    table, _ = report.format_table(_suite(), markdown=True)
    lines = table.splitlines()
    assert lines[0].startswith("| workload |") and lines[1].startswith("|---|")
    assert len(lines) == 4 and all(line.endswith("|") for line in lines)
    assert "| kiln eager |" in lines[0]
    assert all(text.startswith("| workload |") for text in _tables(markdown=True).values())


def test_json_is_strict_and_carries_derived_ratios(tmp_path):
    path = tmp_path / "out.json"
    report.write_json(_suite(), str(path))
    data = json.loads(path.read_text())
    chain = data["workloads"][0]
    assert chain["kiln_speedup"] == pytest.approx(5.0)
    assert chain["check"]["kiln_eager vs torch_eager"] is None  # inf is not JSON
    assert chain["columns"]["kiln_compiled"]["cold_compile_seconds"] == 0.15
    assert chain["columns"]["kiln_compiled"]["compile_stages"]["codegen"] == 0.05
    assert chain["columns"]["kiln_eager"]["quartiles"] == pytest.approx([0.009, 0.011])
    assert chain["bandwidth"]["kiln_compiled"] == pytest.approx(4e9)
    assert chain["copy_bandwidth"] == pytest.approx(16e9)


def test_plot_writes_a_png_when_matplotlib_is_installed(tmp_path):
    pytest.importorskip("matplotlib")  # an optional extra: `pip install -e '.[plot]'`
    from kiln.bench.plot import plot_speedups

    path = plot_speedups(_suite(), str(tmp_path / "speedups.png"))
    assert open(path, "rb").read(8) == b"\x89PNG\r\n\x1a\n"


def _column(step: float, cold: float | None = None, warm: float | None = None) -> ColumnResult:
    return ColumnResult(step_seconds=step, samples=[step], calls_per_sample=1,
                        quartiles=(step, step), extremes=(step, step),
                        cold_compile_seconds=cold, warm_compile_seconds=warm)  # fmt: skip


def _with_a_program() -> SuiteResult:
    """The suite plus a workload whose step is a whole program with changing shapes."""
    suite = _suite()
    columns = {
        "kiln_eager": _column(2.0),
        "kiln_compiled": _column(0.5, 4.0, 1.0),
        "torch_eager": _column(8.0),
        "torch_compiled": _column(0.4, 20.0, 5.0),
    }
    program = WorkloadResult(
        "gpt_forward_lengths", "200 calls", columns, graphs=4, captures=3, recompiles=2,
        end_to_end=True,
    )  # fmt: skip
    suite.workloads.append(program)
    suite.workloads[0].dynamic_seconds = 0.003
    return suite


def test_end_to_end_table_sets_the_eager_run_against_the_compiled_first_run():
    table = _tables(_with_a_program())["Shapes"]
    program = _row(table, "gpt_forward_lengths")
    # eager run, first run (cold), warm cache, later runs, eager / first run, captures,
    # recompiles, inductor graphs; PyTorch eager run, first run, eager / first run
    expected = ["2.00 s ±0%", "4.00 s", "1.00 s", "500.00 ms ±0%", "0.50x", "3", "2", "4"]
    expected += ["8.00 s ±0%", "20.00 s", "0.40x"]
    assert program.split()[1:] == [part for text in expected for part in text.split()]
    assert "pointwise_chain" not in table  # only programs whose shapes change have a row
    assert "Shapes" not in _tables()  # and without them there is no such table


def test_compile_table_counts_captures_and_recompiles():
    program = _row(_tables(_with_a_program())["Compile"], "gpt_forward_lengths")
    assert program.split()[-4:-1] == ["3", "2", "4"]  # captures, recompiles, graphs (kernels -)


def test_step_table_sets_dynamic_true_against_the_default_compile():
    suite = _with_a_program()
    chain = _row(_tables(suite)["Step"], "pointwise_chain")
    assert chain.endswith("1.50x")  # 3 ms with dynamic=True over 2 ms
    assert not _row(_tables(suite)["Memory-bound"], "pointwise_chain").endswith("1.50x")
    data = report.to_json(suite)
    assert data["workloads"][0]["dynamic_vs_static"] == pytest.approx(1.5)
    assert data["workloads"][2]["end_to_end_speedup"] == pytest.approx(0.5)
    assert data["workloads"][2]["torch_end_to_end_speedup"] == pytest.approx(0.4)
