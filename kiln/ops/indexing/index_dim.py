"""``index_*`` along one dim: index_select, index_add, index_fill, index_copy, index_reduce.

``index_select`` reads the slices ``x[..., index[i], ...]``; the other three write them, sharing
one numpy kernel (``_dim_put``) and one decomposition into ``index_put``. Derivatives follow
PyTorch's formulas (index_select and index_add are each other's adjoints).
"""

from __future__ import annotations

import numpy as np

from ...runtime import dtypes as dt
from ..core.common import (
    Scalar,
    Tensor,
    TensorOrScalar,
    checked_scalar,
    fake,
    laid_out,
    preserved_layout,
    require_tensor,
    scalar_value,
    wrap,
)
from ..core.common import wrap_dim as _wrap_dim
from ..core.grad_fn_naming import is_tensor_arg
from ..core.registry import OPS, defop
from .gather_scatter import INDEX_DTYPES, as_1d, check_index_bounds, index_dtype_name
from .row_accumulate import accumulate_rows

__all__: list[str] = []


def _dim_index_check(name: str, x, d: int, index, source=None) -> None:
    """Checks shared by ``index_add/index_copy/index_fill``: a vector of int32/int64 indices."""
    if index.ndim > 1:
        raise IndexError(
            f"{name}(): Index is supposed to be a vector, but got dim: {index.ndim} with type: "
            f"{index_dtype_name(index.dtype)} and size: {list(index.shape)}"
        )
    if index.dtype not in INDEX_DTYPES:
        raise RuntimeError(f"{name}(): Expected dtype int32/int64 for index")
    if source is None:
        return
    if source.dtype is not x.dtype:
        raise RuntimeError(
            f"{name}(): self ({index_dtype_name(x.dtype)}) and source ({index_dtype_name(source.dtype)}) must have the "
            "same scalar type"
        )
    xs, ss = list(x.shape) or [1], list(source.shape) or [1]
    n = index.numel()
    if len(xs) != len(ss) or any(a != b for k, (a, b) in enumerate(zip(xs, ss)) if k != d):
        raise RuntimeError(
            "source tensor shape must match self tensor shape, excluding the specified "
            f"dimension. Got self.shape = {list(x.shape)} source.shape = {list(source.shape)}"
        )
    if ss[d] != n:
        if not source.ndim:  # PyTorch reads the 0-d source's size along dim
            raise IndexError(f"Dimension specified as {d} but tensor has no dimensions")
        if name == "index_copy_":  # PyTorch's index_copy says it as an IndexError
            raise IndexError(
                f"{name}(): Number of indices ({n}) should be equal to source.size(dim) ({ss[d]})"
            )
        raise RuntimeError(
            f"{name}(): Number of indices ({n}) should be equal to source.size(dim): ({ss[d]}), "
            f"for dim: {d}"
        )


# ------------------------------------------------------------------------------ index_select


@defop(kind="indexing")
def index_select(self: Tensor, dim: int, index: Tensor): ...


def _index_select_check(x, dim, index):
    require_tensor("index_select", "index", index)
    d = _wrap_dim(dim, x.ndim)
    if index.ndim > 1:
        raise IndexError("index_select(): Index is supposed to be a vector")
    if index.dtype not in INDEX_DTYPES:
        raise RuntimeError("index_select(): Expected dtype int32 or int64 for index")
    if x.ndim == 0 and index.numel() != 1:
        raise RuntimeError(
            f"index_select(): Index to scalar can have only 1 value, got {index.numel()} value(s)"
        )
    if x.ndim > 1 and _known_zero(x.shape[d]) and not _known_zero(index.numel()):
        # (PyTorch's CPU kernel checks an empty matrix's axis before its indices)
        raise RuntimeError("index_select(): self indexing axis dim should be positive")
    if x.ndim == 0:
        return d, ()  # a scalar stays a scalar, whatever the index's shape
    shape = list(x.shape)
    shape[d] = index.numel()
    return d, tuple(shape)


def _known_zero(size) -> bool:
    """A size that is the int 0 (a symbolic size is taken for non-zero: no guard is made)."""
    return size.__class__ is int and size == 0


@index_select.register_kernel
def _index_select_kernel(x, dim, index):
    d, shape = _index_select_check(x, dim, index)
    a = as_1d(x._data)
    idx = index._data.reshape(-1)
    if idx.size and (idx.min() < 0 or idx.max() >= a.shape[d]):
        # PyTorch's CPU kernels differ by dim: its row copy (dim 0, and the last dim of 3-d and
        # wider inputs) raises IndexError, its gather path RuntimeError
        if d == 0 or a.ndim >= 3 and d == a.ndim - 1:
            raise IndexError("index out of range in self")
        bad = int(idx[(idx < 0) | (idx >= a.shape[d])][0])
        raise RuntimeError(f"INDICES element is out of DATA bounds, id={bad} axis_dim={a.shape[d]}")
    return wrap(np.take(a, idx, axis=d).reshape(shape), x._dtype)


@index_select.register_meta
def _index_select_meta(x, dim, index):
    return fake(_index_select_check(x, dim, index)[1], x._dtype, x)


def _index_select_grad(c, g):
    x, dim, index = c.args
    if x.ndim == 0:
        return (g.sum(),)
    d = _wrap_dim(dim, x.ndim)
    return (index_add(g.new_zeros(tuple(x.shape)), d, index.reshape(-1), g),)


index_select.register_derivative(_index_select_grad, save_inputs=(2,))
index_select.result_layout = "contiguous"  # as PyTorch's (the decomposition's index keeps x's)


@index_select.register_decomposition
def _index_select_decomp(x, dim, index):
    d, shape = _index_select_check(x, dim, index)
    flat = x.reshape(1) if x.ndim == 0 else x
    # ``index`` counts negative indices from the end; index_select refuses them, with the
    # kernel's exception type (``_index_select_kernel``)
    error = "IndexError" if d == 0 or flat.ndim >= 3 and d == flat.ndim - 1 else "RuntimeError"
    rows = OPS["_checked_index"](index.reshape(-1), flat.shape[d], error)
    return OPS["index"](flat, [None] * d + [rows]).reshape(shape)


# ------------------------------------------------------------------------------ index_add / fill / copy
# All three write slices ``out[..., index[i], ...]`` along one dim: one kernel, one decomposition.


def _dim_put(x, d, index, values, accumulate, exc=RuntimeError, prefix="", negative_ok=False):
    out = as_1d(x._data).copy()
    idx = index._data.reshape(-1)
    check_index_bounds(prefix, idx, out.shape[d], d, negative_ok, exc)
    where = (slice(None),) * d + (idx,)
    if accumulate:
        if not (
            isinstance(values, np.ndarray)
            and accumulate_rows(np.moveaxis(out, d, 0), idx, np.moveaxis(values, d, 0))
        ):
            np.add.at(out, where, values)
    else:
        out[where] = values
    return wrap(out.reshape(x._shape), x._dtype)


def _dim_put_decomp(x, d, index, values, accumulate, checked=False):
    """``checked``: the op refuses negative indices, and raises RuntimeError (index_add), not
    ``index_put``'s IndexError, for one out of range (``_checked_index``)."""
    flat = x.reshape(1) if x.ndim == 0 else x
    if checked:
        index = OPS["_checked_index"](index.reshape(-1), flat.shape[d], "RuntimeError")
    if values.ndim:
        # the slot count spelled out: -1 is ambiguous when another dim is 0
        count = (index.numel(),)
        values = values.reshape(tuple(flat.shape[:d]) + count + tuple(flat.shape[d + 1 :]))
    out = OPS["index_put"](flat, [None] * d + [index.reshape(-1)], values, accumulate)
    return out.reshape(tuple(x.shape))


def _source_grad(g, dim, index, source, scale=1):
    gs = index_select(g, dim, index).reshape(tuple(source.shape))
    return gs * scale if scale != 1 else gs


@defop(kind="indexing", inplace_method=True)
def index_add(self: Tensor, dim: int, index: Tensor, source: Tensor, *, alpha: Scalar = 1): ...


index_add.refuse_overlap("source")  # PyTorch's assert_no_overlap(self, source)


def _index_add_check(x, dim, index, source):
    d = _wrap_dim(dim, x.ndim)
    _dim_index_check("index_add_", x, d, index, source)
    return d


@index_add.register_kernel
def _index_add_kernel(x, dim, index, source, alpha):
    d = _index_add_check(x, dim, index, source)
    values = as_1d(source._data)
    if alpha != 1:  # alpha in the values' dtype first, as add's (-1 wraps to 255 for bytes)
        values = (values * np.asarray(alpha).astype(values.dtype)).astype(values.dtype)
    return _dim_put(x, d, index, values, True)


@index_add.register_meta
def _index_add_meta(x, dim, index, source, alpha=1):
    _index_add_check(x, dim, index, source)
    return fake(x._shape, x._dtype, x)


def _index_add_grad(c, g):
    x, dim, index, source, alpha = c.args
    gs = _source_grad(g, dim, index, source, alpha) if c.needs_input_grad[3] else None
    return g, None, None, gs, None


index_add.register_derivative(_index_add_grad, save_inputs=(2,))
index_add.result_layout = "contiguous"  # as PyTorch's (its decomposition's parts keep x's)


@index_add.register_decomposition
def _index_add_decomp(x, dim, index, source, alpha=1):
    d = _index_add_check(x, dim, index, source)
    values = source * alpha if alpha != 1 else source
    return _dim_put_decomp(x, d, index, values, True, checked=True)


@defop(kind="indexing", inplace_method=True)
def index_fill(self: Tensor, dim: int, index: Tensor, value: TensorOrScalar): ...


def _index_fill_check(x, dim, index, value):
    d = _wrap_dim(dim, x.ndim)
    _dim_index_check("index_fill_", x, d, index)
    if isinstance(value, Tensor) and value.ndim:
        raise RuntimeError(
            "index_fill_ only supports a 0-dimensional value tensor, but got tensor with "
            f"{value.ndim} dimension(s)."
        )
    return d


@index_fill.register_kernel
def _index_fill_kernel(x, dim, index, value):
    d = _index_fill_check(x, dim, index, value)
    value = scalar_value(value)
    if not isinstance(value, np.ndarray):
        value = checked_scalar(value, x._dtype)  # -1 into uint8 is 255, 300 raises
    out = _dim_put(x, d, index, value, False, IndexError, negative_ok=True)
    strides = preserved_layout(x)  # PyTorch fills a copy that keeps the input's layout
    return out if strides is None else wrap(laid_out(out._data, strides), x._dtype)


@index_fill.register_meta
def _index_fill_meta(x, dim, index, value):
    _index_fill_check(x, dim, index, value)
    return fake(x._shape, x._dtype, x, preserved_layout(x))


def _index_fill_grad(c, g):
    x, dim, index, value = c.args
    unfilled = index_fill(g, dim, index, 0)
    gx = unfilled if c.needs_input_grad[0] else None
    gv = None
    if is_tensor_arg(value) and c.needs_input_grad[3]:
        # each filled position once, however often the index repeats it (as PyTorch's sum over
        # the unique indices)
        gv = (g - unfilled).sum()
    return gx, None, None, gv


index_fill.register_derivative(_index_fill_grad, save_inputs=(2,))
index_fill.result_layout = "preserved"  # as PyTorch's


@index_fill.register_decomposition
def _index_fill_decomp(x, dim, index, value):
    d = _index_fill_check(x, dim, index, value)
    if isinstance(value, Tensor):
        value = value.to(x.dtype)
    else:
        value = OPS["full"]((), value, dtype=x.dtype, device=x.device)
    # a mask of the filled slots along ``d``, then a where: a slot the index repeats is
    # filled (and takes the value's gradient) once, as the kernel and its derivative say
    size = x.shape[d] if x.ndim else 1
    hit = OPS["index_put"](
        OPS["full"]((size,), False, dtype=dt.bool_, device=x.device),
        [index.reshape(-1)],
        OPS["full"]((), True, dtype=dt.bool_, device=x.device),
        False,
    )
    shape = [1] * x.ndim
    if x.ndim:
        shape[d] = size
    return OPS["where"](hit.reshape(shape), value, x)


@defop(kind="indexing", autocast={"cpu": "promote"}, inplace_method=True)
def index_copy(self: Tensor, dim: int, index: Tensor, source: Tensor): ...


index_copy.refuse_overlap("source")  # PyTorch's assert_no_overlap(self, source)


def _index_copy_check(x, dim, index, source):
    d = _wrap_dim(dim, x.ndim)
    _dim_index_check("index_copy_", x, d, index, source)
    return d


@index_copy.register_kernel
def _index_copy_kernel(x, dim, index, source):
    d = _index_copy_check(x, dim, index, source)
    return _dim_put(x, d, index, as_1d(source._data), False, IndexError, "index_copy_(): ")


@index_copy.register_meta
def _index_copy_meta(x, dim, index, source):
    _index_copy_check(x, dim, index, source)
    return fake(x._shape, x._dtype, x)


def _index_copy_grad(c, g):
    x, dim, index, source = c.args
    gx = index_fill(g, dim, index, 0) if c.needs_input_grad[0] else None
    gs = _source_grad(g, dim, index, source) if c.needs_input_grad[3] else None
    return gx, None, None, gs


index_copy.register_derivative(_index_copy_grad, save_inputs=(2,))
index_copy.result_layout = "contiguous"  # as PyTorch's (its decomposition's parts keep x's)
index_copy.register_decomposition(
    lambda x, dim, index, source: _dim_put_decomp(
        x, _index_copy_check(x, dim, index, source), index, source, False
    )
)


# ------------------------------------------------------------------------------ index_reduce


@defop(kind="indexing", inplace_method=True)
def index_reduce(
    self: Tensor, dim: int, index: Tensor, source: Tensor, reduce: str, *, include_self: bool = True
): ...


index_reduce.refuse_overlap("source")  # PyTorch's assert_no_overlap(self, source)


def _index_reduce_refusal(x, reduce: str, include_self: bool) -> str | None:
    """The kernel PyTorch names refusing a bool or complex ``x``, by the path it takes: a
    reduction without ``self`` and a vector's loop have neither dtype; the rows of a matrix
    take bools but for the mean (a floor division) and complex numbers but for amax/amin."""
    if not (x.dtype is dt.bool_ or x.dtype.is_complex):
        return None
    if not include_self:
        return "index_reduce_func_exclude_input_init"
    if x.ndim <= 1:
        return "index_func_"
    if x.dtype is dt.bool_:
        return "div_floor_cpu" if reduce == "mean" else None
    return {"amax": "maximum_cpu", "amin": "minimum_cpu"}.get(reduce)


@index_reduce.register_decomposition
def _index_reduce_decomp(x, dim, index, source, reduce, include_self=True):
    """``scatter_reduce`` with ``index`` spread over ``source``'s other dims."""
    d = _wrap_dim(dim, x.ndim)
    _dim_index_check("index_reduce_", x, d, index, source)
    if reduce not in ("prod", "mean", "amax", "amin"):
        raise RuntimeError(
            "index_reduce(): Expected reduce to be one of prod, mean, amax or amin but got "
            f"{reduce}."
        )
    kernel = _index_reduce_refusal(x, reduce, include_self)
    if kernel is not None:
        raise NotImplementedError(
            f"\"{kernel}\" not implemented for '{dt.torch_type_name(x.dtype)}'"
        )
    if source.ndim == 0:
        return OPS["scatter_reduce"](
            x, d, index.reshape(()), source, reduce, include_self=include_self
        )
    shape = [1] * source.ndim
    shape[d] = -1
    spread = index.reshape(shape).expand(tuple(source.shape))
    return OPS["scatter_reduce"](x, d, spread, source, reduce, include_self=include_self)
