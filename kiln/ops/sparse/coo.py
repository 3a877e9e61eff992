"""The sparse COO tensor: a ``Tensor`` of layout ``kiln.sparse_coo`` holding two dense tensors.

A ``SparseTensor`` has no ``_data`` (like a fake tensor), so the dense dispatch's CPU fast path
never takes it: ``dispatch`` sends an op with a sparse argument to ``sparse.dispatch`` from the
branch it already takes for data-less tensors, and dense ops pay nothing. ``indices`` is an int64
tensor of shape (sparse_dim, nnz), ``values`` one of shape (nnz, *dense_shape), as PyTorch's.
"""

from __future__ import annotations

import copy

import numpy as np

from ...runtime import dtypes as dt
from ...runtime.device import cpu
from ...runtime.layouts import sparse_coo
from ...runtime.tensor import Tensor, wrap_array

__all__ = ["SparseTensor", "make_sparse", "coalesced_arrays", "dense_array", "dense_to_sparse"]


class SparseTensor(Tensor):
    """A sparse COO tensor (see the module docstring)."""

    __module__ = "kiln"
    __slots__ = ("_sparse_indices", "_sparse_values", "_coalesced")

    is_sparse = True

    @property
    def layout(self):
        return sparse_coo

    def sparse_dim(self) -> int:
        return self._sparse_indices._shape[0]

    def dense_dim(self) -> int:
        return len(self._sparse_values._shape) - 1

    def _nnz(self) -> int:
        return self._sparse_indices._shape[1]

    def _indices(self) -> Tensor:
        return self._sparse_indices

    def _values(self) -> Tensor:
        return self._sparse_values

    def is_coalesced(self) -> bool:
        return self._coalesced

    def _coalesced_(self, coalesced: bool) -> SparseTensor:
        self._coalesced = coalesced
        return self

    def is_contiguous(self, memory_format=None) -> bool:
        raise RuntimeError("Tensors of type SparseTensorImpl do not have is_contiguous")

    def stride(self, dim: int | None = None):
        raise RuntimeError("Tensors of type SparseTensorImpl do not have strides")

    def _get_storage(self):
        # in-place version counting and saved-tensor checks follow the values' storage
        return self._sparse_values._get_storage()

    def __reduce_ex__(self, protocol):
        parts = (self._sparse_indices, self._sparse_values.detach(), self._shape, self._coalesced)
        return (rebuild_sparse, (*parts, self._requires_grad))

    def __deepcopy__(self, memo):
        """A leaf's deep copy, as PyTorch's: indices and values copied, with ``requires_grad``
        and ``.grad``."""
        if id(self) in memo:
            return memo[id(self)]
        if self.grad_fn is not None:
            raise RuntimeError(
                "Only Tensors created explicitly by the user (graph leaves) support the deepcopy "
                "protocol at the moment."
            )
        indices = copy.deepcopy(self._sparse_indices, memo)
        values = copy.deepcopy(self._sparse_values.detach(), memo)
        result = make_sparse(indices, values, self._shape, self._coalesced)
        result._requires_grad = self._requires_grad
        memo[id(self)] = result
        if self._grad is not None:
            result._grad = copy.deepcopy(self._grad, memo)
        return result

    def _check_data(self, what: str):
        raise NotImplementedError(
            f"cannot {what} a tensor of layout kiln.sparse_coo: call .to_dense() first"
        )


def make_sparse(indices: Tensor, values: Tensor, shape, coalesced: bool = False) -> SparseTensor:
    """A sparse tensor around ``indices`` and ``values`` (no copy, no checks: callers check)."""
    t = object.__new__(SparseTensor)
    t._data = None
    t._shape = tuple(shape)
    t._dtype = values._dtype
    t._device = cpu
    t._storage = None
    t._stride = None
    t._base = None
    t._view_src = None
    t._sparse_indices = indices
    t._sparse_values = values
    t._coalesced = coalesced
    return t


def rebuild_sparse(indices, values, shape, coalesced: bool, requires_grad: bool):
    """Unpickling a sparse tensor (``SparseTensor.__reduce_ex__``)."""
    t = make_sparse(indices, values, shape, coalesced)
    t._requires_grad = requires_grad
    return t


def linear_index(indices: np.ndarray, sparse_shape: tuple) -> np.ndarray:
    """Each column of ``indices`` as one row-major number over the sparse dims (its sort key)."""
    if indices.shape[0] == 0:
        return np.zeros(indices.shape[1], np.int64)
    return np.ravel_multi_index(tuple(indices), sparse_shape)


def coalesced_arrays(t: SparseTensor) -> tuple[np.ndarray, np.ndarray]:
    """``t``'s indices sorted and unique and its values summed per index (numpy arrays)."""
    indices = t._sparse_indices._data
    values = t._sparse_values._data
    if indices.shape[1] == 0:
        return indices.copy(), values.copy()
    keys = linear_index(indices, t._shape[: indices.shape[0]])
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]
    starts = np.flatnonzero(np.r_[True, sorted_keys[1:] != sorted_keys[:-1]])
    out_values = np.add.reduceat(values[order], starts, axis=0).astype(values.dtype)
    return np.ascontiguousarray(indices[:, order[starts]]), out_values


def dense_array(t: SparseTensor) -> np.ndarray:
    """``t`` as a dense numpy array: duplicate entries summed, in index order per element."""
    indices = t._sparse_indices._data
    values = t._sparse_values._data
    out = np.zeros(t._shape, values.dtype)
    np.add.at(out, tuple(indices), values)
    return out


def dense_to_sparse(self: Tensor, sparse_dims: int | None = None, *, layout=None) -> SparseTensor:
    """``Tensor.to_sparse``: the non-zero entries (rows of the trailing dense dims with any
    non-zero) of a dense tensor, coalesced, as PyTorch makes them."""
    if isinstance(self, SparseTensor):
        if sparse_dims is not None and sparse_dims != self.sparse_dim():
            raise RuntimeError(
                "to_sparse: conversion from Sparse to Sparse with sparse_dim argument != "
                "self.sparse_dim() is not supported"
            )
        return self
    if layout is not None and layout is not sparse_coo:
        raise NotImplementedError(f"to_sparse: layout {layout} is not supported by kiln")
    array = self._check_data("convert to sparse")
    ndim = array.ndim
    sparse_dims = ndim if sparse_dims is None else sparse_dims
    if not 0 <= sparse_dims <= ndim:
        raise RuntimeError(
            f"sparse_dim argument must be in [0,{ndim}] range, but {sparse_dims} is given"
        )
    flat = array.reshape(array.shape[:sparse_dims] + (-1,))
    mask = (flat != 0).any(-1) if flat.shape[-1] else np.zeros(flat.shape[:-1], bool)
    where = np.nonzero(mask)
    indices = np.stack(where).astype(np.int64) if sparse_dims else np.zeros((0, 1), np.int64)
    values = array[where] if sparse_dims else array[None]
    return make_sparse(
        wrap_array(np.ascontiguousarray(indices.reshape(sparse_dims, -1)), dt.int64),
        wrap_array(np.ascontiguousarray(values), self._dtype),
        self._shape,
        coalesced=True,
    )
