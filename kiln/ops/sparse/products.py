"""Sparse x dense matrix products (``kiln.sparse.mm``, ``mm``, ``spmm``, ``matmul``) and the
sparse embedding lookup, with PyTorch's gradient layouts."""

from __future__ import annotations

import numpy as np

from ...autograd.function import Function
from ...runtime import dtypes as dt
from ...runtime.tensor import Tensor
from .construction import coalesce, transpose, transposed, wrap
from .coo import SparseTensor, coalesced_arrays, make_sparse


def _product(t: SparseTensor, dense: np.ndarray) -> np.ndarray:
    """``t @ dense`` for a 2-d ``t``: each row's products summed in index order."""
    index_array, value_array = (
        (t._sparse_indices._data, t._sparse_values._data) if t._coalesced else coalesced_arrays(t)
    )
    out = np.zeros((t._shape[0], dense.shape[1]), np.result_type(value_array, dense))
    if index_array.shape[1] == 0:
        return out
    rows, cols = index_array
    products = value_array[:, None] * dense[cols]
    starts = np.flatnonzero(np.r_[True, rows[1:] != rows[:-1]])
    out[rows[starts]] = np.add.reduceat(products, starts, axis=0)
    return out


def _check_mm(t: SparseTensor, dense: Tensor, name: str) -> None:
    if isinstance(dense, SparseTensor):
        raise NotImplementedError(
            f"{name}: sparse @ sparse is not implemented by kiln; call .to_dense() on one operand"
        )
    if len(t._shape) != 2 or t.dense_dim() != 0 or dense.dim() != 2:
        raise RuntimeError(
            f"{name}: expected a 2-d sparse matrix and a 2-d dense matrix, got shapes "
            f"{list(t._shape)} (sparse, {t.dense_dim()} dense dims) and {list(dense._shape)}"
        )
    if t._shape[1] != dense._shape[0]:
        raise RuntimeError(
            f"mat1 and mat2 shapes cannot be multiplied ({t._shape[0]}x{t._shape[1]} and "
            f"{dense._shape[0]}x{dense._shape[1]})"
        )
    if t._dtype is not dense._dtype:
        raise RuntimeError(
            f"expected mat1 and mat2 to have the same dtype, but got: {t._dtype} != {dense._dtype}"
        )


class SparseDenseMm(Function):
    @staticmethod
    def forward(ctx, t: SparseTensor, dense: Tensor, sparse_grad: bool):
        ctx.source = t.detach()
        ctx.dense = dense.detach()
        ctx.sparse_grad = sparse_grad
        return wrap(_product(t, dense._check_data("multiply")), dense._dtype)

    @staticmethod
    def backward(ctx, grad):
        source, dense = ctx.source, ctx.dense
        g = grad._check_data("read")
        grad_dense = grad_sparse = None
        if ctx.needs_input_grad[1]:
            grad_dense = wrap(_product(transposed(source), g), grad._dtype)
        if ctx.needs_input_grad[0]:
            d = dense._data
            if ctx.sparse_grad:
                pattern = coalesce(source)
                rows, cols = pattern._sparse_indices._data
                products = np.einsum("ij,ij->i", g[rows], d[cols]).astype(g.dtype)
                grad_sparse = make_sparse(
                    pattern._sparse_indices, wrap(products, grad._dtype), source._shape, True
                )
            else:
                grad_sparse = wrap(g @ d.T, grad._dtype)
        return grad_sparse, grad_dense, None


def sparse_mm(t: Tensor, dense: Tensor, *, sparse_grad: bool = False, name="mm") -> Tensor:
    """``sparse @ dense`` or ``dense @ sparse`` (dense result; the second as the transpose of
    the first). ``sparse_grad``: the sparse operand's gradient is sparse (``kiln.sparse.mm``),
    else dense (``kiln.mm``), as PyTorch's."""
    if not isinstance(t, SparseTensor):
        if dense.dim() != 2 or t.dim() != 2:
            raise RuntimeError(
                f"{name}: expected 2-d matrices, got {t.dim()}-d and {dense.dim()}-d"
            )
        return sparse_mm(transpose(dense), t.t(), sparse_grad=sparse_grad, name=name).t()
    _check_mm(t, dense, name)
    return SparseDenseMm.apply(t, dense, sparse_grad)


def spmm(input: Tensor, mat2: Tensor) -> Tensor:  # noqa: A002 - PyTorch's name
    """``torch.spmm``: ``mm`` whose first operand may be sparse (dense gradient to it)."""
    if isinstance(input, SparseTensor) or isinstance(mat2, SparseTensor):
        return sparse_mm(input, mat2, name="spmm")
    from ..core.registry import OPS

    return OPS["mm"](input, mat2)


def matmul_op(a, b):
    return sparse_mm(a, b, name="matmul")


def mm_op(a, b):
    return sparse_mm(a, b, name="mm")


class EmbeddingSparse(Function):
    @staticmethod
    def forward(ctx, weight: Tensor, indices: Tensor, padding_idx: int, scale_grad_by_freq: bool):
        from ..core.registry import OPS

        ctx.weight_shape, ctx.padding_idx = weight._shape, padding_idx
        ctx.indices, ctx.scale = indices._check_data("look up").reshape(-1), scale_grad_by_freq
        return OPS["embedding"](weight, indices, padding_idx, scale_grad_by_freq, False)

    @staticmethod
    def backward(ctx, grad):
        if ctx.scale:
            raise RuntimeError(
                "embedding_backward: scale_grad_by_freq not supported with sparse gradients"
            )
        rows = ctx.indices.astype(np.int64)
        values_ = grad._check_data("read").reshape(len(rows), *ctx.weight_shape[1:])
        keep = rows != ctx.padding_idx
        rows, values_ = rows[keep], values_[keep]
        out = make_sparse(
            wrap(rows[None], dt.int64),
            wrap(values_.astype(values_.dtype, copy=True), grad._dtype),
            ctx.weight_shape,
        )
        return out, None, None, None


def embedding_sparse(weight: Tensor, indices: Tensor, padding_idx: int, scale_grad_by_freq: bool):
    """``F.embedding(sparse=True)`` and the lookup of ``F.embedding_bag(sparse=True)``: the
    dense lookup, whose gradient to ``weight`` is a sparse tensor of the looked-up rows
    (uncoalesced, the padding index left out), as PyTorch's."""
    return EmbeddingSparse.apply(weight, indices, padding_idx, scale_grad_by_freq)
