"""Views made with grad mode off of a tensor that requires grad: PyTorch gives them
requires_grad=True without history (a leaf whose gradients are dropped), and forbids an in-place
op on one once grad mode is back on. kiln once returned requires_grad=False. Each case runs the
same code on both libraries, eagerly and compiled."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from tests.oracle import assert_close, needs_torch, torch

pytestmark = needs_torch

VIEWS = {
    "select": lambda x: x[0],
    "slice": lambda x: x[:, 1:3],
    "view": lambda x: x.view(12),
    "t": lambda x: x.t(),
    "expand": lambda x: x[:1].expand(2, 4),
    "diagonal": lambda x: x.diagonal(),
    "unsqueeze": lambda x: x.unsqueeze(0),
    "split": lambda x: x.split(2)[1],
    "unbind": lambda x: x.unbind(1)[2],
    "view_of_view": lambda x: x.t()[1],
}


def _leaf(lib):
    values = np.arange(12, dtype=np.float32).reshape(3, 4) / 7
    return lib.from_numpy(values).requires_grad_(True)


def _flags(t) -> tuple:
    return (t.requires_grad, t.grad_fn is None, t.is_leaf)


@pytest.mark.parametrize("name", sorted(VIEWS))
def test_view_made_under_no_grad_requires_grad_without_history(name):
    results = {}
    for lib in (kiln, torch):
        x = _leaf(lib)
        with lib.no_grad():
            v = VIEWS[name](x)
        results[lib.__name__] = _flags(v)
    assert results["kiln"] == results["torch"] == (True, True, True)


@pytest.mark.parametrize("name", ["select", "t", "split"])
def test_gradient_through_a_no_grad_view_is_dropped(name):
    """The view is a leaf whose gradient goes nowhere: backward runs, and only the other path
    reaches the base."""
    grads = []
    for lib in (kiln, torch):
        x = _leaf(lib)
        with lib.no_grad():
            v = VIEWS[name](x)
        ((v * 2).sum() + (x * 3).sum()).backward()
        assert v.grad is None
        grads.append(x.grad)
    assert_close(*grads)


def test_in_place_on_a_no_grad_view_with_grad_mode_on_raises_like_pytorch():
    errors = []
    for lib in (kiln, torch):
        x = _leaf(lib)
        with lib.no_grad():
            v = x[0]
            v.mul_(2)  # fine with grad mode still off
        with pytest.raises(RuntimeError) as caught:
            v.mul_(2)
        errors.append(str(caught.value).split("\nException raised from")[0])
    assert errors[0] == errors[1]


def test_detach_and_integer_views_under_no_grad_stay_without_grad():
    for lib in (kiln, torch):
        x = _leaf(lib)
        with lib.no_grad():
            d = x.detach()[0]
            i = lib.arange(6).view(2, 3)[0]
        assert (d.requires_grad, i.requires_grad) == (False, False)
        assert x[0].requires_grad and x[0].grad_fn is not None  # grad mode back on


def _outputs_under_no_grad(a):
    return a[0], a.t(), a * 2, a.detach()[1]


def _no_grad_block(a):
    with kiln.no_grad():
        v = a[0]
    return v, v * 2, a * 3


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
def test_compiled_views_under_no_grad_equal_eager(backend):
    """Compiled outputs that view an input are remade from it at run time in the caller's grad
    mode: a function called under no_grad, and a no_grad block inside a compiled function,
    return what eager returns (flags, aliasing, and the gradients of what follows)."""
    compiled = kiln.compile(_outputs_under_no_grad, backend=backend)
    x = _leaf(kiln)
    with kiln.no_grad():
        eager = _outputs_under_no_grad(x)
        got = compiled(x)
    assert [_flags(t) for t in got] == [_flags(t) for t in eager]
    assert [t._base is x for t in got] == [t._base is x for t in eager]

    grads, flags = [], []
    for fn in (_no_grad_block, kiln.compile(_no_grad_block, backend=backend)):
        x = _leaf(kiln)
        outs = fn(x)
        flags.append([_flags(t) for t in outs])
        (outs[0].sum() + outs[1].sum() + outs[2].sum()).backward()
        grads.append(x.grad)
    assert flags[0] == flags[1]
    assert_close(grads[1], grads[0])
