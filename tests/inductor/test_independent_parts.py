"""Kernels made of independent parts are split (``scheduler._split_independent``): an optimizer's
updates of many equal parameters, the same work in each of a model's blocks, the gradient norms
``clip_grad_norm_`` takes. Each kernel then holds a few equal pointwise parts, or one part with a
reduction, so a deeper model reuses the same kernels instead of growing one; work that shares an
input stays in one pass over it; and every result is still eager's."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.inductor.codegen.llvm import jit as llvm_jit
from kiln.inductor.scheduler import _PARTS_PER_KERNEL, Kernel

from .helpers import compile_traced


def _adam_updates(lr, *tensors):
    """Adam's moment and parameter updates for each (p, g, m, v) quadruple, all independent."""
    out = []
    for i in range(0, len(tensors), 4):
        p, g, m, v = tensors[i : i + 4]
        m = 0.9 * m + 0.1 * g
        v = 0.999 * v + 0.001 * g * g
        out += [p - lr * m / (v.sqrt() + 1e-8), m, v]
    return out


def _reference(lr, *arrays):
    out = []
    for i in range(0, len(arrays), 4):
        p, g, m, v = (a.astype(np.float64) for a in arrays[i : i + 4])
        m = 0.9 * m + 0.1 * g
        v = 0.999 * v + 0.001 * g * g
        out += [p - lr * m / (np.sqrt(v) + 1e-8), m, v]
    return out


def _inputs(shapes, seed=0):
    rng = np.random.default_rng(seed)
    arrays = []
    for shape in shapes:
        p, g, m = (rng.standard_normal(shape).astype(np.float32) for _ in range(3))
        arrays += [p, g, m, np.abs(rng.standard_normal(shape)).astype(np.float32)]
    return arrays


def _kernels(compiled) -> list:
    return [s for s in compiled.schedule.steps if isinstance(s, Kernel)]


@pytest.mark.parametrize("count", [1, 3, 8, 13])
def test_equal_updates_share_kernels_of_a_few_parts(count):
    arrays = _inputs([(768,)] * count)
    lr = kiln.tensor(1e-3)
    args = [lr, *(kiln.tensor(a) for a in arrays)]
    compiled = compile_traced(_adam_updates, *args)
    for got, want in zip(compiled(*args), _reference(1e-3, *arrays)):
        np.testing.assert_allclose(got.numpy(), want, rtol=2e-6, atol=1e-7)
    kernels = _kernels(compiled)
    # three outputs per part; every kernel holds at most _PARTS_PER_KERNEL parts
    assert max(len(k.nodes) for k in kernels) <= 3 * _PARTS_PER_KERNEL
    assert len(kernels) == -(-count // _PARTS_PER_KERNEL)


def test_long_independent_loops_get_a_kernel_each():
    arrays = _inputs([(64, 1024)] * 3, seed=1)
    args = [kiln.tensor(0.5), *(kiln.tensor(a) for a in arrays)]
    compiled = compile_traced(_adam_updates, *args)
    for got, want in zip(compiled(*args), _reference(0.5, *arrays)):
        np.testing.assert_allclose(got.numpy(), want, rtol=2e-6, atol=1e-6)
    assert [len(k.nodes) for k in _kernels(compiled)] == [3, 3, 3]


def test_parts_of_one_structure_share_kernels():
    """Interleaved parts of two structures (a weight's update, then a bias's) are regrouped: each
    kernel holds parts of one structure, so the kernels of a deeper stack are the same ones."""
    shapes = [(768,), (32, 24)] * 9
    arrays = _inputs(shapes, seed=5)
    args = [kiln.tensor(1e-2), *(kiln.tensor(a) for a in arrays)]
    compiled = compile_traced(_adam_updates, *args)
    for got, want in zip(compiled(*args), _reference(1e-2, *arrays)):
        np.testing.assert_allclose(got.numpy(), want, rtol=2e-6, atol=1e-6)
    kernels = _kernels(compiled)
    assert sorted(len(k.nodes) for k in kernels) == [3, 3, 24, 24]  # 8 + 1 parts of each shape
    for k in kernels:
        assert len({tuple(n.data.ranges) for n in k.nodes}) == 1


def test_a_deeper_stack_emits_no_new_kernel():
    """Twelve blocks' updates are the kernels four blocks' were: nothing is generated again."""
    shapes = [(768,), (768,), (96, 768), (768,)]
    small = [kiln.tensor(a) for a in _inputs(shapes * 4, seed=2)]
    compile_traced(_adam_updates, kiln.tensor(1e-3), *small)
    before = llvm_jit.jit_stats().kernels_emitted
    arrays = _inputs(shapes * 12, seed=3)
    args = [kiln.tensor(1e-3), *(kiln.tensor(a) for a in arrays)]
    compiled = compile_traced(_adam_updates, *args)
    assert llvm_jit.jit_stats().kernels_emitted - before <= 1  # a last part-filled kernel
    for got, want in zip(compiled(*args), _reference(1e-3, *arrays)):
        np.testing.assert_allclose(got.numpy(), want, rtol=2e-6, atol=1e-6)


def _norms(*tensors):
    """A gradient norm per tensor (sum of squares, square root), as ``clip_grad_norm_`` takes."""
    return [(t * t).sum().sqrt() for t in tensors]


def test_independent_reductions_get_a_kernel_each_shared_by_equal_ones():
    """Norms of many gradients of a few shapes: a kernel per norm (a kernel of several mixed
    the parts unevenly, one kernel per mix), each shape's kernel emitted once, values eager's.
    (A kernel of no more parts than share a launch stays whole.)"""
    rng = np.random.default_rng(6)
    shapes = [(768,), (96, 768), (768,), (2304,)] * 9  # more of each than share a launch
    arrays = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    args = [kiln.tensor(a) for a in arrays]
    before = llvm_jit.jit_stats().kernels_emitted
    compiled = compile_traced(_norms, *args)
    emitted = llvm_jit.jit_stats().kernels_emitted - before
    for got, a in zip(compiled(*args), arrays):
        np.testing.assert_allclose(
            got.numpy(), np.sqrt((a.astype(np.float64) ** 2).sum()), rtol=1e-5
        )
    kernels = _kernels(compiled)
    assert all(len({tuple(n.data.ranges) for n in k.nodes}) == 1 for k in kernels)
    assert len(kernels) >= len(shapes)  # no kernel holds two norms
    assert emitted <= 2 * len(set(shapes))  # a norm's sum (and its root) per shape, not per mix


def test_reductions_of_one_input_stay_one_pass():
    """Parts that read the same input (a batch norm's sum and sum of squares) share its pass."""
    x = np.random.default_rng(4).standard_normal((256, 64)).astype(np.float32)

    def stats(x):
        return x.sum(0), (x * x).sum(0), x.amax(0)

    compiled = compile_traced(stats, kiln.tensor(x))
    got = compiled(kiln.tensor(x))
    np.testing.assert_allclose(got[0].numpy(), x.astype(np.float64).sum(0), rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(got[1].numpy(), (x.astype(np.float64) ** 2).sum(0), rtol=1e-5)
    np.testing.assert_array_equal(got[2].numpy(), x.max(0))
    assert len(_kernels(compiled)) == 1


def test_a_compiled_training_step_of_many_equal_layers_matches_eager():
    """Through kiln.compile: a stack of equal layers' forward, backward and SGD update, split
    into parts, gives eager's loss and parameters."""

    def build():
        kiln.manual_seed(0)
        layers = [kiln.nn.Linear(32, 32) for _ in range(10)]
        model = kiln.nn.Sequential(*(m for layer in layers for m in (layer, kiln.nn.Tanh())))
        return model, kiln.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    def step(model, opt, x):
        opt.zero_grad()
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        return loss

    x = kiln.randn(16, 32)
    eager_model, eager_opt = build()
    model, opt = build()
    compiled = kiln.compile(step)
    for _ in range(3):
        want = step(eager_model, eager_opt, x)
        got = compiled(model, opt, x)
        np.testing.assert_allclose(got.item(), want.item(), rtol=1e-5)
    for a, b in zip(model.parameters(), eager_model.parameters()):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-4, atol=1e-6)
