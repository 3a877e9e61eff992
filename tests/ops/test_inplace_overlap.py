"""In-place ops refuse an input that shares part of the memory they write, as PyTorch does.

``x[1:].add_(x[:-1])`` would give a result that depends on the order elements are written in,
so PyTorch raises instead (the same view, ``x.add_(x)``, and disjoint parts of one storage are
fine). Each case runs in kiln and in PyTorch; both must raise or both must give equal values.
Compiled code raises too (the check runs on the capture's fake tensors).
"""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from tests.oracle import needs_torch, torch

CASES = {
    "add_ of the shifted tensor": lambda t, y: y[1:].add_(y[:5]),
    "add_ of itself": lambda t, y: y.add_(y),
    "add_ of a disjoint part": lambda t, y: y[:3].add_(y[3:]),
    "add_ of the same bytes transposed": lambda t, y: y.view(2, 3).add_(y.view(3, 2).t()),
    "add_ of the same bytes, same strides": lambda t, y: y.view(2, 3).add_(y.view(3, 2).view(2, 3)),
    "copy_ shifted": lambda t, y: y[1:].copy_(y[:5]),
    "clamp_ by a shifted tensor": lambda t, y: y[1:].clamp_(min=y[:5]),
    "addcmul_ shifted": lambda t, y: y[1:].addcmul_(y[:5], y[:5]),
    "lerp_ shifted": lambda t, y: y[1:].lerp_(y[:5], 0.5),
    "index_add_ shifted": lambda t, y: y[1:].index_add_(0, t.tensor([0, 1]), y[:2]),
    "index_put_ shifted": lambda t, y: y[1:].index_put_((t.tensor([0, 1]),), y[:2]),
    "mul_ by a strided view": lambda t, y: y[::2].mul_(y[1::2]),
    "mul_ by an expanded element": lambda t, y: y[1:].mul_(y[0].expand(5)),
    # PyTorch's assert_no_overlap: the source of an indexed write may not be the very memory
    # written either (the kernel reads it while it writes)
    "index_put_ of itself": lambda t, y: y.index_put_((t.tensor([0, 0, 1, 2, 3, 4]),), y, True),
    "setitem of itself": lambda t, y: y.__setitem__(t.tensor([5, 4, 3, 2, 1, 0]), y),
    "index_add_ of itself": lambda t, y: y.index_add_(0, t.tensor([0, 0, 1, 1, 2, 2]), y),
    "index_copy_ of itself": lambda t, y: y.index_copy_(0, t.tensor([5, 4, 3, 2, 1, 0]), y),
    "index_reduce_ of itself": lambda t, y: y.index_reduce_(0, t.arange(6), y, "prod"),
    "scatter_ of itself": lambda t, y: y.scatter_(0, t.tensor([1, 0, 3, 2, 5, 4]), y),
    "scatter_add_ of itself": lambda t, y: y.scatter_add_(0, t.tensor([1, 0, 3, 2, 5, 4]), y),
    "scatter_reduce_ of itself": lambda t, y: y.scatter_reduce_(0, t.arange(6), y, "amax"),
    "put_ of itself": lambda t, y: y.put_(t.tensor([5, 4, 3, 2, 1, 0]), y),
    "index_add_ of the same bytes": lambda t, y: y.index_add_(0, t.arange(6), y.view(2, 3).view(6)),
    "scatter_ of a number": lambda t, y: y.scatter_(0, t.tensor([1, 0]), 2.0),
    "index_fill_ by a value": lambda t, y: y.index_fill_(0, t.tensor([1, 0]), 2.0),
    "index_add_ of a disjoint part": lambda t, y: y[:3].index_add_(0, t.tensor([0, 0, 2]), y[3:]),
}


def _outcome(lib, case):
    y = lib.arange(6, dtype=lib.float32) + 1
    try:
        case(lib, y)
    except RuntimeError as e:
        return "raised", str(e)
    return "ran", np.asarray(y.tolist())


@needs_torch
@pytest.mark.parametrize("name", list(CASES))
def test_partial_overlap_raises_as_in_pytorch(name):
    got, expected = _outcome(kiln, CASES[name]), _outcome(torch, CASES[name])
    assert got[0] == expected[0], f"kiln {got}, PyTorch {expected}"
    if got[0] == "raised":
        assert got[1] == expected[1]
    else:
        np.testing.assert_allclose(got[1], expected[1])


def test_a_mask_seen_through_another_shape_is_refused():
    """The fuzzer's case: the 0-d mask and the 1-element tensor written share one byte but not
    strides."""
    v0 = kiln.sign(kiln.tensor(True))
    with pytest.raises(RuntimeError, match="refer to a single memory location"):
        v0.unsqueeze(0).masked_fill_(v0, False)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compiled_code_refuses_it_too(backend):
    def shift_add(x):
        y = x * 1
        y[1:].add_(y[:5])
        return y

    with pytest.raises(RuntimeError, match="refer to a single memory location"):
        kiln.compile(shift_add, backend=backend)(kiln.arange(6.0))


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compiled_indexed_writes_of_themselves_are_refused(backend):
    """The fuzzer's case: ``v.index_put_((i,), v, accumulate=True)`` of an intermediate."""

    def accumulate_itself(x):
        v = x + 1
        v.index_put_((kiln.tensor([0, 0]),), v[:2].clone(), accumulate=True)
        v.index_put_((kiln.tensor([0]),), v, accumulate=True)
        return v

    with pytest.raises(RuntimeError, match="refer to a single memory location"):
        kiln.compile(accumulate_itself, backend=backend)(kiln.ones(1, 3))
