"""Arithmetic on sparse COO tensors: scaling, sums of tensors, elementwise ops on the values,
products with another tensor of one shape, and ``kiln.sparse.sum``."""

from __future__ import annotations

import numpy as np

from ...autograd.function import Function
from ...runtime import dtypes as dt
from ...runtime.tensor import Tensor
from .construction import (
    Coalesce,
    NoContext,
    SparseCooTensorWithDimsAndTensors,
    Values,
    cast,
    coalesce,
    gradient_on,
    values_at,
    wrap,
)
from .coo import SparseTensor, linear_index, make_sparse


def _on_values(t: SparseTensor, fn, coalesced: bool) -> SparseTensor:
    """A sparse tensor of ``fn(values)`` on ``t``'s indices (coalesced first where ``fn`` is
    not linear, as PyTorch does), differentiable through the values."""
    if coalesced:
        t = coalesce(t)
    source = Values.apply(t) if t._requires_grad else t._sparse_values
    new_values = fn(source)
    if new_values._requires_grad:
        parts = (t._sparse_indices, new_values, t._shape, t._coalesced)
        return SparseCooTensorWithDimsAndTensors.apply(*parts)
    return make_sparse(t._sparse_indices, new_values, t._shape, t._coalesced)


def zero_preserving(name: str):
    """The sparse version of a unary op that maps 0 to 0: the op on the coalesced values."""

    def apply(t, *args):
        from ..core.dispatch import dispatch
        from ..core.registry import OPS

        if not isinstance(t, SparseTensor):
            raise NotImplementedError(f"{name}: a sparse tensor as a second operand")
        return _on_values(t, lambda v: dispatch(OPS[name], (v, *args)), coalesced=True)

    return apply


def div(t, divisor, rounding_mode=None) -> SparseTensor:
    """``sparse / number`` (or a 0-d tensor), PyTorch's only sparse division."""
    from ..core.registry import OPS

    if not isinstance(t, SparseTensor) or isinstance(divisor, SparseTensor):
        raise NotImplementedError("div: kiln divides a sparse tensor by a number only")
    if isinstance(divisor, Tensor) and divisor.dim() != 0:
        raise RuntimeError(
            "Sparse division requires a scalar or zero-dim dense tensor divisor (got shape "
            f"{list(divisor._shape)} for divisor)"
        )
    linear = rounding_mode is None
    return _on_values(t, lambda v: OPS["div"](v, divisor, rounding_mode=rounding_mode), not linear)


def pow_(t, exponent) -> SparseTensor:
    from ..core.registry import OPS

    if not isinstance(t, SparseTensor) or isinstance(exponent, Tensor):
        raise NotImplementedError("pow: kiln raises a sparse tensor to a number only")
    if not exponent > 0:
        raise NotImplementedError(f"pow: a sparse tensor to the power {exponent} is not sparse")
    return _on_values(t, lambda v: OPS["pow"](v, exponent), coalesced=True)


class Scale(Function):
    @staticmethod
    def forward(ctx, t: SparseTensor, factor):
        ctx.factor = factor
        scaled = t._sparse_values._data * factor
        return make_sparse(t._sparse_indices, wrap(scaled, t._dtype), t._shape, t._coalesced)

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.factor, None


def _scalar(value, name: str):
    if isinstance(value, Tensor):
        if isinstance(value, SparseTensor) or value.dim() != 0:
            raise NotImplementedError(
                f"{name}: kiln multiplies a sparse tensor by a number or a 0-d tensor only"
            )
        return value.item()
    return value


def _elementwise_product(a: SparseTensor, b: Tensor) -> SparseTensor:
    """sparse * sparse (the entries both hold) or sparse * dense of one shape (``a``'s
    entries), coalesced first as PyTorch's; differentiable through both."""
    if tuple(a._shape) != tuple(b._shape):
        raise NotImplementedError(
            f"mul: kiln multiplies sparse tensors elementwise at one shape only, got "
            f"{list(a._shape)} and {list(b._shape)}"
        )
    if not isinstance(b, SparseTensor):  # linear in ``a``: its entries as they are
        source = Values.apply(a) if a._requires_grad else a._sparse_values
        where = tuple(wrap(row, dt.int64) for row in a._sparse_indices._data)
        product = source * b[where]
        return with_values(a._sparse_indices._data, product, a._shape, a._coalesced)
    a = coalesce(a)
    a_values = Values.apply(a) if a._requires_grad else a._sparse_values
    b = coalesce(b)
    sparse_shape = a._shape[: a.sparse_dim()]
    keys_a = linear_index(a._sparse_indices._data, sparse_shape)
    keys_b = linear_index(b._sparse_indices._data, sparse_shape)
    _, in_a, in_b = np.intersect1d(keys_a, keys_b, assume_unique=True, return_indices=True)
    b_values = Values.apply(b) if b._requires_grad else b._sparse_values
    product = a_values[wrap(in_a, dt.int64)] * b_values[wrap(in_b, dt.int64)]
    return with_values(a._sparse_indices._data[:, in_a], product, a._shape)


def with_values(index_array, new_values: Tensor, shape, coalesced: bool = True) -> SparseTensor:
    indices = wrap(index_array, dt.int64)
    if new_values._requires_grad:
        return SparseCooTensorWithDimsAndTensors.apply(indices, new_values, shape, coalesced)
    return make_sparse(indices, new_values, shape, coalesced)


def mul(a, b) -> SparseTensor:
    if not isinstance(a, SparseTensor):
        a, b = b, a
    if isinstance(b, Tensor) and (isinstance(b, SparseTensor) or b.dim() != 0):
        return _elementwise_product(a, b)
    factor = _scalar(b, "mul")
    if (isinstance(factor, float) or isinstance(factor, complex)) and not (
        a._dtype.is_floating_point or a._dtype.is_complex
    ):
        raise NotImplementedError("mul: a float factor on an integer sparse tensor")
    return Scale.apply(a, factor)


def mul_(t: Tensor, factor) -> SparseTensor:
    """In place: a sparse tensor's values scaled (SGD's momentum buffer of a sparse gradient)."""
    if not isinstance(t, SparseTensor):
        raise NotImplementedError("mul_: a dense tensor times a sparse one, in place")
    factor = _scalar(factor, "mul_")
    _check_no_history(t, factor if isinstance(factor, Tensor) else t, "mul_")
    t._sparse_values = wrap(t._sparse_values._data * factor, t._dtype)
    return t


def neg(t: SparseTensor) -> SparseTensor:
    return Scale.apply(t, -1)


class SparseAdd(Function):
    @staticmethod
    def forward(ctx, a: SparseTensor, b: SparseTensor, alpha):
        ctx.alpha = alpha
        b_values = b._sparse_values._data if alpha == 1 else b._sparse_values._data * alpha
        index_array = np.concatenate([a._sparse_indices._data, b._sparse_indices._data], 1)
        value_array = np.concatenate(
            [a._sparse_values._data, b_values.astype(a._sparse_values._data.dtype)]
        )
        return make_sparse(wrap(index_array, dt.int64), wrap(value_array, a._dtype), a._shape)

    @staticmethod
    def backward(ctx, grad):
        return grad, grad * ctx.alpha if ctx.alpha != 1 else grad, None


class DenseAddSparse(Function):
    @staticmethod
    def forward(ctx, dense: Tensor, t: SparseTensor, alpha):
        ctx.alpha = alpha
        ctx.source = t.detach()
        out = np.array(dense._check_data("add to"), copy=True)
        np.add.at(out, tuple(t._sparse_indices._data), t._sparse_values._data * alpha)
        return wrap(out, dense._dtype)

    @staticmethod
    def backward(ctx, grad):
        scaled = grad if ctx.alpha == 1 else grad * ctx.alpha
        return grad, gradient_on(coalesce(ctx.source), scaled), None


def _check_same_shape(a: Tensor, b: Tensor, name: str) -> None:
    if tuple(a._shape) != tuple(b._shape):
        raise RuntimeError(
            f"{name}: expected sizes to match, got {list(a._shape)} and {list(b._shape)}"
        )
    if a._dtype is not b._dtype:
        raise NotImplementedError(
            f"{name}: kiln adds sparse tensors of one dtype, got {a._dtype} and {b._dtype}"
        )


def add(a, b, alpha=1) -> Tensor:
    """sparse + sparse (sparse, uncoalesced) and dense + sparse (dense), as PyTorch's."""
    if not isinstance(a, Tensor) or not isinstance(b, Tensor):
        raise NotImplementedError("add: a sparse tensor and a number (use values() and rebuild)")
    _check_same_shape(a, b, "add")
    if isinstance(a, SparseTensor) and isinstance(b, SparseTensor):
        return SparseAdd.apply(a, b, alpha)
    if isinstance(a, SparseTensor):
        raise RuntimeError("add(sparse, dense) is not supported. Use add(dense, sparse) instead.")
    return DenseAddSparse.apply(a, b, alpha)


def sub(a, b, alpha=1) -> Tensor:
    return add(a, b, -alpha)


def _check_no_history(a: Tensor, b: Tensor, name: str) -> None:
    if a._requires_grad or b._requires_grad:
        from ...runtime.state import per_thread

        if per_thread.state.grad_enabled:
            raise NotImplementedError(f"{name}: an in-place sparse op with autograd")


def add_(a: Tensor, b: Tensor, alpha=1) -> Tensor:
    """In place: a sparse ``a`` gains ``b``'s entries; a dense ``a`` adds ``b``'s values in (how
    gradients accumulate into ``.grad``)."""
    _check_same_shape(a, b, "add_")
    _check_no_history(a, b, "add_")
    if isinstance(a, SparseTensor):
        if not isinstance(b, SparseTensor):
            raise RuntimeError("add_: a sparse tensor cannot gain a dense tensor in place")
        total = SparseAdd.forward(NoContext(), a, b, alpha)
        a._sparse_indices, a._sparse_values = total._sparse_indices, total._sparse_values
        a._coalesced = False
        return a
    data = a._check_data("add to")
    np.add.at(data, tuple(b._sparse_indices._data), b._sparse_values._data * alpha)
    a._get_storage().version += 1
    return a


class SparseSum(Function):
    @staticmethod
    def forward(ctx, t: SparseTensor):
        ctx.source = t.detach()
        return wrap(
            np.asarray(t._sparse_values._data.sum(dtype=t._sparse_values._data.dtype)), t._dtype
        )

    @staticmethod
    def backward(ctx, grad):
        pattern = coalesce(ctx.source)  # PyTorch's gradient: one entry per index
        filled = np.broadcast_to(grad._data, pattern._sparse_values._shape)
        return make_sparse(pattern._sparse_indices, wrap(filled, grad._dtype), pattern._shape, True)


def sparse_sum(t: SparseTensor, dim=None, dtype=None) -> Tensor:
    """``kiln.sparse.sum``: every entry (a dense 0-d tensor), or over some sparse dims (a
    sparse tensor of the others; dense when none is left), duplicates summed."""
    if not isinstance(t, SparseTensor):
        return t.sum() if dim is None else t.sum(dim)
    if dtype is not None:
        t = cast(t, dtype)
    if dim is None:
        return SparseSum.apply(t)
    dims = sorted({d % len(t._shape) for d in ((dim,) if isinstance(dim, int) else dim)})
    if any(d >= t.sparse_dim() for d in dims):
        raise NotImplementedError("sparse.sum: kiln sums over sparse dims only")
    return SparseSumDims.apply(t, tuple(dims))


class SparseSumDims(Function):
    @staticmethod
    def forward(ctx, t: SparseTensor, dims: tuple):
        keep = [d for d in range(t.sparse_dim()) if d not in dims]
        ctx.source, ctx.keep = t.detach(), keep
        kept_shape = tuple(t._shape[d] for d in keep) + tuple(t._shape[t.sparse_dim() :])
        reduced = make_sparse(
            wrap(t._sparse_indices._data[keep], dt.int64), t._sparse_values, kept_shape
        )
        reduced = Coalesce.forward(NoContext(), reduced)
        if keep:
            return reduced
        array = reduced._sparse_values._data
        return wrap(array[0] if len(array) else np.zeros(kept_shape, array.dtype), t._dtype)

    @staticmethod
    def backward(ctx, grad):
        pattern = coalesce(ctx.source)  # PyTorch's gradient: one entry per index
        kept_indices = pattern._sparse_indices._data[ctx.keep]
        if ctx.keep:
            array = values_at(grad, kept_indices, pattern._sparse_values._shape)
        else:
            array = np.broadcast_to(grad._data, pattern._sparse_values._shape)
        values_grad = wrap(array, grad._dtype)
        return make_sparse(pattern._sparse_indices, values_grad, pattern._shape, True), None


def sum_op(t, dim=None, keepdim=False, *, dtype=None):
    if keepdim:
        raise NotImplementedError("sum: keepdim=True on a sparse tensor")
    return sparse_sum(t, dim, dtype)
