"""float32 sums added in the order PyTorch's CPU kernel adds them, for small tensors.

Programs print sums and means, and a float32 sum depends on the order of its additions: numpy's
pairwise order and PyTorch's differ in the last bit about a third of the time, which shows in a
printed ``tensor(12.3457)`` now and then and always in the noise of a cancelling sum (the mean
of normalised data). PyTorch's ``cascade_sum`` is deterministic for inputs below its
parallelisation grain, so this module replays it on numpy arrays, vectorised across the
independent outputs:

1. TensorIterator orders the dims (reduced dims innermost, then by the input's strides) and
   coalesces neighbours that are contiguous in memory;
2. the two innermost dims go to one of four loops (contiguous inner reduction in 8-lane vectors,
   contiguous outer reduction, scalar inner, scalar outer), each built from ``row_sum`` (four
   interleaved partial sums) and ``multi_row_sum`` (a four-level cascade of 16-row blocks);
3. results are added into the zero-filled output, across outer dims in iteration order.
"""

from __future__ import annotations

import math

import numpy as np

from ...runtime import machine_code

__all__ = [
    "torch_order_sum",
    "torch_order_flat_sum",
    "torch_order_last_dim_sums",
    "native_last_dim_sums",
    "over_last_dim",
    "EXACT_SUM_MAX_SIZE",
]

# small tensors only (the ones programs print; the replay costs a few microseconds), far below
# PyTorch's parallel grain (32768), where its order would depend on the thread count
EXACT_SUM_MAX_SIZE = 1024
_LANES = 8  # float32 lanes of the vectors PyTorch's sum kernel uses
_ILP = 4
_f32 = np.float32


def _ceil_log2(x: int) -> int:
    return 1 if x <= 2 else (x - 1).bit_length()


def _sequential(rows: np.ndarray) -> np.ndarray:
    """0 + rows[0] + rows[1] + ... along axis 0, one float32 rounding per addition."""
    if not rows.shape[0]:
        return np.zeros(rows.shape[1:], _f32)
    return np.add.accumulate(rows, axis=0, dtype=_f32)[-1] + _f32(0)


def _multi_row_sum(rows: np.ndarray) -> np.ndarray:
    """Sum rows (axis 0) per lane in PyTorch's four-level cascade of ``2**level_power`` blocks."""
    size = rows.shape[0]
    power = max(4, _ceil_log2(size) // 4)
    step = 1 << power
    mask = step - 1
    acc = np.zeros((4,) + rows.shape[1:], _f32)
    i = 0
    while i + step <= size:
        acc[0] = _sequential(rows[i : i + step])
        i += step
        for level in range(1, 4):
            acc[level] = acc[level] + acc[level - 1]
            acc[level - 1] = 0
            if i & (mask << (level * power)):
                break
    if i < size:
        acc[0] = _sequential(rows[i:])
    return ((acc[0] + acc[1]) + acc[2]) + acc[3]


def _row_sum(items: np.ndarray) -> np.ndarray:
    """Sum items (axis 0) per lane with four interleaved partial sums, as ``row_sum`` does."""
    size = items.shape[0]
    lanes = items.shape[1:]
    whole = size // _ILP
    if whole:
        rows = items[: whole * _ILP].reshape((whole, _ILP) + lanes)
        partial = _multi_row_sum(rows)
    else:
        partial = np.zeros((_ILP,) + lanes, _f32)
    first = partial[0]
    for k in range(whole * _ILP, size):
        first = first + items[k]
    return ((first + partial[1]) + partial[2]) + partial[3]


def _vectorized_inner(block: np.ndarray) -> np.ndarray:
    """Rows contiguous in memory (last axis reduced), summed in 8-lane vectors plus a tail."""
    n = block.shape[-1]
    count = n // _LANES
    lead = block.shape[:-1]
    if count:
        vectors = block[..., : count * _LANES].reshape(lead + (count, _LANES))
        lanes = _row_sum(np.moveaxis(vectors, -2, 0))
    else:
        lanes = np.zeros(lead + (_LANES,), _f32)
    final = np.zeros(lead, _f32)
    for k in range(count * _LANES, n):
        final = final + block[..., k]
    for k in range(_LANES):
        final = final + lanes[..., k]
    return final


def _column_groups(block: np.ndarray, width: int, grouped, rest) -> np.ndarray:
    """Columns (last axis) in groups of ``width`` through ``grouped``, the rest through ``rest``;
    the reduced axis is axis -2."""
    ncols = block.shape[-1]
    whole = ncols - ncols % width
    rows = np.moveaxis(block, -2, 0)
    parts = []
    if whole:
        parts.append(grouped(rows[..., :whole]))
    if whole < ncols:
        parts.append(rest(rows[..., whole:]))
    return np.concatenate(parts, axis=-1) if len(parts) > 1 else parts[0]


def _vectorized_outer(block: np.ndarray) -> np.ndarray:
    """Columns contiguous in memory: 32 columns at a time through one cascade per lane, the
    rest (8-lane vectors, then single columns) with interleaved partial sums."""
    return _column_groups(block, _ILP * _LANES, _multi_row_sum, _row_sum)


def _scalar_outer(block: np.ndarray) -> np.ndarray:
    """Strided columns, four at a time through one cascade, the rest one by one."""
    return _column_groups(block, _ILP, _multi_row_sum, _row_sum)


def _iterator_dims(shape, strides, reduced):
    """TensorIterator's order (innermost first) and coalescing of a reduction's dims: a list of
    (size, input stride, reduced, original axes outermost first)."""
    ndim = len(shape)
    out_strides = {}
    step = 1
    for d in reversed(range(ndim)):  # the result is contiguous over the kept dims
        out_strides[d] = 0 if reduced[d] else step
        step *= 1 if reduced[d] else shape[d]

    def should_swap(d0: int, d1: int) -> int:
        o0, o1 = out_strides[d0], out_strides[d1]
        if (o0 == 0) != (o1 == 0):
            return 1 if o1 == 0 else -1
        for s0, s1 in ((o0, o1), (strides[d0], strides[d1])):
            if s0 == 0 or s1 == 0:
                continue
            if s0 != s1:
                return -1 if s0 < s1 else 1
            if shape[d0] > shape[d1]:
                return 1
        return 0

    perm = list(reversed(range(ndim)))
    for i in range(1, ndim):
        d1 = i
        for d0 in range(i - 1, -1, -1):
            order = should_swap(perm[d0], perm[d1])
            if order > 0:
                perm[d0], perm[d1] = perm[d1], perm[d0]
                d1 = d0
            elif order < 0:
                break
    dims = []
    for d in perm:
        if shape[d] == 1:
            continue
        if dims:
            size, stride, red, axes = dims[-1]
            mergeable = stride * size == strides[d] and red == reduced[d]
            if mergeable and (red or out_strides[d] == out_strides[axes[-1]] * size):
                dims[-1] = (size * shape[d], stride, red, [d] + axes)
                continue
        dims.append((shape[d], strides[d], reduced[d], [d]))
    return dims


def _loop2d(block: np.ndarray, stride0: int, stride1: int) -> np.ndarray:
    """One of ``cascade_sum``'s four loops over (..., size1, size0), axis -1 reduced."""
    size0 = block.shape[-1]
    size1 = block.shape[-2]
    if stride0 == 1 and size0 >= _LANES:
        return _vectorized_inner(block)
    columns = np.swapaxes(block, -1, -2)  # (..., size0 rows, size1 columns)
    if stride1 == 1 and size1 >= _LANES:
        return _vectorized_outer(columns)
    if stride0 < stride1:
        return _row_sum(np.moveaxis(block, -1, 0))
    return _scalar_outer(columns)


# the order ``row_sum`` adds 5 to 7 elements in: x0, then x4.., then the partials x1, x2, x3
_SHORT_ROW_ORDERS = {n: [0, *range(4, n), 1, 2, 3] for n in range(5, 8)}
_SHORT_ROW_INDICES = {n: np.array(order) for n, order in _SHORT_ROW_ORDERS.items()}


def _contiguous_sum(x: np.ndarray) -> np.ndarray:
    """The sum of a contiguous 1-d array of at least 8 elements (``_contiguous_rows`` of one
    row, with 1-d numpy calls, which are several times cheaper)."""
    n = x.shape[0]
    count = n // _LANES
    whole = count // _ILP
    width = _ILP * _LANES
    if whole:
        groups = x[: whole * width].reshape(whole, width)
        if whole < 16:
            partial = np.add.accumulate(groups, axis=0, dtype=_f32)[-1] + _f32(0)
        else:
            partial = _multi_row_sum(groups)
        first = partial[:_LANES]
    else:
        first = np.zeros(_LANES, _f32)
    for k in range(whole * _ILP, count):
        first = first + x[k * _LANES : (k + 1) * _LANES]
    if whole:
        first = ((first + partial[8:16]) + partial[16:24]) + partial[24:32]
    tail = np.concatenate([_ZERO, x[count * _LANES :], first])
    return np.add.accumulate(tail, dtype=_f32)[-1:]


_ZERO = np.zeros(1, _f32)
# from this length a flat sum's groups of _ILP vectors run through the cascade (_multi_row_sum)
_FLAT_CASCADE = 16 * _ILP * _LANES


def torch_order_flat_sum(x: np.ndarray) -> np.ndarray:
    """The 0-d sum of a contiguous 1-d float32 array (``x.sum()``, the commonest reduction):
    fewer than 8 elements are one running sum in ``row_sum``'s order."""
    n = x.shape[0]
    if n >= _LANES:
        kernels = machine_code.get("sums")
        if kernels is not None and n < _FLAT_CASCADE:
            # below PyTorch's cascade a flat sum adds as one row does: the row sums' machine
            # code, one call (~3 us, not ~5: a 16-float ``x.sum()``)
            sums = kernels.rows(x.reshape(1, n))
            if sums is not None:
                return sums.reshape(())
        return _contiguous_sum(x).reshape(())
    if not n:
        return np.zeros((), _f32)
    if n > _ILP:
        x = x[_SHORT_ROW_INDICES[n]]
    # one sequential numpy call (a loop of numpy scalar additions cost 1.6 us of a 3 us
    # ``x.sum()``); it starts from x[0], not from PyTorch's 0 + x[0], which differs only for
    # an all -0.0 input: 0 + -0.0 is +0.0
    sums = np.add.accumulate(x)
    if sums.item(-1) == 0:  # (a Python float: comparing the array costs a ufunc call)
        sums[-1] = 0.0
    return sums[-1:].reshape(())


def _contiguous_rows(block: np.ndarray) -> np.ndarray:
    """Sums of the rows of a C-contiguous (rows, n) array: the common case, in few numpy calls
    (the same additions as ``_vectorized_inner`` and, for n < 8, ``_row_sum``)."""
    rows, n = block.shape
    if rows == 1:
        return torch_order_flat_sum(block[0]).reshape(1)
    kernels = machine_code.get("sums")  # the same additions, one loop per row
    if kernels is not None:
        sums = kernels.rows(block)
        if sums is not None:
            return sums
    if n < _LANES:
        ordered = block if n <= _ILP else block[:, _SHORT_ROW_ORDERS[n]]
        return np.add.accumulate(ordered, axis=1, dtype=_f32)[:, -1] + _f32(0)
    count = n // _LANES
    vectors = block[:, : count * _LANES].reshape(rows, count, _LANES)
    whole = count // _ILP
    first = np.zeros((rows, _LANES), _f32)
    partial = None
    if whole:
        groups = vectors[:, : whole * _ILP].reshape(rows, whole, _ILP * _LANES)
        if whole < 16:  # no complete cascade block: one running sum per lane
            partial = np.add.accumulate(groups, axis=1, dtype=_f32)[:, -1] + _f32(0)
        else:
            partial = _multi_row_sum(np.moveaxis(groups, 1, 0))
        partial = partial.reshape(rows, _ILP, _LANES)
        first = partial[:, 0]
    for k in range(whole * _ILP, count):
        first = first + vectors[:, k]
    if partial is not None:
        first = ((first + partial[:, 1]) + partial[:, 2]) + partial[:, 3]
    zero = np.zeros((rows, 1), _f32)
    tail = np.concatenate([zero, block[:, count * _LANES :], first], axis=1)
    return np.add.accumulate(tail, axis=1, dtype=_f32)[:, -1]


def torch_order_last_dim_sums(a: np.ndarray, keepdims: bool) -> np.ndarray:
    """``a.sum(-1)`` for a non-empty C-contiguous float32 ``a`` of at least one dim: what
    ``torch_order_sum`` computes there, without its tests of the layout and dims, which the
    caller (``x.sum(-1)``, ``x.mean(1)`` on small tensors) has made."""
    return over_last_dim(_contiguous_rows, a, keepdims)


def native_last_dim_sums(a: np.ndarray, keepdims: bool) -> np.ndarray | None:
    """``a.sum(-1)`` of a non-empty C-contiguous float32 ``a`` of any size, by the machine-code
    rows; None where there is none or the rows are too long for it (a cascade block completes).
    PyTorch's order at every size, not only below its parallel grain: its threads split the
    kept dims of a last-dim sum (``parallel_dim_reduction``), never a row, so each row is the
    one serial loop the rows replay. numpy's pairwise ``add.reduce`` took 15-30 us for 256 x 256
    (PyTorch: 5 us), the vector rows take 4 us."""
    kernels = machine_code.get("sums")
    if kernels is None:
        return None
    return over_last_dim(kernels.rows, a, keepdims)


def over_last_dim(rows_of, a: np.ndarray, keepdims: bool) -> np.ndarray | None:
    """A reduction of C-contiguous ``a`` over its last dim by ``rows_of``, which reduces each row
    of a (rows, n) block to one value (or returns None: so does this), in ``a``'s kept shape."""
    shape = a.shape
    rows = rows_of(a.reshape(-1, shape[-1]))
    if rows is None:
        return None
    kept = shape[:-1]
    return rows.reshape(kept + (1,) if keepdims else kept)


def torch_order_sum(a: np.ndarray, dims: tuple, keepdims: bool) -> np.ndarray | None:
    """``a.sum(dims)`` for float32 ``a`` with PyTorch's additions, or None where the layout is
    one this replay does not cover (negative strides)."""
    if a.dtype != _f32:
        return None
    shape = a.shape
    ndim = len(shape)
    if a.flags.c_contiguous and a.size and tuple(dims) == tuple(range(ndim - len(dims), ndim)):
        # a contiguous suffix of dims: one contiguous row per output
        kept = shape[: ndim - len(dims)]
        rows = _contiguous_rows(a.reshape(math.prod(kept), -1))
        return rows.reshape(kept + (1,) * len(dims) if keepdims else kept)
    if any(s < 0 for s in a.strides):
        return None
    reduced = [d in dims for d in range(ndim)]
    kept_shape = tuple(1 if r else s for s, r in zip(shape, reduced, strict=True))
    out_shape = kept_shape if keepdims else tuple(s for s, r in zip(shape, reduced) if not r)
    if a.size == 0:
        return np.zeros(out_shape, _f32)
    strides = [s // a.itemsize for s in a.strides]
    it = _iterator_dims(shape, strides, reduced)
    if len(it) < 2:
        it = it + [(1, 0, True, [])] * (2 - len(it))
    (_, stride0, red0, _), (_, stride1, red1, _) = it[0], it[1]
    order = [ax for dim in reversed(it) for ax in dim[3]]
    view = a.transpose(order + [d for d in range(a.ndim) if d not in order])
    view = view.reshape(tuple(d[0] for d in reversed(it)))  # outermost first
    flags = [d[2] for d in reversed(it)]
    if red1 and not red0:
        view = np.swapaxes(view, -1, -2)
        flags[-1], flags[-2] = flags[-2], flags[-1]
        stride0, stride1, red0, red1 = stride1, stride0, red1, red0
    if red0:
        partial = _loop2d(view, stride0, stride1)
        flags = flags[:-1]
    else:
        partial = view  # both inner dims kept: the loop adds elementwise
    # add into the zero-filled output across the remaining reduced dims, in iteration order
    keep = [i for i, r in enumerate(flags) if not r]
    sums = [i for i, r in enumerate(flags) if r]
    partial = partial.transpose(keep + sums)
    kept_sizes = partial.shape[: len(keep)]
    partial = partial.reshape(kept_sizes + (-1,))
    total = _sequential(np.moveaxis(partial, -1, 0))
    # back from iterator order to the logical order of the kept dims
    kept_dims = [d for d in reversed(it) if not d[2]]
    kept_axes = [ax for d in kept_dims for ax in d[3]]
    total = total.reshape(tuple(shape[ax] for ax in kept_axes))
    ranks = np.argsort(kept_axes)
    total = total.transpose(ranks) if len(kept_axes) else total
    return np.ascontiguousarray(total).reshape(out_shape)
