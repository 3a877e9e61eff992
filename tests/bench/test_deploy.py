"""``python -m kiln.bench.deploy``: a package's load and step times against ``kiln.compile``."""

from __future__ import annotations

import json

import pytest

from kiln.bench.deploy import DeployResult, format_deploy_report, main, measure_workload


def test_quick_run_reports_load_and_step_times_as_table_and_json(tmp_path, capsys):
    out = tmp_path / "deploy.json"
    argv = ["--quick", "--workload", "call_overhead", "--loads", "1", "--repeat", "5"]
    assert main([*argv, "--json", str(out)]) == 0
    table = capsys.readouterr().out
    assert table.splitlines()[1].startswith("call_overhead")
    (record,) = json.loads(out.read_text())
    assert record["workload"] == "call_overhead"
    assert record["load_cpu_ms"] > 0 and record["load_wall_ms"] > 0
    assert record["package_step_ms"] > 0 and record["compiled_step_ms"] > 0
    assert record["max_difference"] == 0.0  # x + 1: the same float32 sums everywhere
    assert record["ratio"] == record["package_step_ms"] / record["compiled_step_ms"]


def test_training_workloads_are_refused():
    with pytest.raises(ValueError, match="training step"):
        measure_workload("mlp_train_step", quick=True)


def test_report_marks_a_package_slower_than_the_noise():
    common = dict(load_cpu_ms=50.0, load_wall_ms=60.0, compiled_step_ms=1.0, max_difference=0.0)
    slower = DeployResult("a", package_step_ms=1.5, spread=0.1, **common)
    noisy = DeployResult("b", package_step_ms=1.5, spread=0.6, **common)
    assert slower.slower and not noisy.slower
    lines = format_deploy_report([slower, noisy]).splitlines()
    assert lines[1].endswith("SLOWER") and not lines[2].endswith("SLOWER")
    assert "1.50x" in lines[1]
