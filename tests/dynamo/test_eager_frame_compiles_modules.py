"""A compiled function whose frame runs eagerly (a graph break inside a loop, the recompile limit) still
compiles the modules it calls, as PyTorch compiles the frames a skipped frame calls: a training
loop with ``backward()`` inside its ``for`` runs its model compiled. Results, gradients and hooks
are eager's; modules called by other threads meanwhile, or with compiling disabled, stay eager."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import kiln


class _Recording:
    """A backend noting the shapes of each graph's tensor inputs (which module it came from)."""

    def __init__(self):
        self.graphs: list[list[tuple]] = []

    def __call__(self, gm, example_inputs):
        self.graphs.append([tuple(t.shape) for t in example_inputs if isinstance(t, kiln.Tensor)])
        return gm.forward


def _model(seed=0):
    kiln.manual_seed(seed)
    return kiln.nn.Sequential(kiln.nn.Linear(8, 16), kiln.nn.ReLU(), kiln.nn.Linear(16, 1))


def _data():
    g = np.random.default_rng(1)
    return [
        (
            kiln.tensor(g.standard_normal((4, 8), np.float32)),
            kiln.tensor(g.standard_normal((4, 1), np.float32)),
        )
        for _ in range(3)
    ]


def _epoch(model, opt, data):
    total = 0.0
    for x, y in data:
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()  # a graph break inside the loop: the frame runs eagerly
        opt.step()
        total += loss.item()
    return total


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
def test_a_training_loop_run_eagerly_compiles_its_model(backend):
    eager_model, model = _model(), _model()
    eager_opt = kiln.optim.SGD(eager_model.parameters(), lr=0.1)
    opt = kiln.optim.SGD(model.parameters(), lr=0.1)
    recording = _Recording()
    compiled = kiln.compile(_epoch, backend=recording if backend == "eager" else backend)
    data = _data()
    for _ in range(2):
        want = _epoch(eager_model, eager_opt, data)
        got = compiled(model, opt, data)
        assert got == pytest.approx(want, rel=1e-5)
    for a, b in zip(model.parameters(), eager_model.parameters()):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-5, atol=1e-6)
    if backend == "eager":
        # the model's forward: its input and four parameters
        assert [(4, 8), (16, 8), (16,), (1, 16), (1,)] in recording.graphs


class _Block(kiln.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = kiln.nn.Linear(6, 6)

    def forward(self, x):
        return self.linear(x).tanh()


class _Stack(kiln.nn.Module):
    """A forward whose loop holds a graph break: its blocks are compiled one by one (a bare
    kiln.nn.Linear would not be: one op gains nothing compiled alone)."""

    def __init__(self):
        super().__init__()
        self.blocks = kiln.nn.ModuleList(_Block() for _ in range(3))
        self.head = kiln.nn.Linear(6, 2)
        self.norms: list[float] = []

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
            self.norms.append(x.norm().item())  # .item() inside the loop
        return self.head(x)


def test_a_forward_run_eagerly_compiles_its_blocks():
    kiln.manual_seed(3)
    stack = _Stack()
    x = kiln.randn(2, 6, requires_grad=True)
    want = stack(x)
    want.sum().backward()
    want_grad = x.grad.clone()
    x.grad = None
    recording = _Recording()
    got = kiln.compile(stack, backend=recording)(x)
    got.sum().backward()
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-6)
    np.testing.assert_allclose(x.grad.numpy(), want_grad.numpy(), rtol=1e-6)
    assert [(2, 6), (6, 6), (6,)] in recording.graphs  # a block
    assert not any(graph[1:] == [(2, 6), (2,)] for graph in recording.graphs)  # not the head
    assert len(stack.norms) == 6


def test_hooks_of_a_module_called_from_an_eager_frame_run_once():
    model = _model()
    calls = []
    model.register_forward_hook(lambda m, args, out: calls.append(out.shape) or out * 2)

    def run(xs):
        outs = []
        for x in xs:
            outs.append(model(x))
            print(end="")  # a graph break inside the loop
        return outs

    xs = [kiln.randn(3, 8) for _ in range(2)]
    want = run(xs)
    calls.clear()
    got = kiln.compile(run, backend="aot_eager")(xs)
    assert calls == [(3, 1), (3, 1)]
    for a, b in zip(got, want):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-6)


def test_other_threads_and_disabled_forwards_stay_eager():
    class Plain(kiln.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = kiln.nn.Linear(3, 3)

        @kiln.compiler.disable
        def forward(self, x):
            return self.lin(x)

    model, plain, other = _model(), Plain(), kiln.nn.Sequential(kiln.nn.Linear(5, 5))
    side = []

    def run(xs):
        for x in xs:
            model(x)
            plain(kiln.ones(2, 3))
            thread = threading.Thread(target=lambda: side.append(other(kiln.ones(7, 5))))
            thread.start()
            thread.join()
            print(end="")
        return x

    recording = _Recording()
    kiln.compile(run, backend=recording)([kiln.randn(3, 8)])
    shapes = {s for graph in recording.graphs for s in graph}
    assert (3, 8) in shapes  # the model, called by the frame's thread
    assert (7, 5) not in shapes and (2, 3) not in shapes
    assert len(side) == 1


def test_a_frame_differentiating_twice_keeps_its_modules_eager():
    """MAML's meta-loss takes gradients with create_graph inside its loop: its model's backward
    must be differentiable again, which a compiled region's is not, so the model stays eager
    (as the whole frame did before) and the meta-gradients are eager's."""
    kiln.manual_seed(0)
    model = kiln.nn.Sequential(kiln.nn.Linear(4, 8), kiln.nn.Tanh(), kiln.nn.Linear(8, 1))
    tasks = [(kiln.randn(5, 4), kiln.randn(5, 1)) for _ in range(3)]

    def meta_loss(model, tasks):
        total = 0.0
        for x, y in tasks:
            loss = ((model(x) - y) ** 2).mean()
            grads = kiln.autograd.grad(loss, list(model.parameters()), create_graph=True)
            total = total + sum((g**2).sum() for g in grads)
        total.backward()
        return total

    want = meta_loss(model, tasks)
    want_grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    got = kiln.compile(meta_loss, backend="aot_eager")(model, tasks)
    assert got.item() == pytest.approx(want.item(), rel=1e-6)
    for p, g in zip(model.parameters(), want_grads):
        np.testing.assert_allclose(p.grad.numpy(), g.numpy(), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_modules_inside_function_transforms_stay_eager(backend):
    """kiln.func and autograd.functional transforms differentiate twice (grad, jvp's double-vjp
    trick, hessian): modules they call from a frame run eagerly are not compiled."""
    from kiln.func import functional_call, grad, jacrev, vmap

    kiln.manual_seed(0)
    m = kiln.nn.Linear(3, 2)
    x = kiln.randn(4, 3)

    def transforms(x):
        outs = []
        for _ in range(2):
            outs.append(vmap(m)(x.unsqueeze(1)))
            weight_grad = grad(
                lambda w: functional_call(m, {"weight": w, "bias": m.bias}, (x,)).sum()
            )
            outs.append(weight_grad(m.weight))
            outs.append(jacrev(lambda v: m(v))(x[0]))
            outs.append(kiln.autograd.functional.hessian(lambda v: m(v).square().sum(), x[0]))
            outs.append(kiln.autograd.functional.jvp(lambda v: m(v), x[0], kiln.ones(3))[1])
            print(end="")  # a graph break inside the loop
        return outs

    want = transforms(x)
    got = kiln.compile(transforms, backend=backend)(x)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-6, atol=1e-7)
