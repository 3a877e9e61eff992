"""benchmarks/cuda_bench.py runs end to end without a GPU (``--dry-run``: the stand-in device)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_cuda_bench_dry_run_reports_no_compiles_in_steady_state(tmp_path):
    out = tmp_path / "results.json"
    proc = subprocess.run(
        [sys.executable, os.path.join(ROOT, "benchmarks", "cuda_bench.py"), "--dry-run"]
        + ["--json", str(out)],
        capture_output=True,
        text=True,
        timeout=900,
        env=dict(os.environ, PYTHONPATH=ROOT),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = json.loads(out.read_text())
    assert results["dry_run"] and "stand-in" in results["device"]
    assert len(results["kiln"]["eager_ops_us"]) == 8
    for mode in ("eager", "compiled"):
        step = results["kiln"]["training_step"][mode]
        assert step["eager_kernel_compiles_in_steady_state"] == 0
        assert step["graph_compiles_in_steady_state"] == 0
    assert "training step" in proc.stdout
