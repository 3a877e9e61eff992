"""``register_multi_grad_hook``, tensor hooks on passes with targets, and
``allow_mutation_on_saved_tensors``, each against PyTorch's behaviour."""

from __future__ import annotations

import pytest

import kiln
from tests.oracle import needs_torch, torch

pytestmark = needs_torch


def _record_all(lib):
    """The gradients each 'all' hook call sees (None or the list of values), per pass."""
    a = lib.tensor([1.0, 2.0], requires_grad=True)
    b = lib.tensor([3.0, 4.0], requires_grad=True)
    c = a * b
    d = a * b
    calls = []
    lib.autograd.graph.register_multi_grad_hook(
        (a, b, c, d), lambda grads: calls.append([None if g is None else g.tolist() for g in grads])
    )
    c.sum().backward(retain_graph=True)
    c.sum().backward(inputs=(a,), retain_graph=True)
    (c * d).sum().backward(inputs=(c,))
    return calls


def test_all_mode_waits_for_the_gradients_each_pass_computes():
    assert _record_all(kiln) == _record_all(torch)


def test_all_mode_refuses_a_leaf_in_a_grad_call():
    for lib in (kiln, torch):
        a = lib.ones(2, requires_grad=True)
        b = a * 2
        lib.autograd.graph.register_multi_grad_hook((a, b), print)
        with pytest.raises(RuntimeError, match="A leaf node was passed"):
            lib.autograd.grad(b.sum(), (a,))


def _record_any(lib):
    a = lib.tensor([1.0, 2.0], requires_grad=True)
    b = lib.tensor([3.0, 4.0], requires_grad=True)
    frozen = lib.tensor([1.0, 1.0])
    out = (a * 2 + b * 3).sum()
    calls = []
    handle = lib.autograd.graph.register_multi_grad_hook(
        (a, b, frozen), lambda g: calls.append(g.tolist()), mode="any"
    )
    out.backward(retain_graph=True)
    out.backward(retain_graph=True)
    handle.remove()
    out.backward()
    return calls


def test_any_mode_calls_once_per_pass_and_handle_removes_it():
    assert _record_any(kiln) == _record_any(torch)


def test_unknown_mode_and_frozen_tensor_in_all_mode_are_refused():
    for lib in (kiln, torch):
        a = lib.ones(2, requires_grad=True)
        with pytest.raises(ValueError, match="Expects mode to be one of"):
            lib.autograd.graph.register_multi_grad_hook((a,), print, mode="some")
        with pytest.raises((RuntimeError, AssertionError)):
            lib.autograd.graph.register_multi_grad_hook((a, lib.ones(2)), print)


def _hook_log(lib):
    log = []
    a = lib.ones(2, requires_grad=True)
    b = lib.ones(2, requires_grad=True)
    a.register_hook(lambda g: log.append("a") or g * 10)
    b.register_hook(lambda g: log.append("b"))
    c = a * b
    c.register_hook(lambda g: log.append("c"))
    d = a * b
    d.register_hook(lambda g: log.append("d"))
    (ga,) = lib.autograd.grad(c.sum(), [a], retain_graph=True)
    log.append(ga.tolist())
    (c + d).sum().backward(inputs=(c,))
    log.append([a.grad, b.grad])
    return log


def test_tensor_hooks_run_for_nodes_the_pass_runs_only():
    """A leaf's hook changes what ``grad`` returns; a tensor the pass does not need for its
    targets gets no hook call."""
    assert _hook_log(kiln) == _hook_log(torch)


def _mutate_saved(lib):
    with lib.autograd.graph.allow_mutation_on_saved_tensors() as ctx:
        a = lib.tensor([0.5, 1.0, 2.0], requires_grad=True)
        b = a.clone()
        out = (b**2).sum() + b.exp().sum()
        b.sin_()
        b[1:].mul_(3)
        out.backward()
        kept = len(ctx.cloned)
    return a.grad.tolist(), b.tolist(), kept


def test_mutation_on_saved_tensors_is_allowed_inside_the_context():
    grads, values, cloned = _mutate_saved(kiln)
    torch_grads, torch_values, torch_cloned = _mutate_saved(torch)
    assert grads == pytest.approx(torch_grads)
    assert values == pytest.approx(torch_values)
    assert cloned == torch_cloned


def test_mutation_on_saved_tensors_outside_the_context_still_refused():
    a = kiln.tensor([0.5, 1.0], requires_grad=True)
    b = a.clone()
    out = (b**2).sum()
    b.sin_()
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.backward()


@pytest.mark.parametrize("lib", ["kiln", "torch"])
def test_backward_after_the_context_and_nesting_are_refused(lib):
    lib = kiln if lib == "kiln" else torch
    with lib.autograd.graph.allow_mutation_on_saved_tensors():
        a = lib.tensor([0.5, 1.0], requires_grad=True)
        out = (a.clone() ** 2).sum()
    with pytest.raises(AssertionError, match="outside of the 'allow_mutation_on_saved_tensors'"):
        out.backward()
    with pytest.raises(RuntimeError, match="cannot be nested"):
        with lib.autograd.graph.allow_mutation_on_saved_tensors():
            with lib.autograd.graph.allow_mutation_on_saved_tensors():
                pass
