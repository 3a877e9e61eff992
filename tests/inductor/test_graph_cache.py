"""The compiled-graph index: a graph compiled before loads its kernels without emitting LLVM IR.

A warm compile must skip the IR generator and the LLVM optimizer, give the same answers as a cold
one, and never reuse kernels across graphs that differ in code, shapes, strides or dtypes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import kiln
from kiln.inductor.codegen import cpu, graph_index
from kiln.inductor.codegen.llvm import jit as llvm_jit
from kiln.inductor.codegen.llvm import kernel as llvm_kernel

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def emitted(monkeypatch) -> list:
    """Names of the kernels whose LLVM IR gets generated."""
    names: list = []
    real = llvm_kernel.emit_kernel

    def counting(module, name, *args, **kwargs):
        names.append(name)
        return real(module, name, *args, **kwargs)

    monkeypatch.setattr(cpu, "emit_kernel", counting)
    return names


def softmax_rows(x):
    return (x * 2).softmax(-1) + 1


def compile_and_run(fn, *args):
    kiln.dynamo.reset()
    return kiln.compile(fn)(*args)


def test_second_compile_emits_no_ir_and_runs_no_llvm(cache_dir, emitted):
    x = kiln.randn(33, 70)
    cold = compile_and_run(softmax_rows, x)
    assert emitted, "the cold compile generates kernels"
    emitted.clear()
    llvm_jit.reset_jit_stats()
    warm = compile_and_run(softmax_rows, x)
    stats = llvm_jit.jit_stats()
    assert emitted == []
    assert stats.optimize_runs == 0 and stats.objects_generated == 0
    np.testing.assert_array_equal(warm.numpy(), cold.numpy())
    np.testing.assert_allclose(warm.numpy(), softmax_rows(x).numpy(), rtol=1e-6, atol=1e-6)
    assert list(cache_dir.glob("llvm/graphs/*/*.index"))


def test_the_same_graph_from_another_line_is_a_hit(cache_dir, emitted):
    def first(x):
        return (x.exp() - 1).sum(0)

    def second(x):
        y = x
        return (y.exp() - 1).sum(0)

    x = kiln.randn(40, 9)
    compile_and_run(first, x)
    emitted.clear()
    out = compile_and_run(second, x)
    assert emitted == []
    np.testing.assert_allclose(out.numpy(), second(x).numpy(), rtol=1e-5)


@pytest.mark.parametrize(
    "make",
    [
        lambda: kiln.randn(40, 17),  # another shape
        lambda: kiln.randn(17, 33).t(),  # same shape, other strides
        lambda: kiln.randn(33, 17, dtype=kiln.float64),  # another dtype
    ],
    ids=["shape", "strides", "dtype"],
)
def test_graphs_that_differ_in_layout_compile_their_own_kernels(cache_dir, emitted, make):
    compile_and_run(softmax_rows, kiln.randn(33, 17))
    emitted.clear()
    x = make()
    out = compile_and_run(softmax_rows, x)
    assert emitted, "a different layout must not reuse the cached kernels"
    np.testing.assert_allclose(out.numpy(), softmax_rows(x).numpy(), rtol=1e-5, atol=1e-6)


def test_graphs_that_differ_in_a_constant_compile_their_own_kernels(cache_dir, emitted):
    x = kiln.randn(8, 8)
    compile_and_run(lambda t: t * 3.0 + 1, x)
    emitted.clear()
    out = compile_and_run(lambda t: t * 4.0 + 1, x)
    assert emitted
    np.testing.assert_allclose(out.numpy(), (x * 4.0 + 1).numpy(), rtol=1e-6)


def test_a_lost_object_or_damaged_index_entry_recompiles(cache_dir, emitted):
    x = kiln.randn(12, 30)
    compile_and_run(softmax_rows, x)
    graph_index.clear_memory_cache()
    for obj in cache_dir.glob("llvm/*/*.o"):
        obj.unlink()
    emitted.clear()
    out = compile_and_run(softmax_rows, x)
    assert emitted
    np.testing.assert_allclose(out.numpy(), softmax_rows(x).numpy(), rtol=1e-5, atol=1e-6)
    graph_index.clear_memory_cache()
    for entry in cache_dir.glob("llvm/graphs/*/*.index"):
        entry.write_text("{not json")
    emitted.clear()
    out = compile_and_run(softmax_rows, x)
    assert emitted
    np.testing.assert_allclose(out.numpy(), softmax_rows(x).numpy(), rtol=1e-5, atol=1e-6)


def test_dumps_after_a_hit_still_hold_the_kernels_ir(cache_dir, tmp_path, monkeypatch):
    x = kiln.randn(16, 16)
    compile_and_run(softmax_rows, x)
    monkeypatch.setenv("KILN_DEBUG_DIR", str(tmp_path / "dump"))
    compile_and_run(softmax_rows, x)
    (kernels,) = (tmp_path / "dump").rglob("kernels.ll")
    assert "define void @" in kernels.read_text()


WARM_PROCESS = """
import json, time
import numpy as np
import kiln
from kiln.inductor.codegen import cpu
from kiln.inductor.codegen.llvm import jit as llvm_jit
emitted = []
real = cpu.emit_kernel
cpu.emit_kernel = lambda module, name, *a, **k: (emitted.append(name), real(module, name, *a, **k))
net = kiln.nn.Sequential(kiln.nn.Linear(24, 48), kiln.nn.GELU(), kiln.nn.LayerNorm(48))
for p in net.parameters():
    p.data = kiln.linspace(-1, 1, p.numel()).reshape(p.shape)
opt = kiln.optim.AdamW(net.parameters(), lr=1e-2)

def step(x):
    opt.zero_grad()
    loss = net(x).square().mean()
    loss.backward()
    opt.step()
    return loss

x = kiln.linspace(-2, 2, 16 * 24).reshape(16, 24)
losses = [kiln.compile(step)(x).item() for _ in range(2)]
stats = llvm_jit.jit_stats()
print(json.dumps({"emitted": len(emitted), "optimize_runs": stats.optimize_runs,
                  "generated": stats.objects_generated, "losses": losses}))
"""


def test_a_second_process_compiles_a_training_step_without_emitting_ir(tmp_path):
    env = {**os.environ, "KILN_CACHE_DIR": str(tmp_path / "shared"), "PYTHONPATH": str(REPO)}

    def run_process() -> dict:
        command = [sys.executable, "-c", WARM_PROCESS]
        done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
        return json.loads(done.stdout.strip().splitlines()[-1])

    cold, warm = run_process(), run_process()
    assert cold["emitted"] > 0 and cold["optimize_runs"] > 0 and cold["generated"] > 0
    assert (warm["emitted"], warm["optimize_runs"], warm["generated"]) == (0, 0, 0)
    assert warm["losses"] == cold["losses"]
