"""Sparse COO ops with their gradients, and the table ``dispatch`` consults for them.

Each op computes on the numpy arrays of the indices and values; its gradient is a
``kiln.autograd.Function`` so a sparse leaf gets the gradient layout PyTorch gives it
(``kiln.sparse.mm``: sparse, on the input's coalesced pattern; ``kiln.mm``: dense). Gradients
are first-order only (their backward computes on arrays).
"""

from __future__ import annotations

import numpy as np

from ...autograd.function import Function
from ...runtime import dtypes as dt
from ...runtime.tensor import Tensor, wrap_array
from .coo import SparseTensor, coalesced_arrays, dense_array, linear_index, make_sparse

__all__ = [
    "SPARSE_OPS",
    "sparse_dispatch",
    "sparse_coo_tensor",
    "coalesce",
    "to_dense",
    "values",
    "indices",
    "sparse_mm",
    "sparse_sum",
    "spmm",
]


def _as_tensor(data, dtype=None) -> Tensor:
    from ..creation.api import as_tensor

    return as_tensor(data, dtype=dtype)


def _wrap(array: np.ndarray, dtype) -> Tensor:
    return wrap_array(np.require(array, requirements="C"), dtype)  # 0-d stays 0-d


def _values_at(grad: Tensor, indices: np.ndarray, value_shape: tuple) -> np.ndarray:
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


def _gradient_on(t: SparseTensor, grad: Tensor) -> SparseTensor:
    """``grad`` restricted to ``t``'s entries, as a sparse tensor with ``t``'s indices."""
    array = _values_at(grad, t._sparse_indices._data, t._sparse_values._shape)
    return make_sparse(t._sparse_indices, _wrap(array, grad._dtype), t._shape, t._coalesced)


# ---------------------------------------------------------------------------- construction
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
        array = _values_at(grad, ctx.indices, ctx.value_shape)
        return None, _wrap(array, grad._dtype), None, None


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
    indices = indices if isinstance(indices, Tensor) else _as_tensor(indices, dt.int64)
    values = values if isinstance(values, Tensor) else _as_tensor(values, dtype)
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
    indices = _wrap(index_array, dt.int64)
    coalesced = bool(is_coalesced) if is_coalesced is not None else nnz <= 1
    if values._requires_grad:
        out = SparseCooTensorWithDimsAndTensors.apply(indices, values, size, coalesced)
    else:
        out = make_sparse(indices, values, size, coalesced)
    if requires_grad:
        out.requires_grad_(True)
    return out


# ---------------------------------------------------------------------------- conversions
class Coalesce(Function):
    @staticmethod
    def forward(ctx, t: SparseTensor):
        index_array, value_array = coalesced_arrays(t)
        return make_sparse(
            _wrap(index_array, dt.int64), _wrap(value_array, t._dtype), t._shape, True
        )

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
        return _wrap(dense_array(t), t._dtype)

    @staticmethod
    def backward(ctx, grad):
        return _gradient_on(coalesce(ctx.source), grad)


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


# ---------------------------------------------------------------------------- products
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


def _transposed(t: SparseTensor) -> SparseTensor:
    return make_sparse(
        _wrap(t._sparse_indices._data[::-1], dt.int64), t._sparse_values, t._shape[::-1]
    )


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
        return _wrap(_product(t, dense._check_data("multiply")), dense._dtype)

    @staticmethod
    def backward(ctx, grad):
        source, dense = ctx.source, ctx.dense
        g = grad._check_data("read")
        grad_dense = grad_sparse = None
        if ctx.needs_input_grad[1]:
            grad_dense = _wrap(_product(_transposed(source), g), grad._dtype)
        if ctx.needs_input_grad[0]:
            d = dense._data
            if ctx.sparse_grad:
                pattern = coalesce(source)
                rows, cols = pattern._sparse_indices._data
                products = np.einsum("ij,ij->i", g[rows], d[cols]).astype(g.dtype)
                grad_sparse = make_sparse(
                    pattern._sparse_indices, _wrap(products, grad._dtype), source._shape, True
                )
            else:
                grad_sparse = _wrap(g @ d.T, grad._dtype)
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


# ---------------------------------------------------------------------------- arithmetic
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


def _zero_preserving(name: str):
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
        return make_sparse(t._sparse_indices, _wrap(scaled, t._dtype), t._shape, t._coalesced)

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
        where = tuple(_wrap(row, dt.int64) for row in a._sparse_indices._data)
        product = source * b[where]
        return _with_values(a._sparse_indices._data, product, a._shape, a._coalesced)
    a = coalesce(a)
    a_values = Values.apply(a) if a._requires_grad else a._sparse_values
    b = coalesce(b)
    sparse_shape = a._shape[: a.sparse_dim()]
    keys_a = linear_index(a._sparse_indices._data, sparse_shape)
    keys_b = linear_index(b._sparse_indices._data, sparse_shape)
    _, in_a, in_b = np.intersect1d(keys_a, keys_b, assume_unique=True, return_indices=True)
    b_values = Values.apply(b) if b._requires_grad else b._sparse_values
    product = a_values[_wrap(in_a, dt.int64)] * b_values[_wrap(in_b, dt.int64)]
    return _with_values(a._sparse_indices._data[:, in_a], product, a._shape)


def _with_values(index_array, new_values: Tensor, shape, coalesced: bool = True) -> SparseTensor:
    indices = _wrap(index_array, dt.int64)
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
    t._sparse_values = _wrap(t._sparse_values._data * factor, t._dtype)
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
        return make_sparse(_wrap(index_array, dt.int64), _wrap(value_array, a._dtype), a._shape)

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
        return _wrap(out, dense._dtype)

    @staticmethod
    def backward(ctx, grad):
        scaled = grad if ctx.alpha == 1 else grad * ctx.alpha
        return grad, _gradient_on(coalesce(ctx.source), scaled), None


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
        total = SparseAdd.forward(_Context(), a, b, alpha)
        a._sparse_indices, a._sparse_values = total._sparse_indices, total._sparse_values
        a._coalesced = False
        return a
    data = a._check_data("add to")
    np.add.at(data, tuple(b._sparse_indices._data), b._sparse_values._data * alpha)
    a._get_storage().version += 1
    return a


class _Context:
    """A stand-in ``ctx`` for running a Function's forward outside autograd."""


# ---------------------------------------------------------------------------- shape, reductions
class Transpose(Function):
    @staticmethod
    def forward(ctx, t: SparseTensor):
        return _transposed(t)

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


class SparseSum(Function):
    @staticmethod
    def forward(ctx, t: SparseTensor):
        ctx.source = t.detach()
        return _wrap(
            np.asarray(t._sparse_values._data.sum(dtype=t._sparse_values._data.dtype)), t._dtype
        )

    @staticmethod
    def backward(ctx, grad):
        pattern = coalesce(ctx.source)  # PyTorch's gradient: one entry per index
        filled = np.broadcast_to(grad._data, pattern._sparse_values._shape)
        return make_sparse(
            pattern._sparse_indices, _wrap(filled, grad._dtype), pattern._shape, True
        )


def sparse_sum(t: SparseTensor, dim=None, dtype=None) -> Tensor:
    """``kiln.sparse.sum``: every entry (a dense 0-d tensor), or over some sparse dims (a
    sparse tensor of the others; dense when none is left), duplicates summed."""
    if not isinstance(t, SparseTensor):
        return t.sum() if dim is None else t.sum(dim)
    if dtype is not None:
        t = _cast(t, dtype)
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
            _wrap(t._sparse_indices._data[keep], dt.int64), t._sparse_values, kept_shape
        )
        reduced = Coalesce.forward(_Context(), reduced)
        if keep:
            return reduced
        array = reduced._sparse_values._data
        return _wrap(array[0] if len(array) else np.zeros(kept_shape, array.dtype), t._dtype)

    @staticmethod
    def backward(ctx, grad):
        pattern = coalesce(ctx.source)  # PyTorch's gradient: one entry per index
        kept_indices = pattern._sparse_indices._data[ctx.keep]
        if ctx.keep:
            array = _values_at(grad, kept_indices, pattern._sparse_values._shape)
        else:
            array = np.broadcast_to(grad._data, pattern._sparse_values._shape)
        values_grad = _wrap(array, grad._dtype)
        return make_sparse(pattern._sparse_indices, values_grad, pattern._shape, True), None


class Cast(Function):
    @staticmethod
    def forward(ctx, t: SparseTensor, dtype):
        ctx.dtype = t._dtype
        values_ = t._sparse_values.to(dtype)
        return make_sparse(t._sparse_indices, values_, t._shape, t._coalesced)

    @staticmethod
    def backward(ctx, grad):
        return grad.to(ctx.dtype), None


def _cast(t: SparseTensor, dtype) -> SparseTensor:
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
    t._sparse_indices = _wrap(np.zeros((t.sparse_dim(), 0), np.int64), dt.int64)
    t._sparse_values = _wrap(t._sparse_values._data[:0].copy(), t._dtype)
    t._coalesced = True
    return t


def detach(t: SparseTensor) -> SparseTensor:
    return make_sparse(t._sparse_indices, t._sparse_values.detach(), t._shape, t._coalesced)


def spmm(input: Tensor, mat2: Tensor) -> Tensor:  # noqa: A002 - PyTorch's name
    """``torch.spmm``: ``mm`` whose first operand may be sparse (dense gradient to it)."""
    if isinstance(input, SparseTensor) or isinstance(mat2, SparseTensor):
        return sparse_mm(input, mat2, name="spmm")
    from ..core.registry import OPS

    return OPS["mm"](input, mat2)


def _matmul(a, b):
    return sparse_mm(a, b, name="matmul")


def _mm(a, b):
    return sparse_mm(a, b, name="mm")


def _sum(t, dim=None, keepdim=False, *, dtype=None):
    if keepdim:
        raise NotImplementedError("sum: keepdim=True on a sparse tensor")
    return sparse_sum(t, dim, dtype)


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
            _wrap(rows[None], dt.int64),
            _wrap(values_.astype(values_.dtype, copy=True), grad._dtype),
            ctx.weight_shape,
        )
        return out, None, None, None


def embedding_sparse(weight: Tensor, indices: Tensor, padding_idx: int, scale_grad_by_freq: bool):
    """``F.embedding(sparse=True)`` and the lookup of ``F.embedding_bag(sparse=True)``: the
    dense lookup, whose gradient to ``weight`` is a sparse tensor of the looked-up rows
    (uncoalesced, the padding index left out), as PyTorch's."""
    return EmbeddingSparse.apply(weight, indices, padding_idx, scale_grad_by_freq)


# the dense ops a sparse argument may reach, by op name (anything else: NotImplementedError)
SPARSE_OPS = {
    "mm": _mm,
    "matmul": _matmul,
    "add": add,
    "sub": sub,
    "add_": add_,
    "mul": mul,
    "mul_": mul_,
    "neg": neg,
    "sum": _sum,
    "clone": clone,
    "convert_element_type": _cast,
    "div": div,
    "pow": pow_,
}
# unary ops that map zero to zero, as PyTorch's sparse kernels run them: on the coalesced values
ZERO_PRESERVING = (
    "abs sqrt sin tan tanh relu sign expm1 log1p floor ceil round trunc frac asin atan sinh asinh "
    "atanh erf erfinv isnan isinf signbit nan_to_num"
).split()
SPARSE_OPS.update({name: _zero_preserving(name) for name in ZERO_PRESERVING})


def sparse_dispatch(op, args: tuple):
    """Run the sparse version of ``op`` (``dispatch`` found a sparse tensor among ``args``)."""
    impl = SPARSE_OPS.get(op.name)
    if impl is None:
        raise NotImplementedError(
            f"Could not run 'aten::{op.name}' with arguments from the 'SparseCPU' backend: kiln's "
            f"sparse COO tensors support {', '.join(sorted(SPARSE_OPS))}; call .to_dense() first"
        )
    return impl(*args)
