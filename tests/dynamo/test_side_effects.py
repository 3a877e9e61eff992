"""Capture suite, part 5: Python side effects replayed after the graph, in-place tensor ops kept."""

from __future__ import annotations

import collections

import pytest

import kiln
import kiln.nn as nn
from kiln.dynamo.testing import CompileCounter
from tests.oracle import needs_torch

from .helpers import Case, assert_same, check, same_as_torch


def t(*shape):
    return kiln.randn(*shape)


class Box:
    def __init__(self, value=0, tensor=None):
        self.value = value
        self.tensor = tensor


def append_to_input_list(x, log):
    log.append(x * 2)
    return x + 1


def extend_and_pop_input_list(x, items):
    items.extend([x, x + 1])
    first = items.pop(0)
    return first


def setitem_input_list(x, items):
    items[0] = x * 3
    del items[1]
    return len(items)


def update_input_dict(x, state):
    state["last"] = x.sum()
    state["count"] = state.get("count", 0) + 1
    state.pop("drop", None)
    return x


def set_attribute_on_object(x, box):
    box.value = box.value + 1
    box.tensor = x * 2
    return box.value


def swap_attributes(x, box):
    box.value, box.tensor = box.tensor, box.value
    return x


def attribute_read_after_write(x, box):
    box.value = 10
    return x * box.value


def mutate_nested_list_in_dict(x, state):
    state["history"].append(x.mean())
    return len(state["history"])


def new_list_returned_and_stored(x, box):
    fresh = [x, x * 2]
    box.tensor = fresh
    return fresh


def inplace_tensor_ops_on_inputs(x, y):
    x.add_(y)
    y.zero_()
    return x * 2


def inplace_on_view_of_input(x):
    x[0].mul_(10)
    x[:, 1] = -1.0
    return x.sum()


def set_add_on_input(x, seen):
    seen.add(3)
    return x


def returns_of_rewards(x, rewards):
    """REINFORCE's discounted returns, built in a deque from the right."""
    running, returns = 0.0, collections.deque()
    for r in rewards[::-1]:
        running = r + 0.99 * running
        returns.appendleft(running)
    returns = kiln.tensor(returns)
    return x * (returns - returns.mean()) / (returns.std() + 1e-8)


def sliding_window_deque(x, history):
    """A bounded deque made in the function and one passed in: appends drop the oldest."""
    history.append(x * 2)
    window = collections.deque(maxlen=2)
    for i in range(4):
        window.append(x + i)
    window.appendleft(x - 1)
    window.rotate(1)
    first = window.popleft()
    window.extendleft([x * 5, x * 6])
    return sum(history) + first, window, len(window), window.maxlen, history.popleft()


CASES = [
    Case(returns_of_rewards, lambda: (t(3), [1.0, 0.0, 1.0])),
    Case(sliding_window_deque, lambda: (t(2), collections.deque([t(2), t(2)], maxlen=3))),
    Case(append_to_input_list, lambda: (t(3), [])),
    Case(extend_and_pop_input_list, lambda: (t(3), [t(3)]), graphs=1),
    Case(setitem_input_list, lambda: (t(3), [1, 2, 3]), graphs=1),
    Case(update_input_dict, lambda: (t(3), {"drop": 1, "count": 2})),
    Case(set_attribute_on_object, lambda: (t(3), Box(5))),
    Case(swap_attributes, lambda: (t(3), Box(1, t(2))), graphs=0),
    Case(attribute_read_after_write, lambda: (t(3), Box(1))),
    Case(mutate_nested_list_in_dict, lambda: (t(3), {"history": []})),
    Case(new_list_returned_and_stored, lambda: (t(3), Box())),
    Case(inplace_tensor_ops_on_inputs, lambda: (t(3), t(3))),
    Case(inplace_on_view_of_input, lambda: (t(3, 3),)),
    Case(set_add_on_input, lambda: (t(3), {1, 2}), graphs=0),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_side_effects_match_eager(case):
    check(case.fn, *case.make_args(), graphs=case.graphs, breaks=case.breaks)


COUNTER = {"calls": 0}
TOTAL = 0


def bump_global_dict(x):
    COUNTER["calls"] += 1
    return x * COUNTER["calls"] if False else x + 1


def write_global(x):
    global TOTAL
    TOTAL = TOTAL + 1
    return x * 2


def test_global_dict_mutation_is_replayed_every_call():
    COUNTER["calls"] = 0
    compiled = kiln.compile(bump_global_dict)
    for _ in range(3):
        compiled(t(2))
    assert COUNTER["calls"] == 3


def test_global_write_is_replayed_without_recompiling():
    global TOTAL
    from kiln.dynamo.testing import CompileCounter

    TOTAL = 0
    counter = CompileCounter()
    compiled = kiln.compile(write_global, backend=counter)
    for _ in range(4):
        compiled(t(2))
    assert TOTAL == 4
    assert counter.frame_count == 1


def _make_counter():
    calls = 0

    def step(x):
        nonlocal calls
        calls += 1
        return x * 2

    def read():
        return calls

    return step, read


def test_closure_cell_write_is_replayed():
    step, read = _make_counter()

    def run(x):
        return step(x) + 1

    compiled = kiln.compile(run)
    compiled(t(2))
    compiled(t(2))
    assert read() == 2


class StepCounter(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.steps = 0

    def forward(self, x):
        self.steps += 1
        return self.lin(x)


def test_module_step_counter_is_replayed_without_recompiling():
    from kiln.dynamo.testing import CompileCounter

    model = StepCounter()
    counter = CompileCounter()
    compiled = kiln.compile(model, backend=counter)
    x = t(2, 3)
    for _ in range(5):
        assert_same(compiled(x), model.lin(x))
    assert model.steps == 5
    assert counter.frame_count == 1


def test_side_effects_happen_before_a_graph_break_in_order(capsys):
    log = []

    def fn(x):
        log.append("before")
        print(len(log))
        log.append("after")
        return x

    compiled = kiln.compile(fn)
    compiled(t(2))
    assert log == ["before", "after"]
    assert capsys.readouterr().out.strip() == "1"


BACKENDS = ["eager", "aot_eager", "inductor"]


def _unsqueeze_input(x):
    x.unsqueeze_(0)
    return x * 2


def _transpose_input_after_view_write(x):
    v = x.view(-1)
    v[1] = 7
    x.t_()
    return v


def _reshape_intermediate_in_place(x):
    y = x * 2
    held = [y]
    y.unsqueeze_(0).t_()
    y.transpose_(0, 1)
    y.squeeze_(0)
    z = y * 1
    z.unsqueeze_(-1).swapdims_(0, 1)
    return held[0] + 1, y.shape, z


@pytest.mark.parametrize("backend", BACKENDS)
def test_inplace_view_methods_under_compile(backend):
    for fn, args in (
        (_unsqueeze_input, (kiln.ones(3),)),
        (_transpose_input_after_view_write, (kiln.zeros(2, 2),)),
        (_reshape_intermediate_in_place, (kiln.arange(3.0),)),
    ):
        eager_args = [a.clone() for a in args]
        compiled_args = [a.clone() for a in args]
        expected = fn(*eager_args)
        actual = kiln.compile(fn, backend=backend)(*compiled_args)
        assert_same(actual, expected)
        assert_same(compiled_args, eager_args)  # inputs change shape as they do eagerly


def test_inplace_view_of_an_intermediate_needs_no_break():
    check(_reshape_intermediate_in_place, kiln.arange(3.0), graphs=1, breaks=0)
    check(_unsqueeze_input, kiln.ones(3), graphs=1, breaks=1)


def test_inplace_view_keeps_gradients():
    x1 = kiln.arange(3.0).requires_grad_()
    x2 = x1.detach().clone().requires_grad_()
    out1 = kiln.compile(_reshape_intermediate_in_place, backend="aot_eager")(x1)
    out2 = _reshape_intermediate_in_place(x2)
    (out1[0].sum() + out1[2].pow(2).sum()).backward()
    (out2[0].sum() + out2[2].pow(2).sum()).backward()
    assert_same(x1.grad, x2.grad)


@needs_torch
def test_inplace_view_methods_match_torch():
    def snippet(lib):
        xx = lib.zeros(2, 2)
        r = lib.compile(_transpose_input_after_view_write, backend="aot_eager")(xx)
        y = lib.ones(3)
        s = lib.compile(_unsqueeze_input, backend="aot_eager")(y)
        return r, xx, s, y.shape

    same_as_torch(snippet)


def _make_step_counter():
    count = 0

    def step(x):
        nonlocal count
        count += 1
        return x * 2 + 1, count

    return step


def test_nonlocal_write_of_the_compiled_function_is_replayed():
    step = _make_step_counter()
    counter = CompileCounter()
    compiled = kiln.compile(step, backend=counter)
    twin = _make_step_counter()
    for _ in range(3):
        assert_same(compiled(kiln.ones(2)), twin(kiln.ones(2)))
    assert step.__closure__[0].cell_contents == 3
    assert counter.frame_count == 1


@needs_torch
def test_zero_grad_drops_the_old_gradients_before_the_graph_runs():
    import weakref

    from tests.oracle import torch

    def step(model, opt, x):
        opt.zero_grad(set_to_none=True)
        return model(x).tanh().sum()

    model = nn.Linear(4, 3)
    opt = kiln.optim.SGD(model.parameters(), lr=0.1)
    model(t(2, 4)).sum().backward()
    old = weakref.ref(model.weight.grad)
    alive_in_graph = []

    def backend(gm, example_inputs):
        def run(*args):
            alive_in_graph.append(old() is not None)
            return gm.forward(*args)

        return run

    x = t(2, 4)
    out = kiln.compile(step, backend=backend)(model, opt, x)
    # the captured zero_grad's writes happen before the graph, as in eager code (the last
    # step's gradients are not alive while a training step's forward runs)
    assert alive_in_graph == [False]
    assert model.weight.grad is None and model.bias.grad is None
    tmodel = torch.nn.Linear(4, 3)
    with torch.no_grad():
        tmodel.weight.copy_(torch.tensor(model.weight.detach().numpy()))
        tmodel.bias.copy_(torch.tensor(model.bias.detach().numpy()))
    expected = step(tmodel, torch.optim.SGD(tmodel.parameters(), lr=0.1), torch.tensor(x.numpy()))
    assert abs(out.item() - expected.item()) < 1e-5
