"""Printing details PyTorch programs show: column widths around -0., nan and inf, and the
``return_types`` named tuples of multi-output ops."""

from __future__ import annotations

import pickle

import pytest

import kiln
from tests.oracle import needs_torch, torch

VALUES = [
    [2.0, 2.0, -0.0],
    [float("nan"), 1.0, -2.0],
    [0.0, 0.0],
    [1.0, float("inf"), -float("inf")],
    [0.5, -0.0, 12.25],
    [1e-5, 0.0],
    [[1.0, -0.0], [float("nan"), 3.0]],
    [[-1.5, 200.0], [3.0, float("-inf")]],
]


@needs_torch
@pytest.mark.parametrize("values", VALUES, ids=[str(v) for v in VALUES])
def test_float_widths_match_torch(values):
    assert str(kiln.tensor(values)) == str(torch.tensor(values))


@needs_torch
def test_return_types_print_like_torch():
    x = [[1.0, 5.0], [3.0, 2.0]]
    for name, call in (
        ("max", lambda lib, t: lib.max(t, 0)),
        ("sort", lambda lib, t: lib.sort(t, 1)),
        ("topk", lambda lib, t: lib.topk(t, 1)),
        ("aminmax", lambda lib, t: lib.aminmax(t)),
    ):
        got = repr(call(kiln, kiln.tensor(x)))
        want = repr(call(torch, torch.tensor(x)))
        assert got == want.replace("torch.", "kiln."), name


def test_return_types_are_named_tuples_that_pickle():
    result = kiln.max(kiln.tensor([[1.0, 5.0]]), 1)
    values, indices = result
    assert result.values is values and result[1] is indices
    assert type(result) is kiln.return_types.max
    again = pickle.loads(pickle.dumps(result))
    assert type(again) is kiln.return_types.max and again.indices.tolist() == [1]
