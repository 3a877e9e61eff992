"""``x[a:b:c]`` (one slice of dim 0, plain int bounds) against PyTorch: shape, strides, offset and
values, writes through the view, autograd, in-range and out-of-range bounds, negative bounds and
steps over 1-d and 3-d tensors; such an index skips the general index parser."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.ops.indexing import subscript
from tests.oracle import needs_torch, torch

_SLICES = [
    slice(None, None, 2),
    slice(3, 100),
    slice(-5, None),
    slice(None, -7, 3),
    slice(2, 1000, 5),
    slice(-1000, 4),
    slice(None, 0),
    slice(1, None, 1),
]


@needs_torch
@pytest.mark.parametrize("shape", [(37,), (11, 3, 5), (256, 256)])
@pytest.mark.parametrize("index", _SLICES, ids=str)
def test_dim0_slice_matches_torch(shape, index):
    a = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    base_k, base_t = kiln.from_numpy(a.copy()), torch.from_numpy(a.copy())
    k, t = base_k[index], base_t[index]
    assert tuple(k.shape) == tuple(t.shape) and k.stride() == t.stride()
    if t.numel():  # (an empty slice's offset: see the report; PyTorch keeps start * stride)
        assert k.storage_offset() == t.storage_offset()
    np.testing.assert_array_equal(k.numpy(), t.numpy())
    k.fill_(7.0)  # a view: the write lands in the base
    t.fill_(7.0)
    np.testing.assert_array_equal(base_k.numpy(), base_t.numpy())


@needs_torch
def test_dim0_slice_backward_matches_torch():
    a = np.random.default_rng(1).standard_normal((9, 4)).astype(np.float32)
    k = kiln.from_numpy(a.copy()).requires_grad_()
    t = torch.from_numpy(a.copy()).requires_grad_()
    (k[1::3] * 2).sum().backward()
    (t[1::3] * 2).sum().backward()
    np.testing.assert_array_equal(k.grad.numpy(), t.grad.numpy())


def test_refusals_keep_their_messages():
    x = kiln.zeros(5)
    with pytest.raises(ValueError, match="step must be greater than zero"):
        x[::-1]
    with pytest.raises(ValueError, match="slice step cannot be zero"):
        x[::0]
    with pytest.raises(IndexError, match="too many indices"):
        kiln.tensor(1.0)[1:]


def test_plain_slice_skips_the_index_parser(monkeypatch):
    def refuse(*args):
        raise AssertionError("general parser used")

    x = kiln.arange(10.0)
    with monkeypatch.context() as m:
        m.setattr(subscript, "_parse", refuse)
        assert x[2:7:2].tolist() == [2.0, 4.0, 6.0]
