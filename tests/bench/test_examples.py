"""The examples run end to end with tiny settings (each in its own process, as a user runs it)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run(tmp_path, script: str, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=ROOT, KILN_CACHE_DIR=str(tmp_path / "cache"))
    proc = subprocess.run(
        [sys.executable, os.path.join(ROOT, "examples", script), *args],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return proc


def test_quickstart_explains_dumps_and_times(tmp_path):
    proc = _run(tmp_path, "quickstart.py", "--rows", "64", "--width", "32")
    out = proc.stdout
    difference = float(re.search(r"max \|compiled - eager\| = (\S+)", out).group(1))
    assert difference < 1e-4
    assert "Graph Count: 1" in out and "Graph Break Count: 0" in out
    assert "def call(" in out  # the generated wrapper is printed
    dumps = tmp_path / "kiln_debug" / "quickstart"
    assert (dumps / "explain.txt").exists() and list(dumps.glob("inductor/*/kernels.ll"))
    assert re.search(r"eager \S+ ms, compiled \S+ ms", out)
    assert "[kiln.recompiles] recompiling gelu_layer_norm" in proc.stderr


def test_custom_backend_rewrites_relu_and_matches_eager(tmp_path):
    out = _run(tmp_path, "custom_backend.py").stdout
    assert "kiln.ops.relu(" in out.split("---- after")[0]
    assert "kiln.ops.relu(" not in out.split("---- after")[1]
    assert "replaced 2 relu nodes" in out
    assert "same=True" in out and "match eager: True" in out
    assert "inductor backward graph" in out


def test_train_tiny_gpt_prints_losses_timing_and_a_sample(tmp_path):
    out = _run(tmp_path, "train_tiny_gpt.py", "--steps", "3", "--batch", "2", "--block", "8",
               "--width", "16", "--layers", "1", "--heads", "2", "--time-steps", "2",
               "--sample-chars", "12").stdout  # fmt: skip
    losses = [float(x) for x in re.findall(r"step +\d+ +loss (\S+)", out)]
    assert len(losses) == 3 and all(0 < loss < 10 for loss in losses)
    assert re.search(r"eager \S+ ms, compiled \S+ ms", out)
    sample = out.split("sample:\n", 1)[1]
    assert sample.startswith("The ") and len(sample.rstrip("\n")) == 4 + 12
