"""``kiln.sparse.softmax`` / ``log_softmax``: a softmax over the entries a sparse tensor holds
(the others count as minus infinity), as PyTorch's; differentiable through the values."""

from __future__ import annotations

import numpy as np

from ...runtime import dtypes as dt
from ..core.registry import OPS
from .arithmetic import with_values
from .construction import Values, cast, coalesce, wrap
from .coo import SparseTensor, linear_index

__all__ = ["sparse_softmax"]


def sparse_softmax(t: SparseTensor, dim: int, dtype=None, *, log: bool = False) -> SparseTensor:
    """Softmax (``log``: its log) along ``dim`` over the coalesced entries, each group of
    entries sharing the other indices normalized on its own (per dense position)."""
    if not isinstance(t, SparseTensor):
        raise TypeError("kiln.sparse.softmax expects a sparse COO tensor; use kiln.softmax")
    if dtype is not None:
        t = cast(t, dtype)
    t = coalesce(t)
    ndim = len(t._shape)
    if not -ndim <= dim < ndim:
        raise IndexError(
            f"Dimension out of range (expected to be in range of [{-ndim}, {ndim - 1}], but "
            f"got {dim})"
        )
    dim %= ndim
    values = Values.apply(t) if t._requires_grad else t._sparse_values
    index_array = t._sparse_indices._data
    if dim >= t.sparse_dim():  # along a dense dim: each entry's values on their own
        along = dim - t.sparse_dim() + 1
        out = OPS["log_softmax" if log else "softmax"](values, along)
        return with_values(index_array, out, t._shape)
    others = [d for d in range(t.sparse_dim()) if d != dim]
    keys = linear_index(index_array[others], tuple(t._shape[d] for d in others))
    _, group = np.unique(keys, return_inverse=True)
    group_count = int(group.max()) + 1 if len(group) else 0
    value_array = values.detach().numpy()
    peaks = np.full((group_count, *value_array.shape[1:]), -np.inf, value_array.dtype)
    np.maximum.at(peaks, group, value_array)
    group_index = wrap(group.astype(np.int64), dt.int64)
    shifted = values - wrap(peaks[group], values._dtype)
    exps = shifted.exp()
    zeros = wrap(np.zeros_like(peaks), values._dtype)
    sums = OPS["index_add"](zeros, 0, group_index, exps)
    out = shifted - sums.log()[group_index] if log else exps / sums[group_index]
    return with_values(index_array, out, t._shape)
