"""``kiln.sparse``: PyTorch's ``torch.sparse`` namespace over kiln's sparse COO tensors.

Only the COO layout exists; the compressed layouts (CSR, CSC, BSR, BSC) are not implemented.
"""

from __future__ import annotations

from .ops.sparse import arithmetic as _arithmetic
from .ops.sparse import construction as _construction
from .ops.sparse import products as _products
from .ops.sparse.coo import SparseTensor as _SparseTensor
from .ops.sparse.softmax import sparse_softmax as _sparse_softmax
from .runtime import dtypes as _dt

__all__ = ["mm", "sum", "softmax", "log_softmax", "FloatTensor", "DoubleTensor", "LongTensor"]


def mm(mat1, mat2):
    """``sparse @ dense`` whose sparse operand's gradient is sparse (on its coalesced
    pattern), as ``torch.sparse.mm``'s."""
    return _products.sparse_mm(mat1, mat2, sparse_grad=True, name="torch.sparse.mm")


def sum(input, dim=None, dtype=None):  # noqa: A001 - PyTorch's name
    """``torch.sparse.sum``: see ``kiln.ops.sparse.arithmetic.sparse_sum``."""
    return _arithmetic.sparse_sum(input, dim, dtype)


def softmax(input, dim: int, *, dtype=None):
    """``torch.sparse.softmax``: over the entries held, the others as minus infinity."""
    return _sparse_softmax(input, dim, dtype)


def log_softmax(input, dim: int, *, dtype=None):
    """``torch.sparse.log_softmax``: the log of ``softmax``, computed as one."""
    return _sparse_softmax(input, dim, dtype, log=True)


def _legacy(dtype):
    def constructor(indices, values, size=None) -> _SparseTensor:
        """PyTorch's legacy ``torch.sparse.<Type>Tensor(indices, values[, size])``."""
        return _construction.sparse_coo_tensor(indices, values, size, dtype=dtype)

    return constructor


FloatTensor = _legacy(_dt.float32)
DoubleTensor = _legacy(_dt.float64)
LongTensor = _legacy(_dt.int64)
