"""Eager fast paths agree with the general path and with PyTorch.

The dispatcher, kernels and autograd take shortcuts for the common case (contiguous CPU
buffers, plain int sizes, same-dtype operands). Each test here runs an op over the layouts,
dtypes and argument kinds that decide between the shortcut and the general path, and compares
values, strides, aliasing, dtypes and grad_fn names with PyTorch.
"""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from tests.oracle import assert_close, needs_torch, torch

pytestmark = needs_torch


def _layouts(lib, base):
    """The same values in layouts the reshape shortcut must tell apart."""
    return {
        "contiguous": base,
        "transposed": base.t(),
        "sliced_columns": base[:, 1:3],
        "sliced_rows": base[1:3],
        "size_one_dim": base[:1],
        "expanded": base[:1].expand(3, 4),
        "empty": base[:0],
        "unsqueezed_transposed": base.t().unsqueeze(1),
    }


_SHAPES = {
    "contiguous": [(12,), (2, 6), (4, 1, 3), (-1,)],
    "transposed": [(12,), (2, 6), (4, 3)],
    "sliced_columns": [(6,), (3, 1, 2), (3, 2), (2, 3)],
    "sliced_rows": [(8,), (4, 2), (2, 1, 4)],
    "size_one_dim": [(4,), (2, 2), (1, 4, 1)],
    "expanded": [(12,), (3, 4), (6, 2)],
    "empty": [(0,), (0, 4), (4, 0, 2)],
    "unsqueezed_transposed": [(12,), (4, 3), (2, 2, 3)],
}


@pytest.mark.parametrize("layout", list(_SHAPES))
@pytest.mark.parametrize("requires_grad", [False, True])
def test_reshape_views_or_copies_as_pytorch(layout, requires_grad):
    values = np.arange(12, dtype=np.float32).reshape(3, 4)
    for shape in _SHAPES[layout]:
        k_leaf = kiln.tensor(values, requires_grad=requires_grad)
        t_leaf = torch.tensor(values, requires_grad=requires_grad)
        k_src, t_src = _layouts(kiln, k_leaf)[layout], _layouts(torch, t_leaf)[layout]
        k, t = k_src.reshape(shape), t_src.reshape(shape)
        assert_close(k, t)
        assert k.stride() == t.stride(), (layout, shape)
        shares = t.numel() > 0 and t.data_ptr() == t_src.data_ptr()
        assert (k.numel() > 0 and k.data_ptr() == k_src.data_ptr()) == shares, (layout, shape)
        if shares:  # (a copying reshape's result is a view of kiln's copy, not base-less)
            assert k._base is k_leaf and t._base is t_leaf, (layout, shape)
        if requires_grad:
            assert k.grad_fn.name() == type(t.grad_fn).__name__, (layout, shape)
            k.sum().backward()
            t.sum().backward()
            assert_close(k_leaf.grad, t_leaf.grad)


def test_view_of_a_reshape_alias_writes_through():
    """The shortcut's result is a real view: in-place writes reach the source (and bump its
    version), as in PyTorch."""
    for lib in (kiln, torch):
        x = lib.zeros(2, 3)
        y = x.reshape(6)
        y.add_(1)
        assert x._version == y._version == 1
        assert float(x.sum()) == 6.0
