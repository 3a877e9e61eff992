"""In-place writes through one view of a non-leaf, read back through another view or the base:
every view of the base must lead backward through the write (PyTorch regenerates a view's
grad_fn when its base's version changed). kiln once kept the other views' old history, so
``x = (w * 1).view(2, 4); x[:, 1:3] *= 3; x.sum().backward()`` gave w a gradient of ones, and
``x[0:1] += 1`` (a (1, 4) view written back onto itself) raised a false overlap error. Each case
runs the same code on both libraries and compares values and gradients."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from tests.oracle import assert_close, needs_torch, torch

pytestmark = needs_torch


def _slice_mul_read_through_view(lib, w):
    x = (w * 1).view(2, 4)
    v = x[:, 1:3]
    v.mul_(3)
    return (x * x).sum()


def _augmented_setitem(lib, w):
    x = (w * 1).view(2, 4)
    x[0:1] += 1
    x[:1] -= x.mean()
    x[1:2, 1:3] /= 2
    x[None] *= 2
    return (x * x).sum()


def _base_written_other_views_read(lib, w):
    b = w * 1
    x = b.view(2, 4)
    y = b[2:6]
    b.mul_(2)
    return x.t().sum() + (y * y).sum()


def _view_of_view_written(lib, w):
    x = (w * 1).view(2, 4)
    col = x.t()[1]
    col.add_(x[:, 0].detach())
    return (x.exp() * torch_like_weights(lib)).sum()


def torch_like_weights(lib):
    return lib.tensor(np.linspace(0.5, 2.0, 8, dtype=np.float32).reshape(2, 4))


def _backward_from_a_stale_view(lib, w):
    x = (w * 1).view(2, 4)
    x[:, 2:].mul_(5)
    return x  # backward(ones) from the view itself


def _as_strided_written(lib, w):
    # as_strided's gradient needs its input's layout, not its values, which the write changes
    x = w * 1
    x.as_strided((2, 2), (1, 4)).mul_(7)
    return (x.view(2, 4) * lib.arange(8.0).view(2, 4)).sum()


CASES = {
    "slice-mul-read-through-view": _slice_mul_read_through_view,
    "augmented-setitem": _augmented_setitem,
    "base-written-other-views-read": _base_written_other_views_read,
    "view-of-view-written": _view_of_view_written,
    "backward-from-a-stale-view": _backward_from_a_stale_view,
    "as-strided-written": _as_strided_written,
}


@pytest.mark.parametrize("name", list(CASES))
def test_writes_through_views_reach_every_view(name):
    results = []
    for lib in (kiln, torch):
        w = lib.tensor(np.arange(8, dtype=np.float32) * 0.25, requires_grad=True)
        out = CASES[name](lib, w)
        if out.ndim:
            out.backward(lib.ones_like(out))
        else:
            out.backward()
        results.append((out.detach(), w.grad))
    assert_close(results[0], results[1])


def test_autograd_grad_from_a_stale_view():
    grads = []
    for lib in (kiln, torch):
        w = lib.tensor(np.arange(8, dtype=np.float32), requires_grad=True)
        x = (w * 1).view(2, 4)
        x[:, 1:3].mul_(3)
        grads.append(lib.autograd.grad(x.sum(), w)[0])
    assert_close(grads[0], grads[1])


@needs_torch
@pytest.mark.parametrize(
    "make",
    [
        lambda lib: lib.ones(2).repeat(2, 1),
        lambda lib: lib.ones(2).tile(2, 1),
        lambda lib: lib.ones(2, 1).repeat_interleave(2, dim=1),
        lambda lib: lib.tensor([2.0]).repeat(1).view(1, 1).expand(1, 2).contiguous(),
    ],
    ids=["repeat", "tile", "repeat_interleave", "repeat_of_one"],
)
def test_copies_made_by_an_op_are_its_own_tensors(make):
    """repeat and tile return a fresh tensor, not a view of the copy they made: a value written
    into the result afterwards (``r[0, 1] = w``) makes the result itself require grad, and
    gradients reach ``w`` (the fuzzer's ``2.0 ** v1`` after ``v1[0] = x0`` came out not
    requiring grad). (PyTorch's repeat_interleave returns a view of its copy, whose grad_fn
    PyTorch regenerates from the base; kiln's returns the copy itself.)"""
    grads = []
    for lib in (torch, kiln):
        w = lib.tensor(1.5, requires_grad=True)
        r = make(lib)
        r[0, 1] = w
        assert r.requires_grad
        (2.0**r).sum().backward()
        grads.append(w.grad.item())
    assert grads[1] == pytest.approx(grads[0])


def _view_written_through_its_own_view(lib, w):
    buf = lib.zeros(2, 2)
    grid = buf.view(4)
    grid[1] = w  # a select of grid: a view of buf
    return (grid * grid).sum() + grid[1:].sum()


def _sibling_view_written(lib, w):
    buf = lib.zeros(3, 2)
    first, second = buf[0], buf[1]
    second.copy_(w * lib.ones(2))
    return (first * 3 + second * 5).sum() + (buf * buf).sum()


def _base_written_directly(lib, w):
    buf = lib.ones(2, 3)
    rows = buf.t()
    buf.mul_(w)
    return (rows * rows).sum()


def _unsqueezed_scratch(lib, w):
    out = lib.zeros(3).unsqueeze(0)
    out[0, 2] = w * 2
    return (out.exp() * out).sum()


@pytest.mark.parametrize(
    "program",
    [
        _view_written_through_its_own_view,
        _sibling_view_written,
        _base_written_directly,
        _unsqueezed_scratch,
    ],
)
def test_views_of_a_buffer_that_gains_a_history_lead_back_to_it(program):
    """A view made (with grad mode on) of a buffer that needed no gradient, after the buffer
    was written with a value that does, through another view or directly: PyTorch's view then
    requires grad (a differentiable view reads its base's flag) and its gradient reaches the
    written value. kiln's kept ``requires_grad=False``, and its uses dropped the gradient."""
    results = []
    for lib in (torch, kiln):
        w = lib.tensor(1.5, requires_grad=True)
        loss = program(lib, w)
        assert loss.requires_grad
        loss.backward()
        results.append((loss.item(), w.grad.item()))
    assert results[1] == pytest.approx(results[0])


def test_every_kept_view_of_many_leads_back_after_the_base_gains_a_history():
    """Views are watched by weak references in a list pruned of dead ones as it grows (the
    common append is inlined in ``mark_view``): of 300 views made one after another, most
    dropped at once, the kept ones, made before and after each pruning, must all wake."""
    results = []
    for lib in (torch, kiln):
        w = lib.tensor(1.5, requires_grad=True)
        buf = lib.ones(4, 3)
        kept = []
        for i in range(300):
            view = buf[i % 4]
            if i % 37 == 0:
                kept.append(view)
        buf.mul_(w)
        assert all(v.requires_grad for v in kept)
        sum(((k + 1) * v).sum() for k, v in enumerate(kept)).backward()
        results.append(w.grad.item())
    assert results[1] == pytest.approx(results[0])


def test_a_detached_alias_stays_out_of_the_history():
    """A detached alias of such a buffer is no differentiable view, in PyTorch as in kiln: it
    keeps ``requires_grad=False`` after the buffer gains a history."""
    for lib in (torch, kiln):
        w = lib.tensor(1.5, requires_grad=True)
        buf = lib.zeros(2, 2)
        detached = buf.detach()
        buf[0, 0] = w
        assert buf.requires_grad
        assert not detached.requires_grad
