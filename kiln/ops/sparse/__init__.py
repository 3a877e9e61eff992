"""Sparse COO tensors: the representation (``coo``) and its ops with gradients (``functions``).

The methods PyTorch gives sparse tensors are bound here, on the ``SparseTensor`` class only:
dense tensors keep their method table unchanged.
"""

from __future__ import annotations

from . import functions
from .coo import SparseTensor, dense_to_sparse
from .printing import sparse_repr

__all__ = ["SparseTensor", "dense_to_sparse"]

_METHODS = {
    "coalesce": functions.coalesce,
    "to_dense": functions.to_dense,
    "values": functions.values,
    "indices": functions.indices,
    "t": functions.transpose,
    "transpose": functions.transpose,
    "detach": functions.detach,
    "zero_": functions.zero_,
    "clone": functions.clone,
    "to_sparse": dense_to_sparse,
    "to_sparse_coo": dense_to_sparse,
    "__repr__": sparse_repr,
    "__str__": sparse_repr,
}
for _name, _method in _METHODS.items():
    setattr(SparseTensor, _name, _method)
SparseTensor.T = property(functions.transpose)
SparseTensor.data = property(functions.detach)
