"""``F.embedding_bag``: sums, means or maxima of bags of embedding rows.

A composite of kiln ops (index/scatter reductions), so autograd and ``kiln.compile`` see ordinary
ops. Checks that need tensor values (offsets) run only on tensors with data, never while a graph
is being captured.
"""

from __future__ import annotations

import warnings

from ...autograd.grad_mode import is_grad_enabled
from ...ops import OPS
from ...ops.core.grad_fn_naming import rename_grad_fn
from ...ops.core.registry import torch_function
from ...ops.sparse.products import embedding_sparse
from ...runtime import dtypes as dt
from ...runtime.tensor import Tensor
from .layers import _embedding_renorm_

__all__ = ["embedding_bag"]

_MODES = ("sum", "mean", "max")


def _has_data(t: Tensor) -> bool:
    """True for a real tensor, False for a fake one (graph capture): value checks need data."""
    return t._data is not None


def _index_dtype_name(t: Tensor) -> str:
    return str(t.dtype).split(".")[-1]


def _bag_of_each_index(offsets: Tensor, n: int, include_last_offset: bool) -> tuple:
    """(bag id of each of the ``n`` indices, number of bags); ids are -1 before the first bag
    and ``num_bags`` past the last offset when ``include_last_offset`` closes the last bag."""
    starts = offsets[:-1] if include_last_offset else offsets
    num_bags = starts.shape[0]
    positions = OPS["arange"](0, n, dtype=offsets.dtype, device=offsets.device)
    bag = OPS["searchsorted"](starts.contiguous(), positions, right=True) - 1
    if include_last_offset and offsets.shape[0] > 0:
        bag = OPS["where"](positions < offsets[-1], bag, num_bags)
    return bag, num_bags


def _check_offsets(offsets: Tensor, n: int) -> None:
    if offsets.shape[0] == 0 or not _has_data(offsets):
        return
    first, last = int(offsets[0]), int(offsets[-1])
    if first != 0:
        raise RuntimeError(
            "offsets[0] has to be 0, i.e., the first sequence in the mini-batch has to start "
            f"from position 0. However, got {first}"
        )
    if last > n:
        raise RuntimeError(
            f"offsets[-1] can not be greater than input's length {n} but got offsets[-1] of {last}"
        )


def _check_indices(input: Tensor, num_weights: int, message_of_max: bool) -> None:
    """PyTorch's RuntimeError for an index outside the table (plain ``embedding`` raises an
    IndexError, so the lookup's own check would name the wrong type); max-mode and padded bags
    word it as PyTorch's max kernel does."""
    if input.numel() == 0 or not _has_data(input):
        return
    outside = (input < 0) | (input >= num_weights)
    if not bool(outside.any()):
        return
    position = int(OPS["nonzero"](outside)[0, 0])
    value = int(input[position])
    if message_of_max:
        raise RuntimeError(
            f"embedding_bag: Expected idx >= 0 && idx < num_embeddings but found idx to be {value}"
        )
    raise RuntimeError(
        f"Index {position} of input takes value {value} which is not in the valid range "
        f"[0, {num_weights})"
    )


def embedding_bag(
    input: Tensor,
    weight: Tensor,
    offsets: Tensor | None = None,
    max_norm: float | None = None,
    norm_type: float = 2,
    scale_grad_by_freq: bool = False,
    mode: str = "mean",
    sparse: bool = False,
    per_sample_weights: Tensor | None = None,
    include_last_offset: bool = False,
    padding_idx: int | None = None,
) -> Tensor:
    """Sums, means or maxima of bags of embedding rows, without building the (n, dim) lookup's
    per-bag padding: each index is sent to its bag (or to a discarded extra bag when it is
    padding or outside every bag) and the bags are reduced with ``index_add``/``scatter_reduce``.
    """
    if weight.dtype == dt.int64 and input.is_floating_point():
        warnings.warn(
            "Argument order of nn.functional.embedding_bag was changed. Usage "
            "`embedding_bag(weight, input, ...)` is deprecated, and should now be "
            "`embedding_bag(input, weight, ...)`.",
            stacklevel=2,
        )
        weight, input = input, weight
    if per_sample_weights is not None and input.size() != per_sample_weights.size():
        raise ValueError(
            f"embedding_bag: If per_sample_weights ({per_sample_weights.shape}) is not None, then "
            f"it must have the same shape as the input ({input.shape})"
        )
    if weight.dim() != 2:
        raise ValueError(
            f"weight has to be a 2D Tensor, but got Tensor of dimension {weight.dim()}"
        )
    for name, t in (("indices", input), ("offsets", offsets)):
        if t is not None and t.dtype not in (dt.int64, dt.int32):
            raise RuntimeError(
                f"Expected tensor for argument '{name}' to have one of the following scalar "
                f"types: Long, Int; but got {_index_dtype_name(t)} instead (while checking "
                "arguments for embedding_bag)"
            )
    if input.dim() == 2:
        if offsets is not None:
            raise ValueError(
                "if input is 2D, then offsets has to be None, as input is treated is a mini-batch "
                f"of fixed length sequences. However, found offsets of type {type(offsets)}"
            )
        offsets = OPS["arange"](
            0, input.numel(), input.size(1), dtype=input.dtype, device=input.device
        )
        include_last_offset = False
        input = input.reshape(-1)
        if per_sample_weights is not None:
            per_sample_weights = per_sample_weights.reshape(-1)
    elif input.dim() == 1:
        if offsets is None:
            raise ValueError("offsets has to be a 1D Tensor but got None")
        if offsets.dim() != 1:
            raise ValueError("offsets has to be a 1D Tensor")
    else:
        raise ValueError(
            f"input has to be 1D or 2D Tensor, but got Tensor of dimension {input.dim()}"
        )
    if mode not in _MODES:
        raise ValueError("mode has to be one of sum, mean or max")
    if mode == "max" and scale_grad_by_freq:
        raise ValueError("max mode does not support scaling the gradient by the frequency")
    if mode == "max" and sparse:
        raise ValueError("max mode does not support sparse weights")
    num_weights = weight.shape[0]
    if padding_idx is not None:
        if not -num_weights <= padding_idx < num_weights:
            raise RuntimeError(
                f"padding_idx must be within the number of embeddings, -{num_weights} through "
                f"{num_weights - 1}, but got {padding_idx}"
            )
        padding_idx = padding_idx % num_weights
    if max_norm is not None:
        _embedding_renorm_(weight, input, max_norm, norm_type)
    if per_sample_weights is not None and mode != "sum":
        raise NotImplementedError(
            "embedding_bag: per_sample_weights was not None. per_sample_weights is only supported "
            f"for mode='sum' (got mode='{mode}'). Please open a feature request on GitHub."
        )
    n = input.shape[0]
    _check_offsets(offsets, n)
    _check_indices(input, num_weights, mode == "max" or padding_idx is not None)
    bag, num_bags = _bag_of_each_index(offsets, n, include_last_offset)
    # indices outside every bag and padding indices go to an extra bag that is dropped
    keep = bag >= 0
    if padding_idx is not None:
        keep = keep & (input != padding_idx)
    bag = OPS["where"](keep, bag, num_bags).to(dt.int64)
    lookup_padding = -1 if padding_idx is None else padding_idx
    if sparse and weight.requires_grad:
        rows = embedding_sparse(weight, input, lookup_padding, scale_grad_by_freq)
    else:
        rows = OPS["embedding"](weight, input, lookup_padding, scale_grad_by_freq, False)
    dim = weight.shape[1]
    zeros = OPS["full"]((num_bags + 1, dim), 0, dtype=weight.dtype, device=weight.device)
    if mode == "max":
        index = bag.unsqueeze(1).expand(n, dim)
        out = OPS["scatter_reduce"](zeros, 0, index, rows, "amax", include_self=False)[:num_bags]
    else:
        if per_sample_weights is not None:
            rows = rows * per_sample_weights.unsqueeze(1)
        out = OPS["index_add"](zeros, 0, bag, rows)[:num_bags]
        if mode == "mean":
            ones = OPS["full"]((n,), 1, dtype=weight.dtype, device=weight.device)
            counts = OPS["index_add"](zeros[:, 0], 0, bag, ones)[:num_bags]
            out = out / counts.clamp(min=1).unsqueeze(1)
    rename_grad_fn(out, (weight,), "EmbeddingBagBackward0")  # one node in PyTorch, as reprs show
    return out


@torch_function("embedding_bag")
def _torch_embedding_bag(
    weight: Tensor,
    indices: Tensor,
    offsets: Tensor,
    scale_grad_by_freq: bool = False,
    mode: int = 0,
    sparse: bool = False,
    per_sample_weights: Tensor | None = None,
    include_last_offset: bool = False,
    padding_idx: int | None = None,
) -> tuple:
    """``torch.embedding_bag``: ``mode`` 0/1/2 for sum/mean/max, returning (output, offset2bag,
    bag_size, max_indices) -- the bag of each index, the indices counted in each bag and, for
    max, the row each maximum came from -- filled as PyTorch's CPU kernel fills them (the
    integer outputs of a plain sum are empty or zero there)."""
    out = embedding_bag(
        indices, weight, offsets, None, 2, scale_grad_by_freq, ("sum", "mean", "max")[mode],
        sparse, per_sample_weights, include_last_offset, padding_idx,
    )  # fmt: skip
    n = indices.shape[0]
    bag, num_bags = _bag_of_each_index(offsets, n, include_last_offset)
    bag = bag.clamp(0, max(num_bags - 1, 0)).to(dt.int64)
    zeros = OPS["full"]((num_bags,), 0, dtype=dt.int64, device=indices.device)
    if mode == 0:  # sized by the offsets (even the closing one) when no gradient is recorded
        recorded = weight.requires_grad and is_grad_enabled()
        size = num_bags if recorded else offsets.shape[0]
        unused = OPS["full"]((size,), 0, dtype=dt.int64, device=indices.device)
        # PyTorch's fast sum path (float32 and the half types, no padding) leaves it empty
        fast = padding_idx is None and weight.dtype in (dt.float32, dt.float16, dt.bfloat16)
        empty = OPS["full"]((0,), 0, dtype=dt.int64, device=indices.device)
        return out, empty if fast else bag, unused, unused
    counted = OPS["full"]((n,), 1, dtype=dt.int64, device=indices.device)
    if padding_idx is not None:
        counted = (indices != padding_idx % weight.shape[0]).to(dt.int64)
    bag_size = OPS["index_add"](zeros, 0, bag, counted)
    if mode == 1:
        return out, bag, bag_size, bag_size
    rows = OPS["embedding"](weight.detach(), indices, -1, False, False)
    dim = weight.shape[1]
    best = OPS["full"]((num_bags, dim), 0, dtype=dt.int64, device=indices.device)
    for b in range(num_bags):  # the first row holding each column's maximum, per bag
        members = ((bag == b) & (counted > 0)).nonzero().reshape(-1)
        if members.numel():
            winners = rows[members].argmax(0)
            best[b] = indices[members][winners].to(dt.int64)
    return out, bag, bag_size, best
