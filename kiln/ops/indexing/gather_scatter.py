"""Gather and scatter along a dim: gather, scatter, scatter_add and scatter_reduce.

``gather``, ``scatter_add`` and ``scatter_reduce`` are prims (numpy kernels with
``take_along_axis`` and ``ufunc.at``); ``scatter`` has a numpy kernel for eager speed plus a
decomposition into ``index_put``/``scatter_reduce``. Derivatives follow PyTorch's formulas, so
duplicate indices accumulate and ties of ``amax``/``amin`` share the gradient evenly. The index
helpers at the top are shared with ``index_dim`` and ``masked``.
"""

from __future__ import annotations

import numpy as np

from ...runtime import dtypes as dt
from ...runtime.symbolic import known_same_shape
from ..core.common import (
    Tensor,
    TensorOrScalar,
    c_contiguous,
    checked_scalar,
    fake,
    require_tensor,
    scalar_value,
    wrap,
)
from ..core.common import wrap_dim as _wrap_dim
from ..core.grad_fn_naming import is_tensor_arg
from ..core.out_arguments import writes_out
from ..core.registry import OPS, defop, tensor_method, torch_function

__all__ = [
    "INDEX_DTYPES", "index_dtype_name", "is_tensor_arg", "check_index_bounds", "as_1d",
]  # fmt: skip

INDEX_DTYPES = (dt.int64, dt.int32)


def index_dtype_name(dtype: dt.dtype) -> str:
    """A dtype's name as the indexing ops' error messages spell it ('Bool', 'Float32')."""
    return {"bool": "Bool", "bfloat16": "BFloat16"}.get(dtype.name, dtype.name.capitalize())


def _arange(n: int, like: Tensor) -> Tensor:
    return OPS["arange"](0, n, 1, dtype=dt.int64, device=like.device)


# ------------------------------------------------------------------------------ shared checks


def check_index_bounds(
    prefix, idx: np.ndarray, size: int, d: int, negative_ok=False, exc=RuntimeError
):
    """PyTorch's message for an index outside ``[0, size)`` (or ``[-size, size)``)."""
    if idx.size == 0:
        return
    lo, hi = int(idx.min()), int(idx.max())
    low = -size if negative_ok else 0
    if hi >= size or lo < low:
        bad = hi if hi >= size else lo
        raise exc(f"{prefix}index {bad} is out of bounds for dimension {d} with size {size}")


@defop(kind="indexing", prim=True, differentiable=False)
def _checked_index(index: Tensor, size: int, error: str = "RuntimeError"): ...


_INDEX_ERRORS = {"IndexError": IndexError, "RuntimeError": RuntimeError}


@_checked_index.register_kernel
def _checked_index_kernel(index, size, error="RuntimeError"):
    check_index_bounds("", index._data, size, 0, exc=_INDEX_ERRORS[error])
    return wrap(index._data.copy(), index._dtype)


_checked_index.register_meta(
    lambda index, size, error="RuntimeError": fake(index._shape, index._dtype, index)
)
_checked_index.__doc__ = """``index`` itself, refused when a value lies outside ``[0, size)``: what a
decomposition computes from an index without reading memory through it (``nll_loss``'s one-hot
mask, ``one_hot``, ``embedding``'s and ``index_select``'s rows) checks it this way, so the
compiled op refuses an index eager refuses (the inductor's kernels flag it as they flag a
gather's). ``error`` names the builtin exception the calling op raises eagerly (PyTorch's
``IndexError`` for ``embedding``, ``RuntimeError`` for ``one_hot``), which compiled code raises
too."""


def as_1d(a: np.ndarray) -> np.ndarray:
    """A 0-d array as shape (1,), so dim 0 exists for kernels that index along a dim."""
    return a.reshape(1) if a.ndim == 0 else a


# ------------------------------------------------------------------------------ gather (prim)


@defop(kind="indexing", prim=True)
def gather(self: Tensor, dim: int, index: Tensor, *, sparse_grad: bool = False): ...


def _gather_check(x, dim, index):
    require_tensor("gather", "index", index)
    d = _wrap_dim(dim, x.ndim)
    if index.dtype not in INDEX_DTYPES:
        raise RuntimeError("gather(): Expected dtype int32/int64 for index")
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
    a, idx = as_1d(x._data), as_1d(index._data)
    check_index_bounds("", idx, a.shape[d], d)
    # contiguous (numpy follows the index's layout), as PyTorch's result and the meta's
    return wrap(c_contiguous(_take_along(a, idx, d)).reshape(index._shape), x._dtype)


def _take_along(a: np.ndarray, idx: np.ndarray, d: int) -> np.ndarray:
    """``take_along_axis`` of ``a`` (its leading part of ``idx``'s extents) with indices already
    checked. A C-contiguous ``a`` is one ``np.take`` of flat element offsets, ``idx`` times the
    step of ``d`` plus each position's offset along the other dims: numpy's take_along_axis
    builds a fancy index of broadcast aranges (1.1 ms for a 256 x 256 gather, against 0.16 ms
    here)."""
    if not a.flags.c_contiguous or not idx.size:
        window = tuple(slice(None) if k == d else slice(0, n) for k, n in enumerate(idx.shape))
        return np.take_along_axis(a[window], idx, axis=d)
    steps = [1] * a.ndim  # row-major element steps, from the shape (a size-1 dim's stride is
    for k in range(a.ndim - 2, -1, -1):  # arbitrary in a C-contiguous array)
        steps[k] = steps[k + 1] * a.shape[k + 1]
    offsets = None
    for k, n in enumerate(idx.shape):
        if k != d and n > 1:
            along = np.arange(0, n * steps[k], steps[k], dtype=np.int64)
            along = along.reshape((1,) * k + (n,) + (1,) * (idx.ndim - k - 1))
            offsets = along if offsets is None else offsets + along
    flat = idx if steps[d] == 1 else idx * np.int64(steps[d])
    if offsets is not None:
        flat = np.add(flat, offsets, dtype=np.int64)  # (an int32 index widened)
    return a.reshape(-1).take(flat)


gather.result_layout = "contiguous"  # as PyTorch's


@gather.register_meta
def _gather_meta(x, dim, index, sparse_grad=False):
    _gather_check(x, dim, index)
    return fake(index._shape, x._dtype, x)


def _gather_grad(c, g):
    x, dim, index, _ = c.args
    return (scatter_add(g.new_zeros(tuple(x.shape)), dim, index, g),)


gather.register_derivative(_gather_grad, save_inputs=(2,))


# ------------------------------------------------------------------------------ scatter family


def _scatter_check(x, dim, index, src):
    """PyTorch's checks for the scatter family (its messages all say ``scatter()``)."""
    d = _wrap_dim(dim, x.ndim)
    if index.dtype not in INDEX_DTYPES:
        raise RuntimeError("scatter(): Expected dtype int32/int64 for index")
    if isinstance(src, Tensor) and src.dtype is not x.dtype:
        raise RuntimeError("scatter(): Expected self.dtype to be equal to src.dtype")
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
    """Flat positions in the C-contiguous output of ``out[i][j]..`` with ``index`` replacing
    coordinate ``d``, in ``index``'s element order: ``ufunc.at`` over one flat index is 10x
    faster than over a tuple of index arrays, with the same order of updates."""
    idx = as_1d(index._data)
    shape = x._shape or (1,)
    check_index_bounds("", idx, shape[d], d)
    stride = 1
    flat = None
    for k in range(len(shape) - 1, -1, -1):
        if k == d:
            part = idx.astype(np.int64, copy=False) * stride
        else:
            part = np.arange(idx.shape[k], dtype=np.int64) * stride
            part = part.reshape((-1,) + (1,) * (len(shape) - 1 - k))
        flat = part if flat is None else flat + part
        stride *= shape[k]
    return np.broadcast_to(flat, idx.shape).reshape(-1), idx.shape


def _src_values(src, shape, dtype):
    """The part of ``src`` the index covers (or a scalar value), in the output dtype."""
    if not isinstance(src, Tensor):  # checked as PyTorch converts a Scalar (and ``full`` does)
        return np.asarray(checked_scalar(scalar_value(src), dtype)).astype(dtype.np)
    s = as_1d(src._data)
    return s[tuple(slice(0, n) for n in shape)]


def _flat_values(src, shape, dtype):
    """``_src_values`` in the flat order of ``_scatter_coords`` (a number stays a number)."""
    values = _src_values(src, shape, dtype)
    return values.reshape(-1) if values.ndim else values


def _pad_to(g: Tensor, shape) -> Tensor:
    """Zero-pad a gradient for the covered part of ``src`` back to ``src``'s shape."""
    shape = tuple(shape)
    if known_same_shape(g._shape, shape):
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


@defop(
    kind="indexing",
    grad_fn_name=lambda args: f"ScatterBackward{0 if is_tensor_arg(args[3]) else 1}",
    inplace_method=True,
)
def scatter(
    self: Tensor, dim: int, index: Tensor, src: TensorOrScalar, *, reduce: str | None = None
): ...


scatter.refuse_overlap("src")  # PyTorch's assert_no_overlap(self, src)


_SCATTER_UFUNCS = {"add": np.add, "multiply": np.multiply}


@scatter.register_kernel
def _scatter_kernel(x, dim, index, src, reduce):
    d = _scatter_check(x, dim, index, src)
    if reduce is not None and reduce not in _SCATTER_UFUNCS:
        raise RuntimeError("reduce argument must be either add or multiply.")
    out = as_1d(x._data).copy()
    coords, shape = _scatter_coords(x, d, index)
    values = _flat_values(src, shape, x._dtype)
    flat = out.reshape(-1)
    if reduce is None:
        flat[coords] = values
    else:
        _SCATTER_UFUNCS[reduce].at(flat, coords, values)
    return wrap(out.reshape(x._shape), x._dtype)


@scatter.register_meta
def _scatter_meta(x, dim, index, src, reduce=None):
    _scatter_check(x, dim, index, src)
    if not isinstance(src, Tensor):  # the kernel's conversion of a number, checked
        checked_scalar(scalar_value(src), x._dtype)
    return fake(x._shape, x._dtype, x)


def _scatter_grad(c, g):
    x, dim, index, src, reduce = c.args
    if reduce is not None:
        raise NotImplementedError("derivative for aten::scatter is not implemented")
    gx = scatter(g, dim, index, 0) if c.needs_input_grad[0] else None
    gs = None
    if is_tensor_arg(src) and c.needs_input_grad[3]:
        gs = _pad_to(gather(g, dim, index), src.shape)
    return gx, None, None, gs


scatter.register_derivative(_scatter_grad, save_inputs=(2,))
# as PyTorch's (a structured op: a row-major result); the decomposition's index_put would keep
# the input's layout
scatter.result_layout = "contiguous"


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
    d = _scatter_check(x, dim, index, src)
    if x.ndim == 0:
        flat = _scatter_decomp(x.reshape(1), 0, index.reshape(1), _flat1(src), reduce)
        return flat.reshape(())
    values = _scatter_values(src, index, x.dtype, x.device)
    if reduce == "multiply":
        values = values.expand(tuple(index.shape))
        return scatter_reduce(x, d, index, values, "prod")
    # scatter refuses negative indices, and raises RuntimeError (not index_put's IndexError) for
    # one out of range, compiled as eagerly
    index = OPS["_checked_index"](index, x.shape[d], "RuntimeError")
    coords = _coord_tensors(x, d, index)
    return OPS["index_put"](x, coords, values, reduce == "add")


def _flat1(src):
    return src.reshape(1) if isinstance(src, Tensor) else src


def _scatter_arg(src, value):
    if src is None and value is None:
        raise TypeError("scatter() missing 1 required argument: 'src' or 'value'")
    return src if src is not None else value


@torch_function("scatter")
@writes_out(name="scatter")
@tensor_method("scatter")
def _scatter_fn(input, dim, index, src=None, *, value=None, reduce=None):
    return scatter(input, dim, index, _scatter_arg(src, value), reduce=reduce)


@tensor_method("scatter_")
def _scatter_inplace(self, dim, index, src=None, *, value=None, reduce=None):
    return OPS["scatter_"](self, dim, index, _scatter_arg(src, value), reduce=reduce)


@defop(kind="indexing", prim=True, autocast={"cuda": "promote"}, inplace_method=True)
def scatter_add(self: Tensor, dim: int, index: Tensor, src: Tensor): ...


scatter_add.refuse_overlap("src")  # PyTorch's assert_no_overlap(self, src)


@scatter_add.register_kernel
def _scatter_add_kernel(x, dim, index, src):
    d = _scatter_check(x, dim, index, src)
    out = as_1d(x._data).copy()
    coords, shape = _scatter_coords(x, d, index)
    np.add.at(out.reshape(-1), coords, _flat_values(src, shape, x._dtype))
    return wrap(out.reshape(x._shape), x._dtype)


@scatter_add.register_meta
def _scatter_add_meta(x, dim, index, src):
    _scatter_check(x, dim, index, src)
    return fake(x._shape, x._dtype, x)


def _scatter_add_grad(c, g):
    x, dim, index, src = c.args
    gs = _pad_to(gather(g, dim, index), src.shape) if c.needs_input_grad[3] else None
    return g, None, None, gs


scatter_add.register_derivative(_scatter_add_grad, save_inputs=(2,))


# ------------------------------------------------------------------------------ scatter_reduce


@defop(kind="indexing", prim=True, inplace_method=True)
def scatter_reduce(
    self: Tensor, dim: int, index: Tensor, src: Tensor, reduce: str, *, include_self: bool = True
): ...


scatter_reduce.refuse_overlap("src")  # PyTorch's assert_no_overlap(self, src)


@scatter_reduce.canonicalize_args
def _max_and_min_spelled_out(args: tuple) -> tuple:
    """PyTorch's scatter_reduce also takes "max" and "min" for "amax" and "amin"."""
    if args[4] in ("max", "min"):
        return (*args[:4], "a" + args[4], *args[5:])
    return args


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


def _check_reduce(reduce, dtype: dt.dtype):
    if reduce not in _REDUCE_UFUNCS:
        raise RuntimeError(
            f"reduce argument must be either sum, prod, mean, amax or amin, got {reduce}"
        )
    # PyTorch's CPU kernels: no bool mean, no complex ordering
    if dtype is dt.bool_ and reduce == "mean" or dtype.is_complex and reduce in ("amax", "amin"):
        raise NotImplementedError(
            f'"scatter_gather_tensor_cpu_reduce_{reduce}" not implemented for '
            f"'{dt.torch_type_name(dtype)}'"
        )


@scatter_reduce.register_kernel
def _scatter_reduce_kernel(x, dim, index, src, reduce, include_self):
    _check_reduce(reduce, x._dtype)
    d = _scatter_check(x, dim, index, src)
    out = as_1d(x._data).copy()
    coords, shape = _scatter_coords(x, d, index)
    values = _flat_values(src, shape, x._dtype)
    flat = out.reshape(-1)
    if not include_self:
        flat[coords] = _reduce_identity(reduce, x._dtype)
    _REDUCE_UFUNCS[reduce].at(flat, coords, values)
    if reduce == "mean":
        count = np.full(out.shape, 1 if include_self else 0, dtype=np.int64)
        np.add.at(count.reshape(-1), coords, 1)
        count = np.maximum(count, 1)
        if x._dtype.is_floating_point or x._dtype.is_complex:
            out = (out / count).astype(out.dtype)
        else:
            out = np.floor_divide(out, count).astype(out.dtype)
    return wrap(out.reshape(x._shape), x._dtype)


@scatter_reduce.register_meta
def _scatter_reduce_meta(x, dim, index, src, reduce, include_self=True):
    _check_reduce(reduce, x._dtype)
    _scatter_check(x, dim, index, src)
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
