"""Compiled functions whose outputs are views (of intermediates, of inputs, of each other) give
what PyTorch's eager mode gives: values, dtypes, ``requires_grad``, whether a ``grad_fn`` is
there, and the gradients that flow back through each output.

Every case runs under each built-in backend with ``fullgraph=True`` (nothing may fall back to
eager), on the same input values as PyTorch. The gradient check gives every differentiable
output its own random cotangent, so a gradient that goes to the wrong output, or is summed
wrongly over an expanded one, shows.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import kiln
from tests.oracle import assert_close, needs_torch, to_torch, torch

pytestmark = needs_torch

BACKENDS = ["eager", "aot_eager", "inductor"]


def _flat(out) -> list:
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _compare(fn, inputs: list, backend: str | None, same_layout: bool = False) -> None:
    """Run ``fn(lib, *inputs)`` compiled under kiln (``backend`` None: kiln's eager mode) and
    eagerly under PyTorch, then compare; ``same_layout``: also whether each output is a view,
    and its strides."""
    import torch

    kiln_inputs = [x.detach().clone().requires_grad_(x.requires_grad) for x in inputs]
    torch_inputs = [to_torch(x) for x in inputs]
    compiled = lambda *a: fn(kiln, *a)  # noqa: E731
    if backend is not None:
        compiled = kiln.compile(compiled, backend=backend, fullgraph=True)
    got = _flat(compiled(*kiln_inputs))
    expected = _flat(fn(torch, *torch_inputs))
    assert len(got) == len(expected)
    for i, (g, e) in enumerate(zip(got, expected)):
        assert_close(g, e)
        assert g.requires_grad == e.requires_grad, f"output {i}: requires_grad differs"
        assert (g.grad_fn is None) == (e.grad_fn is None), f"output {i}: grad_fn presence differs"
        if same_layout:
            assert (g._base is None) == (e._base is None), f"output {i}: view or not differs"
            assert g.stride() == e.stride(), f"output {i}: strides {g.stride()} != {e.stride()}"
    rng = np.random.default_rng(0)
    pairs = [(g, e) for g, e in zip(got, expected) if e.requires_grad]
    if not pairs:
        return
    cotangents = [rng.uniform(-1, 1, tuple(e.shape)).astype(np.float32) for _, e in pairs]
    kiln.autograd.backward(
        [g for g, _ in pairs],
        [kiln.tensor(c, dtype=g.dtype) for c, (g, _) in zip(cotangents, pairs)],
    )
    torch.autograd.backward(
        [e for _, e in pairs],
        [torch.from_numpy(c).to(e.dtype) for c, (_, e) in zip(cotangents, pairs)],
    )
    for k, (x, t) in enumerate(zip(kiln_inputs, torch_inputs)):
        if t.requires_grad:
            assert (x.grad is None) == (t.grad is None), f"input {k}: grad presence differs"
            if t.grad is not None:
                assert_close(x.grad, t.grad)


def _rand(*shape, requires_grad=True, seed=0):
    values = np.random.default_rng(seed).uniform(-1, 1, shape).astype(np.float32)
    return kiln.tensor(values, requires_grad=requires_grad)


# ------------------------------------------------------------------------------ issue cases


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    "before",
    [
        pytest.param(lambda lib, a: a * a, id="mul"),
        pytest.param(lambda lib, a: lib.exp(a), id="exp"),
        pytest.param(lambda lib, a: a + 1, id="add"),
        pytest.param(lambda lib, a: lib.sin(a), id="sin"),
    ],
)
def test_an_expanded_intermediate_gets_its_gradient_summed_over_the_broadcast(before, backend):
    import torch

    a_values = [[1.0, 2.0, 3.0]]
    weights = [[1.0, 10, 100], [1000, 1e4, 1e5]]
    grads = []
    for lib, compile_fn in ((kiln, lambda f: kiln.compile(f, backend=backend)), (torch, None)):
        a = lib.tensor(a_values, requires_grad=True)
        fn = lambda a, lib=lib: before(lib, a).expand(2, 3)  # noqa: E731
        out = (compile_fn(fn) if compile_fn else fn)(a)
        (out * lib.tensor(weights)).sum().backward()
        grads.append(a.grad)
    assert_close(grads[0], grads[1])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    "view",
    [
        pytest.param(lambda y: y.view(2), id="view"),
        pytest.param(lambda y: y.squeeze(-1), id="squeeze"),
    ],
)
def test_views_of_a_vector_matrix_product_keep_requires_grad(view, backend):
    inputs = [_rand(5), _rand(5, 2, seed=1)]
    _compare(lambda lib, a, d: (view(a @ d), a @ d), inputs, backend, same_layout=True)

    def both_from_one_product(lib, a, d):
        y = a @ d
        return view(y), y

    _compare(both_from_one_product, inputs, backend, same_layout=True)


# ------------------------------------------------------------------------------ every view kind

VIEWS = {
    "view": lambda lib, y: y.view(-1),
    "reshape": lambda lib, y: y.reshape(4, 3),
    "flatten": lambda lib, y: y.flatten(),
    "squeeze": lambda lib, y: y.unsqueeze(0).squeeze(0),
    "unsqueeze": lambda lib, y: y.unsqueeze(1),
    "t": lambda lib, y: y.t(),
    "transpose": lambda lib, y: y.transpose(0, 1),
    "permute": lambda lib, y: y.unsqueeze(0).permute(2, 0, 1),
    "movedim": lambda lib, y: y.movedim(0, 1),
    "slice": lambda lib, y: y[1:, ::2],
    "select": lambda lib, y: y[1],
    "narrow": lambda lib, y: y.narrow(1, 1, 2),
    "diagonal": lambda lib, y: y.diagonal(),
    "expand": lambda lib, y: y.expand(2, 3, 4),
    "expand_as": lambda lib, y: y[:1].expand_as(y),
    "broadcast_to": lambda lib, y: lib.broadcast_to(y, (2, 3, 4)),
    "as_strided": lambda lib, y: y.as_strided((2, 2), (1, 4), 1),
    "unfold": lambda lib, y: y.unfold(1, 2, 1),
    "chain": lambda lib, y: y.t()[1:].unsqueeze(0).expand(2, 3, 3),
    "split": lambda lib, y: y.split(2, dim=1),
    "chunk": lambda lib, y: y.chunk(3),
    "unbind": lambda lib, y: y.unbind(1),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("view", VIEWS)
def test_a_view_of_an_intermediate_matches_eager(view, backend):
    # AOT decomposes unfold into a gather of the windows: a copy, not a view
    _compare(lambda lib, x: VIEWS[view](lib, lib.sin(x) * 2), [_rand(3, 4)], backend,
             same_layout=view != "unfold")  # fmt: skip


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("view", ["view", "t", "slice", "select", "expand", "as_strided"])
def test_a_view_of_an_intermediate_without_grad_matches_eager(view, backend):
    _compare(lambda lib, x: VIEWS[view](lib, lib.sin(x) * 2), [_rand(3, 4, requires_grad=False)],
             backend, same_layout=True)  # fmt: skip


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("view", ["view", "t", "slice", "select", "expand", "as_strided"])
def test_a_view_of_an_input_matches_eager(view, backend):
    _compare(lambda lib, x: (VIEWS[view](lib, x), x * 3), [_rand(3, 4)], backend, same_layout=True)


# ------------------------------------------------------------------------------ aliasing mixes


@pytest.mark.parametrize("backend", BACKENDS)
def test_several_views_of_one_intermediate(backend):
    def f(lib, x):
        y = lib.exp(x)
        return y.t(), y, y[1:].expand(2, 2, 4), y.view(2, 6), y.diagonal()

    _compare(f, [_rand(3, 4)], backend, same_layout=True)


@pytest.mark.parametrize("backend", BACKENDS)
def test_outputs_aliasing_inputs_and_intermediates_together(backend):
    def f(lib, x, w):
        y = x @ w
        return x, x.t(), y, y[0], w.view(-1), (x * 2).expand(2, 3, 4)

    _compare(f, [_rand(3, 4), _rand(4, 2, seed=1)], backend, same_layout=True)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_view_of_an_input_that_needs_no_grad_next_to_one_that_does(backend):
    def f(lib, x, w):
        return x.t(), x[0] * w, w.unsqueeze(0)

    _compare(f, [_rand(3, 4, requires_grad=False), _rand(4, seed=1)], backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_detached_view_next_to_the_tensor_it_comes_from(backend):
    def f(lib, x):
        y = x * 3
        return y, y.detach()[1:], y.detach().t()

    _compare(f, [_rand(3, 4)], backend, same_layout=True)


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_integer_view_needs_no_grad(backend):
    def f(lib, x):
        return x.argmax(-1).view(-1, 1), (x * 2).max(-1).values.unsqueeze(0)

    _compare(f, [_rand(3, 4)], backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_transposed_result_that_is_no_view(backend):
    # the output is laid out like x.t(); the incoming gradient is contiguous
    _compare(lambda lib, x: (x.t() * 2, lib.relu(x.t())), [_rand(3, 4)], backend)


# ------------------------------------------------------------------------------ in-place, then views


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_view_of_an_input_mutated_in_place(backend):
    import torch

    def f(lib, x, w):
        x.add_(1)
        return x.view(-1), x.t() * w

    results = []
    for lib, compile_fn in ((kiln, lambda g: kiln.compile(g, backend=backend)), (torch, None)):
        x = lib.tensor(np.arange(12.0, dtype=np.float32).reshape(3, 4))
        w = lib.tensor(np.linspace(-1, 1, 3, dtype=np.float32), requires_grad=True)
        g = lambda x, w, lib=lib: f(lib, x, w)  # noqa: E731
        flat, scaled = (compile_fn(g) if compile_fn else g)(x, w)
        scaled.backward(lib.ones(4, 3))
        results.append((x, flat, scaled, w.grad, flat._base is x))
    for got, expected in zip(results[0], results[1]):
        if isinstance(expected, bool):
            assert got == expected
        else:
            assert_close(got, expected)
            assert got.requires_grad == expected.requires_grad


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("returned", ["reshape", "reshape-of-view", "view-then-reshape"])
def test_a_reshape_of_an_input_mutated_in_place_stays_a_view_of_it(backend, returned):
    # the inductor keeps ``reshape`` whole in its trace: the returned reshape must still alias
    # the real input, so a write through it reaches the caller's tensor, as in eager
    import torch

    def f(lib, a):
        if returned == "reshape":
            a[0] = 5.0
            return (a.reshape(4),)
        b = a.view(2, 2)
        b[0] = b[1] * 10
        c = a.reshape(4) if returned == "reshape-of-view" else b.reshape(-1)
        c.neg_()
        return b, c

    results = []
    for lib, compile_fn in ((kiln, lambda g: kiln.compile(g, backend=backend)), (torch, None)):
        a = lib.arange(4.0).reshape(2, 2) if returned == "reshape" else lib.arange(4.0)
        g = lambda a, lib=lib: f(lib, a)  # noqa: E731
        outs = (compile_fn(g) if compile_fn else g)(a)
        outs[-1].add_(1000)
        results.append([a, *outs, *[o._base is a for o in outs]])
    for got, expected in zip(results[0], results[1]):
        if isinstance(expected, bool):
            assert got == expected
        else:
            assert_close(got, expected)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_view_of_a_non_leaf_input_mutated_in_place(backend):
    import torch

    def f(lib, x):
        x.mul_(x.detach() + 1)
        return x[1:], x.t()

    grads = []
    for lib, compile_fn in ((kiln, lambda g: kiln.compile(g, backend=backend)), (torch, None)):
        leaf = lib.tensor(np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3),
                          requires_grad=True)  # fmt: skip
        x = leaf * 2
        g = lambda x, lib=lib: f(lib, x)  # noqa: E731
        tail, transposed = (compile_fn(g) if compile_fn else g)(x)
        assert tail.requires_grad and tail.grad_fn is not None
        (tail * 3).sum().backward(retain_graph=True)
        (transposed * lib.arange(6.0).view(3, 2)).sum().backward()
        grads.append((x, tail, transposed, leaf.grad))
    assert_close(list(grads[0]), list(grads[1]))


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_intermediate_written_through_a_view_then_returned_with_views(backend):
    def f(lib, x):
        y = x * 2
        y[0].mul_(3)
        return y, y[1:], y[0]

    _compare(f, [_rand(3, 4)], backend, same_layout=True)


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_in_place_op_on_a_returned_view_reaches_its_base(backend):
    import torch

    results = []
    for lib, compile_fn in ((kiln, lambda g: kiln.compile(g, backend=backend)), (torch, None)):
        x = lib.tensor(np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4), requires_grad=True)
        g = lambda x: (x * 2).view(-1)  # noqa: E731
        flat = (compile_fn(g) if compile_fn else g)(x)
        flat.mul_(lib.arange(12.0))  # eager rebases the history of the intermediate it views
        (flat * lib.arange(12.0)).sum().backward()
        results.append((flat, x.grad))
    assert_close(list(results[0]), list(results[1]))


# ------------------------------------------------------------------------------ custom Functions

CUSTOM_FORWARDS = {
    # a view of an intermediate made inside forward: an expanded (overlapping) output whose
    # gradient arrives dense
    "expand_intermediate": (lambda x: (x * 1).expand(2, 3, 4), lambda g: g.sum(0) * 2),
    # a view of the Function's input, with a backward that is not the view's
    "transpose_input": (lambda x: x.t(), lambda g: g.t() * 2),
}


def _custom_function(lib, name: str):
    forward, backward = CUSTOM_FORWARDS[name]

    class Doubling(lib.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return forward(x)

        @staticmethod
        def backward(ctx, g):
            return backward(g)

    return Doubling


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", CUSTOM_FORWARDS)
def test_a_custom_function_returning_a_view_keeps_its_own_backward(name, backend):
    import torch

    functions = {lib.__name__: _custom_function(lib, name) for lib in (kiln, torch)}
    _compare(lambda lib, x: functions[lib.__name__].apply(x * 3), [_rand(3, 4)], backend)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_a_view_of_an_input_returned_under_no_grad_for_a_new_size(backend):
    """Grad mode off around the call: the output view is replayed untracked, for the sizes of
    each call (the second call's new size makes them symbolic)."""
    compiled = kiln.compile(lambda x: (x.view(-1), x[0]), backend=backend)
    with kiln.no_grad(), torch.no_grad():
        for shape in ((5, 4), (5, 3), (2, 3)):
            values = np.arange(float(np.prod(shape))).reshape(shape)
            got = compiled(kiln.tensor(values, requires_grad=True))
            x = torch.tensor(values, requires_grad=True)
            want = (x.view(-1), x[0])
            for g, w in zip(got, want):
                assert g.requires_grad == w.requires_grad
                np.testing.assert_array_equal(g.detach().numpy(), w.detach().numpy())


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_boolean_mask_on_a_later_dim_of_an_input_that_needs_grad_compiles(backend):
    # its (3, u0) result is laid out with stride max(1, u0); laying out its gradient asked
    # whether that equals u0, which inductor refused (the graph ran with the eager backend)
    mask = kiln.tensor([True, False, True, False])
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        _compare(lambda lib, a: a[:, mask if lib is kiln else to_torch(mask)], [_rand(3, 4)],
                 backend)  # fmt: skip
