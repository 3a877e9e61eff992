"""Memory of compiled code: a process that keeps compiling new graphs stays flat.

Compiled graphs live as long as the functions that run them; the compiled-graph index keeps
others (and their machine code) only within ``kiln.inductor.config.compiled_graph_cache_bytes``,
and never frees code that a live compiled function still calls.
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import kiln
from kiln.inductor import config
from kiln.inductor.codegen import graph_index
from kiln.inductor.codegen.llvm import jit as llvm_jit

REPO = Path(__file__).resolve().parents[2]


pytestmark = pytest.mark.usefixtures("cache_dir")  # a cold cache for every test


def scaled(constant: float):
    """A fresh closure per call: each compiles its own graph (the constant is baked in)."""

    def step(t):
        return (t * constant + 1).relu().sum(0)

    return step


def live_compiled_modules() -> int:
    gc.collect()
    return sum(isinstance(o, llvm_jit.CompiledModule) for o in gc.get_objects())


def test_evicted_code_keeps_running_while_a_compiled_function_uses_it(monkeypatch):
    monkeypatch.setattr(config, "compiled_graph_cache_bytes", 0)
    step = kiln.compile(scaled(1.5))
    x = kiln.randn(6, 5)
    step(x)
    assert graph_index.memory_cache_bytes() == 0  # evicted as soon as it was put in
    graph_index.clear_memory_cache()
    gc.collect()
    y = kiln.randn(6, 5)
    np.testing.assert_allclose(step(y).numpy(), scaled(1.5)(y).numpy(), rtol=1e-6)


def test_the_index_holds_no_more_than_its_byte_budget(monkeypatch):
    budget = 200_000
    monkeypatch.setattr(config, "compiled_graph_cache_bytes", budget)
    x = kiln.randn(4, 4)
    for i in range(10):
        kiln.compile(scaled(i + 0.25))(x)
        assert 0 < graph_index.memory_cache_bytes() <= budget


def test_graphs_of_dropped_functions_free_their_code(monkeypatch):
    monkeypatch.setattr(config, "compiled_graph_cache_bytes", 0)
    x = kiln.randn(4, 4)
    for i in range(8):  # whatever compiling leaves behind for later compiles to reuse
        kiln.compile(scaled(i + 0.5))(x)
    before = live_compiled_modules()
    for i in range(16):
        out = kiln.compile(scaled(i + 0.75))(x)
        np.testing.assert_allclose(out.numpy(), scaled(i + 0.75)(x).numpy(), rtol=1e-6)
    # sixteen more graphs, none kept alive: a module or two of the most recent compiles may
    # still be held (which ones depends on what ran before in the process), never one per graph
    assert live_compiled_modules() <= before + 2


MANY_GRAPHS = """
import gc, json, os, sys
import kiln
from kiln.inductor import config
from kiln.inductor.codegen import graph_index

config.compiled_graph_cache_bytes = int(sys.argv[1])


def rss_mb():
    gc.collect()
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def scaled(constant):
    def step(t):
        return (t * constant + 1).relu().sum(0)

    return step


x = kiln.randn(16, 16)
rss = {}
for i in range(500):
    out = kiln.compile(scaled(i + 0.5))(x)
    assert abs(out.sum().item() - scaled(i + 0.5)(x).sum().item()) < 1e-2
    if i + 1 in (100, 500):
        rss[i + 1] = rss_mb()
print(json.dumps({"rss": rss, "index": graph_index.memory_cache_bytes()}))
"""


@pytest.mark.slow  # 500 compiles: about two minutes on two busy cores
def test_memory_stays_flat_over_500_distinct_graphs(tmp_path):
    """Before the fix every graph kept about 1 MB (its closure's frame cache, an MCJIT engine
    holding its IR module): 151 -> 442 MB by the 300th. What is left is about 70 KB per cold
    compile that llvmlite's new-pass-manager binding never frees (a PassInstrumentationCallbacks
    per PassBuilder, with callbacks added on every run), outside kiln's reach; 130 KB with
    llvmlite 0.50 on an AVX-512 host (larger modules), where Python's own heap grows 13 KB per
    compile (tracemalloc). The bound (80 MB over 400 graphs) still fails the 1 MB per graph."""
    budget = 4 * 2**20
    env = {**os.environ, "KILN_CACHE_DIR": str(tmp_path / "many"), "PYTHONPATH": str(REPO)}
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", MANY_GRAPHS, str(budget)],
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    rss = {int(k): v for k, v in report["rss"].items()}
    growth = rss[500] - rss[100]
    print(
        f"RSS after 100 graphs {rss[100]:.1f} MB, after 500 {rss[500]:.1f} MB "
        f"(+{growth:.1f} MB) in {time.perf_counter() - start:.0f} s"
    )
    assert report["index"] <= budget
    assert growth < 80, f"RSS grew {growth:.1f} MB from graph 100 to 500: {rss}"


def test_a_cold_compile_leaves_no_kernel_ir_for_the_cyclic_collector():
    # the kernels' IR is freed by reference counting as soon as its text is taken: with the
    # collector paused during a compile, IR left in cycles cost one long collection after it
    from llvmlite import ir

    def step(t):  # a row loop, a reduction (a phi and its update) and a pointwise tail
        return (t - t.amax(1, keepdim=True)).exp().sum(1) * 0.5

    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    try:
        x = kiln.randn(64, 40)
        out = kiln.compile(step)(x)
        left = sum(isinstance(o, (ir.Block, ir.Instruction, ir.Function)) for o in gc.get_objects())
    finally:
        if enabled:
            gc.enable()
    assert left == 0
    a = x.numpy()
    expected = np.exp(a - a.max(1, keepdims=True)).sum(1) * 0.5
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5)
