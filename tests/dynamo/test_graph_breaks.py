"""Capture suite, part 4: graph breaks, resume functions, eager fallbacks and exceptions."""

from __future__ import annotations

import functools
import logging
import time

import numpy as np
import pytest

import kiln
from kiln.dynamo.testing import CompileCounter
from tests.oracle import needs_torch, torch

from .helpers import Case, assert_same, check, two_breaks
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


def test_unsupported_inside_capture_still_breaks_the_graph():
    """The evaluator's own ``Unsupported`` is now a RuntimeError: a break must not be taken for
    an error of the user's code (a ``try/except RuntimeError`` around it stays a break)."""

    def fn(x):
        try:
            y = x * 2
            print("inside try")
        except RuntimeError:
            y = x * 100
        return y + 1

    check(fn, kiln.ones(2), graphs=0, breaks=1)


_logger = logging.getLogger("graph_break_logging_tests")


def _logs_in_the_middle(x):
    y = x + 1
    _logger.info("step %d", 3)
    return y.sin()


def test_logger_call_is_one_graph_break(caplog):
    with caplog.at_level(logging.INFO, logger=_logger.name):
        check(_logs_in_the_middle, kiln.ones(2), graphs=2, breaks=1)
    # only the user's logger: kiln's own artifacts are not this test's business
    said = [r.getMessage() for r in caplog.records if r.name == _logger.name]
    assert said == ["step 3"] * 3  # eager + two calls
    with caplog.at_level(logging.INFO, logger=_logger.name):  # (at WARNING it is dropped)
        report = kiln._dynamo.explain(_logs_in_the_middle)(kiln.ones(2))
    assert report.break_reasons[0].reason == "call to logging.Logger.info"


def _helper_that_logs(x):
    _logger.debug("inside helper")
    return x * 3


def _calls_helper_that_logs(x):
    return _helper_that_logs(x + 1) - 1


def test_logger_call_inside_a_helper_keeps_the_helper_compiled(caplog):
    """The helper is compiled on its own (its ``x * 3`` is a graph), not run eagerly."""
    with caplog.at_level(logging.DEBUG, logger=_logger.name):
        counter, _ = check(_calls_helper_that_logs, kiln.ones(2), graphs=3, breaks=2)
    assert counter.op_count == 3  # add | mul | sub: nothing left to eager code


def _logs_with_the_root_logger(x):
    logging.debug("root says %s", "hi")
    return x.cos()


def test_a_log_call_at_a_disabled_level_is_dropped_and_guarded(caplog):
    with caplog.at_level(logging.INFO, logger=_logger.name):
        check(_calls_helper_that_logs, kiln.ones(2), graphs=1, breaks=0)
        check(_logs_with_the_root_logger, kiln.ones(2), graphs=1, breaks=0)
    compiled = kiln.compile(_calls_helper_that_logs)
    with caplog.at_level(logging.INFO, logger=_logger.name):
        compiled(kiln.ones(2))
    assert not [r for r in caplog.records if r.name == _logger.name]
    with caplog.at_level(logging.DEBUG, logger=_logger.name):  # the guard sees the new level
        got = compiled(kiln.ones(2))
    said = [r.getMessage() for r in caplog.records if r.name == _logger.name]
    assert said == ["inside helper"]
    np.testing.assert_array_equal(got.numpy(), _calls_helper_that_logs(kiln.ones(2)).numpy())


@kiln.compiler.disable
def _numpy_total(x):
    return x.numpy().sum()


def numpy_scalar_after_break(x):
    a = x.sin()
    s = _numpy_total(a)
    return a * float(s) + np.float32(0.5)


def test_numpy_scalars_are_constants():
    check(numpy_scalar_after_break, kiln.randn(3), graphs=2, breaks=1)


def break_with_inner_function(x):
    scale = x.shape[0]

    def inner(y):
        return y * scale

    total = inner(x) + inner(x * 2)
    print("inner done")
    return total + scale, inner(x)


def inner_functions_share_cells_across_a_break(x):
    acc = []

    def add(v):
        acc.append(v)
        return len(acc)

    n = add(x * 2)
    print("added", n)
    add(x + 1)
    m = x.sum()

    def later():
        return m * 3

    print("again")
    return sum(acc), later(), n


def returns_a_closure(x):
    k = x.shape[-1]

    def scale(y):
        return y * k

    print("made")
    return scale


def test_graph_breaks_in_functions_with_inner_functions():
    check(break_with_inner_function, kiln.randn(3), graphs=2, breaks=1)
    check(inner_functions_share_cells_across_a_break, kiln.randn(2), graphs=3, breaks=2)


def test_a_closure_made_before_a_break_is_returned():
    fn = kiln.compile(returns_a_closure, backend=CompileCounter())(kiln.randn(2, 4))
    assert fn.__qualname__ == "returns_a_closure.<locals>.scale"
    assert_same(fn(kiln.ones(2)), kiln.full((2,), 4.0))


def closure_called_after_a_break(x, k):
    acc = [x]

    def add(v):
        acc.append(v * k)

    with kiln.no_grad():
        add(x)
        print("mid")
        add(x + 1)
    return sum(acc), len(acc)


@pytest.mark.parametrize("backend", ["eager", "inductor"])
def test_a_local_function_called_after_breaks_uses_this_calls_closure(backend):
    compiled = kiln.compile(closure_called_after_a_break, backend=backend)
    x = kiln.randn(2)
    for k in (1, 2, 3, 4, 5):
        assert_same(compiled(x, k), closure_called_after_a_break(x, k))


def dead_cell_before_a_break(lib, x, y):
    """``acc`` (a cell: ``bump`` writes it) depends on ``y`` and is never read after the
    break: ``y`` gets no gradient from a backward through the result."""
    v = x * 2
    acc = y

    def bump(t):
        nonlocal acc
        acc = acc + t

    bump(v)
    lib._dynamo.graph_break()
    return v


def live_cell_across_a_break(lib, x, y):
    """``acc`` is written before the break and read, and written again, after it."""
    acc = y * 1

    def bump(t):
        nonlocal acc
        acc = acc + t
        return acc

    bump(x)
    lib._dynamo.graph_break()
    bump(x * 3)
    return acc * 2


@needs_torch
@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
@pytest.mark.parametrize("fn", [dead_cell_before_a_break, live_cell_across_a_break])
def test_gradients_through_closure_cells_at_a_break_match_pytorch(fn, backend):
    compiled = kiln.compile(lambda x, y: fn(kiln, x, y), backend=backend)
    values = np.arange(6.0).reshape(2, 3)
    got_x, got_y = (kiln.tensor(values, requires_grad=True) for _ in range(2))
    want_x, want_y = (torch.tensor(values, requires_grad=True) for _ in range(2))
    got = compiled(got_x, got_y)
    want = fn(torch, want_x, want_y)
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy())
    got.sum().backward()
    want.sum().backward()
    for g, w in ((got_x.grad, want_x.grad), (got_y.grad, want_y.grad)):
        assert (g is None) == (w is None), (g, w)
        if w is not None:
            np.testing.assert_allclose(g.numpy(), w.numpy())


def _closure_runner():
    """``run`` reads its free variable ``acc``; ``bump`` writes the same cell."""
    acc = kiln.zeros(3)

    def bump(t):
        nonlocal acc
        acc = acc + t

    def run(fn, x):
        fn(x)
        return acc * 1

    return run, bump


def test_a_function_passed_in_that_shares_the_frames_cell_is_guarded():
    run, bump = _closure_runner()
    eager_run, eager_bump = _closure_runner()
    compiled = kiln.compile(run, backend="eager")
    x = kiln.ones(3)
    # bump writes run's own cell; the other bump a cell of its own (a guard tells them apart)
    pairs = [(bump, eager_bump), (_closure_runner()[1],) * 2, (bump, eager_bump)]
    for fn, eager_fn in pairs:
        assert_same(compiled(fn, x), eager_run(eager_fn, x))


def _lookup(d, key):
    if key not in d:
        raise KeyError(key)
    return d[key]


def _limited(xs):
    for x in xs:
        if x.shape[0] > 2:
            raise ValueError("too long")
        yield x * 2


def exceptions_caught_in_the_graph(x, d):
    try:
        v = d["missing"]
    except KeyError as e:
        v = x * len(str(e))
    finally:
        v = v + 1
    try:
        w = _lookup(d, "other")
    except (TypeError, KeyError) as e:
        w = x * len(e.args)
    else:
        w = w * 0
    out = []
    try:
        for y in _limited([x, x, kiln.ones(3)]):
            out.append(y)
    except ValueError as err:
        out.append(x * 0 + len(str(err)))
    try:
        if x.dim() != 2:  # (an ``assert`` here would be rewritten by pytest)
            raise AssertionError("needs a matrix")
    except AssertionError:
        out.append(x - 1)
    return v, w, out


def test_exceptions_raised_and_caught_stay_in_one_graph():
    check(exceptions_caught_in_the_graph, kiln.randn(2), {"a": 1})


def exception_escapes(x):
    try:
        raise RuntimeError("boom")
    except ValueError:
        return x


def test_an_uncaught_exception_still_reaches_the_caller():
    check(exception_escapes, kiln.randn(2), graphs=0, breaks=1)


def leaves_made_inside(lib, data):
    """Leaves that require grad, made inside the compiled code: what is computed from them
    must carry their history (a backward inside the function reaches them)."""
    x = lib.tensor(data, requires_grad=True)
    w = lib.ones(3, requires_grad=True)
    y = (x.cumprod(0) * w).sum()
    y.backward()
    z = x * 2
    return x.grad, w.grad, z, z.requires_grad, z.grad_fn is None, x.is_leaf


@needs_torch
@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
def test_a_leaf_made_with_requires_grad_inside_compiled_code_gets_its_gradients(backend):
    data = [1.5, -2.0, 0.5]
    counter = CompileCounter()
    got = kiln.compile(lambda: leaves_made_inside(kiln, data), backend=backend)()
    kiln.compile(lambda: leaves_made_inside(kiln, data), backend=counter)()
    want = leaves_made_inside(torch, data)
    for g, w in zip(got[:3], want[:3]):
        np.testing.assert_allclose(g.detach().numpy(), w.detach().numpy(), rtol=1e-6)
    assert got[3:] == want[3:]
    assert counter.frame_count >= 1  # the rest is still captured around the breaks


def numpy_copy_across_a_break(x):
    y = x * 2
    values = y.detach().numpy().copy()  # breaks at .numpy(): ``values.copy`` is resumed with
    return y + 1, values


def test_a_bound_numpy_method_on_the_resumed_stack_does_not_recompile():
    # a new bound method every call: guarded by its object's type and its name, not identity
    counter = CompileCounter()
    compiled = kiln.compile(numpy_copy_across_a_break, backend=counter)
    for i in range(12):
        out, values = compiled(kiln.ones(3) * i)
        np.testing.assert_array_equal(values, np.full(3, 2.0 * i, np.float32))
        assert_same(out, kiln.full((3,), 2.0 * i + 1))
    assert counter.frame_count == 2


def _unpacks(packed):
    padded, lengths = kiln.nn.utils.rnn.pad_packed_sequence(packed, batch_first=True)
    return padded + 1, lengths


def test_packed_sequence_reaches_kiln_functions_as_itself():
    """A namedtuple argument (a ``PackedSequence``) reaches a kiln function as its own type:
    passed as a plain tuple, ``pad_packed_sequence`` failed on ``.data`` and the break was
    reported as the user's error; the one break left is the real one (it reads the batch sizes'
    values), and the results are eager's."""
    rnn = kiln.nn.utils.rnn
    packed = rnn.pack_padded_sequence(
        kiln.randn(3, 4, 2), kiln.tensor([4, 2, 3]), batch_first=True, enforce_sorted=False
    )
    report = kiln._dynamo.explain(_unpacks)(packed)
    (reason,) = report.break_reasons
    assert "AttributeError" not in reason.message and reason.category != "user error"
    compiled = kiln.compile(_unpacks)
    for got, want in zip(compiled(packed), _unpacks(packed)):
        np.testing.assert_array_equal(got.numpy(), want.numpy())


@functools.lru_cache(maxsize=16)
def _inverse_frequencies(dim: int, base: float = 10000.0) -> tuple:
    return tuple(1.0 / base ** (i / dim) for i in range(0, dim, 2))


def _rotary_angles(x):
    freqs = x.new_tensor(_inverse_frequencies(x.shape[-1]))
    return x[..., ::2] * freqs


def test_a_memoized_helper_is_captured_not_a_break():
    check(_rotary_angles, kiln.randn(3, 8))


@kiln.compiler.disable
def _opaque_scale() -> float:
    return 2.5


def _tensor_method_across_a_break(x):
    y = x * 2
    return y.add(_opaque_scale()).sin()


def test_a_tensor_method_waiting_on_the_stack_at_a_break_resumes_compiled():
    # ``y.add`` is on the stack when the call to the disabled function breaks the graph: the
    # resumed code gets the bound method, a new object each call, and still hits its cache
    counter, _ = check(_tensor_method_across_a_break, kiln.randn(4), graphs=2, breaks=1)
    assert counter.op_count == 3  # mul | add, sin: nothing left to eager code


def _critic(lib):
    return lib.nn.Sequential(lib.nn.Linear(3, 8), lib.nn.Tanh(), lib.nn.Linear(8, 1))


def _gradient_penalty_step(lib, critic, real, fake, alpha):
    """WGAN-GP's critic loss: a gradient taken with create_graph=True, then differentiated
    again by the step's backward."""
    interp = (alpha * real + (1 - alpha) * fake).requires_grad_(True)
    out = critic(interp)
    (grads,) = lib.autograd.grad(out, interp, lib.ones_like(out), create_graph=True)
    penalty = ((grads.norm(2, dim=1) - 1) ** 2).mean()
    loss = critic(fake).mean() - critic(real).mean() + 10 * penalty
    loss.backward()
    return loss.detach()


def _hessian_vector_step(lib, critic, x):
    loss = critic(x).pow(2).mean()
    loss.backward(create_graph=True)
    first = [p.grad for p in critic.parameters()]
    (sum((g * 0.1).sum() for g in first)).backward()
    return loss.detach()


@needs_torch
@pytest.mark.filterwarnings("ignore:Using backward\\(\\) with create_graph")  # PyTorch's
@pytest.mark.parametrize("program", [_gradient_penalty_step, _hessian_vector_step])
def test_a_gradient_taken_with_create_graph_is_differentiated_again_compiled(program):
    """The graph ending at ``autograd.grad``/``backward`` with ``create_graph=True`` runs with
    the eager ops, so the second backward goes through it (a compiled region refuses double
    backward, as torch.compile's does; the other graphs stay compiled)."""
    rng = np.random.default_rng(0)
    data = [rng.standard_normal((4, 3)).astype(np.float32) for _ in range(2)]
    data.append(rng.uniform(size=(4, 1)).astype(np.float32))
    torch.manual_seed(0)
    theirs, ours = _critic(torch), _critic(kiln)
    for mine, its in zip(ours.parameters(), theirs.parameters()):
        mine.data.copy_(kiln.tensor(its.detach().numpy()))
    n_args = 3 if program is _gradient_penalty_step else 1
    expected = program(torch, theirs, *map(torch.tensor, data[:n_args]))
    got = kiln.compile(program)(kiln, ours, *map(kiln.tensor, data[:n_args]))
    np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-5, atol=1e-6)
    for mine, its in zip(ours.parameters(), theirs.parameters()):
        np.testing.assert_allclose(
            mine.grad.detach().numpy(), its.grad.detach().numpy(), rtol=1e-4, atol=1e-6
        )


def _literal_with_a_break(kind: str, size: int = 40):
    """A function returning a display of more than 30 items with a graph break among them:
    CPython builds it empty and adds the items one by one (LIST_APPEND, MAP_ADD, SET_ADD,
    DICT_UPDATE), so the resume function gets the half-built container as an argument."""
    items = {
        "list": [f"x + {i}" for i in range(size)] + ["_log_and_double(x)", "x - 1"],
        "dict": [f"'k{i}': x + {i}" for i in range(size)] + ["'b': _log_and_double(x)", "'z': x"],
        "set": [str(i) for i in range(size)] + ["int(_log_and_double(x).sum() > 1e9)", "99"],
        "dict_merge": ["**d", "'b': _log_and_double(x)", "**d", "'z': x - 1"],
    }[kind]
    brackets = "[]" if kind == "list" else "{}"
    source = f"def display(x, d):\n    return {brackets[0]}{', '.join(items)}{brackets[1]}\n"
    namespace = {"_log_and_double": _log_and_double}
    exec(source, namespace)
    return namespace["display"]


def _log_and_double(x):
    _log("doubling")
    return x * 2


@pytest.mark.parametrize("kind", ["list", "dict", "set", "dict_merge"])
def test_a_break_inside_a_long_display_keeps_the_items_added_after_it(kind):
    # the items added in the resume function were dropped: 40 of 42 list items came back
    check(_literal_with_a_break(kind), t(3), {"a": t(2)}, graphs=None, breaks=None)


class _Doubler(kiln.nn.Module):
    def forward(self, x):
        return x * 2


class _BreaksThenCallsSuper(_Doubler):
    def forward(self, x):
        print("a graph break with a value on the stack")
        return super().forward(x) + 1


class _MasksDataThenCallsSuper(kiln.nn.Linear):
    """PixelCNN's masked convolution, linear: ``.data`` masked in place, then the parent's
    forward by zero-argument ``super()``."""

    def __init__(self):
        super().__init__(3, 2)
        self.register_buffer("mask", kiln.tensor([[1.0, 0.0, 0.0], [1.0, 1.0, 0.0]]))

    def forward(self, x):
        self.weight.data *= self.mask
        return super().forward(x)


@pytest.mark.parametrize("module_class", [_BreaksThenCallsSuper, _MasksDataThenCallsSuper])
def test_zero_argument_super_after_a_graph_break_finds_self(module_class):
    # a resume function took the stack slots first: a zero-argument super() (which reads the
    # frame's first local, and names no ``self`` so ``self`` was not live) saw a stack value
    kiln.manual_seed(0)
    eager, compiled = module_class(), module_class()
    compiled.load_state_dict(eager.state_dict())
    run = kiln.compile(compiled)
    x = kiln.randn(4, 3)
    for _ in range(2):
        assert_same(run(x), eager(x))
