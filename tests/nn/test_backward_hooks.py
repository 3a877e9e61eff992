"""Module backward hooks as PyTorch runs them: the old ``register_backward_hook`` (its
gradient shapes and clamping), full backward hooks' warnings, and not mixing the two."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import kiln
from tests.oracle import assert_same_error, error_of, needs_torch, torch


def _relu_net(lib):
    nn = lib.nn
    model = nn.Sequential(nn.Linear(4, 5), nn.ReLU(), nn.Linear(5, 5), nn.ReLU(), nn.Linear(5, 2))
    with lib.no_grad():
        for i, p in enumerate(model.parameters()):
            p.copy_(lib.from_numpy(np.cos(np.arange(p.numel()) + i).reshape(p.shape) / 2))
    return model


@needs_torch
def test_old_backward_hook_clamps_relu_gradients_like_torch():
    """Guided backprop: ``register_backward_hook`` on ReLUs replaces their input gradients."""

    def saliency(lib):
        model = _relu_net(lib)
        seen = []

        def guided(module, grad_in, grad_out):
            seen.append((len(grad_in), tuple(grad_out[0].shape)))
            return (lib.clamp(grad_in[0], min=0.0),)

        for layer in model:
            if isinstance(layer, lib.nn.ReLU):
                layer.register_backward_hook(guided)
        x = lib.from_numpy(np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4))
        x.requires_grad_()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            model(x)[:, 1].sum().backward()
        return x.grad.numpy().tolist(), seen, sorted({str(w.message)[:60] for w in caught})

    got, want = saliency(kiln), saliency(torch)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6)
    assert got[1:] == want[1:]


@needs_torch
def test_full_backward_hook_warns_when_no_input_requires_grad():
    def run(lib):
        layer = lib.nn.Linear(2, 2)
        calls = []
        layer.register_full_backward_hook(lambda m, gi, go: calls.append(gi))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            layer(lib.ones(1, 2)).sum().backward()
        return calls, [str(w.message) for w in caught], [w.filename for w in caught]

    got, want = run(kiln), run(torch)
    assert got[:2] == want[:2] and got[2] == [__file__]


@needs_torch
def test_old_and_full_backward_hooks_do_not_mix():
    def build(lib):
        layer = lib.nn.Linear(2, 2)
        layer.register_full_backward_hook(lambda *a: None)
        return lambda: layer.register_backward_hook(lambda *a: None)

    assert_same_error(build(kiln), build(torch))


@needs_torch
@pytest.mark.parametrize(
    "make",
    [
        lambda lib: (lib.nn.Conv2d(2, 3, 3), (1, 2, 5, 5)),
        lambda lib: (lib.nn.MaxPool2d(2), (1, 1, 4, 4)),
        lambda lib: (lib.nn.Sigmoid(), (2, 3)),
    ],
    ids=["conv", "max_pool", "sigmoid"],
)
def test_old_backward_hook_gradient_shapes_match_torch(make):
    def shapes(lib):
        module, shape = make(lib)
        seen = []

        def record(mod, grad_in, grad_out):
            seen.append([None if g is None else tuple(g.shape) for g in grad_in])
            seen.append([tuple(g.shape) for g in grad_out])

        module.register_backward_hook(record)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            module(lib.ones(*shape, requires_grad=True)).sum().backward()
        return seen

    assert shapes(kiln) == shapes(torch)


@needs_torch
def test_global_full_backward_hooks_see_every_module_like_torch():
    """``nn.modules.module.register_module_full_backward_hook`` (and its pre hook) run for
    every module, before a module's own hooks, until removed."""

    def run(lib):
        seen = []
        pre = lib.nn.modules.module.register_module_full_backward_pre_hook(
            lambda m, go: seen.append(("pre", type(m).__name__, len(go)))
        )
        post = lib.nn.modules.module.register_module_full_backward_hook(
            lambda m, gi, go: seen.append(("post", type(m).__name__, len(gi), len(go)))
        )
        model = lib.nn.Sequential(lib.nn.Linear(2, 3), lib.nn.Tanh())
        model[0].register_full_backward_hook(lambda m, gi, go: seen.append(("own", "Linear")))
        model(lib.ones(1, 2, requires_grad=True)).sum().backward()
        pre.remove()
        post.remove()
        model(lib.ones(1, 2, requires_grad=True)).sum().backward()
        return seen

    assert run(kiln) == run(torch)


@needs_torch
def test_full_backward_hook_of_a_module_returning_a_dict_is_not_called_like_torch():
    def run(lib):
        class Pair(lib.nn.Module):
            def forward(self, x):
                return {"a": x * 2, "b": x * 3}

        calls = []
        module = Pair()
        module.register_full_backward_hook(lambda m, gi, go: calls.append(go))
        x = lib.ones(2, requires_grad=True)
        with pytest.warns(UserWarning, match="module output should be a Tensor or a tuple"):
            out = module(x)
        out["a"].sum().backward()
        return calls, x.grad.tolist()

    assert run(kiln) == run(torch)


@needs_torch
def test_full_backward_hook_sees_none_for_an_output_without_gradient_like_torch():
    """An output the loss does not use has no gradient: the hook gets None (not zeros), and so
    does a custom Function's backward that does not materialize gradients."""

    def run(lib):
        class Two(lib.nn.Module):
            def forward(self, a, b):
                return a * b, a + b

        seen = []
        module = Two()
        module.register_full_backward_hook(
            lambda m, gi, go: seen.append([None if g is None else g.tolist() for g in go])
        )
        a = lib.ones(2, requires_grad=True)
        first, _ = module(a, lib.full((2,), 3.0))
        first.sum().backward()

        class Split(lib.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.set_materialize_grads(False)
                return x * 2, x * 3

            @staticmethod
            def backward(ctx, g1, g2):
                seen.append(g2 is None)
                return g1 * 2

        x = lib.ones(2, requires_grad=True)
        Split.apply(x)[0].sum().backward()
        return seen, a.grad.tolist(), x.grad.tolist()

    assert run(kiln) == run(torch)


@needs_torch
def test_an_in_place_module_with_a_full_backward_hook_is_refused_like_torch():
    """Its input is the view the hook Function returns; modifying a custom Function's view in
    place is PyTorch's error (the view's history would replace the Function's backward). A
    custom Function's returned input, modified in place, likewise; under no_grad it is fine."""

    def run(lib):
        relu = lib.nn.ReLU(inplace=True)
        relu.register_full_backward_hook(lambda m, gi, go: None)
        hooked = error_of(lambda: relu(lib.ones(1, 2, requires_grad=True) * 1))

        class Same(lib.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x

            @staticmethod
            def backward(ctx, g):
                return g

        x = lib.ones(2, requires_grad=True) * 1
        returned = error_of(lambda: Same.apply(x).add_(1))
        with lib.no_grad():
            quiet = Same.apply(x).add_(1).tolist()
        return hooked[0], returned, quiet, relu(lib.ones(1, 2) * -1).tolist()

    got, want = run(kiln), run(torch)
    assert got[0] == want[0] == "RuntimeError"
    assert got[1:] == want[1:]
