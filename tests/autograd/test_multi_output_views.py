"""The outputs of split, chunk and unbind may not be modified in place while they have history,
as in PyTorch (the pieces share their view history): the same error of the same type; without
grad (no_grad, detached, plain tensors) the write goes through."""

from __future__ import annotations

import pytest

import kiln
from tests.oracle import assert_raises_alike, needs_torch, torch

CASES = {
    "split": lambda y: y.split(2)[0].mul_(2),
    "split-second": lambda y: y.split(3)[1].add_(1),
    "split_with_sizes": lambda y: y.split([1, 3])[1].add_(1),
    "chunk": lambda y: y.chunk(2)[1].sub_(1),
    "unbind": lambda y: y.unbind(0)[2].zero_(),
    "function split": lambda y: kiln_or_torch(y).split(y, 2)[1].mul_(3),
    "setitem": lambda y: y.chunk(2)[0].__setitem__((0, 0), 1.0),
}


def kiln_or_torch(t):
    return kiln if isinstance(t, kiln.Tensor) else torch


def _pair(lib):
    x = lib.ones(4, 3, requires_grad=True)
    return x, x * 2


@needs_torch
@pytest.mark.parametrize("name", list(CASES))
def test_in_place_on_a_piece_with_history_is_refused_like_pytorch(name):
    write = CASES[name]
    assert_raises_alike(RuntimeError, lambda: write(_pair(kiln)[1]), lambda: write(_pair(torch)[1]))


@needs_torch
def test_a_leafs_pieces_are_refused_with_the_multi_output_message():
    for lib in (kiln, torch):
        x, _ = _pair(lib)
        with pytest.raises(RuntimeError, match="Output 1 of Split is a view and is being modified"):
            x.split(2)[1].mul_(2)


@pytest.mark.parametrize("name", list(CASES))
def test_pieces_without_history_take_the_write(name):
    write = CASES[name]
    x, y = _pair(kiln)
    with kiln.no_grad():
        write(y)
    write(y.detach())
    write(kiln.ones(4, 3))
    # a copy of a piece is not a view: in place on it is recorded as usual
    piece = y.split(2)[0] * 1
    piece.add_(1).sum().backward()
    assert x.grad is not None and float(x.grad.sum()) == 12.0
