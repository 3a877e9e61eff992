"""Kernels equal up to buffer names are compiled once: within a graph that repeats a block, and
across graphs of one process. Compile time then grows with the distinct kernels, not the nodes,
and the shared machine code still gives PyTorch's values and gradients.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import kiln
from kiln.inductor.codegen import graph_index
from kiln.inductor.codegen.llvm import jit as llvm_jit
from tests.oracle import assert_close, needs_torch, to_torch


def make_blocks(lib, blocks: int, width: int = 24):
    """``blocks`` identical residual blocks (linear, layer norm, GELU) with fixed weights."""
    lib.manual_seed(0)
    layers = []
    for _ in range(blocks):
        linear = lib.nn.Linear(width, width)
        norm = lib.nn.LayerNorm(width)
        layers.append((linear, norm))
    return layers


class Stack:
    """The blocks as one callable over kiln or torch modules built from the same weights."""

    def __init__(self, lib, layers):
        self.lib = lib
        self.layers = layers

    def __call__(self, x):
        F = self.lib.nn.functional
        for linear, norm in self.layers:
            x = x + F.gelu(norm(linear(x)))
        return x

    def parameters(self):
        return [p for linear, norm in self.layers for m in (linear, norm) for p in m.parameters()]


def torch_copy(stack: Stack):
    import torch

    layers = []
    for linear, norm in stack.layers:
        t_linear = torch.nn.Linear(linear.in_features, linear.out_features)
        t_norm = torch.nn.LayerNorm(norm.normalized_shape)
        with torch.no_grad():
            for t_module, module in ((t_linear, linear), (t_norm, norm)):
                for (_, tp), (_, p) in zip(t_module.named_parameters(), module.named_parameters()):
                    tp.copy_(to_torch(p.detach()))
        layers.append((t_linear, t_norm))
    return Stack(torch, layers)


def compile_stats(fn, *args):
    """What compiling and running ``fn(*args)`` once cost the JIT, and its result."""
    llvm_jit.reset_jit_stats()
    out = kiln.compile(fn)(*args)
    return llvm_jit.jit_stats(), out


@needs_torch
def test_identical_blocks_compile_their_kernels_once_forward(cache_dir):
    import torch

    x = kiln.randn(5, 24)
    with kiln.no_grad():
        one, _ = compile_stats(Stack(kiln, make_blocks(kiln, 1)), x)
        kiln.dynamo.reset()
        stack = Stack(kiln, make_blocks(kiln, 6))
        six, out = compile_stats(stack, x)
    assert one.kernels_compiled > 0
    assert six.kernel_uses == 6 * one.kernel_uses  # the graph really has six times the kernels
    # ... but the six blocks' kernels were already compiled for the one-block graph
    assert six.kernels_compiled == 0 and six.optimize_runs == 0
    with torch.no_grad():
        expected = torch_copy(stack)(to_torch(x))
    assert_close(out, expected)


@needs_torch
def test_identical_blocks_compile_their_kernels_once_backward(tmp_path, monkeypatch):
    """A training step's forward and backward graphs: six blocks compile no more distinct kernels
    than three (the first and last blocks differ from the middle ones, the middle ones are one
    kernel set), and values and gradients equal PyTorch's."""

    compiled = {}
    for blocks in (3, 6):
        monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / f"cache{blocks}"))
        kiln.dynamo.reset()
        stack = Stack(kiln, make_blocks(kiln, blocks))
        x = kiln.randn(5, 24, requires_grad=True)

        def step(x, stack=stack):
            return stack(x).square().mean()

        stats, loss = compile_stats(step, x)
        loss.backward()
        compiled[blocks] = stats
        t_stack = torch_copy(stack)
        t_x = to_torch(x.detach(), requires_grad=True)
        t_loss = t_stack(t_x).square().mean()
        t_loss.backward()
        assert_close(loss, t_loss, rtol=1e-5, atol=1e-6)
        assert_close(x.grad, t_x.grad, rtol=1e-4, atol=1e-6)
        for p, tp in zip(stack.parameters(), t_stack.parameters()):
            assert_close(p.grad, tp.grad, rtol=1e-4, atol=1e-6)
    assert compiled[6].kernel_uses > compiled[3].kernel_uses
    assert compiled[6].kernels_compiled == compiled[3].kernels_compiled


def test_another_graph_reuses_a_compiled_kernel(cache_dir):
    """A kernel one graph compiled is found, not compiled again, by a different graph."""
    w = kiln.randn(16, 8)

    def normed(x):
        return kiln.nn.functional.layer_norm(x, (16,)).exp()

    def normed_then_matmul(x):
        return kiln.nn.functional.layer_norm(x, (16,)).exp() @ w

    x = kiln.randn(7, 16)
    first, _ = compile_stats(normed, x)
    second, out = compile_stats(normed_then_matmul, x)
    assert first.kernels_compiled >= 1
    assert second.kernels_reused >= 1 and second.optimize_runs == 0
    assert_close(out, normed(x) @ w)


def test_kernels_differing_in_dtype_are_not_shared(cache_dir):
    def block(x):
        return kiln.nn.functional.layer_norm(x, (16,)).tanh() * 3

    x = kiln.randn(9, 16)
    compile_stats(block, x)
    stats, out = compile_stats(block, x.double())
    assert stats.kernels_reused == 0 and stats.kernels_compiled >= 1
    assert out.dtype is kiln.float64
    assert_close(out, block(x.double()))


def test_kernels_differing_in_size_are_not_shared(cache_dir):
    def block(x):
        return (x * 2).softmax(-1)

    compile_stats(block, kiln.randn(4, 33))
    kiln.dynamo.reset()
    x = kiln.randn(4, 35)
    stats, out = compile_stats(block, x)
    assert stats.kernels_reused == 0 and stats.kernels_compiled >= 1
    assert_close(out, block(x))


_OTHER_PROCESS = """
import json, sys
import kiln
from kiln.inductor.codegen.llvm import jit as llvm_jit
kiln.manual_seed(0)
w, x = kiln.randn(16, 8), kiln.randn(7, 16)
def normed(x):
    return kiln.nn.functional.layer_norm(x, (16,)).exp()
def normed_then_matmul(x):
    return kiln.nn.functional.layer_norm(x, (16,)).exp() @ w
fn = normed if sys.argv[1] == "first" else normed_then_matmul
out = kiln.compile(fn)(x)
stats = llvm_jit.jit_stats()
print(json.dumps({"reused": stats.kernels_reused, "compiled": stats.kernels_compiled,
                  "close": bool(kiln.allclose(out, fn(x), rtol=1e-5, atol=1e-6))}))
"""


def _run_other_process(cache_dir: Path, which: str) -> dict:
    import json
    import os
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, "KILN_CACHE_DIR": str(cache_dir), "PYTHONPATH": str(repo)}
    done = subprocess.run(
        [sys.executable, "-c", _OTHER_PROCESS, which],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_later_process_finds_a_kernel_another_graph_compiled(cache_dir):
    """The per-kernel records on disk: a different graph in a new process loads the shared
    kernel's object instead of compiling it; a damaged record is a miss, never a wrong kernel."""
    first = _run_other_process(cache_dir, "first")
    assert first["compiled"] >= 1 and first["close"]
    second = _run_other_process(cache_dir, "second")
    assert second["reused"] >= 1 and second["compiled"] == 0 and second["close"]
    for record in cache_dir.glob("llvm/kernels/*/*.index"):
        record.write_bytes(record.read_bytes()[:-3] + b"xyz")
    for graph in cache_dir.glob("llvm/graphs/*/*.index"):
        graph.unlink()
    damaged = _run_other_process(cache_dir, "second")
    # the kernel is not found through its record (its object, keyed by content, may still be)
    assert damaged["reused"] == 0 and damaged["close"]


@pytest.fixture
def reuse_unverified(cache_dir, monkeypatch):
    """Kernels found by structure are taken as they are (the suite otherwise emits and compares
    them), starting from a process that has emitted nothing."""
    monkeypatch.delenv("KILN_VERIFY_KERNEL_REUSE", raising=False)
    graph_index.clear_memory_cache()
    return cache_dir


@needs_torch
def test_identical_blocks_emit_their_ir_once(reuse_unverified):
    """The IR of a block's kernels is generated for the first block only: the other five take it
    by structure before any IR is built, and the values are still PyTorch's."""
    import torch

    x = kiln.randn(5, 24)
    with kiln.no_grad():
        one, _ = compile_stats(Stack(kiln, make_blocks(kiln, 1)), x)
        kiln.dynamo.reset()
        graph_index.clear_memory_cache()
        stack = Stack(kiln, make_blocks(kiln, 6))
        six, out = compile_stats(stack, x)
    assert six.kernel_uses == 6 * one.kernel_uses
    assert six.kernels_emitted == one.kernels_emitted
    assert six.kernels_by_structure == six.kernel_uses - one.kernel_uses
    with torch.no_grad():
        expected = torch_copy(stack)(to_torch(x))
    assert_close(out, expected)


@pytest.mark.parametrize(
    "first, second",
    [
        (lambda x: x * 2.0 + 1, lambda x: x * 3.0 + 1),  # a constant
        (lambda x: x * 2.0 + 1, lambda x: x * 2 + 1),  # an int constant where a float was
        (lambda x: x.exp() + 1, lambda x: x.expm1() + 1),  # an op
        (lambda x: x + x.sum(1, keepdim=True), lambda x: x + x.amax(1, keepdim=True)),
        (lambda x: x + 1, lambda x: x.t() + 1),  # an index expression
        (lambda x: x[:, :3] * 2, lambda x: x[:, 1:4] * 2),  # an offset
    ],
)
def test_kernels_differing_in_one_detail_are_not_taken_by_structure(
    reuse_unverified, first, second
):
    """Graphs alike but for one detail of a kernel: the second gets IR of its own, not the
    first's (whose values would be wrong for it)."""
    x = kiln.randn(6, 6)
    compile_stats(first, x)
    kiln.dynamo.reset()
    _, out = compile_stats(second, x)
    assert_close(out, second(x))


def test_a_different_dtype_is_not_taken_by_structure(reuse_unverified):
    def double(x):
        return (x * 2).relu()

    x = kiln.randn(4, 8)
    compile_stats(double, x)
    kiln.dynamo.reset()
    stats, out = compile_stats(double, x.double())
    assert stats.kernels_by_structure == 0
    assert out.dtype is kiln.float64
    assert_close(out, double(x.double()))


@pytest.mark.parametrize(
    "first, second",
    [
        (lambda x: x * 2.0 + 1, lambda x: x * 3.0 + 1),  # a constant
        (lambda x: x.exp() + 1, lambda x: x.expm1() + 1),  # an op
        (lambda x: x + x.sum(1, keepdim=True), lambda x: x + x.amax(1, keepdim=True)),
        (lambda x: x + 1, lambda x: x.t() + 1),  # an index expression
        (lambda x: x[:, :3] * 2, lambda x: x[:, 1:4] * 2),  # an offset
        (lambda x: x * 2.0 + 1, lambda x: (x * 2.0 + 1).double()),  # a dtype
    ],
)
def test_kernels_of_one_graph_differing_in_one_detail_are_not_twins(
    reuse_unverified, first, second
):
    """Two kernels of one graph (a matmul between them) alike but for one detail: the second is
    planned and emitted for itself, not taken as the first's twin."""
    x = kiln.randn(6, 6)
    eye = kiln.eye(6)[:, : second(x).shape[1]]

    def both(x):
        return second(first(x) @ eye[: first(x).shape[1]])

    expected = both(x)
    stats, out = compile_stats(both, x)
    assert stats.kernels_emitted == 2
    assert_close(out, expected)


def test_a_graph_repeating_a_kernel_plans_and_emits_it_once(reuse_unverified):
    """The same pointwise work after each of four matmuls: one kernel planned and emitted, its
    three twins take it with their own buffers (their values differ)."""
    weights = [kiln.randn(6, 6) for _ in range(4)]

    def chain(x):
        for w in weights:
            x = (x @ w).tanh() * 0.5 + x
        return x

    x = kiln.randn(5, 6)
    expected = chain(x)
    stats, out = compile_stats(chain, x)
    assert stats.kernel_uses == 4
    assert stats.kernels_emitted == 1 and stats.kernels_by_structure == 3
    assert_close(out, expected)


def test_a_size_pinned_by_a_guard_keys_as_the_constant_the_emitter_writes():
    """The emitter writes a symbol that a guard pinned (``s == 2``) as its constant and loads an
    unpinned one, even one whose range is [2, 2]; kernels keyed alike after the pin came
    between two compiles reused IR of the other kind (the inductor-dynamic fuzz campaign, seed
    74, with KILN_VERIFY_KERNEL_REUSE)."""
    from kiln.inductor.codegen.kernel_structure import _render
    from kiln.runtime.symbolic import ShapeEnv

    env = ShapeEnv()
    pinned = env.symint(env.create_symbol(2, "x.size(0)", lower=2))
    narrowed = env.symint(env.create_symbol(2, "y.size(0)", lower=2))
    assert _render(pinned) == "<s0>"
    assert bool(pinned == 2) and bool(narrowed <= 2)
    assert _render(pinned) == "2"  # what the emitter writes now
    assert _render(narrowed) == "<s1>"  # still loaded from the sizes argument


def _momentum_step(params, buffers, grads):
    """An SGD-with-momentum update of tensors of different sizes: one flat kernel each."""
    out = []
    for p, b, g in zip(params, buffers, grads):
        b = b * 0.9 + g
        out += [p - 0.01 * b, b]
    return out


@needs_torch
def test_flat_kernels_differing_only_in_size_share_machine_code(cache_dir):
    """A flat loop's element count is the range its rows cover, not a constant of its IR: an
    optimizer's update of parameters of different sizes (under a vector, under a piece, over
    several) is one compiled kernel, with PyTorch's values at every size."""
    sizes = [(37,), (64, 3, 3), (4097,), (3, 5000)]
    tensors = [[kiln.randn(*s) for s in sizes] for _ in range(3)]
    stats, out = compile_stats(_momentum_step, *tensors)
    assert stats.kernel_uses == len(sizes) and stats.kernels_compiled == 1
    expected = _momentum_step(*([to_torch(t) for t in group] for group in tensors))
    for got, want in zip(out, expected):
        assert_close(got, want)


@needs_torch
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("size", [300_007, 4096 * 40, 4096 * 40 + 17])
def test_flat_kernels_split_among_threads_anywhere(cache_dir, threads, size):
    """Threads take a flat loop's elements in ranges that need not end at a piece: each range
    runs its partial pieces first and last, and every element is computed once."""
    saved = kiln.get_num_threads()
    kiln.set_num_threads(threads)
    try:
        x, y = kiln.randn(size), kiln.randn(size)
        got = kiln.compile(lambda a, b: (a * 1.5 - b).exp() + a)(x, y)
    finally:
        kiln.set_num_threads(saved)
    a, b = to_torch(x), to_torch(y)
    assert_close(got, (a * 1.5 - b).exp() + a)
