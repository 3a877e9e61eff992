"""``kiln.sparse``: PyTorch's ``torch.sparse`` namespace over kiln's sparse COO tensors.

Only the COO layout exists; the compressed layouts (CSR, CSC, BSR, BSC) are not implemented.
"""

from __future__ import annotations

from .ops.sparse import arithmetic as _arithmetic
from .ops.sparse import construction as _construction
from .ops.sparse import products as _products
from .ops.sparse.coo import SparseTensor as _SparseTensor
from .runtime import dtypes as _dt

__all__ = ["mm", "sum", "FloatTensor", "DoubleTensor", "LongTensor"]


def mm(mat1, mat2):
    """``sparse @ dense`` whose sparse operand's gradient is sparse (on its coalesced
    pattern), as ``torch.sparse.mm``'s."""
    return _products.sparse_mm(mat1, mat2, sparse_grad=True, name="torch.sparse.mm")


def sum(input, dim=None, dtype=None):  # noqa: A001 - PyTorch's name
    """``torch.sparse.sum``: see ``kiln.ops.sparse.arithmetic.sparse_sum``."""
    return _arithmetic.sparse_sum(input, dim, dtype)


def _legacy(dtype):
    def constructor(indices, values, size=None) -> _SparseTensor:
        """PyTorch's legacy ``torch.sparse.<Type>Tensor(indices, values[, size])``."""
        return _construction.sparse_coo_tensor(indices, values, size, dtype=dtype)

    return constructor


FloatTensor = _legacy(_dt.float32)
DoubleTensor = _legacy(_dt.float64)
LongTensor = _legacy(_dt.int64)
