"""Gather and scatter along a dim, index_* along a dim, masked and flat (take/put) selection.

``gather``, ``scatter_add`` and ``scatter_reduce`` are prims (numpy kernels with ``take_along_axis``
and ``ufunc.at``); the others have numpy kernels for eager speed plus decompositions into
``index``/``index_put``/``gather``/``scatter_add``. Derivatives follow PyTorch's formulas, so
duplicate indices accumulate and ties of ``amax``/``amin`` share the gradient evenly.
"""

from __future__ import annotations

import numpy as np

from ..autograd.graph import SavedMeta
from ..runtime import dtypes as dt
from .common import Scalar, Tensor, TensorOrScalar, broadcast_shapes, fake, scalar_value, wrap
from .common import wrap_dim as _wrap_dim
from .registry import OPS, defop, tensor_method, torch_function

__all__: list[str] = []

_INDEX_DTYPES = (dt.int64, dt.int32)


def _name(dtype: dt.dtype) -> str:
    return {"bool": "Bool", "bfloat16": "BFloat16"}.get(dtype.name, dtype.name.capitalize())


def _data_dependent(what: str):
    from .indexing import DataDependentOutputError

    return DataDependentOutputError(f"{what} has a data-dependent output shape")


def _is_tensor(x) -> bool:
    """A tensor argument, or the metadata autograd saved in its place."""
    return isinstance(x, (Tensor, SavedMeta))


def _arange(n: int, like: Tensor) -> Tensor:
    return OPS["arange"](0, n, 1, dtype=dt.int64, device=like.device)


# ------------------------------------------------------------------------------ shared checks


def _check_bounds(prefix, idx: np.ndarray, size: int, d: int, negative_ok=False, exc=RuntimeError):
    """PyTorch's message for an index outside ``[0, size)`` (or ``[-size, size)``)."""
    if idx.size == 0:
        return
    lo, hi = int(idx.min()), int(idx.max())
    low = -size if negative_ok else 0
    if hi >= size or lo < low:
        bad = hi if hi >= size else lo
        raise exc(f"{prefix}index {bad} is out of bounds for dimension {d} with size {size}")


def _dim_index_check(name: str, x, d: int, index, source=None) -> None:
    """Checks shared by ``index_add/index_copy/index_fill``: a vector of int32/int64 indices."""
    if index.ndim > 1:
        raise IndexError(
            f"{name}(): Index is supposed to be a vector, but got dim: {index.ndim} with type: "
            f"{_name(index.dtype)} and size: {list(index.shape)}"
        )
    if index.dtype not in _INDEX_DTYPES:
        raise RuntimeError(f"{name}(): Expected dtype int32/int64 for index")
    if source is None:
        return
    if source.dtype is not x.dtype:
        raise RuntimeError(
            f"{name}(): self ({_name(x.dtype)}) and source ({_name(source.dtype)}) must have the "
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
        raise RuntimeError(
            f"{name}(): Number of indices ({n}) should be equal to source.size(dim): ({ss[d]}), "
            f"for dim: {d}"
        )


def _as_1d(a: np.ndarray) -> np.ndarray:
    return a.reshape(1) if a.ndim == 0 else a


# ------------------------------------------------------------------------------ index_select


@defop(kind="indexing")
def index_select(self: Tensor, dim: int, index: Tensor): ...


def _index_select_check(x, dim, index):
    d = _wrap_dim(dim, x.ndim)
    if index.ndim > 1:
        raise IndexError("index_select(): Index is supposed to be a vector")
    if index.dtype not in _INDEX_DTYPES:
        raise RuntimeError("index_select(): Expected dtype int32 or int64 for index")
    if x.ndim == 0 and index.numel() != 1:
        raise IndexError(
            f"index_select(): Index to scalar can have only 1 value, got {index.numel()} value(s)"
        )
    if x.ndim == 0:
        return d, tuple(index.shape)
    shape = list(x.shape)
    shape[d] = index.numel()
    return d, tuple(shape)


@index_select.register_kernel
def _index_select_kernel(x, dim, index):
    d, shape = _index_select_check(x, dim, index)
    a = _as_1d(x._data)
    idx = index._data.reshape(-1)
    if idx.size and (idx.min() < 0 or idx.max() >= a.shape[d]):
        raise IndexError("index out of range in self")
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


@index_select.register_decomposition
def _index_select_decomp(x, dim, index):
    d, shape = _index_select_check(x, dim, index)
    flat = x.reshape(1) if x.ndim == 0 else x
    return OPS["index"](flat, [None] * d + [index.reshape(-1)]).reshape(shape)


# ------------------------------------------------------------------------------ gather (prim)


@defop(kind="indexing", prim=True)
def gather(self: Tensor, dim: int, index: Tensor, *, sparse_grad: bool = False): ...


def _gather_check(x, dim, index):
    d = _wrap_dim(dim, x.ndim)
    if index.dtype is not dt.int64:
        raise RuntimeError("gather(): Expected dtype int64 for index")
    if max(x.ndim, 1) != max(index.ndim, 1):
        raise RuntimeError("Index tensor must have the same number of dimensions as input tensor")
    xs, js = list(x.shape) or [1], list(index.shape) or [1]
    for k in range(len(js)):
        if k != d and js[k] > xs[k]:
            raise RuntimeError(
                f"Size does not match at dimension {k} expected index {list(index.shape)} to be "
                f"no larger than self {list(x.shape)} apart from dimension {d}"
            )
    return d


@gather.register_kernel
def _gather_kernel(x, dim, index, sparse_grad):
    d = _gather_check(x, dim, index)
    a, idx = _as_1d(x._data), _as_1d(index._data)
    _check_bounds("", idx, a.shape[d], d)
    window = tuple(slice(None) if k == d else slice(0, n) for k, n in enumerate(idx.shape))
    out = np.take_along_axis(a[window], idx, axis=d)
    return wrap(out.reshape(index._shape), x._dtype)


@gather.register_meta
def _gather_meta(x, dim, index, sparse_grad=False):
    _gather_check(x, dim, index)
    return fake(index._shape, x._dtype, x)


def _gather_grad(c, g):
    x, dim, index, _ = c.args
    return (scatter_add(g.new_zeros(tuple(x.shape)), dim, index, g),)


gather.register_derivative(_gather_grad, save_inputs=(2,))


# ------------------------------------------------------------------------------ scatter family


def _scatter_check(name, x, dim, index, src):
    d = _wrap_dim(dim, x.ndim)
    if index.dtype is not dt.int64:
        raise RuntimeError(f"{name}(): Expected dtype int64 for index")
    if isinstance(src, Tensor) and src.dtype is not x.dtype:
        raise RuntimeError(f"{name}(): Expected self.dtype to be equal to src.dtype")
    nd = max(x.ndim, 1)
    if max(index.ndim, 1) != nd:
        raise RuntimeError("Index tensor must have the same number of dimensions as self tensor")
    if isinstance(src, Tensor) and max(src.ndim, 1) != nd:
        raise RuntimeError("Index tensor must have the same number of dimensions as src tensor")
    xs, js = list(x.shape) or [1], list(index.shape) or [1]
    ss = (list(src.shape) or [1]) if isinstance(src, Tensor) else js
    if any((k != d and j > a) or j > s for k, (j, a, s) in enumerate(zip(js, xs, ss))):
        raise RuntimeError(
            f"Expected index {list(index.shape)} to be no larger than self {list(x.shape)} apart "
            f"from dimension {d}"
            + (
                f" and to be no larger size than src {list(src.shape)}"
                if isinstance(src, Tensor)
                else ""
            )
        )
    return d


def _scatter_coords(x, d, index):
    """numpy index arrays addressing ``out[i][j]..`` with ``index`` replacing coordinate ``d``."""
    idx = _as_1d(index._data)
    _check_bounds("", idx, (x._shape or (1,))[d], d)
    coords = list(np.indices(idx.shape, sparse=True))
    coords[d] = idx
    return tuple(coords), idx.shape


def _src_values(src, shape, dtype):
    """The part of ``src`` the index covers (or a scalar value), in the output dtype."""
    if not isinstance(src, Tensor):
        return np.asarray(scalar_value(src)).astype(dtype.np)
    s = _as_1d(src._data)
    return s[tuple(slice(0, n) for n in shape)]


def _pad_to(g: Tensor, shape) -> Tensor:
    """Zero-pad a gradient for the covered part of ``src`` back to ``src``'s shape."""
    shape = tuple(shape)
    if tuple(g.shape) == shape:
        return g
    if not shape:
        return g.reshape(())
    for k, n in enumerate(shape):
        if g.shape[k] < n:
            extra = list(g.shape)
            extra[k] = n - g.shape[k]
            g = OPS["cat"]([g, g.new_zeros(extra)], k)
    return g


def _narrow_to(t: Tensor, shape) -> Tensor:
    for k, n in enumerate(shape):
        if t.shape[k] != n:
            t = OPS["slice"](t, k, 0, n, 1)
    return t


@defop(kind="indexing")
def scatter(
    self: Tensor, dim: int, index: Tensor, src: TensorOrScalar, *, reduce: str | None = None
): ...


_SCATTER_UFUNCS = {"add": np.add, "multiply": np.multiply}


@scatter.register_kernel
def _scatter_kernel(x, dim, index, src, reduce):
    d = _scatter_check("scatter", x, dim, index, src)
    if reduce is not None and reduce not in _SCATTER_UFUNCS:
        raise RuntimeError("reduce argument must be either add or multiply.")
    out = _as_1d(x._data).copy()
    coords, shape = _scatter_coords(x, d, index)
    values = _src_values(src, shape, x._dtype)
    if reduce is None:
        out[coords] = values
    else:
        _SCATTER_UFUNCS[reduce].at(out, coords, values)
    return wrap(out.reshape(x._shape), x._dtype)


@scatter.register_meta
def _scatter_meta(x, dim, index, src, reduce=None):
    _scatter_check("scatter", x, dim, index, src)
    return fake(x._shape, x._dtype, x)


def _scatter_grad(c, g):
    x, dim, index, src, reduce = c.args
    if reduce is not None:
        raise NotImplementedError("derivative for aten::scatter is not implemented")
    gx = scatter(g, dim, index, 0) if c.needs_input_grad[0] else None
    gs = None
    if _is_tensor(src) and c.needs_input_grad[3]:
        gs = _pad_to(gather(g, dim, index), src.shape)
    return gx, None, None, gs


scatter.register_derivative(_scatter_grad, save_inputs=(2,))


def _coord_tensors(x: Tensor, d: int, index: Tensor) -> list:
    """Index tensors for ``index_put`` that address what ``scatter`` along ``d`` addresses."""
    n = index.ndim
    out = []
    for k in range(n):
        if k == d:
            out.append(index)
            continue
        shape = [1] * n
        shape[k] = index.shape[k]
        out.append(_arange(index.shape[k], x).reshape(shape))
    return out


def _scatter_values(src, index, dtype, device):
    if isinstance(src, Tensor):
        return _narrow_to(src, index.shape)
    return OPS["full"]((), src, dtype=dtype, device=device)


@scatter.register_decomposition
def _scatter_decomp(x, dim, index, src, reduce=None):
    d = _scatter_check("scatter", x, dim, index, src)
    if x.ndim == 0:
        flat = _scatter_decomp(x.reshape(1), 0, index.reshape(1), _flat1(src), reduce)
        return flat.reshape(())
    values = _scatter_values(src, index, x.dtype, x.device)
    if reduce == "multiply":
        values = values.expand(tuple(index.shape))
        return scatter_reduce(x, d, index, values, "prod")
    coords = _coord_tensors(x, d, index)
    return OPS["index_put"](x, coords, values, reduce == "add")


def _flat1(src):
    return src.reshape(1) if isinstance(src, Tensor) else src


def _scatter_arg(src, value):
    if src is None and value is None:
        raise TypeError("scatter() missing 1 required argument: 'src' or 'value'")
    return src if src is not None else value


@torch_function("scatter")
@tensor_method("scatter")
def _scatter_fn(input, dim, index, src=None, *, value=None, reduce=None):
    return scatter(input, dim, index, _scatter_arg(src, value), reduce=reduce)


@tensor_method("scatter_")
def _scatter_inplace(self, dim, index, src=None, *, value=None, reduce=None):
    return OPS["scatter_"](self, dim, index, _scatter_arg(src, value), reduce=reduce)


@defop(kind="indexing", prim=True)
def scatter_add(self: Tensor, dim: int, index: Tensor, src: Tensor): ...


@scatter_add.register_kernel
def _scatter_add_kernel(x, dim, index, src):
    d = _scatter_check("scatter_add", x, dim, index, src)
    out = _as_1d(x._data).copy()
    coords, shape = _scatter_coords(x, d, index)
    np.add.at(out, coords, _src_values(src, shape, x._dtype))
    return wrap(out.reshape(x._shape), x._dtype)


@scatter_add.register_meta
def _scatter_add_meta(x, dim, index, src):
    _scatter_check("scatter_add", x, dim, index, src)
    return fake(x._shape, x._dtype, x)


def _scatter_add_grad(c, g):
    x, dim, index, src = c.args
    gs = _pad_to(gather(g, dim, index), src.shape) if c.needs_input_grad[3] else None
    return g, None, None, gs


scatter_add.register_derivative(_scatter_add_grad, save_inputs=(2,))


# ------------------------------------------------------------------------------ scatter_reduce


@defop(kind="indexing", prim=True)
def scatter_reduce(
    self: Tensor, dim: int, index: Tensor, src: Tensor, reduce: str, *, include_self: bool = True
): ...


_REDUCE_UFUNCS = {
    "sum": np.add,
    "mean": np.add,
    "prod": np.multiply,
    "amax": np.maximum,
    "amin": np.minimum,
}


def _reduce_identity(reduce: str, dtype: dt.dtype):
    if reduce in ("sum", "mean"):
        return 0
    if reduce == "prod":
        return 1
    if dtype.is_floating_point:
        return -np.inf if reduce == "amax" else np.inf
    if dtype is dt.bool_:
        return reduce == "amin"
    info = np.iinfo(dtype.np)
    return info.min if reduce == "amax" else info.max


def _check_reduce(reduce):
    if reduce not in _REDUCE_UFUNCS:
        raise RuntimeError(
            f"reduce argument must be either sum, prod, mean, amax or amin, got {reduce}"
        )


@scatter_reduce.register_kernel
def _scatter_reduce_kernel(x, dim, index, src, reduce, include_self):
    _check_reduce(reduce)
    d = _scatter_check("scatter_reduce", x, dim, index, src)
    out = _as_1d(x._data).copy()
    coords, shape = _scatter_coords(x, d, index)
    values = _src_values(src, shape, x._dtype)
    if not include_self:
        out[coords] = _reduce_identity(reduce, x._dtype)
    _REDUCE_UFUNCS[reduce].at(out, coords, values)
    if reduce == "mean":
        count = np.full(out.shape, 1 if include_self else 0, dtype=np.int64)
        np.add.at(count, coords, 1)
        count = np.maximum(count, 1)
        if x._dtype.is_floating_point:
            out = (out / count).astype(out.dtype)
        else:
            out = np.floor_divide(out, count).astype(out.dtype)
    return wrap(out.reshape(x._shape), x._dtype)


@scatter_reduce.register_meta
def _scatter_reduce_meta(x, dim, index, src, reduce, include_self=True):
    _check_reduce(reduce)
    _scatter_check("scatter_reduce", x, dim, index, src)
    return fake(x._shape, x._dtype, x)


def _scatter_reduce_grad(c, g):
    """PyTorch's scatter_reduce backward: each reduction distributes ``g`` to its contributors."""
    x, dim, index, src, reduce, include_self = c.args
    result = c.out
    part = _narrow_to(src, index.shape)
    if reduce == "sum":
        gx, gs = g, gather(g, dim, index)
    elif reduce == "mean":
        count = g.new_ones(tuple(g.shape)) if include_self else g.new_zeros(tuple(g.shape))
        count = scatter_add(count, dim, index, part.new_ones(tuple(part.shape)))
        count = count.masked_fill(count == 0, 1)
        gx, gs = g / count, gather(g, dim, index) / gather(count, dim, index)
    elif reduce == "prod":
        gx, gs = _prod_grads(g, x, dim, index, part, result, include_self)
    else:  # amax / amin: ties split the gradient evenly between self and src entries
        value = gather(result, dim, index)
        self_is = (x == result).to(g.dtype)
        src_is = (part == value).to(g.dtype)
        share = g / scatter_add(self_is, dim, index, src_is)
        gx, gs = self_is * share, src_is * gather(share, dim, index)
    if not include_self:
        gx = scatter(gx, dim, index, 0)
    return gx, None, None, _pad_to(gs, src.shape), None, None


def _prod_grads(g, x, dim, index, part, result, include_self):
    """Exclusive products; a zero factor is replaced by one when it is the only zero of its slot."""
    where = OPS["where"]
    safe_self = where(x == 0, 1, x)
    others = scatter_reduce(safe_self, dim, index, part, "prod", include_self=include_self)
    gx = g * others / safe_self
    src_zero = part == 0
    zeros_per_slot = scatter_add(g.new_zeros(tuple(g.shape)), dim, index, src_zero.to(g.dtype))
    lone_zero = src_zero & (gather(zeros_per_slot, dim, index) == 1)
    without_lone = scatter_reduce(
        x, dim, index, where(lone_zero, 1, part), "prod", include_self=include_self
    )
    gs = where(
        lone_zero,
        gather(g * without_lone, dim, index),
        gather(g * result, dim, index) / where(src_zero, 1, part),
    )
    return gx, gs


scatter_reduce.register_derivative(_scatter_reduce_grad, save_output=True)


# ------------------------------------------------------------------------------ index_add / fill / copy
# All three write slices ``out[..., index[i], ...]`` along one dim: one kernel, one decomposition.


def _dim_put(x, d, index, values, accumulate, exc=RuntimeError, prefix="", negative_ok=False):
    out = _as_1d(x._data).copy()
    idx = index._data.reshape(-1)
    _check_bounds(prefix, idx, out.shape[d], d, negative_ok, exc)
    where = (slice(None),) * d + (idx,)
    if accumulate:
        np.add.at(out, where, values)
    else:
        out[where] = values
    return wrap(out.reshape(x._shape), x._dtype)


def _dim_put_decomp(x, d, index, values, accumulate):
    flat = x.reshape(1) if x.ndim == 0 else x
    if values.ndim:
        values = values.reshape(tuple(flat.shape[:d]) + (-1,) + tuple(flat.shape[d + 1 :]))
    out = OPS["index_put"](flat, [None] * d + [index.reshape(-1)], values, accumulate)
    return out.reshape(tuple(x.shape))


def _source_grad(g, dim, index, source, scale=1):
    gs = index_select(g, dim, index).reshape(tuple(source.shape))
    return gs * scale if scale != 1 else gs


@defop(kind="indexing")
def index_add(self: Tensor, dim: int, index: Tensor, source: Tensor, *, alpha: Scalar = 1): ...


def _index_add_check(x, dim, index, source):
    d = _wrap_dim(dim, x.ndim)
    _dim_index_check("index_add_", x, d, index, source)
    return d


@index_add.register_kernel
def _index_add_kernel(x, dim, index, source, alpha):
    d = _index_add_check(x, dim, index, source)
    values = _as_1d(source._data)
    if alpha != 1:
        values = (values * alpha).astype(values.dtype)
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


@index_add.register_decomposition
def _index_add_decomp(x, dim, index, source, alpha=1):
    d = _index_add_check(x, dim, index, source)
    return _dim_put_decomp(x, d, index, source * alpha if alpha != 1 else source, True)


@defop(kind="indexing")
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
    return _dim_put(x, d, index, scalar_value(value), False, IndexError, negative_ok=True)


@index_fill.register_meta
def _index_fill_meta(x, dim, index, value):
    _index_fill_check(x, dim, index, value)
    return fake(x._shape, x._dtype, x)


def _index_fill_grad(c, g):
    x, dim, index, value = c.args
    gx = index_fill(g, dim, index, 0) if c.needs_input_grad[0] else None
    gv = None
    if _is_tensor(value) and c.needs_input_grad[3]:
        gv = index_select(g, dim, index).sum()
    return gx, None, None, gv


index_fill.register_derivative(_index_fill_grad, save_inputs=(2,))


@index_fill.register_decomposition
def _index_fill_decomp(x, dim, index, value):
    d = _index_fill_check(x, dim, index, value)
    if isinstance(value, Tensor):
        value = value.to(x.dtype)
    else:
        value = OPS["full"]((), value, dtype=x.dtype, device=x.device)
    return _dim_put_decomp(x, d, index, value, False)


@defop(kind="indexing")
def index_copy(self: Tensor, dim: int, index: Tensor, source: Tensor): ...


def _index_copy_check(x, dim, index, source):
    d = _wrap_dim(dim, x.ndim)
    _dim_index_check("index_copy_", x, d, index, source)
    return d


@index_copy.register_kernel
def _index_copy_kernel(x, dim, index, source):
    d = _index_copy_check(x, dim, index, source)
    return _dim_put(x, d, index, _as_1d(source._data), False, IndexError, "index_copy_(): ")


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
index_copy.register_decomposition(
    lambda x, dim, index, source: _dim_put_decomp(
        x, _index_copy_check(x, dim, index, source), index, source, False
    )
)


# ------------------------------------------------------------------------------ masked


def _check_mask(name: str, mask: Tensor) -> None:
    if mask.dtype is not dt.bool_:
        raise RuntimeError(f"{name}: expected BoolTensor for mask")


@defop(kind="indexing")
def masked_select(self: Tensor, mask: Tensor): ...


@masked_select.register_kernel
def _masked_select_kernel(x, mask):
    _check_mask("masked_select", mask)
    shape = broadcast_shapes(x._shape, mask._shape)
    a = np.broadcast_to(x._data, shape)
    return wrap(np.require(a[np.broadcast_to(mask._data, shape)], requirements="C"), x._dtype)


@masked_select.register_meta
def _masked_select_meta(x, mask):
    _check_mask("masked_select", mask)
    raise _data_dependent("masked_select")


def _masked_select_grad(c, g):
    x, mask = c.args
    shape = broadcast_shapes(tuple(x.shape), tuple(mask.shape))
    return masked_scatter(g.new_zeros(shape), mask, g), None


masked_select.register_derivative(_masked_select_grad, save_inputs=(1,))


@masked_select.register_decomposition
def _masked_select_decomp(x, mask):
    _check_mask("masked_select", mask)
    shape = broadcast_shapes(tuple(x.shape), tuple(mask.shape))
    return OPS["index"](x.expand(shape), [mask.expand(shape)])


@defop(kind="indexing")
def masked_scatter(self: Tensor, mask: Tensor, source: Tensor): ...


def _masked_scatter_check(x, mask, source):
    _check_mask("masked_scatter_", mask)
    if source.dtype is not x.dtype:
        raise RuntimeError(
            "masked_scatter: expected self and source to have same dtypes but got "
            f"{_name(x.dtype)} and {_name(source.dtype)}"
        )
    return broadcast_shapes(x._shape, mask._shape)


@masked_scatter.register_kernel
def _masked_scatter_kernel(x, mask, source):
    shape = _masked_scatter_check(x, mask, source)
    out = np.array(np.broadcast_to(x._data, shape))
    m = np.broadcast_to(mask._data, shape)
    n = int(np.count_nonzero(m))
    if n > source.numel():
        raise RuntimeError("Number of elements of source < number of ones in mask")
    out[m] = source._data.reshape(-1)[:n]
    return wrap(out, x._dtype)


@masked_scatter.register_meta
def _masked_scatter_meta(x, mask, source):
    return fake(_masked_scatter_check(x, mask, source), x._dtype, x)


def _masked_scatter_grad(c, g):
    x, mask, source = c.args
    gx = g.masked_fill(mask, 0) if c.needs_input_grad[0] else None
    gs = None
    if c.needs_input_grad[2]:
        taken = masked_select(g, mask)
        rest = source.numel() - taken.shape[0]
        gs = OPS["cat"]([taken, taken.new_zeros((rest,))], 0).reshape(tuple(source.shape))
    return gx, None, gs


masked_scatter.register_derivative(_masked_scatter_grad, save_inputs=(1,))


@masked_scatter.register_decomposition
def _masked_scatter_decomp(x, mask, source):
    """The k-th True position takes ``source.flatten()[k]``: k is a running count of the mask."""
    shape = _masked_scatter_check(x, mask, source)
    base = x.expand(shape).reshape(-1)
    m = mask.expand(shape).reshape(-1)
    if source.numel() == 0:
        return OPS["where"](m, base, base).reshape(shape)
    rank = OPS["cumsum"](m, 0) - 1
    rank = OPS["clamp"](rank, 0, source.numel() - 1)
    values = OPS["index"](source.reshape(-1), [rank])
    return OPS["where"](m, values, base).reshape(shape)


# ------------------------------------------------------------------------------ flat: take / put


@defop(kind="indexing")
def take(self: Tensor, index: Tensor): ...


def _take_check(x, index):
    if index.dtype is not dt.int64:
        raise RuntimeError(
            f"take(): Expected a long tensor for index, but got {_name(index.dtype)}"
        )


@take.register_kernel
def _take_kernel(x, index):
    _take_check(x, index)
    n = x.numel()
    idx = index._data
    if idx.size and (idx.max() >= n or idx.min() < -n):
        bad = idx.max() if idx.max() >= n else idx.min()
        raise IndexError(f"out of range: tried to access index {bad} on a tensor of {n} elements.")
    return wrap(np.require(x._data.reshape(-1)[idx], requirements="C"), x._dtype)


@take.register_meta
def _take_meta(x, index):
    _take_check(x, index)
    return fake(index._shape, x._dtype, x)


def _take_grad(c, g):
    x, index = c.args
    flat = g.new_zeros((x.numel(),))
    return OPS["index_put"](flat, [index], g, True).reshape(tuple(x.shape)), None


take.register_derivative(_take_grad, save_inputs=(1,))
take.register_decomposition(lambda x, index: OPS["index"](x.reshape(-1), [index]))


@defop(kind="indexing")
def put(self: Tensor, index: Tensor, source: Tensor, accumulate: bool = False): ...


@put.register_decomposition
def _put_decomp(x, index, source, accumulate=False):
    if index.numel() != source.numel():
        raise IndexError(
            "put_(): Expected source and index to have the same number of elements, but got "
            f"source.numel() = {source.numel()}, index.numel() = {index.numel()}"
        )
    if source.dtype is not x.dtype:
        raise RuntimeError(
            f"put_(): self ({_name(x.dtype)}) and source ({_name(source.dtype)}) must have the "
            "same scalar type"
        )
    n = x.numel()
    if index._data is not None and index.numel():
        lo, hi = int(index._data.min()), int(index._data.max())
        if hi >= n or lo < -n:
            bad = hi if hi >= n else lo
            raise IndexError(
                f"out of range: tried to access index {bad} on a tensor of {n} elements."
            )
    flat = OPS["index_put"](x.reshape(-1), [index.reshape(-1)], source.reshape(-1), accumulate)
    return flat.reshape(tuple(x.shape))


@torch_function()
@tensor_method()
def take_along_dim(input: Tensor, indices: Tensor, dim: int | None = None) -> Tensor:
    if dim is None:
        return gather(input.reshape(-1), 0, indices.reshape(-1))
    d = _wrap_dim(dim, input.ndim)
    if input.ndim != indices.ndim:
        raise RuntimeError(
            "torch.take_along_dim(): input and indices should have the same number of "
            f"dimensions, but got {input.ndim} dimensions for input, and {indices.ndim} "
            "dimensions for indices"
        )
    shape = list(broadcast_shapes(tuple(input.shape), tuple(indices.shape)))
    src_shape, idx_shape = list(shape), list(shape)
    src_shape[d], idx_shape[d] = input.shape[d], indices.shape[d]
    return gather(input.expand(src_shape), d, indices.expand(idx_shape))


# ------------------------------------------------------------------------------ nonzero forms


@torch_function("nonzero")
@tensor_method("nonzero")
def _nonzero_fn(input: Tensor, *, as_tuple: bool = False, out=None):
    if not as_tuple:
        return OPS["nonzero"](input)
    flat = input.reshape(1) if input.ndim == 0 else input
    positions = OPS["nonzero"](flat)
    return tuple(OPS["select"](positions, 1, k) for k in range(flat.ndim))


@torch_function()
@tensor_method()
def argwhere(input: Tensor) -> Tensor:
    return OPS["nonzero"](input)


@torch_function("where")
def _where_fn(condition: Tensor, input=None, other=None, *, out=None):
    """``where(cond, x, y)`` selects; ``where(cond)`` is ``nonzero(cond, as_tuple=True)``."""
    if input is None and other is None:
        return _nonzero_fn(condition, as_tuple=True)
    if input is None or other is None:
        raise TypeError("where() takes 1 or 3 arguments: (condition) or (condition, input, other)")
    return OPS["where"](condition, input, other)


@tensor_method("where")
def _where_method(self: Tensor, condition: Tensor, other) -> Tensor:
    return OPS["where"](condition, self, other)
