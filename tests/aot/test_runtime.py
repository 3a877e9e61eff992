"""The runtime wrapper: a compiled region behaves like an autograd Function inside eager code,
picks the inference path when nothing needs grad, and finds its cache entry cheaply."""

from __future__ import annotations

import weakref

import numpy as np
import pytest

import kiln
from kiln.aot import aot_function
from kiln.aot.backend import aot_module_simplified


class CountingCompiler:
    """Runs graphs eagerly and remembers every graph it was given."""

    def __init__(self):
        self.graphs = []

    def __call__(self, gm, example_inputs):
        self.graphs.append(gm)
        return gm.forward


def _leaf(*shape):
    return kiln.randn(*shape).requires_grad_()


def _grads_of(fn, inputs, loss):
    for t in inputs:
        t.grad = None
    loss(fn(*inputs)).backward()
    return [None if t.grad is None else t.grad.numpy().copy() for t in inputs]


def _assert_same_grads(fn, inputs, loss):
    expected = _grads_of(fn, inputs, loss)
    got = _grads_of(aot_function(fn, CountingCompiler()), inputs, loss)
    for g, e in zip(got, expected):
        assert (g is None) == (e is None)
        if e is not None:
            np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6)


def test_unused_differentiable_outputs_get_zero_gradients():
    def f(x, w):
        h = x @ w
        return h.sin(), h.cos(), h.exp()

    _assert_same_grads(f, [_leaf(3, 4), _leaf(4, 2)], lambda outs: outs[1].sum())


def test_outputs_that_do_not_require_grad_are_not_attached_to_the_graph():
    def f(x, y):
        return x * y, y + 1, (x > 0), x.detach() * 2

    x, y = _leaf(3), kiln.randn(3)
    prod, plus, mask, detached = aot_function(f, CountingCompiler())(x, y)
    assert prod.requires_grad and prod.grad_fn.name() == "CompiledFunctionBackward"
    for t in (plus, mask, detached):
        assert not t.requires_grad and t.grad_fn is None
    assert mask.dtype is kiln.bool


def test_gradients_flow_to_eager_producers_of_the_inputs():
    w = _leaf(4)
    compiled = aot_function(lambda a, b: (a * b).tanh(), CountingCompiler())
    a = w.exp()  # eager history before the region
    out = compiled(a, w * 3)
    (out.sum() * 2).backward()  # and eager code after it
    got = w.grad.numpy().copy()
    w.grad = None
    ((w.exp() * (w * 3)).tanh().sum() * 2).backward()
    np.testing.assert_allclose(got, w.grad.numpy(), rtol=1e-5)


def test_backward_twice_without_retain_graph_raises_like_eager():
    compiled = aot_function(lambda t: (t.exp() * t).sum(), CountingCompiler())
    y = compiled(_leaf(4))
    y.backward()
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        y.backward()


def test_modifying_a_saved_input_before_backward_raises_like_eager():
    def f(a, w):
        return (a * w).sum()

    for fn in (f, aot_function(f, CountingCompiler())):
        a, w = kiln.randn(3), _leaf(3)
        y = fn(a, w)
        with kiln.no_grad():
            a.add_(1)  # the gradient of w needs a's old value
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            y.backward()


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_writing_into_a_saved_output_before_backward_raises_like_eager(backend):
    """``exp`` saves its result, which the compiled region also returns: the inductor's graph
    returns that buffer as two tensors (the output and the saved value), so the user's
    ``y.add_(1)`` moved only the output's version and the backward silently read the new
    values (a wrong gradient); the node now keeps an alias of the output's own storage."""
    kiln.dynamo.reset()
    compiled = kiln.compile(lambda t: (t * 2).exp(), backend=backend)
    x = _leaf(3)
    y = compiled(x)
    y.add_(1)
    with pytest.raises(RuntimeError) as info:
        y.sum().backward()
    assert str(info.value).startswith(  # PyTorch's words for a compiled region's output
        "one of the variables needed for gradient computation has been modified by an inplace "
        "operation: [kiln.FloatTensor [3]], which is output 0 of CompiledFunction, is at "
        "version 1; expected version 0 instead. Hint: enable anomaly detection"
    )
    y = compiled(x)
    (y * 3).sum().backward()  # untouched, the gradient is exp's
    np.testing.assert_allclose(x.grad.numpy(), 6 * np.exp(2 * x.detach().numpy()), 1e-6)


class BoxedBackward:
    """A backward compiler whose graphs take their arguments boxed (as the inductor's do): each
    call records, once it has computed and emptied the list, whether something else still holds
    each saved activation (a saved tensor that is not a view of ``inputs``, whose owners keep
    them anyway)."""

    def __init__(self, *inputs):
        self.inputs = {t.data_ptr() for t in inputs}
        self.held_elsewhere = []

    def __call__(self, gm, example_inputs):
        spy = self
        names = [n.name for n in gm.graph.nodes if n.op == "placeholder"]

        class Graph:
            def boxed_call(self, args: list) -> tuple:
                refs = [
                    weakref.ref(a)
                    for a, name in zip(args, names)
                    if not name.startswith("tangents") and a.data_ptr() not in spy.inputs
                ]
                outs = gm.forward(*args)
                args.clear()
                spy.held_elsewhere.append([r() is not None for r in refs])
                return outs

        return Graph()


def _boxed_region(x):
    """A region whose backward reads activations of ``x`` no user code sees, compiled with
    ``BoxedBackward``."""
    boxed = BoxedBackward(x)
    compiled = aot_function(lambda t: (t.sin() * t.cos()).sum(), CountingCompiler(), boxed)
    return compiled, boxed


def test_a_freeing_backward_hands_the_saved_tensors_over_to_a_boxed_graph():
    x = _leaf(5)
    compiled, boxed = _boxed_region(x)
    compiled(x).backward()
    assert boxed.held_elsewhere[-1] and not any(boxed.held_elsewhere[-1])
    np.testing.assert_allclose(x.grad.numpy(), np.cos(2 * x.detach().numpy()), rtol=1e-5)


def test_retain_graph_keeps_the_saved_tensors_for_the_next_backward():
    x = _leaf(5)
    compiled, boxed = _boxed_region(x)
    y = compiled(x)
    y.backward(retain_graph=True)
    assert boxed.held_elsewhere[-1] and all(boxed.held_elsewhere[-1])  # the node holds them
    y.backward()
    assert not any(boxed.held_elsewhere[-1])
    np.testing.assert_allclose(x.grad.numpy(), 2 * np.cos(2 * x.detach().numpy()), rtol=1e-5)
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        y.backward()


def test_a_backward_called_directly_keeps_what_it_saved():
    x = _leaf(5)
    compiled, boxed = _boxed_region(x)
    y = compiled(x)
    with kiln.no_grad():
        (gx,) = y.grad_fn(kiln.tensor(1.0))  # outside a backward pass: nothing is freed
    assert all(boxed.held_elsewhere[-1])
    y.backward()
    np.testing.assert_allclose(x.grad.numpy(), gx.numpy(), rtol=1e-6)


def test_plain_compiled_backwards_are_called_with_positional_arguments():
    calls = []

    def compiler(gm, example_inputs):
        def run(*args):
            calls.append(len(args))
            return gm.forward(*args)

        return run

    compiled = aot_function(lambda x: (x.sin() * x.cos()).sum(), compiler)
    x = _leaf(5)
    compiled(x).backward()
    assert len(calls) == 2  # the forward, then the backward with its saved tensors and tangent
    np.testing.assert_allclose(x.grad.numpy(), np.cos(2 * x.detach().numpy()), rtol=1e-5)


@pytest.mark.parametrize("why", ["no_grad", "no_input_requires_grad"])
def test_inference_path_traces_only_the_forward(why):
    counter = CountingCompiler()
    compiled = aot_function(lambda x, w: (x @ w).relu().sum(0), counter)
    x = kiln.randn(2, 3)
    w = kiln.randn(3, 4).requires_grad_(why == "no_grad")
    if why == "no_grad":
        with kiln.no_grad():
            out = compiled(x, w)
    else:
        out = compiled(x, w)
    assert len(counter.graphs) == 1 and not out.requires_grad
    placeholders = [n.name for n in counter.graphs[0].graph.nodes if n.op == "placeholder"]
    assert placeholders == ["primals_1", "primals_2"]
    np.testing.assert_allclose(out.numpy(), (x @ w.detach()).relu().sum(0).numpy(), rtol=1e-6)


def test_kiln_compile_under_no_grad_compiles_only_a_forward():
    counter = CountingCompiler()
    model = kiln.nn.Sequential(kiln.nn.Linear(3, 4), kiln.nn.GELU())

    def backend(gm, example_inputs):
        return aot_module_simplified(gm, example_inputs, counter, counter)

    compiled = kiln.compile(model, backend=backend)
    with kiln.no_grad():
        out = compiled(kiln.randn(2, 3))
    assert len(counter.graphs) == 1 and not out.requires_grad
    compiled(kiln.randn(2, 3)).sum().backward()  # grad mode on: a new entry with a backward
    assert len(counter.graphs) == 3 and model[0].weight.grad is not None


def test_entries_are_found_by_signature():
    counter = CountingCompiler()
    compiled = aot_function(lambda x, s: (x * s).sum(), counter)
    compiled(_leaf(3), 2.0)
    compiled(_leaf(3), 2.0)
    assert len(counter.graphs) == 2  # one forward + backward pair
    compiled(_leaf(3), 3.0)  # a different constant is a different graph
    compiled(_leaf(4), 2.0)  # so is a different shape
    assert len(counter.graphs) == 6
    out = compiled(_leaf(3), s=2.0)  # keyword arguments take the flattening path
    assert len(counter.graphs) == 8 and out.requires_grad


def test_tensor_only_calls_hit_generated_guards():
    counter = CountingCompiler()
    compiled = aot_function(lambda x, y: x * y + 1, counter)
    a, b = kiln.randn(2, 3), kiln.randn(2, 3)
    compiled(a, b)
    compiled(a, b.t().contiguous().t())  # other strides: a new entry
    compiled(a, b.to(kiln.float64))  # other dtype: a new entry
    with kiln.no_grad():
        compiled(a, b)  # grad mode is part of the signature
    assert len(counter.graphs) == 4
    compiled(kiln.randn(2, 3), kiln.randn(2, 3))
    assert len(counter.graphs) == 4


def test_captured_inference_graph_runs_the_compiled_forward_directly():
    """With no mutation, random op or aliasing output, a dynamo graph (which returns a tuple)
    needs nothing from the wrapper per call: the runner is the compiled forward itself."""
    counter = CountingCompiler()
    seen = []

    def backend(gm, example_inputs):
        runner = aot_module_simplified(gm, example_inputs, counter, counter)
        seen.append(runner)
        return runner

    kiln.compile(lambda x: (x + 1,), backend=backend)(kiln.randn(3))
    assert seen[0] == counter.graphs[0].forward


def test_keyword_arguments_in_another_order_reach_the_right_parameters():
    compiled = aot_function(lambda x, y: x - 2 * y, CountingCompiler())
    a, b = kiln.randn(3), kiln.randn(3)
    np.testing.assert_allclose(compiled(x=a, y=b).numpy(), (a - 2 * b).numpy(), rtol=1e-6)
    np.testing.assert_allclose(compiled(y=a, x=b).numpy(), (b - 2 * a).numpy(), rtol=1e-6)


def test_aot_module_reads_the_current_parameters_each_call():
    kiln.manual_seed(0)
    model = kiln.nn.Sequential(kiln.nn.Linear(3, 4), kiln.nn.ReLU(), kiln.nn.Linear(4, 1))
    compiled = kiln.aot.aot_module(model, CountingCompiler())
    x = kiln.randn(5, 3)
    opt = kiln.optim.SGD(model.parameters(), lr=0.5)
    for _ in range(2):
        opt.zero_grad()
        compiled(x).sum().backward()
        grads = [p.grad.numpy().copy() for p in model.parameters()]
        opt.zero_grad()
        model(x).sum().backward()
        for g, p in zip(grads, model.parameters()):
            np.testing.assert_allclose(g, p.grad.numpy(), rtol=1e-5, atol=1e-6)
        opt.step()
