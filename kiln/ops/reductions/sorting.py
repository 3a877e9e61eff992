"""Order statistics and counting: sort and what is built on it (argsort, msort, topk, kthvalue,
median, nanmedian), unique, searchsorted, bincount, histc.

``sort`` is the one kernel of the sort family (numpy's stable sorts; NaN orders as the largest
value, as in PyTorch). argsort, msort and median(dim) are compositions of it, so their values
differentiate through sort's derivative, which sends each gradient back to the position its index
names; topk and kthvalue have kernels of their own with the same kind of derivative. Among equal
values, unstable sort, topk and kthvalue replay PyTorch's CPU algorithms (``stl_order``) so the
same tied positions come back. unique and bincount have output shapes that depend on the data:
eager kernels only (their meta functions raise).
"""

from __future__ import annotations

import functools

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
    result_dtype,
    wrap,
    wrap_dim,
)
from ..core.complex_support import complex_not_implemented
from ..core.grad_fn_naming import renaming
from ..core.out_arguments import writes_out
from ..core.registry import defop, return_type, tensor_method, torch_function
from ..creation.factories import arange, full
from ..indexing.gather_scatter import gather
from ..indexing.subscript import DataDependentOutputError
from ..pointwise.unary_binary import where
from ..shape.views import select, slice
from .reduce import (
    amax,
    amin,
    evenly_distribute,
    scatter_back,
    select_evenly,
    sum,
    torch_type_name,
)
from .stl_order import replay_kthvalue, replay_sort, replay_topk

__all__: list[str] = []

_int64 = dt.int64


def may_hold_nan(a: np.ndarray) -> bool:
    """Whether ``a``'s dtype has NaN: numpy's kinds "f" and "c", and bfloat16 (kind "V")."""
    return a.dtype.kind in "fc" or a.dtype == dt.bfloat16.np


def _size_along(x, dim: int) -> int:
    return x.shape[dim] if x.ndim else 1


# ------------------------------------------------------------------------------ sort


@defop(
    kind="sort",
    returns=("values", "indices"),
    complex_refused=(RuntimeError, " Sort does not support complex dtypes on CPU"),
)
def sort(self: Tensor, dim: int = -1, descending: bool = False, *, stable: bool = False): ...


def argsort_np(a: np.ndarray, axis: int, descending: bool) -> np.ndarray:
    """Stable argsort; descending keeps tied elements in their original order, NaN first."""
    if not descending:
        return np.argsort(a, axis=axis, kind="stable")
    # sort the reversed array ascending and read the result backwards: ties stay in order
    backwards = (np.s_[:],) * axis + (np.s_[::-1],)
    return (a.shape[axis] - 1) - np.argsort(a[backwards], axis=axis, kind="stable")[backwards]


def stable_head(a: np.ndarray, axis: int, m: int, descending: bool) -> np.ndarray:
    """The first ``m`` positions of ``argsort_np(a, axis, descending)`` by a partition, not a
    sort (topk of a few among many: 512 rows of 512 floats, k = 8, took 17 ms sorted whole).

    The partition finds each row's m-th value; every element beyond it (NaN orders as the
    largest) is in, and of the elements equal to it the lowest positions fill the rest, as the
    stable sort keeps ties in position order. Only those m are then sorted."""
    rows = np.moveaxis(a, axis, -1)
    shape = rows.shape
    rows = rows.reshape(-1, shape[-1])
    n = rows.shape[1]
    threshold = _blocked_threshold(rows, m, descending)
    if threshold is None:
        kth = n - m if descending else m - 1
        threshold = np.partition(rows, kth, axis=1)[:, kth : kth + 1]
    if descending:
        chosen = rows > threshold
    else:
        chosen = rows < threshold
    tied = rows == threshold
    if may_hold_nan(rows):
        nan_rows = np.isnan(rows)
        if nan_rows.any():
            nan_threshold = np.isnan(threshold)
            if descending:
                chosen |= nan_rows & ~nan_threshold
            else:
                chosen |= ~nan_rows & nan_threshold
            tied |= nan_rows & nan_threshold
    # of each row's elements equal to its m-th value, the lowest positions fill the room the
    # ones beyond it leave: ranked among the (few) ties only, not by a cumsum over every
    # element (a quarter of a (32, 50257) topk(50))
    room = m - chosen.sum(axis=1)
    tie_rows, tie_cols = _positions(tied)  # row-major: each row's ties in position order
    keep = _ranks_in_rows(tie_rows) < room[tie_rows]
    chosen[tie_rows[keep], tie_cols[keep]] = True
    picked = _positions(chosen)[1].reshape(-1, m)  # each row's m positions, in position order
    values = np.take_along_axis(rows, picked, axis=1)
    head = np.take_along_axis(picked, argsort_np(values, 1, descending), axis=1)
    return np.ascontiguousarray(np.moveaxis(head.reshape(shape[:-1] + (m,)), -1, axis))


def _positions(mask: np.ndarray) -> tuple:
    """``np.nonzero`` of a C-contiguous 2-d mask, by the flat positions (numpy's 2-d nonzero
    costs about 3 ns an element, its flat one a fraction of that)."""
    return np.divmod(np.flatnonzero(mask), mask.shape[1])


def _ranks_in_rows(row_ids: np.ndarray) -> np.ndarray:
    """Each entry's rank among the entries of its row, for ``_positions``' sorted row ids."""
    return np.arange(row_ids.size) - np.searchsorted(row_ids, row_ids)


_BLOCK = 64  # elements per block whose extreme bounds a long row's m-th value
_NATIVE_ORDER_KINDS = "fiu"  # dtypes numpy's max/min reduce and compare natively


def _blocked_threshold(rows: np.ndarray, m: int, descending: bool) -> np.ndarray | None:
    """Each long row's m-th largest (smallest) value, (rows, 1), without partitioning the
    row: the m-th largest of its blocks' maxima is m distinct elements' least, so no more than
    the m-th largest element, and every element of the head is at least that; the exact
    value is then the m-th of the few candidates that reach it. numpy's partition of a
    50257-long row (a language model's vocabulary, topk(50)) was half of a topk costing 12x
    PyTorch's. None where it does not pay (short rows, m close to n) or NaN is about (a
    block's extreme hides its other elements)."""
    count, n = rows.shape
    if n < 4096 or m * _BLOCK > n or rows.dtype.kind not in _NATIVE_ORDER_KINDS:
        return None
    whole = n - n % _BLOCK
    blocks = rows[:, :whole].reshape(count, whole // _BLOCK, _BLOCK)
    extreme = np.maximum.reduce if descending else np.minimum.reduce
    bounds = extreme(blocks, axis=2)
    if whole < n:
        bounds = np.concatenate([bounds, extreme(rows[:, whole:], axis=1)[:, None]], axis=1)
    if rows.dtype.kind == "f" and np.isnan(bounds).any():
        return None
    nblocks = bounds.shape[1]
    kth = nblocks - m if descending else m - 1
    bound = np.partition(bounds, kth, axis=1)[:, kth : kth + 1]
    candidates = rows >= bound if descending else rows <= bound
    per_row = candidates.sum(axis=1)
    width = int(per_row.max())
    # the candidates of each row left-aligned, padded with values that never pass the bound
    if rows.dtype.kind == "f":
        pad = -np.inf if descending else np.inf
    else:
        info = np.iinfo(rows.dtype)
        pad = info.min if descending else info.max
    packed = np.full((count, width), pad, rows.dtype)
    which_rows, which_cols = _positions(candidates)
    packed[which_rows, _ranks_in_rows(which_rows)] = rows[which_rows, which_cols]
    kth = width - m if descending else m - 1
    return np.partition(packed, kth, axis=1)[:, kth : kth + 1]


@sort.register_kernel
def _sort_kernel(x, dim, descending, stable):
    d = wrap_dim(dim, x.ndim)
    a = x._data
    if not a.ndim:
        return sort.returns(wrap(a.copy(), x._dtype), wrap(np.zeros((), np.int64), _int64))
    idx = argsort_np(a, d, descending)
    radix = a.ndim == 1 and a.size >= 32768 and a.dtype.kind in "iu" and not descending
    if not stable and not radix:  # PyTorch's std::sort order among ties (its radix sort is stable)
        idx = replay_sort(a, d, descending, idx)
    values = a[idx] if a.ndim == 1 else np.take_along_axis(a, idx, d)
    strides = preserved_layout(x)  # PyTorch's sort lays both results out like its input
    return sort.returns(
        wrap(laid_out(values, strides), x._dtype), wrap(laid_out(idx, strides), _int64)
    )


@sort.register_meta
def _sort_meta(x, dim=-1, descending=False, stable=False):
    wrap_dim(dim, x.ndim)
    strides = preserved_layout(x)
    return sort.returns(fake(x._shape, x._dtype, x, strides), fake(x._shape, _int64, x, strides))


sort.register_derivative(
    lambda c, g, _gi=None: (scatter_back(g, c.out[1], c.args[1], c.args[0].shape),),
    save_output=(1,),
    save_inputs=(),
)


@sort.register_decomposition
def _sort_decomp(x, dim=-1, descending=False, stable=False):
    # rank of element i = how many elements go before it (ties: the earlier position first);
    # then indices[rank_i] = i. O(n^2) comparisons, all prims.
    if not x.ndim:
        return sort.returns(x.clone(), x.new_zeros((), dtype=_int64))
    d = wrap_dim(dim, x.ndim)
    n = x.shape[d]
    row = x.movedim(d, -1)
    mine, other = row.unsqueeze(-1), row.unsqueeze(-2)
    mine_nan, other_nan = mine != mine, other != other
    if descending:
        ahead = (other > mine) | (other_nan & mine_nan.logical_not())
    else:
        ahead = (other < mine) | (mine_nan & other_nan.logical_not())
    ties = (other == mine) | (mine_nan & other_nan)
    positions = arange(0, n, 1, dtype=_int64, device=x.device)
    earlier = positions.unsqueeze(0) < positions.unsqueeze(1)
    rank = sum(ahead | (ties & earlier), -1)
    order = scatter_back(positions.expand(row.shape), rank, -1, row.shape)
    values = gather(row, -1, order)
    return sort.returns(values.movedim(-1, d), order.movedim(-1, d))


@defop(kind="sort", differentiable=False)
def argsort(self: Tensor, dim: int = -1, descending: bool = False, *, stable: bool = False): ...


argsort.register_decomposition(
    lambda x, dim=-1, descending=False, stable=False: sort(x, dim, descending, stable=stable)[1]
)


@defop(kind="sort")
def msort(self: Tensor): ...


msort.register_decomposition(lambda x: sort(x, 0)[0])


# ------------------------------------------------------------------------------ topk / kthvalue


@defop(
    kind="sort",
    returns=("values", "indices"),
    complex_refused=(RuntimeError, " topk does not support complex dtypes on CPU"),
)
def topk(self: Tensor, k: int, dim: int = -1, largest: bool = True, sorted: bool = True): ...  # noqa: A002


def _topk_dim(x, k, dim) -> int:
    if x._dtype is dt.bool_:  # (PyTorch's CPU kernel has no bool version)
        raise RuntimeError("topk does not support bool dtypes on CPU")
    d = wrap_dim(dim, x.ndim)
    if not 0 <= k <= _size_along(x, d):
        raise RuntimeError("selected index k out of range")
    return d


@topk.register_kernel
def _topk_kernel(x, k, dim, largest, sorted_):
    # the first k of the stable sort, then PyTorch's selection order where ties or sorted=False
    # make it differ
    d = _topk_dim(x, k, dim)
    a = x._data
    if not a.ndim:
        return topk.returns(*sort.kernel(x, d, largest, True))
    n = a.shape[d]
    if sorted_ and n >= 256 and 8 * (k + 1) <= n:
        order = stable_head(a, d, k + 1, largest)  # the replay reads no further
    else:
        order = argsort_np(a, d, largest)
    idx = laid_out(replay_topk(a, d, k, largest, sorted_, order))  # row-major, as PyTorch's
    values = a[idx] if a.ndim == 1 else np.take_along_axis(a, idx, d)
    return topk.returns(wrap(laid_out(values), x._dtype), wrap(idx, _int64))


@topk.register_meta
def _topk_meta(x, k, dim=-1, largest=True, sorted_=True):
    d = _topk_dim(x, k, dim)
    shape = tuple(k if i == d else s for i, s in enumerate(x._shape))
    return topk.returns(fake(shape, x._dtype, x), fake(shape, _int64, x))


topk.register_derivative(
    lambda c, g, _gi=None: (scatter_back(g, c.out[1], c.args[2], c.args[0].shape),),
    save_output=(1,),
    save_inputs=(),
)


@topk.register_decomposition
def _topk_decomp(x, k, dim=-1, largest=True, sorted_=True):
    d = _topk_dim(x, k, dim)
    values, indices = sort(x, d, largest, stable=True)
    if x.ndim:
        values, indices = slice(values, d, 0, k), slice(indices, d, 0, k)
    return topk.returns(values, indices)


@defop(kind="sort", returns=("values", "indices"))
def kthvalue(self: Tensor, k: int, dim: int = -1, keepdim: bool = False): ...


def _kthvalue_dim(x, k, dim) -> int:
    d = wrap_dim(dim, x.ndim)
    if x.ndim and x.shape[d] == 0:  # checked before k, as PyTorch's
        raise IndexError(f"kthvalue(): Expected reduction dim {d} to have non-zero size.")
    if not 1 <= k <= _size_along(x, d):
        raise RuntimeError(f"kthvalue(): selected number k out of range for dimension {d}")
    return d


def _kth_positions(a: np.ndarray, d: int, k: int) -> np.ndarray:
    """``replay_kthvalue``'s answer (kept dim of size 1) by a partition instead of a sort: a row
    whose k-th value has no equal neighbour in sorted order holds it once, and its position is
    the answer; rows with such ties (or a NaN there) are sorted and replayed alone."""
    rows = np.moveaxis(a, d, -1)
    shape = rows.shape
    rows = rows.reshape(-1, shape[-1])
    n = rows.shape[1]
    window = [p for p in (k - 2, k - 1, k) if 0 <= p < n]
    part = np.partition(rows, window, axis=1)
    value = part[:, k - 1 : k]
    tied = np.zeros(rows.shape[0], bool)
    for p in (k - 2, k):
        if 0 <= p < n:
            tied |= part[:, p] == value[:, 0]
    if may_hold_nan(rows):
        tied |= np.isnan(value[:, 0])
    idx = np.argmax(rows == value, axis=1)[:, None]
    which = np.flatnonzero(tied)
    if len(which):
        hard = rows[which]
        idx[which] = replay_kthvalue(hard, 1, k, argsort_np(hard, 1, False))
    return np.ascontiguousarray(np.moveaxis(idx.reshape(shape[:-1] + (1,)), -1, d))


def refuse_unordered(x, kernel_name: str) -> None:
    """PyTorch's selection kernels (kthvalue, median) have no bool or complex versions."""
    if x._dtype is dt.bool_ or x._dtype.is_complex:
        raise NotImplementedError(
            f"\"{kernel_name}\" not implemented for '{torch_type_name(x._dtype)}'"
        )


@kthvalue.register_kernel
def _kthvalue_kernel(x, k, dim, keepdim):
    d = _kthvalue_dim(x, k, dim)
    if x.ndim:  # (a 0-d input is its own k-th value, no kernel runs)
        refuse_unordered(x, "kthvalue_cpu")
    a = x._data
    if not a.ndim:
        return kthvalue.returns(wrap(a.copy(), x._dtype), wrap(np.zeros((), np.int64), _int64))
    if a.shape[d] >= 64:
        idx = _kth_positions(a, d, k)
    else:
        idx = replay_kthvalue(a, d, k, argsort_np(a, d, False))  # PyTorch's pick among ties
    values = np.take_along_axis(a, idx, d)
    if not keepdim:
        values, idx = values.squeeze(d), idx.squeeze(d)
    # row-major, as PyTorch's (the positions may be a slice of a whole sort)
    return kthvalue.returns(wrap(laid_out(values), x._dtype), wrap(laid_out(idx), _int64))


@kthvalue.register_meta
def _kthvalue_meta(x, k, dim=-1, keepdim=False):
    d = _kthvalue_dim(x, k, dim)
    if x.ndim:
        refuse_unordered(x, "kthvalue_cpu")
    shape = tuple(s for i, s in enumerate(x._shape) if i != d or keepdim)
    shape = tuple(1 if i == d else s for i, s in enumerate(shape)) if keepdim else shape
    return kthvalue.returns(fake(shape, x._dtype, x), fake(shape, _int64, x))


def _kthvalue_grad(c, g, _gi=None):
    x, k, dim, keepdim = c.args
    if not x.ndim:
        return (g,)
    d = wrap_dim(dim, x.ndim)
    idx = c.out[1]
    if not keepdim:
        g, idx = g.unsqueeze(d), idx.unsqueeze(d)
    return (scatter_back(g, idx, d, x.shape),)


kthvalue.register_derivative(_kthvalue_grad, save_output=(1,), save_inputs=())


@kthvalue.register_decomposition
def _kthvalue_decomp(x, k, dim=-1, keepdim=False):
    d = _kthvalue_dim(x, k, dim)
    values, indices = sort(x, d, stable=True)
    if not x.ndim:
        return kthvalue.returns(values, indices)
    values, indices = select(values, d, k - 1), select(indices, d, k - 1)
    if keepdim:
        values, indices = values.unsqueeze(d), indices.unsqueeze(d)
    return kthvalue.returns(values, indices)


# ------------------------------------------------------------------------------ median


def median_position(n: int, nans: int, ignore_nan: bool) -> int:
    """Where the median sits in a sorted slice of ``n`` values (NaNs last): the lower middle;
    for median a NaN anywhere makes the first NaN the answer, nanmedian skips them."""
    if ignore_nan:
        return max((n - nans - 1) // 2, 0)
    return n - nans if nans else (n - 1) // 2


@functools.lru_cache(maxsize=64)
def all_nan_median_index(n: int) -> int:
    """The index ``nanmedian(dim=)`` gives a slice of ``n`` NaNs. PyTorch's kernel runs
    libstdc++'s ``std::nth_element`` for position 0 over the indices 0..n-1 with a comparator
    that is false for every pair of NaNs; what its introselect's swaps leave first is the answer
    (2 for 4 or 5 NaNs, 8 for 13). With nothing ever less, each round moves the middle index to
    the front, partitions the rest by swapping its ends inwards (a reversal) and keeps the part
    before the cut, until at most 3 remain for the insertion sort, which moves nothing."""
    idx = np.arange(n)
    last = n
    while last > 3:
        mid = last // 2
        idx[0], idx[mid] = idx[mid], idx[0]
        idx[1:last] = idx[1:last][::-1].copy()
        last = 1 + (last - 1) // 2
    return int(idx[0]) if n else 0


def _median_positions(nans: Tensor, n: int, ignore_nan: bool) -> Tensor:
    """``median_position`` for tensors of NaN counts (one per slice)."""
    if ignore_nan:
        return ((n - 1 - nans) // 2).clamp(min=0)
    return where(nans > 0, n - nans, (n - 1) // 2)


def _empty_median(d: dt.dtype):
    """PyTorch's median of nothing: NaN, converted to an integer dtype as x86 converts it (the
    lowest int32/int64; int8, int16 and uint8 keep the low bits of int32's lowest, 0)."""
    if d.is_floating_point:
        return np.nan
    return np.iinfo(d.np).min if d.np.itemsize >= 4 else 0


def _full_median_kernel(ignore_nan: bool):
    def kernel(x):
        refuse_unordered(x, "median_cpu")
        a = np.sort(x._data.reshape(-1))
        if not a.size:
            return wrap(np.asarray(_empty_median(x._dtype)), x._dtype)
        # NaNs sort last: only when the last value is NaN do they need counting
        nans = int(np.count_nonzero(a != a)) if a[-1] != a[-1] else 0
        return wrap(a[median_position(a.size, nans, ignore_nan) :][:1].reshape(()), x._dtype)

    return kernel


def _full_median_decomp(ignore_nan: bool):
    def decomposition(x):
        flat = x.reshape(-1)
        if not flat.shape[0]:
            return full((), _empty_median(x.dtype), dtype=x.dtype, device=x.device)
        values = sort(flat, 0, stable=True)[0]
        pos = _median_positions(sum(flat != flat), flat.shape[0], ignore_nan)
        return select_evenly(x, gather(values, 0, pos.reshape(1)).reshape(()))

    return decomposition


def _full_median_schema(self: Tensor): ...


median = defop(
    _full_median_schema,
    name="median",
    kind="sort",
    complex_refused=complex_not_implemented("median_cpu"),
)
nanmedian = defop(
    _full_median_schema,
    name="nanmedian",
    kind="sort",
    complex_refused=complex_not_implemented("median_cpu"),
)
for _op, _ignore_nan in ((median, False), (nanmedian, True)):
    _op.register_kernel(_full_median_kernel(_ignore_nan))
    _op.register_meta(lambda x: fake((), x._dtype, x))
    _op.check_in_meta(lambda x: refuse_unordered(x, "median_cpu"))
    _op.register_derivative(
        lambda c, g: (evenly_distribute(g, c.args[0], c.out),), save_output=True
    )
    _op.register_decomposition(_full_median_decomp(_ignore_nan))


def _median_along(result, x: Tensor, dim: int, keepdim: bool, ignore_nan: bool):
    """median(x, dim): the sorted slice at ``median_position``, value and index."""
    d = wrap_dim(dim, x.ndim)
    refuse_unordered(x, "median_out")
    if not x.ndim:
        return result(x.clone(), x.new_zeros((), dtype=_int64))
    n = x.shape[d]
    if n == 0:
        raise IndexError(f"{result.__name__}(): Expected reduction dim {d} to have non-zero size.")
    indices = sort(x, d, stable=True)[1]
    nans = sum(x != x, d, True)
    indices = gather(indices, d, _median_positions(nans, n, ignore_nan))
    if ignore_nan:
        indices = where(nans == n, all_nan_median_index(int(n)), indices)
    values = gather(x, d, indices)  # the gradient goes to the index, as PyTorch's does
    if not keepdim:
        values, indices = values.squeeze(d), indices.squeeze(d)
    return result(values, indices)


def _median_function(name: str, full_op, ignore_nan: bool):
    result = return_type(name, ("values", "indices"))

    def fn(input: Tensor, dim: int | None = None, keepdim: bool = False):
        if dim is None:
            return full_op(input)
        return _median_along(result, input, dim, keepdim, ignore_nan)

    fn.__name__ = name
    return fn


def _median_grad_fn_name(args, kwargs) -> str:
    has_dim = len(args) > 1 or kwargs.get("dim") is not None
    return "MedianBackward1" if has_dim else "MedianBackward0"


for _name, _op, _ignore_nan, _grad_fn_name in (
    ("median", median, False, _median_grad_fn_name),
    ("nanmedian", nanmedian, True, None),
):
    _fn = _median_function(_name, _op, _ignore_nan)
    if _grad_fn_name is not None:
        _fn = renaming(_fn, _grad_fn_name)
    torch_function(_name)(writes_out(_fn, name=_name, exact_dtype=True))
    tensor_method(_name)(_fn)


# ------------------------------------------------------------------------------ unique


@defop(kind="sort", differentiable=False, complex_refused=complex_not_implemented("unique"))
def unique(
    self: Tensor,
    sorted: bool = True,  # noqa: A002
    return_inverse: bool = False,
    return_counts: bool = False,
    dim: int | None = None,
): ...


unique.returns = return_type("unique", ("values", "inverse", "counts"))


@unique.register_kernel
def _unique_kernel(x, sorted_, return_inverse, return_counts, dim):
    if dim is not None:  # unique slices along dim, in lexicographic order
        if not x.ndim:
            raise IndexError(f"Dimension specified as {dim} but tensor has no dimensions")
        d = wrap_dim(dim, x.ndim)
        if any(size == 0 for i, size in enumerate(x._shape) if i != d):
            raise RuntimeError(
                "There are 0 sized dimensions, and they aren't selected, so unique cannot be "
                "applied"
            )
        values, inverse, counts = np.unique(
            x._data, return_inverse=True, return_counts=True, axis=d
        )
        return unique.returns(
            wrap(values, x._dtype), wrap(inverse.reshape(-1), _int64), wrap(counts, _int64)
        )
    # NaNs are all distinct, as in PyTorch; the result is always sorted
    values, inverse, counts = np.unique(
        x._data.reshape(-1), return_inverse=True, return_counts=True, equal_nan=False
    )
    return unique.returns(
        wrap(values, x._dtype),
        wrap(inverse.reshape(x._shape), _int64),
        wrap(counts, _int64),
    )


@unique.register_meta
def _unique_meta(x, sorted_=True, return_inverse=False, return_counts=False, dim=None):
    from ..indexing.subscript import data_dependent_size

    if dim is None:
        count = data_dependent_size("unique", x.numel())
        return unique.returns(
            fake((count,), x._dtype, x), fake(x._shape, _int64, x), fake((count,), _int64, x)
        )
    if not x.ndim:
        raise IndexError(f"Dimension specified as {dim} but tensor has no dimensions")
    d = wrap_dim(dim, x.ndim)
    count = data_dependent_size(f"unique along dim {d}", x._shape[d])
    shape = list(x._shape)
    shape[d] = count
    return unique.returns(
        fake(tuple(shape), x._dtype, x), fake((x._shape[d],), _int64, x), fake((count,), _int64, x)
    )


@torch_function("unique")
@tensor_method("unique")
def unique_function(
    input: Tensor,
    sorted: bool = True,  # noqa: A002
    return_inverse: bool = False,
    return_counts: bool = False,
    dim: int | None = None,
):
    """``torch.unique``: the values, plus the inverse and counts when asked for."""
    values, inverse, counts = unique(input, sorted, return_inverse, return_counts, dim)
    if not (return_inverse or return_counts):
        return values
    return (values,) + ((inverse,) if return_inverse else ()) + ((counts,) if return_counts else ())


# ------------------------------------------------------------------------------ searchsorted


@defop(kind="sort", differentiable=False)
def searchsorted(
    sorted_sequence: Tensor,
    input: TensorOrScalar,
    *,
    out_int32: bool = False,
    right: bool = False,
    side: str | None = None,
    sorter: Tensor | None = None,
): ...


def _is_right(right: bool, side: str | None) -> bool:
    if side is None:
        return right
    if side not in ("left", "right"):
        raise RuntimeError(
            f"torch.searchsorted(): side can only be 'left' or 'right' but got {side}"
        )
    if right and side == "left":
        raise RuntimeError(
            "torch.searchsorted(): side and right can't be set to opposites, got side of left "
            "while right was True"
        )
    return side == "right"


def _check_searchsorted(seq, values) -> None:
    if not seq.ndim:
        raise RuntimeError(
            "torch.searchsorted(): boundaries tensor should have positive dimension, but got 0 "
            "dimension"
        )
    if seq.ndim > 1:
        v_shape = tuple(values.shape) if isinstance(values, Tensor) else ()
        if tuple(seq.shape[:-1]) != v_shape[:-1] or len(v_shape) != seq.ndim:
            raise RuntimeError(
                "torch.searchsorted(): boundaries tensor should be 1 dimension or the first N-1 "
                "dimensions of boundaries tensor and input value tensor must match, but we got "
                f"boundaries tensor {list(seq.shape)} and input value tensor {list(v_shape)}"
            )
    common = result_dtype(seq, values)
    if common is dt.bool_ or common.is_complex:  # (PyTorch's CPU kernel has neither)
        raise NotImplementedError(
            f"\"searchsorted_out_cpu\" not implemented for '{torch_type_name(common)}'"
        )


@searchsorted.register_kernel
def _searchsorted_kernel(seq, values, out_int32, right, side, sorter):
    how = "right" if _is_right(right, side) else "left"
    _check_searchsorted(seq, values)
    s = seq._data if sorter is None else np.take_along_axis(seq._data, sorter._data, -1)
    v = values._data if isinstance(values, Tensor) else np.asarray(values)
    v_float = values._dtype.is_floating_point if isinstance(values, Tensor) else v.dtype.kind == "f"
    # (the dtypes' own flags: numpy calls bfloat16's kind "V")
    if (seq._dtype.is_floating_point and np.isnan(s).any()) or (v_float and np.isnan(v).any()):
        r = _torch_binary_search(s, v, how == "right")
    elif s.ndim == 1:
        r = np.searchsorted(s, v, how)
    else:
        r = np.empty(v.shape, np.int64)
        for row in np.ndindex(*s.shape[:-1]):
            r[row] = np.searchsorted(s[row], v[row], how)
    return wrap(np.asarray(r), dt.int32 if out_int32 else _int64)


def _torch_binary_search(s: np.ndarray, v: np.ndarray, right: bool) -> np.ndarray:
    """PyTorch's own bisection (``!(mid >= v)`` goes right; ``>`` for ``right``), for every
    value at once: with NaNs no comparison holds, so where they sit steers the search, and
    numpy's NaN-as-largest order would answer otherwise."""
    n = s.shape[-1]
    rows = s.reshape(-1, n) if s.ndim > 1 else s.reshape(1, n)
    vals = v.reshape(rows.shape[0], -1) if s.ndim > 1 else v.reshape(1, -1)
    start = np.zeros(vals.shape, np.int64)
    end = np.full(vals.shape, n, np.int64)
    row = np.arange(rows.shape[0])[:, None]
    while True:
        active = start < end
        if not active.any():
            break
        mid = (start + end) >> 1
        probe = rows[row, np.minimum(mid, n - 1)]
        with np.errstate(invalid="ignore"):
            go_right = ~(probe > vals) if right else ~(probe >= vals)
        start = np.where(active & go_right, mid + 1, start)
        end = np.where(active & ~go_right, mid, end)
    return start.reshape(v.shape)


@searchsorted.register_meta
def _searchsorted_meta(seq, values, out_int32=False, right=False, side=None, sorter=None):
    _is_right(right, side)
    _check_searchsorted(seq, values)
    shape = values.shape if isinstance(values, Tensor) else ()
    return fake(shape, dt.int32 if out_int32 else _int64, seq)


@searchsorted.register_decomposition
def _searchsorted_decomp(seq, values, out_int32=False, right=False, side=None, sorter=None):
    # the insertion point is the count of boundaries ordered before the value (NaN is largest)
    right = _is_right(right, side)
    _check_searchsorted(seq, values)
    if sorter is not None:
        seq = gather(seq, -1, sorter)
    if not isinstance(values, Tensor):
        values = full((), values, device=seq.device)
    to = dt.int32 if out_int32 else _int64
    n = seq.shape[-1]
    if n.__class__ is int:
        return _bisection(seq, values, n, right).to(to)
    bounds = seq if seq.ndim == 1 else seq.unsqueeze(-2)
    v = values.unsqueeze(-1)
    v_nan = v != v
    if right:
        before = (bounds <= v) | v_nan
    else:
        before = (bounds < v) | (v_nan & (bounds == bounds))
    return sum(before, -1).to(to)


def _bisection(seq: Tensor, values: Tensor, n: int, right: bool) -> Tensor:
    """PyTorch's bisection, one step per bit of ``n`` (``_torch_binary_search``'s): a probe
    that is not ``>=`` the value (``>`` for ``right``) sends the search right. Where the
    boundaries hold NaNs, where they sit steers the search as in PyTorch (a count of the
    boundaries ordered before the value answers otherwise)."""
    start = full(tuple(values.shape), 0, dtype=_int64, device=values.device)
    end = full(tuple(values.shape), n, dtype=_int64, device=values.device)
    for _ in range(n.bit_length()):
        active = start < end
        mid = (start + end).div(2, rounding_mode="floor")
        at = mid.clamp(max=n - 1)
        probe = seq[at] if seq.ndim == 1 else gather(seq, -1, at)
        go_right = ~(probe > values) if right else ~(probe >= values)
        start = where(active & go_right, mid + 1, start)
        end = where(active & ~go_right, mid, end)
    return start


# ------------------------------------------------------------------------------ bincount / histc


@defop(kind="reduction", differentiable=False)
def bincount(self: Tensor, weights: Tensor | None = None, minlength: int = 0): ...


@bincount.register_kernel
def _bincount_kernel(x, weights, minlength):
    if x._dtype.is_floating_point or x._dtype is dt.bool_:
        raise NotImplementedError(
            f"\"bincount_cpu\" not implemented for '{torch_type_name(x._dtype)}'"
        )
    a = x._data
    if a.ndim != 1 or (a.size and a.min() < 0):
        raise RuntimeError("bincount only supports 1-d non-negative integral inputs.")
    if minlength < 0:
        raise RuntimeError("minlength should be >= 0")
    if weights is None or a.size == 0:  # an empty input counts in int64, weights or not
        return wrap(np.bincount(a, minlength=minlength), _int64)
    if weights.ndim != 1 or weights.shape[0] != a.shape[0]:
        raise RuntimeError("weights should be 1-d and have the same length as input")
    # float32 weights give a float32 histogram; every other weight dtype gives float64
    od = dt.float32 if weights._dtype is dt.float32 else dt.float64
    return wrap(np.bincount(a, weights._data.astype(np.float64), minlength), od)


@bincount.register_meta
def _bincount_meta(x, weights=None, minlength=0):
    raise DataDependentOutputError("bincount's output length depends on the largest input value")


@defop(kind="reduction", differentiable=False)
def histc(self: Tensor, bins: int = 100, min: Scalar = 0, max: Scalar = 0): ...  # noqa: A002


def _check_histc(x, bins, lo, hi) -> None:
    # PyTorch's order: the bin edges' linspace in the input's dtype (no bools; the range
    # converted to an integer dtype checked), then the kernel (floats only)
    if x._dtype is dt.bool_:
        raise NotImplementedError("\"linspace_cpu\" not implemented for 'Bool'")
    if x._dtype.is_integral:
        if lo == hi and x.numel().__class__ is int and x.numel() == 0:
            lo, hi = lo - 1, hi + 1  # (an empty input's range: the kernel widens it so)
        checked_scalar(float(lo), x._dtype)
        checked_scalar(float(hi), x._dtype)
    if not x._dtype.is_floating_point:
        raise NotImplementedError(
            f"\"histogram_cpu\" not implemented for '{torch_type_name(x._dtype)}'"
        )
    if bins <= 0:
        raise RuntimeError(f"torch.histogram(): bins must be > 0, but got {bins} for dimension 0")


def _histc_range(lo, hi):
    if lo == hi:
        lo, hi = lo - 1, hi + 1
    if lo > hi:
        raise RuntimeError("torch.histc: max must be larger than min")
    if not (np.isfinite(lo) and np.isfinite(hi)):
        raise RuntimeError(f"torch.histc: range of [{lo}, {hi}] is not finite")
    return lo, hi


@histc.register_kernel
def _histc_kernel(x, bins, lo, hi):
    _check_histc(x, bins, lo, hi)
    a = x._data.reshape(-1)
    if lo == hi and a.size:
        lo, hi = a.min(), a.max()
    lo, hi = _histc_range(lo, hi)
    # bin i holds [lo + i*w, lo + (i+1)*w); the last bin also holds hi; outside values drop
    inside = a[(a >= lo) & (a <= hi)]
    pos = np.minimum(((inside - lo) * bins / (hi - lo)).astype(np.int64), bins - 1)
    return wrap(np.bincount(pos, minlength=bins), x._dtype)


@histc.register_meta
def _histc_meta(x, bins=100, lo=0, hi=0):
    _check_histc(x, bins, lo, hi)
    return fake((bins,), x._dtype, x)


@histc.register_decomposition
def _histc_decomp(x, bins=100, lo=0, hi=0):
    _check_histc(x, bins, lo, hi)
    flat = x.reshape(-1)
    if lo == hi and flat.shape[0]:
        lo, hi = amin(flat), amax(flat)
        same = lo == hi
        lo, hi = where(same, lo - 1, lo), where(same, hi + 1, hi)
    else:
        lo, hi = _histc_range(lo, hi)
    inside = (flat >= lo) & (flat <= hi)
    pos = ((flat - lo) * bins / (hi - lo)).to(_int64).clamp(max=bins - 1)
    one_hot = (pos.unsqueeze(1) == arange(0, bins, 1, dtype=_int64, device=x.device)) & (
        inside.unsqueeze(1)
    )
    return sum(one_hot, 0).to(x.dtype)


@torch_function()
@writes_out(differentiable=False)
def bucketize(
    input: TensorOrScalar, boundaries: Tensor, *, out_int32: bool = False, right: bool = False
) -> Tensor:
    """Index of the bucket of each value: boundaries[i-1] < x <= boundaries[i] (``<`` with right)."""
    if boundaries.ndim != 1:
        raise RuntimeError(f"boundaries tensor must be 1 dimension, but got dim({boundaries.ndim})")
    return searchsorted(boundaries, input, out_int32=out_int32, right=right)
