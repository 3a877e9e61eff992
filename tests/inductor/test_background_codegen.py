"""LLVM compiles a graph's kernels on a background thread while the compiler goes on.

The first call of a kernel waits for its machine code; the answers must be those of a
compile that waited at once (PyTorch's values and gradients), from any thread, with the objects
in the cache directory of the moment the graph was compiled; a failure to compile runs the
graph with the eager ops, as a failure at compile time does.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

import kiln
from kiln.inductor.codegen import cpu
from kiln.inductor.codegen.llvm import jit as llvm_jit
from kiln.inductor.codegen.llvm import kernel as llvm_kernel
from kiln.inductor.compile_fx import inductor
from tests.oracle import assert_close, needs_torch, to_torch


def mlp_loss(w1, w2, x):
    return ((x @ w1).tanh() @ w2).softmax(-1).square().sum()


def mlp_inputs():
    kiln.manual_seed(0)
    w1 = kiln.randn(12, 20) * 0.3
    w2 = kiln.randn(20, 7) * 0.3
    x = kiln.randn(9, 12)
    return w1, w2, x


@needs_torch
def test_forward_and_backward_compiled_in_the_background_match_pytorch(cache_dir):
    kiln.dynamo.reset()
    w1, w2, x = (t.requires_grad_() for t in mlp_inputs())
    loss = kiln.compile(mlp_loss)(w1, w2, x)
    loss.backward()
    tw1, tw2, tx = (to_torch(t.detach()).requires_grad_() for t in (w1, w2, x))
    expected = mlp_loss(tw1, tw2, tx)
    expected.backward()
    assert_close(loss, expected)
    for ours, theirs in ((w1, tw1), (w2, tw2), (x, tx)):
        assert_close(ours.grad, theirs.grad)


def test_threads_calling_a_graph_still_compiling_all_get_its_answer(cache_dir):
    kiln.dynamo.reset()
    w1, w2, x = mlp_inputs()
    expected = mlp_loss(w1, w2, x).item()
    fn = kiln.compile(mlp_loss)
    results = []
    barrier = threading.Barrier(4)

    def call():
        barrier.wait()
        results.append(fn(w1, w2, x).item())

    threads = [threading.Thread(target=call) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    np.testing.assert_allclose(results, [expected] * 4, rtol=1e-5)


def test_objects_go_to_the_cache_directory_of_the_compile(tmp_path, monkeypatch):
    first, second = tmp_path / "first", tmp_path / "second"
    monkeypatch.setenv("KILN_CACHE_DIR", str(first))
    kiln.dynamo.reset()
    w1, w2, x = mlp_inputs()
    release = threading.Event()
    llvm_jit.in_background(release.wait)  # the graph's compile waits behind this job

    def backend(gm, example_inputs):
        graph = inductor(gm, example_inputs)
        monkeypatch.setenv("KILN_CACHE_DIR", str(second))  # before LLVM has started on it
        release.set()
        return graph

    out = kiln.compile(mlp_loss, backend=backend)(w1, w2, x)
    assert list((first / "llvm").rglob("*.o")), "the kernels' object is in the compile's cache"
    assert not (second / "llvm").exists()
    np.testing.assert_allclose(out.item(), mlp_loss(w1, w2, x).item(), rtol=1e-5)


def test_a_graph_compiled_again_while_its_kernels_compile_waits_for_them(cache_dir, monkeypatch):
    emitted = []
    real = llvm_kernel.emit_kernel

    def counting(module, name, *args, **kwargs):
        emitted.append(name)
        return real(module, name, *args, **kwargs)

    monkeypatch.setattr(cpu, "emit_kernel", counting)
    kiln.dynamo.reset()
    w1, w2, x = mlp_inputs()
    counts = []

    def twice(gm, example_inputs):
        inductor(gm, example_inputs)
        counts.append(len(emitted))
        return inductor(gm, example_inputs)  # before the first one's kernels are ready

    out = kiln.compile(mlp_loss, backend=twice)(w1, w2, x)
    assert counts[0] > 0
    assert len(emitted) == counts[0]  # the second compile found the first one's kernels
    np.testing.assert_allclose(out.item(), mlp_loss(w1, w2, x).item(), rtol=1e-5)


def test_a_failed_background_compile_runs_the_graph_eagerly(cache_dir, monkeypatch):
    """LLVM fails after ``kiln.compile`` returned (the kernels compile in the background): the
    forward and backward graphs run with the eager ops, saying why, with eager's values and
    gradients; nothing runs a half-compiled graph."""

    def broken(texts, uses=0):
        raise RuntimeError("invalid LLVM IR: made up for the test")

    monkeypatch.setattr(llvm_jit, "compile_kernels", broken)
    kiln.dynamo.reset()
    inputs = [t.requires_grad_() for t in mlp_inputs()]
    with pytest.warns(RuntimeWarning, match="made up for the test") as warned:
        loss = kiln.compile(mlp_loss)(*inputs)
        loss.backward()
    assert sum("runs with the eager ops" in str(w.message) for w in warned) == 2  # fwd, bwd
    reference = [t.detach().clone().requires_grad_() for t in inputs]
    expected = mlp_loss(*reference)
    expected.backward()
    np.testing.assert_allclose(loss.item(), expected.item(), rtol=1e-5)
    for ours, theirs in zip(inputs, reference):
        np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), rtol=1e-4, atol=1e-7)


def test_a_failed_background_compile_of_a_graph_mutating_its_input_runs_eagerly(
    cache_dir, monkeypatch
):
    def broken(texts, uses=0):
        raise RuntimeError("made up for the test")

    def step(buffer, x):
        buffer.mul_(0.5).add_(x)
        return buffer.sum() * 2

    monkeypatch.setattr(llvm_jit, "compile_kernels", broken)
    kiln.dynamo.reset()
    buffer, x = kiln.arange(6.0).reshape(2, 3), kiln.full((2, 3), 0.25)
    expected_buffer = buffer.clone()
    expected = step(expected_buffer, x)
    with pytest.warns(RuntimeWarning, match="made up for the test"):
        out = kiln.compile(step)(buffer, x)
    assert out.item() == expected.item()
    np.testing.assert_array_equal(buffer.numpy(), expected_buffer.numpy())


def test_a_call_dispatched_before_another_thread_bound_the_kernel_still_runs_it(monkeypatch):
    """Two threads call a kernel still compiling: the first binds it (the object becomes a
    plain ``RowKernel``) while the second is already inside ``_CompilingKernel.__call__``; the
    second must run the bound machine code, not look up ``ready`` on the rebound object."""
    ran = []

    class Job:
        def result(self):
            return ({"k": ("module", "name")},)

    def fake_bind(kernel, rows, work, names, plan=None):
        return cpu.RowKernel(
            "bound", lambda lo, hi, pointers: ran.append((lo, hi)), 0, rows, 0, names
        )

    monkeypatch.setattr(cpu, "bind_kernel", fake_bind)
    kernel = cpu._CompilingKernel.__new__(cpu._CompilingKernel)
    cpu.RowKernel.__init__(kernel, "compiling", (Job(), "k"), 0, 5, 0, ["a"])
    kernel.ready()  # the first thread's call binds it
    assert type(kernel) is cpu.RowKernel
    cpu._CompilingKernel.__call__(kernel, None)  # the second thread, dispatched before that
    assert ran == [(0, 5)] and kernel.name == "bound"
