"""Making and converting sparse COO tensors, with their gradients: the constructor, coalesce,
to_dense, values, transpose, casts, clones. A Function's backward computes on arrays (the
gradients are first-order)."""

from __future__ import annotations

import numpy as np

from ...autograd.function import Function
from ...runtime import dtypes as dt
from ...runtime.tensor import Tensor, wrap_array
from .coo import SparseTensor, coalesced_arrays, dense_array, linear_index, make_sparse


def as_dense_tensor(data, dtype=None) -> Tensor:
    from ..creation.api import as_tensor

    return as_tensor(data, dtype=dtype)


def wrap(array: np.ndarray, dtype) -> Tensor:
    return wrap_array(np.require(array, requirements="C"), dtype)  # 0-d stays 0-d


def values_at(grad: Tensor, indices: np.ndarray, value_shape: tuple) -> np.ndarray:
    """``grad``'s entries at the columns of ``indices`` (zeros where a sparse ``grad`` has none),
    shaped as values: how a gradient reaches a sparse tensor's values."""
    if not isinstance(grad, SparseTensor):
        return grad._check_data("read")[tuple(indices)]
    g_indices, g_values = coalesced_arrays(grad)
    sparse_shape = grad._shape[: g_indices.shape[0]]
    keys = linear_index(g_indices, sparse_shape)
    wanted = linear_index(indices, sparse_shape)
    out = np.zeros((indices.shape[1], *value_shape[1:]), g_values.dtype)
    if len(keys):
        at = np.minimum(np.searchsorted(keys, wanted), len(keys) - 1)
        found = keys[at] == wanted
        out[found] = g_values[at[found]]
    return out


def gradient_on(t: SparseTensor, grad: Tensor) -> SparseTensor:
    """``grad`` restricted to ``t``'s entries, as a sparse tensor with ``t``'s indices."""
    array = values_at(grad, t._sparse_indices._data, t._sparse_values._shape)
    return make_sparse(t._sparse_indices, wrap(array, grad._dtype), t._shape, t._coalesced)


class NoContext:
    """A stand-in ``ctx`` for running a Function's forward outside autograd."""


class SparseCooTensorWithDimsAndTensors(Function):
    @staticmethod
    def forward(ctx, indices: Tensor, values_: Tensor, shape: tuple, coalesced: bool):
        ctx.indices = indices._data
        ctx.value_shape = values_._shape
        return make_sparse(indices, values_.detach(), shape, coalesced)

    @staticmethod
    def backward(ctx, grad):
        if isinstance(grad, SparseTensor) and grad._sparse_indices._data is ctx.indices:
            # a gradient on these very entries (``Values``'): one per entry, duplicates apart
            return None, grad._sparse_values, None, None
        array = values_at(grad, ctx.indices, ctx.value_shape)
        return None, wrap(array, grad._dtype), None, None


def sparse_coo_tensor(
    indices,
    values,
    size=None,
    *,
    dtype=None,
    device=None,
    pin_memory: bool = False,
    requires_grad: bool = False,
    check_invariants: bool | None = None,
    is_coalesced: bool | None = None,
) -> SparseTensor:
    """``kiln.sparse_coo_tensor``: indices (sparse_dim, nnz), values (nnz, *dense_shape)."""
    if device is not None and str(device) != "cpu":
        raise NotImplementedError(
            f"sparse_coo_tensor: kiln's sparse tensors live on the CPU, got {device}"
        )
    indices = indices if isinstance(indices, Tensor) else as_dense_tensor(indices, dt.int64)
    values = values if isinstance(values, Tensor) else as_dense_tensor(values, dtype)
    if isinstance(indices, SparseTensor) or isinstance(values, SparseTensor):
        raise TypeError("sparse_coo_tensor: indices and values must be dense tensors")
    if dtype is not None and values._dtype is not dtype:
        values = values.to(dtype)
    if indices._dtype is not dt.int64:
        if indices._dtype.is_floating_point or indices._dtype.is_complex:
            raise RuntimeError(f"indices must be an int64 tensor, got {indices._dtype}")
        indices = indices.to(dt.int64)
    if indices.dim() != 2:
        raise RuntimeError(f"indices must be sparse_dim x nnz, but got: {list(indices._shape)}")
    nnz = indices._shape[1]
    if values.dim() == 0 or values._shape[0] != nnz:
        raise RuntimeError(
            f"indices and values must have same nnz, but got nnz from indices: {nnz}, "
            f"nnz from values: {values._shape[0] if values.dim() else 0}"
        )
    index_array = np.ascontiguousarray(indices._check_data("read"))
    sparse_dim = index_array.shape[0]
    dense_shape = tuple(values._shape[1:])
    if size is None:
        if nnz == 0 and sparse_dim:
            raise RuntimeError("sparse_coo_tensor: cannot infer the size of an empty tensor")
        bounds = tuple(int(m) + 1 for m in index_array.max(1)) if nnz else ()
        size = bounds + dense_shape
    size = tuple(int(s) for s in size)
    if len(size) != sparse_dim + len(dense_shape):
        raise RuntimeError(
            f"number of dimensions must be sparse_dim ({sparse_dim}) + dense_dim "
            f"({len(dense_shape)}), but got {len(size)}"
        )
    if size[sparse_dim:] != dense_shape:
        raise RuntimeError(
            f"values has incorrect size, expected {list((nnz, *size[sparse_dim:]))}, "
            f"got {list(values._shape)}"
        )
    if nnz:
        if index_array.min() < 0:
            raise RuntimeError("found negative index in the indices of a sparse tensor")
        for d in range(sparse_dim):
            top = int(index_array[d].max())
            if top >= size[d]:
                raise RuntimeError(
                    f"size is inconsistent with indices: for dim {d}, size is {size[d]} but "
                    f"found index {top}"
                )
    indices = wrap(index_array, dt.int64)
    coalesced = bool(is_coalesced) if is_coalesced is not None else nnz <= 1
    if values._requires_grad:
        out = SparseCooTensorWithDimsAndTensors.apply(indices, values, size, coalesced)
    else:
        out = make_sparse(indices, values, size, coalesced)
    if requires_grad:
        out.requires_grad_(True)
    return out


class Coalesce(Function):
    @staticmethod
    def forward(ctx, t: SparseTensor):
        index_array, value_array = coalesced_arrays(t)
        return make_sparse(wrap(index_array, dt.int64), wrap(value_array, t._dtype), t._shape, True)

    @staticmethod
    def backward(ctx, grad):
        return grad  # the same function of the entries: duplicates read the summed entry's


def coalesce(t: SparseTensor) -> SparseTensor:
    """``Tensor.coalesce``: sorted unique indices, duplicates summed (``t`` itself if it is)."""
    if t._coalesced:
        return t
    return Coalesce.apply(t)


class ToDense(Function):
    @staticmethod
    def forward(ctx, t: SparseTensor):
        ctx.source = t.detach()
        return wrap(dense_array(t), t._dtype)

    @staticmethod
    def backward(ctx, grad):
        return gradient_on(coalesce(ctx.source), grad)


def to_dense(t: Tensor, dtype=None, *, masked_grad: bool | None = None) -> Tensor:
    """``Tensor.to_dense``; a dense tensor returns itself, as in PyTorch."""
    if not isinstance(t, SparseTensor):
        return t if dtype is None else t.to(dtype)
    out = ToDense.apply(t)
    return out if dtype is None else out.to(dtype)


class Values(Function):
    """A sparse tensor's values, entry by entry, differentiable (uncoalesced ones only inside
    ops that are linear in them)."""

    @staticmethod
    def forward(ctx, t: SparseTensor):
        ctx.source = t.detach()
        return t._sparse_values.view_as(t._sparse_values)

    @staticmethod
    def backward(ctx, grad):
        source = ctx.source
        return make_sparse(source._sparse_indices, grad, source._shape, source._coalesced)


def _require_coalesced(t: SparseTensor, what: str) -> None:
    if not t._coalesced:
        raise RuntimeError(
            f"Cannot get {what} on an uncoalesced tensor, please call .coalesce() first"
        )


def values(t: SparseTensor) -> Tensor:
    """``Tensor.values``: a coalesced tensor's values (differentiable, as PyTorch's)."""
    _require_coalesced(t, "values")
    if t._requires_grad:
        return Values.apply(t)
    return t._sparse_values.view_as(t._sparse_values)


def indices(t: SparseTensor) -> Tensor:
    """``Tensor.indices``: a coalesced tensor's indices."""
    _require_coalesced(t, "indices")
    return t._sparse_indices.view_as(t._sparse_indices)


def transposed(t: SparseTensor) -> SparseTensor:
    return make_sparse(
        wrap(t._sparse_indices._data[::-1], dt.int64), t._sparse_values, t._shape[::-1]
    )


class Transpose(Function):
    @staticmethod
    def forward(ctx, t: SparseTensor):
        return transposed(t)

    @staticmethod
    def backward(ctx, grad):
        return transpose(grad)


def transpose(t: Tensor, dim0: int = 0, dim1: int = 1) -> Tensor:
    if not isinstance(t, SparseTensor):
        return t.t()
    if t.sparse_dim() != 2 or t.dense_dim() != 0 or {dim0 % 2, dim1 % 2} != {0, 1}:
        raise NotImplementedError(
            f"transpose: kiln transposes 2-d sparse matrices only, got shape {list(t._shape)}"
        )
    return Transpose.apply(t)


class Cast(Function):
    @staticmethod
    def forward(ctx, t: SparseTensor, dtype):
        ctx.dtype = t._dtype
        values_ = t._sparse_values.to(dtype)
        return make_sparse(t._sparse_indices, values_, t._shape, t._coalesced)

    @staticmethod
    def backward(ctx, grad):
        return grad.to(ctx.dtype), None


def cast(t: SparseTensor, dtype) -> SparseTensor:
    """``t.to(dtype)`` (``float()``, ``double()``...): the values converted."""
    return t if dtype is t._dtype else Cast.apply(t, dtype)


class Clone(Function):
    @staticmethod
    def forward(ctx, t: SparseTensor):
        return make_sparse(
            t._sparse_indices.clone(), t._sparse_values.clone(), t._shape, t._coalesced
        )

    @staticmethod
    def backward(ctx, grad):
        return grad


def clone(t: SparseTensor, *, memory_format=None) -> SparseTensor:
    return Clone.apply(t)


def zero_(t: SparseTensor) -> SparseTensor:
    """In place: no entries left (``zero_grad(set_to_none=False)`` on a sparse gradient)."""
    t._sparse_indices = wrap(np.zeros((t.sparse_dim(), 0), np.int64), dt.int64)
    t._sparse_values = wrap(t._sparse_values._data[:0].copy(), t._dtype)
    t._coalesced = True
    return t


def detach(t: SparseTensor) -> SparseTensor:
    return make_sparse(t._sparse_indices, t._sparse_values.detach(), t._shape, t._coalesced)
