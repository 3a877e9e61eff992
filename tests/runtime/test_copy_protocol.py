"""copy.copy and copy.deepcopy of tensors and parameters, as PyTorch's: a shallow copy shares
the storage; a deep copy copies each storage once (views of one tensor stay views of one copy),
keeps requires_grad, a leaf's .grad and user attributes, refuses non-leaves; a Parameter's deep
copy leaves .grad behind (an EMA copy made after a backward starts without gradients)."""

from __future__ import annotations

import copy

import pytest

import kiln
from tests.oracle import needs_torch, torch

pytestmark = needs_torch


def _facts(lib):
    linear = lib.nn.Linear(2, 1)
    linear(lib.ones(1, 2)).sum().backward()
    leaf = lib.ones(2, requires_grad=True)
    (leaf * 3).sum().backward()
    base = lib.arange(6.0)
    copied_base, copied_view = copy.deepcopy([base, base[2:]])
    copied_base[3] = 100.0
    shallow_source = lib.zeros(2)
    copy.copy(shallow_source).add_(1)
    tagged = lib.arange(3.0)
    tagged.note = {"k": [1, 2]}
    return {
        "param grad": copy.deepcopy(linear).weight.grad is None,
        "leaf grad": copy.deepcopy(leaf).grad.tolist(),
        "leaf requires_grad": copy.deepcopy(leaf).requires_grad,
        "view of the copied base": float(copied_view[1]),
        "original untouched": float(base[3]),
        "shallow copy shares": float(shallow_source[0]),
        "attribute": copy.deepcopy(tagged).note,
        "parameter type": type(copy.deepcopy(linear.weight)).__name__,
    }


def test_copy_protocol_matches_pytorch():
    assert _facts(kiln) == _facts(torch)


def test_deepcopy_of_a_non_leaf_is_refused_like_pytorch():
    for lib in (kiln, torch):
        y = lib.ones(2, requires_grad=True) * 2
        with pytest.raises(RuntimeError, match="graph leaves"):
            copy.deepcopy(y)
