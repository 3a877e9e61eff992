"""``python -m kiln.bench``: the flags, a real quick run of one workload, and the plot flag."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from kiln.bench.__main__ import build_parser, main
from kiln.bench.runner import CHECK_TOLERANCE, COLUMNS
from kiln.bench.workloads import DEFAULT_SUITE, QUICK_SUITE, WORKLOADS
from tests.oracle import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_parser_reads_every_flag():
    args = build_parser().parse_args(
        ["--quick", "--workload", "softmax", "--workload", "layer_norm", "--device", "cpu",
         "--json", "out.json", "--plot", "out.png", "--repeat", "3", "--warmup", "0",
         "--threads", "1", "--no-dump", "--no-torch", "--markdown", "--gpt2-small",
         "--budget", "0.5", "--no-memory"]
    )  # fmt: skip
    assert args.quick and args.no_dump and args.no_torch and args.markdown
    assert args.gpt2_small and args.no_memory and args.budget == 0.5
    assert args.workload == ["softmax", "layer_norm"]
    assert (args.device, args.json, args.plot, args.repeat, args.warmup, args.threads) == (
        "cpu", "out.json", "out.png", 3, 0, 1,
    )  # fmt: skip


@pytest.mark.parametrize(
    "argv", [["--workload", "nope"], ["--device", "tpu"], ["--repeat", "0"], ["--warmup", "-1"]]
)
def test_parser_rejects_bad_values(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(argv)
    assert exit_info.value.code == 2
    assert "error" in capsys.readouterr().err


def test_unknown_backend_is_refused_before_running(capsys):
    with pytest.raises(SystemExit):
        main(["--backend", "no_such_backend"])
    assert "registered backends" in capsys.readouterr().err


def test_list_names_every_workload_and_the_runs_that_leave_it_out(capsys):
    assert main(["--list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == list(WORKLOADS)
    gpt2 = next(line for line in lines if line.startswith("gpt2_small_train_step"))
    lstm = next(line for line in lines if line.startswith("lstm_lm_train_step"))
    assert "opt-in" in gpt2 and "full run only" in lstm


def test_gpt2_small_is_opt_in_and_never_quick():
    assert "gpt2_small_train_step" not in DEFAULT_SUITE
    assert set(QUICK_SUITE) <= set(DEFAULT_SUITE)
    for name in ("nanogpt_train_step", "copy", "mlp_forward_varying_batch"):
        assert name in QUICK_SUITE


def test_plot_without_matplotlib_says_how_to_install(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # makes ``import matplotlib`` fail
    with pytest.raises(SystemExit) as exit_info:
        main(["--quick", "--plot", "speedups.png"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "matplotlib" in err and "pip install" in err


def _run_bench(tmp_path, *extra: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=ROOT, KILN_CACHE_DIR=str(tmp_path / "cache"))
    command = [sys.executable, "-m", "kiln.bench", "--quick", "--repeat", "2", "--warmup", "1",
               "--debug-dir", str(tmp_path / "dumps"), *extra]  # fmt: skip
    return subprocess.run(
        command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )


def test_quick_run_of_one_workload_writes_json_table_and_dumps(tmp_path):
    out = tmp_path / "bench.json"
    proc = _run_bench(tmp_path, "--workload", "softmax", "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "[1/1] softmax" in proc.stderr  # the progress line
    assert "softmax" in proc.stdout and "kernels" in proc.stdout
    for title in ("Step time", "Compile time", "Resident memory", "Memory-bound"):
        assert title in proc.stdout

    data = json.loads(out.read_text())  # strict JSON: no NaN or Infinity
    (record,) = data["workloads"]
    assert record["name"] == "softmax"
    assert set(record["columns"]) == set(COLUMNS)
    for key in ("kiln_eager", "kiln_compiled"):
        column = record["columns"][key]
        assert column["status"] == "ok"
        assert column["step_seconds"] > 0 and len(column["samples"]) == 2  # --repeat 2: exactly
        low, high = column["quartiles"]
        assert column["extremes"][0] <= low <= column["step_seconds"] <= high
        assert column["held_bytes"] is not None and column["step_peak_bytes"] is not None
    compiled = record["columns"]["kiln_compiled"]
    assert compiled["cold_compile_seconds"] > 0 and compiled["warm_compile_seconds"] > 0
    assert set(compiled["compile_stages"]) == {"dynamo", "aot", "inductor", "codegen"}
    # each stage within the compile's wall time (their sum is not: LLVM's codegen runs on a
    # background thread while the inductor stage goes on)
    assert max(compiled["compile_stages"].values()) <= compiled["cold_compile_seconds"]
    assert record["moved_bytes"] == 2 * 4 * 512 * 512 and record["copy_bandwidth"] > 0
    assert record["load_average"] is not None
    assert record["kernels"] >= 1 and record["kiln_speedup"] > 0
    assert record["check"]["kiln_compiled vs kiln_eager"] <= CHECK_TOLERANCE
    if torch is None:
        assert record["columns"]["torch_eager"]["status"] == "not installed"
    else:
        assert record["columns"]["torch_eager"]["status"] == "ok"
        assert record["check"]["kiln_eager vs torch_eager"] <= CHECK_TOLERANCE
        # a quick run leaves torch.compile out and says so
        assert record["columns"]["torch_compiled"]["status"].startswith("skipped")
    assert data["machine"]["cores"] == os.cpu_count()

    dumps = tmp_path / "dumps" / "softmax"
    assert record["debug_dir"] == str(dumps)
    names = sorted(str(p.relative_to(dumps)) for p in dumps.rglob("*") if p.is_file())
    assert "explain.txt" in names
    assert any(n.endswith("_graph.py") for n in names)  # dynamo's KILN_DEBUG_DIR dump
    loop_ir = next(dumps.glob("inductor/*/loop_ir.txt")).read_text()
    assert "reduction" in loop_ir and "exp(" in loop_ir
    assert "def call(" in next(dumps.glob("inductor/*/output_code.py")).read_text()
    assert "define" in next(dumps.glob("inductor/*/kernels.ll")).read_text()
