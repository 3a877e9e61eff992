"""Embedding lookups and one-hot encoding.

``embedding`` gathers rows with a numpy kernel; its derivative scatters with ``index_put``
(skipping ``padding_idx``, optionally scaled by frequency), or straight into numpy zeros when
nothing records the backward, and its decomposition is an ``index`` whose gradient is rescaled
the same way. ``_one_hot`` backs ``F.one_hot``.
"""

from __future__ import annotations

import numpy as np

from ...runtime import dtypes as dt
from ..core.common import Tensor, fake, numpy_derivative_ok, wrap
from ..core.registry import OPS, defop
from ..indexing.row_accumulate import accumulate_rows

__all__: list[str] = []


def _check_indices(name, idx):
    if idx._dtype not in (dt.int64, dt.int32):
        raise RuntimeError(
            f"Expected tensor for argument #1 'indices' to have one of the following scalar types: "
            f"Long, Int; but got {idx.type()} instead (while checking arguments for {name})"
        )


@defop(kind="nn")
def embedding(
    weight: Tensor,
    indices: Tensor,
    padding_idx: int = -1,
    scale_grad_by_freq: bool = False,
    sparse: bool = False,
): ...


def _check_embedding(weight, indices, *rest) -> None:
    """PyTorch's checks, in its order: the indices' dtype, a 2-D weight, then its
    ``index_select`` of the rows, which refuses an empty table before reading any index.
    Made in front of the meta too, so compiled code refuses the same calls."""
    _check_indices("embedding", indices)
    if weight.ndim != 2:
        raise RuntimeError(f"'weight' must be 2-D, got a tensor of shape {list(weight._shape)}")
    rows, lookups = weight._shape[0], indices.numel()
    if rows.__class__ is int and rows == 0 and not (lookups.__class__ is int and lookups == 0):
        raise RuntimeError("index_select(): self indexing axis dim should be positive")


@embedding.register_kernel
def _embedding_kernel(weight, indices, padding_idx, scale_grad_by_freq, sparse):
    _check_embedding(weight, indices)
    idx = indices._data
    num = weight._shape[0]
    if idx.size and (idx.min() < 0 or idx.max() >= num):
        raise IndexError("index out of range in self")
    return wrap(np.take(weight._data, idx, axis=0), weight._dtype)


@embedding.register_meta
def _embedding_meta(weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    return fake(tuple(indices._shape) + (weight._shape[1],), weight._dtype, weight)


def _embedding_grad_numpy(weight, indices, padding_idx, g):
    """The weight's gradient summed into ``np.zeros``: a large vocabulary's table is mostly
    rows no index names, which calloc'd pages leave untouched, where zeros made by ``full``
    (written in full) and then copied by an out-of-place ``index_put`` passed over all of it
    twice: GPT-2's 50304 x 768 table took 0.37 s of a 5 s step that way. Rows add in index
    order, as ``index_put``'s accumulation does."""
    num, dim = weight.shape
    out = np.zeros((num, dim), g._data.dtype)
    flat = indices._data.reshape(-1)
    rows = np.ascontiguousarray(g._data).reshape(flat.shape[0], dim)
    if not accumulate_rows(out, flat, rows):
        np.add.at(out, flat, rows)
    if 0 <= padding_idx < num:
        out[padding_idx] = 0
    return wrap(out, g._dtype)


def _embedding_grad(c, g):
    weight, indices, padding_idx, scale_grad_by_freq, _ = c.args
    num, dim = weight.shape
    if (
        not scale_grad_by_freq
        and g.dtype is weight.dtype  # the weight is not saved: its shape, dtype and device
        and numpy_derivative_ok(g)
        and weight.device.type == "cpu"
    ):
        return (_embedding_grad_numpy(weight, indices, padding_idx, g), None, None, None, None)
    flat = indices.reshape(-1)
    rows = g.reshape(flat.shape[0], dim)  # (-1, dim) is ambiguous for a weight of width 0
    if padding_idx >= 0:
        rows = OPS["where"]((flat != padding_idx).unsqueeze(1), rows, 0)
    if scale_grad_by_freq:
        ones = rows.new_ones(flat.shape)
        counts = OPS["index_put"](rows.new_zeros((num,)), [flat], ones, True)
        rows = rows / OPS["index"](counts, [flat]).unsqueeze(1)
    return (
        OPS["index_put"](rows.new_zeros((num, dim)), [flat], rows, True),
        None,
        None,
        None,
        None,
    )


embedding.check_in_meta(_check_embedding)
embedding.register_derivative(_embedding_grad, save_inputs=(1,))


@embedding.register_decomposition
def _embedding_decomp(weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    # ``index`` counts negative indices from the end; an embedding refuses them
    rows = OPS["index"](weight, [OPS["_checked_index"](indices, weight.shape[0], "IndexError")])
    if padding_idx < 0 and not scale_grad_by_freq:
        return rows
    if not (weight.dtype.is_floating_point or weight.dtype.is_complex):
        return rows  # (no gradient to scale: the scaled form would promote integers to float)
    frozen = rows.detach()
    if not scale_grad_by_freq:
        # the padding row's lookups take no gradient: a selection between the row and its
        # detached copy, the same values bit for bit (frozen + (rows - frozen) * scale gave NaN
        # for an infinite weight: inf - inf)
        return OPS["where"]((indices != padding_idx).unsqueeze(-1), rows, frozen)
    # same values, gradient scaled per lookup: 0 for the padding row, 1/count
    flat = indices.reshape(-1)
    ones = weight.new_ones(tuple(flat.shape))
    counts = OPS["index_put"](weight.new_zeros((weight.shape[0],)), [flat], ones, True)
    scale = (indices != padding_idx).to(weight.dtype) / OPS["index"](counts, [indices])
    return frozen + (rows - frozen) * scale.unsqueeze(-1)


@defop(kind="nn", differentiable=False)
def _one_hot(self: Tensor, num_classes: int = -1): ...


def _check_one_hot(x):
    if x._dtype is not dt.int64:
        raise RuntimeError(
            f"one_hot is only applicable to index tensor of type LongTensor (got {x._dtype})."
        )


@_one_hot.register_kernel
def _one_hot_kernel(x, num_classes):
    _check_one_hot(x)
    a = x._data
    if a.size and a.min() < 0:
        raise RuntimeError("Class values must be non-negative.")
    if num_classes == -1:
        if a.size == 0:
            raise RuntimeError("Can not infer total number of classes from empty tensor.")
        num_classes = int(a.max()) + 1
    elif a.size and a.max() >= num_classes:
        raise RuntimeError("Class values must be smaller than num_classes.")
    return wrap((a[..., None] == np.arange(num_classes)).astype(np.int64), dt.int64)


@_one_hot.register_meta
def _one_hot_meta(x, num_classes=-1):
    _check_one_hot(x)
    if num_classes == -1:
        from ..indexing.subscript import DataDependentOutputError

        raise DataDependentOutputError("one_hot with num_classes=-1 has a data-dependent shape")
    return fake(tuple(x._shape) + (num_classes,), dt.int64, x)


@_one_hot.register_decomposition
def _one_hot_decomp(x, num_classes=-1):
    _check_one_hot(x)
    if num_classes == -1:
        num_classes = int(x.amax().item()) + 1  # data-dependent, as in PyTorch
    classes = OPS["arange"](0, num_classes, 1, dtype=dt.int64, device=x.device)
    x = OPS["_checked_index"](x, num_classes)  # a class outside [0, num_classes) is an error
    return (x.unsqueeze(-1) == classes).to(dt.int64)
