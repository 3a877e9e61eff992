"""Capture suite, part 6: the Python an optimizer is made of — iteration tools over lists and dict
views, dicts keyed by tensors (``self.state[p]``), default dicts, ``Tensor.grad`` read and written,
and tensors made from Python data that captured code then updates in place."""

from __future__ import annotations

import itertools
from collections import OrderedDict, defaultdict

import pytest

import kiln
from kiln.dynamo.testing import CompileCounter

from .helpers import Case, assert_same, check


def t(*shape):
    return kiln.randn(*shape)


# ---------------------------------------------------------------------- iteration tools


def chain_of_list_and_dict_views(x, hooks, extra):
    total = x
    for scale in itertools.chain(hooks.values(), extra):
        total = total * scale
    return total


def chain_from_iterable_of_lists(x, groups):
    return sum(itertools.chain.from_iterable(groups), x)


def islice_leaves_the_rest_of_the_iterator(x):
    it = iter([x, x + 1, x + 2, x + 3])
    head = list(itertools.islice(it, 2))
    rest = list(it)
    return head[1] * 10 + rest[0] + len(rest)


def islice_with_start_and_step(x):
    return [v * 2 for v in itertools.islice([x, x + 1, x + 2, x + 3, x + 4], 1, None, 2)]


def product_pairwise_repeat(x):
    out = x
    for a, b in itertools.product([1, 2], [3]):
        out = out + a * b
    for a, b in itertools.pairwise([1.0, 2.0, 4.0]):
        out = out * (b - a)
    return [out + r for r in itertools.repeat(1, 2)]


def zip_longest_fills(x, ys):
    return [a if b is None else a + b for a, b in itertools.zip_longest([x, x, x], ys)]


def map_and_filter(x, ys):
    doubled = list(map(lambda v: v * 2, ys))
    kept = list(filter(lambda v: v.shape[0] == 3, [x, *doubled]))
    nonzero = list(filter(None, [0, 1, 2]))
    return kept, nonzero


def dict_views_iterate_and_stay_live(x, d):
    keys = d.keys()
    d["new"] = x * 3
    total = x
    for k, v in d.items():
        total = total + v if k != "skip" else total
    return total, len(keys), "new" in keys, sorted(keys)


def dict_view_escapes(x, d):
    return x + 1, d.keys(), d.items()


CASES = [
    Case(chain_of_list_and_dict_views, lambda: (t(3), OrderedDict(a=2.0, b=0.5), [3.0])),
    Case(chain_from_iterable_of_lists, lambda: (t(3), [[t(3)], [t(3), t(3)]])),
    Case(islice_leaves_the_rest_of_the_iterator, lambda: (t(3),)),
    Case(islice_with_start_and_step, lambda: (t(3),)),
    Case(product_pairwise_repeat, lambda: (t(3),)),
    Case(zip_longest_fills, lambda: (t(3), [t(3)])),
    Case(map_and_filter, lambda: (t(3), [t(3), t(2)])),
    Case(dict_views_iterate_and_stay_live, lambda: (t(3), {"skip": t(3), "a": t(3)})),
    Case(dict_view_escapes, lambda: (t(3), {"a": 1, "b": 2})),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_iteration_matches_eager_in_one_graph(case):
    check(case.fn, *case.make_args(), graphs=case.graphs, breaks=case.breaks)


def test_a_returned_dict_view_is_a_real_view():
    d = {"a": 1}
    keys = kiln.compile(dict_view_escapes, backend=CompileCounter())(t(2), d)[1]
    assert type(keys) is type({}.keys())
    d["b"] = 2
    assert list(keys) == ["a", "b"]


def test_hooks_added_later_are_seen_through_the_dict_key_guard():
    hooks = OrderedDict()
    counter = CompileCounter()
    compiled = kiln.compile(chain_of_list_and_dict_views, backend=counter, fullgraph=True)
    x = t(3)
    assert_same(compiled(x, hooks, [2.0]), x * 2.0)
    hooks[0] = 5.0
    assert_same(compiled(x, hooks, [2.0]), x * 5.0 * 2.0)
    assert counter.frame_count == 2


# ---------------------------------------------------------------------- dicts keyed by tensors


def update_state_of_each_param(params, state):
    for p in params:
        s = state[p]
        s["buf"].mul_(0.5).add_(p)
    return len(state)


def lazily_create_state(params, state):
    for p in params:
        entry = state[p]
        if not entry:
            entry["buf"] = kiln.zeros_like(p)
            entry["step"] = kiln.tensor(0.0)
        entry["step"] += 1
        entry["buf"].add_(p)
    return state


def state_items_loop(params, state):
    total = 0
    for p, s in state.items():
        total = total + (p * s["scale"]).sum()
    return total, p in state


# keys are compared by identity: each fresh copy of the arguments is a new cache entry
def test_dict_keyed_by_tensors_is_read_and_updated_in_place():
    params = [t(3), t(2, 2)]
    state = {p: {"buf": kiln.ones_like(p)} for p in params}
    check(update_state_of_each_param, params, state, calls=1)


def test_dict_items_with_tensor_keys_iterate_in_order():
    params = [t(3), t(3)]
    state = {params[1]: {"scale": 2.0}, params[0]: {"scale": 3.0}}
    check(state_items_loop, params, state, calls=1)


def test_the_same_tensor_keys_hit_the_cache():
    params = [t(3), t(2, 2)]
    state = {p: {"buf": kiln.zeros_like(p)} for p in params}
    counter = CompileCounter()
    compiled = kiln.compile(update_state_of_each_param, backend=counter, fullgraph=True)
    for _ in range(3):
        compiled(params, state)
    assert counter.frame_count == 1
    for p in params:
        assert_same(state[p]["buf"], p * 1.75)


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
def test_defaultdict_state_is_created_then_found(backend):
    """The first call creates each entry (the default factory runs, new tensors are stored);
    the second finds them (recompiling once); later calls hit the cache."""
    params = [t(3), t(4)]
    eager_state, compiled_state = defaultdict(dict), defaultdict(dict)
    counter = CompileCounter(backend)
    compiled = kiln.compile(lazily_create_state, backend=counter, fullgraph=True)
    for _ in range(4):
        lazily_create_state(params, eager_state)
        result = compiled(params, compiled_state)
        assert result is compiled_state and type(result) is defaultdict
        assert list(compiled_state) == params  # the keys are the parameters themselves
        for p in params:
            assert_same(compiled_state[p], eager_state[p])
    assert counter.frame_count == 2
    assert compiled_state.default_factory is dict


def test_a_different_tensor_key_recompiles():
    a, b = t(3), t(3)
    counter = CompileCounter()
    compiled = kiln.compile(update_state_of_each_param, backend=counter)
    state_a = {a: {"buf": kiln.zeros(3)}}
    compiled([a], state_a)
    compiled([a], state_a)
    assert counter.frame_count == 1
    state_b = {b: {"buf": kiln.zeros(3)}}
    compiled([b], state_b)
    assert_same(state_b[b]["buf"], b)
    assert counter.frame_count == 2
    # the same dict with another parameter of the same shape: no stale lookup
    with pytest.raises(KeyError):
        compiled([b], state_a)


def test_equal_scalar_tensors_are_different_keys():
    a, b = kiln.tensor(1.0), kiln.tensor(1.0)
    compiled = kiln.compile(update_state_of_each_param, backend=CompileCounter())
    state = {a: {"buf": kiln.zeros(())}, b: {"buf": kiln.ones(())}}
    compiled([b], state)
    assert_same(state[a]["buf"], kiln.zeros(()))
    assert_same(state[b]["buf"], kiln.tensor(1.5))
    # a dict whose first key is ``b`` now: the key guard must compare by identity
    swapped = {b: {"buf": kiln.zeros(())}, a: {"buf": kiln.ones(())}}
    compiled([b], swapped)
    assert_same(swapped[b]["buf"], kiln.tensor(1.0))


# ---------------------------------------------------------------------- Tensor.grad


def sgd_like(params, lr):
    with kiln.no_grad():
        for p in params:
            if p.grad is None:
                continue
            p.add_(p.grad, alpha=-lr)
            p.grad = None
    return [p.grad is None for p in params]


def zero_grads_in_place(params):
    for p in params:
        if p.grad is not None:
            if p.grad.grad_fn is None:
                p.grad.requires_grad_(False)
            p.grad.zero_()


def assign_grad(p, g):
    p.grad = g * 2
    return p.grad + 1


def assign_grad_of_wrong_shape(p):
    p.grad = kiln.zeros(p.shape[0] + 1)
    return p


def _leaves(*shapes, grads=True):
    out = []
    for shape in shapes:
        p = kiln.randn(*shape, requires_grad=True)
        if grads:
            p.grad = kiln.randn(*shape)
        out.append(p)
    return out


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
def test_grads_are_read_as_inputs_and_cleared_after_the_graph(backend):
    params = _leaves((3,), (2, 2))
    params[1].grad = None
    expected = [p.detach().clone() for p in params]
    expected[0] -= 0.1 * params[0].grad
    counter = CompileCounter(backend)
    result = kiln.compile(sgd_like, backend=counter, fullgraph=True)(params, 0.1)
    assert result == [True, True]
    for p, e in zip(params, expected):
        assert p.grad is None and p.is_leaf and p.requires_grad
        assert_same(p.detach(), e)
    assert counter.frame_count == 1


def test_grad_none_and_grad_present_are_separate_entries():
    compiled = kiln.compile(sgd_like, backend=CompileCounter())
    entries = compiled._kiln_cache.entries
    with_grad, without = _leaves((3,)), _leaves((3,), grads=False)
    compiled(with_grad, 0.1)  # clears the grad
    compiled(with_grad, 0.1)  # grad is None now: another entry
    compiled(without, 0.1)
    assert len(entries) == 2
    p = with_grad[0]
    p.grad = kiln.ones(3)
    before = p.detach().clone()
    compiled(with_grad, 0.1)
    assert_same(p.detach(), before - 0.1)
    assert p.grad is None
    assert len(entries) == 2


def test_zero_grad_in_place_keeps_the_grad_tensors():
    params = _leaves((3,), (4,))
    grads = [p.grad for p in params]
    counter = CompileCounter()
    kiln.compile(zero_grads_in_place, backend=counter, fullgraph=True)(params)
    for p, g in zip(params, grads):
        assert p.grad is g
        assert_same(g, kiln.zeros(g.shape))
    assert counter.frame_count == 1


def test_grad_assigned_in_compiled_code_is_read_back():
    (p,) = _leaves((3,), grads=False)
    g = t(3)
    compiled = kiln.compile(assign_grad, backend=CompileCounter(), fullgraph=True)
    assert_same(compiled(p, g), g * 2 + 1)
    assert_same(p.grad, g * 2)


def test_grad_of_the_wrong_shape_raises_like_eager():
    (p,) = _leaves((3,), grads=False)
    with pytest.raises(RuntimeError, match=r"attempting to assign a gradient of size .\[4\]."):
        kiln.compile(assign_grad_of_wrong_shape, backend=CompileCounter())(p)


# ---------------------------------------------------------------------- fresh tensors


def counter_from_python_data(x):
    step = kiln.tensor(0.0)
    step += 1
    return step, x * step


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
def test_a_tensor_made_from_python_data_is_new_on_every_call(backend):
    compiled = kiln.compile(counter_from_python_data, backend=CompileCounter(backend))
    x = t(3)
    first, _ = compiled(x)
    second, scaled = compiled(x)
    assert first is not second
    assert_same(first, kiln.tensor(1.0))
    assert_same(second, kiln.tensor(1.0))
    assert_same(scaled, x)
