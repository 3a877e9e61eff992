"""Sparse COO tensors: the representation (``coo``), its ops with gradients (``construction``,
``arithmetic``, ``products``) and the table dispatch reaches them by (``functions``).

The methods PyTorch gives sparse tensors are bound here, on the ``SparseTensor`` class only:
dense tensors keep their method table unchanged.
"""

from __future__ import annotations

from . import construction
from .coo import SparseTensor, dense_to_sparse
from .printing import sparse_repr

__all__ = ["SparseTensor", "dense_to_sparse"]

_METHODS = {
    "coalesce": construction.coalesce,
    "to_dense": construction.to_dense,
    "values": construction.values,
    "indices": construction.indices,
    "t": construction.transpose,
    "transpose": construction.transpose,
    "detach": construction.detach,
    "zero_": construction.zero_,
    "clone": construction.clone,
    "to_sparse": dense_to_sparse,
    "to_sparse_coo": dense_to_sparse,
    "__repr__": sparse_repr,
    "__str__": sparse_repr,
}
for _name, _method in _METHODS.items():
    setattr(SparseTensor, _name, _method)
SparseTensor.T = property(construction.transpose)
SparseTensor.data = property(construction.detach)
