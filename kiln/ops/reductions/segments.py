"""``kiln.segment_reduce``: reduce consecutive runs (segments) of ``data`` along ``axis``, their
sizes given as ``lengths`` or ``offsets`` (a GNN's per-graph pooling over concatenated nodes,
a ragged batch's per-sequence sums).

A composite: each position's segment number comes from ``searchsorted`` over the segments' ends,
and ``scatter_reduce`` reduces into a tensor holding the reduction's identity (or ``initial``,
which then counts as one more element), so autograd and the compiler need nothing of their own;
a mean divides by the lengths. Empty segments give the identity (0, 1, -inf, inf) or NaN for a
mean, as PyTorch's.
"""

from __future__ import annotations

import math

from ..core.common import Tensor, wrap_dim
from ..core.registry import torch_function
from ..creation import api
from ..pointwise.unary_binary import where
from .reduce import known_any
from .sorting import searchsorted

__all__: list[str] = []

_SCATTER = {"sum": "sum", "mean": "sum", "max": "amax", "min": "amin", "prod": "prod"}
_IDENTITY = {"sum": 0.0, "mean": 0.0, "max": -math.inf, "min": math.inf, "prod": 1.0}


@torch_function()
def segment_reduce(
    data: Tensor,
    reduce: str,
    *,
    lengths: Tensor | None = None,
    indices: Tensor | None = None,
    offsets: Tensor | None = None,
    axis: int = 0,
    unsafe: bool = False,
    initial=None,
) -> Tensor:
    """Reduce (sum, mean, max, min, prod) each segment of ``data`` along ``axis``: output
    ``data.shape[:axis] + (segments,) + data.shape[axis + 1:]``."""
    if reduce not in _SCATTER:
        raise RuntimeError(
            f"reduce argument must be either sum, prod, mean, amax or amin, got {reduce}"
        )
    if indices is not None:
        raise NotImplementedError("segment_reduce(): indices is not supported yet")
    if lengths is None:
        if offsets is None:
            raise RuntimeError("segment_reduce(): Either lengths or offsets must be defined.")
        lengths = offsets[..., 1:] - offsets[..., :-1]
    axis = wrap_dim(axis, data.ndim)
    if lengths.ndim != axis + 1:
        raise RuntimeError(
            f"segment_reduce(): Expected lengths to have {axis + 1} dims (axis={axis}), got "
            f"{lengths.ndim}"
        )
    size = data.shape[axis]
    if not unsafe:
        if known_any(lengths < 0):
            raise RuntimeError("lengths contains negative value!")
        if known_any(lengths.sum(-1) != size):
            raise RuntimeError(
                "segment_reduce(): Expected all rows of lengths along axis to sum to "
                "data.size(lengths.dim()-1) when !unsafe."
            )
    # position p lies in segment k when ends[k - 1] <= p < ends[k]
    ends = lengths.cumsum(-1)
    positions = api.arange(size, device=data.device).expand(*lengths.shape[:-1], size)
    segment = searchsorted(ends.contiguous(), positions.contiguous(), right=True)
    trailing = data.ndim - axis - 1
    index = segment.reshape(*segment.shape, *(1,) * trailing).expand(data.shape)
    out_shape = (*data.shape[:axis], lengths.shape[-1], *data.shape[axis + 1 :])
    start = _IDENTITY[reduce] if initial is None else initial
    base = api.full(out_shape, start, dtype=data.dtype, device=data.device)
    result = base.scatter_reduce(
        axis, index, data, _SCATTER[reduce], include_self=initial is not None
    )
    if reduce != "mean":
        return result
    counts = lengths.reshape(*lengths.shape, *(1,) * trailing).to(data.dtype)
    empty = math.nan if initial is None else initial
    return where(counts == 0, empty, result / counts)
