"""Instances of one ``nn.Module`` class share compiled code: a module is guarded by its type and
by what capture reads from it (parameters as inputs, attributes where used, a container's
children by name and type), as PyTorch guards the modules it inlines. Graph counts are compared
with ``torch.compile`` (a counting backend on each side); values with eager."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import kiln
from kiln.dynamo.testing import CompileCounter
from tests.oracle import needs_torch, torch


def _block_class(lib):
    class Block(lib.nn.Module):
        def __init__(self, scale: float = 2.0):
            super().__init__()
            self.lin = lib.nn.Linear(3, 3)
            self.norm = lib.nn.LayerNorm(3)
            self.scale = scale

        def forward(self, x):
            return self.norm(self.lin(x)).relu() * self.scale

    return Block


def _graphs_per_call(lib, how: str, modules: list, calls: list[tuple[int, int]]) -> list[int]:
    """The graphs compiled so far after each ``(module index, batch)`` call."""
    if lib is torch:
        from torch._dynamo.testing import CompileCounter as TorchCounter

        torch._dynamo.reset()
        counter = TorchCounter()
    else:
        counter = CompileCounter()
    if how == "function":
        step = lib.compile(lambda m, x: m(x), backend=counter)
        callers = [lambda x, m=m: step(m, x) for m in modules]
    elif how == "compile(module)":
        callers = [lib.compile(m, backend=counter) for m in modules]
    else:
        for m in modules:
            m.compile(backend=counter)
        callers = modules
    counts = []
    for index, batch in calls:
        callers[index](lib.ones(batch, 3))
        counts.append(counter.frame_count)
    return counts


_ALTERNATE = [(0, 2), (1, 2)] * 4
_SETUPS = {
    "same": lambda m1, m2: None,
    "eval": lambda m1, m2: m2.eval(),
    "scale": lambda m1, m2: setattr(m2, "scale", 3.0),
}


@needs_torch
@pytest.mark.parametrize("setup", sorted(_SETUPS))
@pytest.mark.parametrize("how", ["function", "compile(module)", "Module.compile"])
def test_alternating_instances_compile_as_often_as_pytorch(how, setup):
    counts = {}
    for lib in (kiln, torch):
        block = _block_class(lib)
        modules = [block(), block()]
        _SETUPS[setup](*modules)
        counts[lib.__name__] = _graphs_per_call(lib, how, modules, _ALTERNATE)
    assert counts["kiln"] == counts["torch"]


@needs_torch
def test_alternating_instances_with_growing_batches_compile_as_often_as_pytorch():
    calls = [(0, 2), (1, 2), (0, 4), (1, 4), (0, 6), (1, 6)]
    counts = {}
    for lib in (kiln, torch):
        block = _block_class(lib)
        counts[lib.__name__] = _graphs_per_call(lib, "function", [block(), block()], calls)
    assert counts["kiln"] == counts["torch"]


def test_a_stack_of_blocks_compiled_one_by_one_stays_under_the_recompile_limit():
    block = _block_class(kiln)
    blocks = [block() for _ in range(12)]
    counter = CompileCounter()
    for b in blocks:
        b.compile(backend=counter)
    x = kiln.randn(2, 3, requires_grad=True)  # as every block's output: one entry for all
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # no "hit config.recompile_limit"
        for _ in range(2):
            h = x
            for b in blocks:
                h = b(h)
    expected = x
    for b in blocks:
        expected = type(b).forward(b, expected)  # eager: the class's forward, not the wrapper
    np.testing.assert_allclose(h.detach().numpy(), expected.detach().numpy(), rtol=1e-5)
    assert counter.frame_count == 1


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_each_instance_computes_with_its_own_parameters_and_gradients(backend):
    block = _block_class(kiln)
    kiln.manual_seed(0)
    m1, m2 = block(), block(scale=2.0)
    step = kiln.compile(lambda m, x: m(x).sum(), backend=backend)
    x = kiln.randn(4, 3)
    for m in (m1, m2, m1, m2):
        m.zero_grad()
        got = step(m, x)
        got.backward()
        grads = [p.grad.clone() for p in m.parameters()]
        m.zero_grad()
        want = m(x).sum()
        want.backward()
        np.testing.assert_allclose(got.item(), want.item(), rtol=1e-5)
        for g, p in zip(grads, m.parameters()):
            np.testing.assert_allclose(g.numpy(), p.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_an_instance_shadowing_a_class_method_is_not_served_by_the_class_entry():
    class Scaled(kiln.nn.Module):
        def factor(self):
            return 2.0

        def forward(self, x):
            return x * self.factor()

    plain, shadowed = Scaled(), Scaled()
    shadowed.factor = lambda: 5.0
    step = kiln.compile(lambda m, x: m(x), backend="eager")
    x = kiln.ones(2)
    for m in (plain, shadowed, plain):
        np.testing.assert_array_equal(step(m, x).numpy(), m(x).numpy())


def test_containers_of_other_lengths_recompile():
    def stack(n):
        return kiln.nn.Sequential(*[kiln.nn.Linear(2, 2) for _ in range(n)])

    counter = CompileCounter()
    step = kiln.compile(lambda m, x: m(x), backend=counter)
    x = kiln.ones(1, 2)
    short, long, other_short = stack(2), stack(3), stack(2)
    for m in (short, long, other_short, long):
        np.testing.assert_allclose(step(m, x).detach().numpy(), m(x).detach().numpy(), rtol=1e-6)
    assert counter.frame_count == 2


def test_comparing_two_modules_by_identity_is_guarded():
    def pick(a, b, x):
        return a(x) if a is b else a(x) - b(x)

    lin1, lin2 = kiln.nn.Linear(2, 2), kiln.nn.Linear(2, 2)
    step = kiln.compile(pick, backend="eager")
    x = kiln.ones(1, 2)
    for a, b in ((lin1, lin2), (lin1, lin1), (lin2, lin1), (lin2, lin2)):
        got, want = step(a, b, x), pick(a, b, x)
        np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-6)


def test_an_optional_submodule_is_guarded_where_it_is_missing():
    class Head(kiln.nn.Module):
        def __init__(self, project: bool):
            super().__init__()
            if project:
                self.proj = kiln.nn.Linear(2, 2)

        def forward(self, x):
            if hasattr(self, "proj"):
                x = self.proj(x)
            return getattr(self, "proj", kiln.nn.Identity())(x) * 2

    step = kiln.compile(lambda m, x: m(x), backend="eager")
    x = kiln.ones(1, 2)
    for m in (Head(False), Head(True), Head(False)):
        np.testing.assert_allclose(step(m, x).detach().numpy(), m(x).detach().numpy(), rtol=1e-6)


class _ShapeRecorder:
    """A backend that runs the graph as captured and keeps whether each one had a symbolic
    size among its inputs (a placeholder's traced value)."""

    def __init__(self):
        self.symbolic: list[bool] = []

    def __call__(self, gm, example_inputs):
        from kiln.runtime.symbolic import SymInt

        def symbolic(value) -> bool:
            if isinstance(value, kiln.Tensor):
                return any(isinstance(size, SymInt) for size in value.shape)
            return isinstance(value, SymInt)

        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        self.symbolic.append(any(symbolic(n.meta.get("val")) for n in placeholders))
        return gm.forward


def test_instances_of_other_sizes_keep_static_graphs():
    """A DCGAN's generator and discriminator, compiled one by one, are two ``Sequential``s of
    other widths sharing one cache (``Sequential.forward``'s): the second one's sizes are not
    the first one's changing, so neither graph turns symbolic (automatic dynamic keeps a history
    per instance of a method's module), and parameters never do. (One function taking either
    module, ``step(m, x)``, sees its own ``x`` change width: that turns symbolic, as in
    PyTorch.)"""
    nn = kiln.nn
    kiln.manual_seed(0)
    small = nn.Sequential(nn.Linear(3, 5), nn.ReLU(), nn.Linear(5, 2))
    wide = nn.Sequential(nn.Linear(7, 9), nn.ReLU(), nn.Linear(9, 4))
    recorder = _ShapeRecorder()
    callers = [kiln.compile(small, backend=recorder), kiln.compile(wide, backend=recorder)]
    for _ in range(3):
        for caller, module, width in zip(callers, (small, wide), (3, 7)):
            x = kiln.randn(4, width)
            np.testing.assert_allclose(caller(x).detach().numpy(), module(x).detach().numpy())
    assert recorder.symbolic == [False, False]
    # the same instance with a new batch size still turns its batch symbolic
    callers[0](kiln.randn(6, 3))
    assert recorder.symbolic == [False, False, True]


def test_a_parameter_that_changes_size_stays_static():
    """``config.force_parameter_static_shapes`` (PyTorch's default): a parameter replaced by
    one of another size recompiles with its new size as a constant, never a symbol."""
    nn = kiln.nn
    kiln.manual_seed(0)
    lin = nn.Linear(3, 4)
    recorder = _ShapeRecorder()
    compiled = kiln.compile(lin, backend=recorder)
    x = kiln.randn(2, 3)
    for out_features in (4, 6, 8):
        lin.weight = nn.Parameter(kiln.randn(out_features, 3))
        lin.bias = nn.Parameter(kiln.randn(out_features))
        np.testing.assert_allclose(compiled(x).detach().numpy(), lin(x).detach().numpy(), rtol=1e-6)
    assert recorder.symbolic == [False] * len(recorder.symbolic) and len(recorder.symbolic) >= 2
