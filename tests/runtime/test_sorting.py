"""Sorting and selection against PyTorch: the order of ties and NaNs in sort, argsort,
topk and kthvalue, and kthvalue's gradient."""

from __future__ import annotations

import numpy as np

import kiln
from tests.oracle import needs_torch, torch
from tests.runtime.helpers import cases, same_as_torch

pytestmark = needs_torch


def _tied(lib, n=40, seed=0):
    values = np.random.RandomState(seed).randint(0, 4, n).astype(np.float32)
    values[[3, 17]] = np.nan
    return lib.tensor(values)


TIES = {
    "sort": lambda lib: lib.sort(
        lib.tensor([2, 1, 2, 1, 0, 2, 1, 1, 2, 0, 1, 2, 2, 1, 0, 1, 2, 1])
    ),
    "sort-descending-nan": lambda lib: lib.sort(_tied(lib), descending=True).indices,
    "sort-2d-dim0": lambda lib: lib.sort(_tied(lib).reshape(8, 5), 0).indices,
    "sort-stable": lambda lib: lib.sort(_tied(lib), stable=True).indices,
    "argsort": lambda lib: lib.argsort(_tied(lib, 30, 1)),
    "argsort-int": lambda lib: lib.argsort(lib.tensor([3, 1, 2, 3, 1, 5, 2, 2, 1, 3, 3])),
    "topk-small-k": lambda lib: lib.topk(_tied(lib, 200, 2), 3),
    "topk-ties": lambda lib: lib.topk(lib.tensor([1, 3, 3, 2, 3]), 2),
    "topk-smallest": lambda lib: lib.topk(lib.tensor([3.0, 1, 2, 1, 3, 0.5]), 2, largest=False),
    "topk-unsorted": lambda lib: lib.topk(lib.arange(20.0).flip(0), 5, sorted=False),
    "topk-dim0": lambda lib: lib.topk(_tied(lib).reshape(8, 5), 3, dim=0).indices,
    "kthvalue": lambda lib: lib.kthvalue(lib.tensor([3.0, 1, 2, 1, 3, 0.5]), 2),
    "kthvalue-ties": lambda lib: lib.kthvalue(lib.tensor([1, 3, 3, 2, 3]), 3),
    "kthvalue-dim": lambda lib: lib.kthvalue(_tied(lib).reshape(8, 5), 4, 0, True).indices,
    "kthvalue-half": lambda lib: lib.kthvalue(_tied(lib).half(), 20).indices,
}


@cases(TIES)
def test_tie_order_matches_torch(case):
    same_as_torch(case)


def test_kthvalue_gradient_goes_to_the_chosen_position():
    grads = []
    for lib in (kiln, torch):
        x = lib.tensor([[1.0, 3, 3, 2, 3], [2.0, 2, 0, 1, 2]], requires_grad=True)
        x.kthvalue(3, 1).values.sum().backward()
        grads.append(x.grad.tolist())
    assert grads[0] == grads[1]
