"""Capture suite, part 4: graph breaks, resume functions, eager fallbacks and exceptions."""

from __future__ import annotations

import time

import pytest

import kiln

from .helpers import Case, check
from .plain_asserts import assert_fails


def t(*shape):
    return kiln.randn(*shape)


def _log(*args):
    print(*args)


def _helper_with_print(x):
    y = x * 2
    print("inside helper")
    return y + 1


def _helper_item(x):
    return x * x.sum().item()


def _scale_two(a, b):
    return a * 2 + b


# ---------------------------------------------------------------- breaks that resume
def print_in_middle(x):
    y = x + 1
    print("y computed")
    return y * 2


def item_call(x):
    s = x.sum().item()
    return x * s


def tolist_call(x):
    values = x.tolist()
    return x + len(values)


def data_dependent_if(x):
    if x.sum() > 0:
        return x * 2
    return x - 1


def data_dependent_if_false_branch(x):
    y = x * 3
    if (y < -100).any():
        y = y + 1
    return y


def time_call_is_opaque(x):
    y = x * 2
    time.time()
    return y + 1


def break_with_many_live_locals(x, y):
    a = x + 1
    b = y * 2
    c = "label"
    unused = x * 0
    print(c)
    return a + b, c, unused


def break_with_values_on_stack(x):
    return _scale_two(x + 1, _log("arg") or x)


def break_in_inlined_function(x):
    return _helper_with_print(x) * 3


def break_in_inlined_method(x, obj):
    return obj.run(x) - 1


def item_in_inlined_function(x):
    return _helper_item(x + 1) + 1


def two_breaks(x):
    x = x + 1
    print("first")
    x = x * 2
    print("second")
    return x - 3


def break_then_branch_on_constant(x, flag):
    y = x.exp()
    print("between")
    if flag:
        return y
    return -y


def and_or_on_tensor(x):
    return x.sum() > 0 and x.mean() < 1


def break_in_closure_frame(x):
    k = 3.0

    def inner(y):
        return y * k

    print("closure")
    return inner(x)


def mutation_before_break(x, items):
    items.append(x * 2)
    print("mutated")
    return len(items)


def break_returns_tensor_from_print_arg(x):
    y = x * 2
    _log(y.shape)
    return y


# ---------------------------------------------------------------- frames that run eagerly
def break_inside_loop(x):
    for i in range(3):
        print(i)
        x = x + i
    return x


def break_inside_with(x):
    with kiln.no_grad():
        print("inside")
        y = x * 2
    return y


def break_inside_try(x):
    try:
        v = x.sum().item()
    except RuntimeError:
        v = 0.0
    return x + v


def try_except_without_break(x):
    try:
        y = x * 2
    except ValueError:
        y = x
    return y


def generator_function(x):
    yield x * 2
    yield x * 3


def consume_generator(x):
    return list(generator_function(x))


def loop_over_data_dependent_while(x):
    while x.sum() < 10:
        x = x + 5
    return x


# ---------------------------------------------------------------- exceptions propagate
def raises_value_error(x):
    if x.dim() == 1:
        raise ValueError(f"expected 2-d input, got {x.dim()}-d")
    return x


def raises_in_kiln_op(x, y):
    return x @ y


def key_error_on_dict(x, d):
    return x * d["missing"]


def index_error_on_list(x):
    values = [x]
    return values[3]


def raises_after_break(x):
    print("before raising")
    raise KeyError("late")


def boolean_mask_indexing(x):
    y = x * 2
    return y[y > 0].sum()


def nonzero_call(x):
    idx = (x > 0).nonzero()
    return idx.shape[0] + x


def int_of_tensor(x):
    return x * int(x.sum() > 0)


class _Runner:
    def run(self, x):
        print("runner")
        return x * 4


CASES = [
    Case(print_in_middle, lambda: (t(3),), graphs=2, breaks=1),
    Case(item_call, lambda: (t(3),), graphs=2, breaks=1),
    Case(tolist_call, lambda: (t(3),), graphs=1, breaks=1),
    Case(data_dependent_if, lambda: (t(4).abs(),), graphs=2, breaks=1),
    Case(data_dependent_if_false_branch, lambda: (t(4),), graphs=1, breaks=1),
    Case(time_call_is_opaque, lambda: (t(3),), graphs=2, breaks=1),
    Case(break_with_many_live_locals, lambda: (t(3), t(3)), graphs=2, breaks=1),
    Case(break_with_values_on_stack, lambda: (t(3),), graphs=2, breaks=2),
    Case(break_in_inlined_function, lambda: (t(3),), graphs=3, breaks=2),
    Case(break_in_inlined_method, lambda: (t(3), _Runner()), graphs=2, breaks=2),
    Case(item_in_inlined_function, lambda: (t(3),), graphs=4, breaks=2),
    Case(two_breaks, lambda: (t(3),), graphs=3, breaks=2),
    Case(break_then_branch_on_constant, lambda: (t(3), False), graphs=2, breaks=1),
    Case(and_or_on_tensor, lambda: (t(3),), graphs=None, breaks=None),
    Case(break_in_closure_frame, lambda: (t(3),), graphs=1, breaks=1),
    Case(mutation_before_break, lambda: (t(3), [1]), graphs=1, breaks=1),
    Case(break_returns_tensor_from_print_arg, lambda: (t(3),), graphs=1, breaks=2),
    Case(break_inside_loop, lambda: (t(3),), graphs=0, breaks=1),
    Case(break_inside_with, lambda: (t(3),), graphs=1, breaks=1),
    Case(break_inside_try, lambda: (t(3),), graphs=0, breaks=1),
    Case(try_except_without_break, lambda: (t(3),), graphs=1, breaks=0),
    Case(consume_generator, lambda: (t(3),), graphs=1, breaks=0),
    Case(loop_over_data_dependent_while, lambda: (t(3),), graphs=1, breaks=2),
    Case(raises_value_error, lambda: (t(3),), graphs=0, breaks=1),
    Case(raises_in_kiln_op, lambda: (t(2, 3), t(2, 3)), graphs=0, breaks=1),
    Case(assert_fails, lambda: (t(3),), graphs=0, breaks=1),
    Case(key_error_on_dict, lambda: (t(3), {"a": 1}), graphs=0, breaks=1),
    Case(index_error_on_list, lambda: (t(3),), graphs=0, breaks=1),
    Case(raises_after_break, lambda: (t(3),), graphs=0, breaks=2),
    # data-dependent sizes stay in the graph (an unbacked size, no break)
    Case(boolean_mask_indexing, lambda: (t(5),), graphs=1, breaks=0),
    Case(nonzero_call, lambda: (t(5),), graphs=1, breaks=0),
    Case(int_of_tensor, lambda: (t(5),), graphs=2, breaks=1),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_graph_break_matches_eager(case):
    check(case.fn, *case.make_args(), graphs=case.graphs, breaks=case.breaks)


def test_generator_function_compiled_directly_runs_eagerly():
    compiled = kiln.compile(generator_function)
    x = t(3)
    out = list(compiled(x))
    assert len(out) == 2
    assert (out[1] - x * 3).abs().max().item() == 0.0


def test_print_output_is_produced_each_call(capsys):
    compiled = kiln.compile(print_in_middle)
    compiled(t(2))
    compiled(t(2))
    assert capsys.readouterr().out.count("y computed") == 2


def test_resume_function_is_reused_across_calls():
    from kiln.dynamo.testing import CompileCounter

    counter = CompileCounter()
    compiled = kiln.compile(two_breaks, backend=counter)
    for _ in range(5):
        compiled(t(3))
    assert counter.frame_count == 3


def test_data_dependent_branch_takes_both_paths_correctly():
    compiled = kiln.compile(data_dependent_if)
    pos, neg = t(4).abs() + 0.1, -(t(4).abs() + 0.1)
    assert bool((compiled(pos) - pos * 2).abs().max() < 1e-6)
    assert bool((compiled(neg) - (neg - 1)).abs().max() < 1e-6)
    assert bool((compiled(pos) - pos * 2).abs().max() < 1e-6)
