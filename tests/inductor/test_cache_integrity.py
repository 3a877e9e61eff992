"""Cache files that are not what their names say are recompiled, never run.

Compiled objects and compiled-graph index entries are found on disk by key; a file swapped with
another one, truncated, damaged, or left in a directory that cannot be written must give the same
answers as eager, compiled (not an eager fallback). Runs that could crash the interpreter on a
regression (loading another graph's machine code) happen in a subprocess, so a crash fails the
test instead of killing pytest.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import kiln
from kiln.inductor.codegen import graph_index
from kiln.inductor.codegen.llvm import jit as llvm_jit
from kiln.runtime import logs as klog

REPO = Path(__file__).resolve().parents[2]

# Compiles two graphs whose kernels share names (kernel0, ...) but not code or arguments, and
# prints compiled and eager results. KILN_TEST_READ_ONLY makes the cache directory behave like a
# read-only mount: every write under it fails with EROFS (tests run as root, whom chmod does not
# stop), reads work.
CACHE_USER = r"""
import errno, json, os, warnings

if os.environ.get("KILN_TEST_READ_ONLY"):
    root = os.environ["KILN_CACHE_DIR"]

    def refusing(call, writes=lambda *args: True):
        def refuse(path, *args, **kwargs):
            if os.fspath(path).startswith(root) and writes(*args):
                raise OSError(errno.EROFS, os.strerror(errno.EROFS), os.fspath(path))
            return call(path, *args, **kwargs)

        return refuse

    writing = os.O_WRONLY | os.O_RDWR | os.O_CREAT
    os.open = refusing(os.open, lambda flags, *rest: flags & writing)
    for name in ("mkdir", "replace", "rename", "unlink", "remove", "rmdir"):
        setattr(os, name, refusing(getattr(os, name)))

import kiln
from kiln.inductor.codegen.llvm import jit as llvm_jit
from kiln.runtime import machine_code

# eager values from the numpy kernels: this cache holds the two graphs' objects alone
for name in ("rows", "sums"):
    machine_code._built[name] = False

# a graph the backend fails on runs eagerly with this warning: here that is a failure
warnings.filterwarnings("error", message=".*running the graph with the eager backend")


def softmax_rows(x):
    return (x * 2).softmax(-1) + 1


def matmul_relu(x, w):
    return (x @ w).relu().sum(0) * 0.5


x = kiln.linspace(-2, 2, 33 * 70).reshape(33, 70)
w = kiln.linspace(-1, 1, 70 * 20).reshape(70, 20)
results = {}
for fn, args in [(softmax_rows, (x,)), (matmul_relu, (x, w))]:
    compiled = kiln.compile(fn)(*args)
    results[fn.__name__] = {"compiled": compiled.tolist(), "eager": fn(*args).tolist()}
print(json.dumps({"results": results, "optimize_runs": llvm_jit.jit_stats().optimize_runs}))
"""


def run_cache_user(cache: Path, read_only: bool = False) -> dict:
    """Run CACHE_USER on ``cache``: it must exit cleanly with compiled results equal to eager."""
    env = {
        **os.environ,
        "KILN_CACHE_DIR": str(cache),
        "PYTHONPATH": str(REPO),
        "KILN_LOGS": "inductor",
    }
    if read_only:
        env["KILN_TEST_READ_ONLY"] = "1"
    command = [sys.executable, "-c", CACHE_USER]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, (
        f"exit status {done.returncode} (a negative one is the signal that killed it)\n"
        f"{done.stderr[-4000:]}"
    )
    report = json.loads(done.stdout.strip().splitlines()[-1])
    for name, result in report["results"].items():
        np.testing.assert_allclose(
            result["compiled"], result["eager"], rtol=1e-5, atol=1e-5, err_msg=name
        )
    report["log"] = done.stderr
    return report


@pytest.fixture(scope="module")
def populated(tmp_path_factory) -> Path:
    """A cache directory after one process compiled CACHE_USER's graphs."""
    cache = tmp_path_factory.mktemp("populated") / "cache"
    assert run_cache_user(cache)["optimize_runs"] > 0
    return cache


@pytest.fixture
def cache(populated, tmp_path) -> Path:
    copy = tmp_path / "cache"
    shutil.copytree(populated, copy)
    return copy


def swap(first: Path, second: Path) -> None:
    first_bytes = first.read_bytes()
    first.write_bytes(second.read_bytes())
    second.write_bytes(first_bytes)


def test_swapped_objects_are_recompiled_and_the_files_replaced(cache):
    objects = sorted(cache.glob("llvm/*/*.o"))
    assert len(objects) == 2, objects
    swap(*objects)
    report = run_cache_user(cache)
    assert report["optimize_runs"] == 2
    assert "written for another key" in report["log"]
    assert run_cache_user(cache)["optimize_runs"] == 0  # both objects rewritten for their keys


def test_swapped_index_entries_are_misses_and_the_files_replaced(cache):
    entries = sorted(cache.glob("llvm/graphs/*/*.index"))
    assert len(entries) == 2, entries
    swap(*entries)
    report = run_cache_user(cache)
    assert "written for another key" in report["log"]
    assert "ignoring cache file" not in run_cache_user(cache)["log"]


def test_a_read_only_cache_with_a_damaged_object_runs_compiled_in_memory(cache):
    objects = sorted(cache.glob("llvm/*/*.o"))
    for path in objects:
        blob = bytearray(path.read_bytes())
        blob[-20] ^= 0xFF
        path.write_bytes(bytes(blob))
    damaged = [path.read_bytes() for path in objects]
    report = run_cache_user(cache, read_only=True)
    assert report["optimize_runs"] == 2  # compiled again, not run eagerly
    assert "checksum mismatch" in report["log"]
    assert "cannot write the compile cache" in report["log"]
    assert [path.read_bytes() for path in objects] == damaged  # nothing was written


def softmax_rows(x):
    return (x * 2).softmax(-1) + 1


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _flip_a_byte(path: Path) -> None:
    blob = bytearray(path.read_bytes())
    blob[len(blob) - 3] ^= 0x01
    path.write_bytes(bytes(blob))


@pytest.mark.parametrize("damage", [_truncate, _flip_a_byte], ids=["truncated", "flipped"])
@pytest.mark.parametrize(
    "pattern", ["llvm/*/*.o", "llvm/graphs/*/*.index"], ids=["object", "index"]
)
def test_a_damaged_cache_file_is_recompiled(tmp_path, monkeypatch, pattern, damage):
    x = kiln.randn(12, 30)
    expected = softmax_rows(x)  # (eager machine code built before: not in this cache)
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "cache"))
    kiln.dynamo.reset()
    kiln.compile(softmax_rows)(x)
    (path,) = (tmp_path / "cache").glob(pattern)
    damage(path)
    graph_index.clear_memory_cache()
    kiln.dynamo.reset()
    llvm_jit.reset_jit_stats()
    out = kiln.compile(softmax_rows)(x)
    np.testing.assert_allclose(out.numpy(), expected.numpy(), rtol=1e-5, atol=1e-6)
    stats = llvm_jit.jit_stats()
    assert stats.optimize_runs == (1 if pattern.endswith(".o") else 0)
    graph_index.clear_memory_cache()
    kiln.dynamo.reset()
    kiln.compile(softmax_rows)(x)
    assert llvm_jit.jit_stats().optimize_runs == stats.optimize_runs  # the file was replaced


def test_a_cache_dir_that_cannot_exist_compiles_in_memory(tmp_path, monkeypatch, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("no directory can be made under a file")
    monkeypatch.setenv("KILN_CACHE_DIR", str(blocker / "cache"))
    x = kiln.randn(9, 17)
    # eager first: its machine code (softmax's rows), built on first use, is not the count below
    want = softmax_rows(x).numpy()
    kiln.dynamo.reset()
    llvm_jit.reset_jit_stats()
    klog.set_logs(inductor=True)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)  # an eager fallback warns
            out = kiln.compile(softmax_rows)(x)
    finally:
        klog.set_logs(inductor=False)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-5, atol=1e-6)
    assert llvm_jit.jit_stats().optimize_runs == 1
    assert "cannot write the compile cache" in capsys.readouterr().err
