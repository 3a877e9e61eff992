"""The engine's final callbacks and its eager accumulation of leaf gradients (what DDP needs)."""

from __future__ import annotations

import pytest

import kiln
from tests.oracle import needs_torch, torch


def _event_order(lib) -> list[str]:
    """Which hooks fire in which order during backward of a three-layer chain whose leaves'
    gradient accumulators were made long before (kept alive, as gradient-averaging libraries
    do by holding ``w.expand_as(w).grad_fn.next_functions[0][0]``)."""
    weights = [lib.ones(3, requires_grad=True) for _ in range(3)]
    accumulators = [w.expand_as(w).grad_fn.next_functions[0][0] for w in weights]
    assert all(type(a).__name__ == "AccumulateGrad" for a in accumulators)
    events = []
    for i, w in enumerate(weights):
        w.register_post_accumulate_grad_hook(lambda p, i=i: events.append(f"acc w{i}"))

    def queue(p):
        lib.autograd.Variable._execution_engine.queue_callback(lambda: events.append("callback"))

    weights[2].register_post_accumulate_grad_hook(queue)
    for _ in range(2):
        events.clear()
        x = lib.ones(3)
        for i, w in enumerate(weights):
            x = (x * w).tanh()
            x.register_hook(lambda g, i=i: events.append(f"grad of layer {i}"))
        x.sum().backward()
    return events


@needs_torch
def test_leaf_gradients_accumulate_as_soon_as_complete_like_torch():
    # w2's gradient is complete before the earlier layers' backward runs: its hook fires then
    assert _event_order(kiln) == _event_order(torch)
    assert _event_order(kiln).index("acc w2") < _event_order(kiln).index("grad of layer 1")


@needs_torch
def test_queued_callback_runs_once_backward_has_finished():
    events = _event_order(kiln)
    assert events[-1] == "callback" and events.count("callback") == 1
    assert events == _event_order(torch)


def test_callback_queued_by_a_callback_runs_too():
    x = kiln.ones(2, requires_grad=True)
    seen = []
    engine = kiln.autograd.Variable._execution_engine

    def first():
        seen.append("first")
        engine.queue_callback(lambda: seen.append("second"))

    x.register_post_accumulate_grad_hook(lambda p: engine.queue_callback(first))
    (x * 2).sum().backward()
    assert seen == ["first", "second"]


@needs_torch
def test_queue_callback_outside_backward_raises_like_torch():
    with pytest.raises(RuntimeError) as ours:
        kiln.autograd.Variable._execution_engine.queue_callback(lambda: None)
    with pytest.raises(RuntimeError) as theirs:
        torch.autograd.Variable._execution_engine.queue_callback(lambda: None)
    assert str(ours.value) == str(theirs.value)


@needs_torch
@pytest.mark.parametrize("returned", ["grad", "number", "none"])
def test_a_post_accumulate_grad_hook_returning_a_value_raises_like_torch(returned):
    """The hook's result was ignored; PyTorch raises (a RuntimeError for a tensor, such as the
    ``p.grad.mul_(0)`` of a one-line lambda, a TypeError for anything else but None)."""
    results = []
    for lib in (kiln, torch):
        hook = {
            "grad": lambda p: p.grad.mul_(0),
            "number": lambda p: 5,
            "none": lambda p: None,
        }[returned]
        x = lib.ones(2, requires_grad=True)
        x.register_post_accumulate_grad_hook(hook)
        try:
            (x * 2).sum().backward()
            error = None
        except (RuntimeError, TypeError) as e:
            error = (type(e).__name__, str(e))
        results.append((error, x.grad.tolist()))
    assert results[0] == results[1]
