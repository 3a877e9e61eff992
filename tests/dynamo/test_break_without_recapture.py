"""A graph break the root frame meets at a call refused before it had any effect (``print``,
``loss.backward()``, ``.item()``, ``kiln.compiler.graph_break()``, an opaque C function) is
made from where the translator stands: the frame is evaluated once, not captured a second
time up to a planned break. Results, side effects, gradients and break counts are eager's;
refusals after effects, and breaks inside inlined calls, still capture again."""

from __future__ import annotations

import contextlib
import logging

import numpy as np
import pytest

import kiln
from kiln.dynamo import symbolic_convert

from .helpers import check


@contextlib.contextmanager
def _counting_root_captures():
    """How many times a root frame was evaluated, by code name."""
    runs: dict[str, int] = {}
    original = symbolic_convert.InstructionTranslator.run

    def run(self):
        runs[self.code.co_name] = runs.get(self.code.co_name, 0) + 1
        return original(self)

    symbolic_convert.InstructionTranslator.run = run
    try:
        yield runs
    finally:
        symbolic_convert.InstructionTranslator.run = original


def _x():
    return kiln.tensor(np.linspace(-1.0, 2.0, 12, dtype=np.float32).reshape(3, 4))


def print_between(x):
    a = x * 2
    print("between", a.shape)
    return a + 1


def item_in_expression(x):
    y = x.sin() + x.sum().item()  # the stack holds x.sin() at the break
    return y * 2


def graph_break_then_more(x):
    a = x.cos()
    kiln.compiler.graph_break()
    b = a.exp()
    return a, b


def opaque_call_with_stack(x):
    return x.relu() + len(repr(x.shape)) + float(np.float32(x.sum().tolist()))


@kiln.compiler.disable
def _eager_helper(t):
    return t * 3


_log = logging.getLogger("tests.dynamo.break_without_recapture")


def disabled_call_between(x):
    a = x.tanh()
    b = _eager_helper(a)
    return a + b


def log_between(x):
    a = x.exp()
    _log.warning("step %d", 1)
    return a - 1


def backward_in_step(w, x):
    loss = (w * x).sum()
    loss.backward()
    return loss.detach(), w.grad.clone()


@pytest.mark.parametrize(
    "fn, breaks",
    [(print_between, 1), (item_in_expression, 1), (graph_break_then_more, 1)],
    ids=lambda v: getattr(v, "__name__", str(v)),
)
def test_clean_breaks_capture_the_frame_once(fn, breaks):
    with _counting_root_captures() as runs:
        check(fn, _x(), graphs=None, breaks=breaks, calls=2)
    assert runs[fn.__name__] == 1, runs


@pytest.mark.parametrize("fn", [disabled_call_between, log_between], ids=lambda f: f.__name__)
def test_disabled_functions_and_logging_calls_capture_the_frame_once(fn, caplog):
    with _counting_root_captures() as runs:
        check(fn, _x(), graphs=None, breaks=None, calls=2)
    assert runs[fn.__name__] == 1, runs


def test_opaque_call_inside_an_expression():
    with _counting_root_captures() as runs:
        check(opaque_call_with_stack, _x(), graphs=None, breaks=None, calls=2)
    assert runs["opaque_call_with_stack"] == 1, runs


def test_backward_in_a_step_gives_eager_gradients_and_captures_once():
    def run(fn):
        w = kiln.ones(3, 4, requires_grad=True)
        return fn(w, _x()), w.grad

    (loss, grad_seen), grad = run(backward_in_step)
    with _counting_root_captures() as runs:
        compiled = kiln.compile(backward_in_step, backend="eager")
        (c_loss, c_grad_seen), c_grad = run(compiled)
    assert runs["backward_in_step"] == 1, runs
    for a, b in ((c_loss, loss), (c_grad_seen, grad_seen), (c_grad, grad)):
        np.testing.assert_allclose(a.numpy(), b.numpy())


def _pairs(x):
    yield x + 1
    yield x * 2


def generator_across_print(x):
    g = _pairs(x)
    a = next(g)
    print("between")
    return a + next(g)


def test_a_clean_break_whose_values_cannot_be_rebuilt_runs_the_frame_eagerly():
    """Making the break fails (a generator made in the capture outlives it): the frame runs
    eagerly, as when the break was planned, instead of the error escaping."""
    counter, report = check(generator_across_print, _x(), graphs=0, breaks=1, calls=2)
    assert "cannot be rebuilt" in str(report)


def test_a_break_inside_an_inlined_call_still_captures_again():
    def inner(x):
        print("inner")
        return x + 1

    def outer(x):
        y = x * 3
        return inner(y) - 1

    with _counting_root_captures() as runs:
        check(outer, _x(), graphs=None, breaks=None, calls=1)
    assert runs["outer"] == 2, runs
