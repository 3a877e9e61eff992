"""``x[...]`` and ``x[...] = v``: basic indexing as view ops, advanced indexing as ``index``/``index_put``.

Basic items (ints, 0-d integer tensors, slices, None, Ellipsis) become ``select``/``slice``/
``unsqueeze`` views, so the result shares storage exactly as in PyTorch. Integer-tensor, list and
boolean-mask items become one ``index`` op over the view: numpy's advanced-indexing rules are
PyTorch's once ints have been applied as ``select`` (adjacent advanced dims stay in place,
separated ones move to the front). Assignment is ``copy_`` into the basic view, or ``index_put_``.
"""

from __future__ import annotations

import numbers

import numpy as np

from ...runtime import dtypes as dt
from ...runtime.storage import writable_target
from ...runtime.sym_expr import INF
from ...runtime.symbolic import (
    SymInt,
    active_env,
    has_symbols,
    is_size_one,
    known_same_shape,
    same_shape,
)
from ..core.common import Tensor, broadcast_shapes, fake, iterator_strides, laid_out, wrap
from ..core.dispatch import dispatch_self_only
from ..core.registry import OPS, defop, tensor_method, torch_function
from ..creation.factories import clone_layout
from ..shape.views import expand_shape, view_strides
from .row_accumulate import accumulate_rows

__all__ = ["getitem", "setitem", "DataDependentOutputError"]

_MASK_DTYPES = (dt.bool_, dt.uint8)


class DataDependentOutputError(RuntimeError):
    """An op whose output shape depends on tensor values was asked for its shape without data."""


def data_dependent_size(what: str, upper=None):
    """The size of a data-dependent output while capturing: a fresh *unbacked* symbol (its value
    is only known when the graph runs), at most ``upper`` when known; without a capture, the
    shape cannot be known at all (``DataDependentOutputError``)."""
    env = active_env()
    if env is None:
        raise DataDependentOutputError(f"{what} has a data-dependent output shape")
    return env.unbacked_size(what, upper if upper.__class__ is int else INF)


def true_count(mask, what: str):
    """The data-dependent count of ``mask``'s nonzero elements while capturing, one unbacked
    symbol per mask value: a mask read twice (``y[m] = x[m] * 2``, whose backward reads it
    again) gives counts the shape checks know are equal, as PyTorch's fake tensors memoise
    ``nonzero``. An in-place write to the mask (its version moves) or another capture makes a
    fresh one."""
    env = active_env()
    memo = getattr(mask, "_true_count", None)
    if memo is not None and memo[0] is env and memo[1] == mask._version:
        return memo[2]
    count = data_dependent_size(what, mask.numel())
    mask._true_count = (env, mask._version, count)
    return count


# ------------------------------------------------------------------------------ index (prim)


@defop(kind="indexing", prim=True)
def index(self: Tensor, indices: list[Tensor | None]): ...


def _np_indices(indices) -> tuple:
    out = []
    for idx in indices:
        if idx is None:
            out.append(np.s_[:])
            continue
        if idx._dtype.is_floating_point:
            raise IndexError("tensors used as indices must be long, int, byte or bool tensors")
        out.append(idx._data if idx._dtype is not dt.uint8 else idx._data.astype(np.bool_))
    return tuple(out)


def _check_bounds(x, indices) -> None:
    if len(indices) > x.ndim:
        raise IndexError(f"too many indices for tensor of dimension {x.ndim}")
    dim = 0
    for idx in indices:
        if idx is None:
            dim += 1
            continue
        if idx._dtype in _MASK_DTYPES:
            mask_shape = tuple(x._shape[dim : dim + idx.ndim])
            if tuple(idx._shape) != mask_shape:
                raise IndexError(
                    f"The shape of the mask {list(idx._shape)} at index {dim} does not match the "
                    f"shape of the indexed tensor {list(x._shape)} at index {dim}"
                )
            dim += idx.ndim
            continue
        size = x._shape[dim]
        a = idx._data
        if a.size:
            lo, hi = int(a.min()), int(a.max())
            if hi >= size or lo < -size:
                bad = hi if hi >= size else lo
                raise IndexError(
                    f"index {bad} is out of bounds for dimension {dim} with size {size}"
                )
        dim += 1
    _check_broadcastable(indices)


def _check_broadcastable(indices) -> None:
    """PyTorch's message when the index tensors do not broadcast (a mask counts as one index
    tensor of its nonzero count per dim it covers)."""
    shapes = []
    for idx in indices:
        if idx is None:
            continue
        if idx._dtype in _MASK_DTYPES:
            shapes += [(int(np.count_nonzero(idx._data)),)] * max(idx.ndim, 1)
        else:
            shapes.append(tuple(idx._shape))
    if len(shapes) > 1:
        try:
            np.broadcast_shapes(*shapes)
        except ValueError:
            listed = ", ".join(str(list(s)) for s in shapes)
            raise IndexError(
                f"shape mismatch: indexing tensors could not be broadcast together with shapes "
                f"{listed}"
            ) from None


@index.register_kernel
def _index_kernel(x, indices):
    _check_bounds(x, indices)
    single = [k for k, idx in enumerate(indices) if idx is not None]
    if len(single) == 1 and x._data.ndim:
        idx = indices[single[0]]
        if idx._dtype in (dt.int64, dt.int32):
            # one integer index array (a gather along one dim, F.pad's reflect and replicate):
            # np.take's loop is 2x faster than numpy's general fancy indexing, same result
            return _index_result(np.take(x._data, idx._data, axis=single[0]), x, indices)
    r = x._data[_np_indices(indices)]
    if all(i is None for i in indices):  # only full slices: numpy gave a view, the op copies
        r = r.copy()
    return _index_result(r, x, indices)


def _index_result(r: np.ndarray, x: Tensor, indices) -> Tensor:
    strides = _index_strides(x, indices)
    out = wrap(laid_out(r, strides), x._dtype)
    if strides is not None and not r.size:  # (numpy's strides of an empty array are row-major)
        out._stride = strides
    return out


def _index_strides(x: Tensor, indices) -> tuple | None:
    """The strides PyTorch gives ``x[indices]`` (None: row-major). PyTorch's ``index`` moves the
    indexed dims to the front when they are not adjacent, restrides the source with stride 0
    along the indexed dims and iterates it with the broadcast index tensors, so the result's
    dim order follows the source's strides in the kept dims and the index tensors' in the
    indexed ones: ``x.permute(2, 0, 1)[:, :, i]`` keeps the permuted order. A boolean mask
    counts as one contiguous index per dim it covers (its nonzero positions)."""
    layouts: list = []
    for idx in indices:
        if idx is None:
            layouts.append(None)
        elif idx._dtype in _MASK_DTYPES:
            if idx._data is None:
                return None  # (a count only known at run time)
            count = int(np.count_nonzero(idx._data))
            layouts += [((count,), (1,))] * max(idx.ndim, 1)
        else:
            layouts.append((tuple(idx._shape), tuple(idx.stride())))
    shape, stride = tuple(x._shape), tuple(x.stride())
    layouts += [None] * (len(shape) - len(layouts))
    positions = [d for d, lay in enumerate(layouts) if lay is not None]
    if not positions:
        return None
    if positions != list(range(positions[0], positions[-1] + 1)):
        order = positions + [d for d in range(len(shape)) if layouts[d] is None]
        shape = tuple(shape[d] for d in order)
        stride = tuple(stride[d] for d in order)
        layouts = [layouts[d] for d in order]
        positions = list(range(len(positions)))
    bshape = tuple(broadcast_shapes(*(layouts[d][0] for d in positions)))
    before, after = positions[0], positions[-1] + 1
    out_shape = shape[:before] + bshape + shape[after:]
    if len(out_shape) < 2:
        return None
    rows = [stride[:before] + (0,) * len(bshape) + stride[after:]]
    for d in positions:
        ishape, istride = layouts[d]
        pad = len(bshape) - len(ishape)
        if has_symbols(ishape) or has_symbols(bshape) or tuple(ishape) != bshape:
            # expanded to the common shape: stride 0 where broadcast (symbolic sizes taken
            # size-obliviously, not 1: the order found holds for every size but 1's strides)
            istride = (0,) * pad + tuple(
                0 if is_size_one(size) and not is_size_one(bshape[pad + k]) else st
                for k, (size, st) in enumerate(zip(ishape, istride))
            )
        # viewed with size-1 dims around it, which read as broadcast where the result is longer
        viewed = view_strides(bshape, istride, (1,) * before + bshape + (1,) * (len(shape) - after))
        rows.append(
            tuple(
                0 if not is_size_one(n) and k not in range(before, before + len(bshape)) else st
                for k, (n, st) in enumerate(zip(out_shape, viewed))
            )
        )
    return iterator_strides(out_shape, rows)


def index_result_shape(shape, indices) -> tuple:
    """Shape of ``x[indices]`` for integer index tensors (PyTorch's and numpy's placement rule)."""
    positions = [i for i, idx in enumerate(indices) if idx is not None]
    if not positions:
        return tuple(shape)
    bshape = broadcast_shapes(*(indices[i]._shape for i in positions))
    adjacent = positions == list(range(positions[0], positions[-1] + 1))
    rest = [s for i, s in enumerate(shape) if i >= len(indices) or indices[i] is None]
    if adjacent:
        before = list(shape[: positions[0]])
        return tuple(before + list(bshape) + rest[len(before) :])
    return tuple(list(bshape) + rest)


@index.register_meta
def _index_meta(x, indices):
    if len(indices) > x.ndim:
        raise IndexError(f"too many indices for tensor of dimension {x.ndim}")
    if any(idx is not None and idx._dtype in _MASK_DTYPES for idx in indices):
        return fake(_masked_index_shape(x, indices), x._dtype, x)
    return fake(index_result_shape(x._shape, indices), x._dtype, x, _index_strides(x, indices))


def _masked_index_shape(x, indices) -> tuple:
    """``x[indices]`` with boolean masks: a mask covering k dims is one index of its (data-
    dependent) count of True values; then numpy's placement rule."""
    per_dim: list = []
    for idx in indices:
        if idx is not None and idx._dtype in _MASK_DTYPES:
            count = true_count(idx, "boolean-mask indexing")
            per_dim.append(fake((count,), dt.int64, x))
            per_dim += [_COVERED] * (idx.ndim - 1)
        else:
            per_dim.append(idx)
    if len(per_dim) > x.ndim:
        raise IndexError(f"too many indices for tensor of dimension {x.ndim}")
    positions = [i for i, idx in enumerate(per_dim) if idx is not None and idx is not _COVERED]
    bshape = broadcast_shapes(*(per_dim[i]._shape for i in positions))
    shape = x._shape
    rest = [s for i, s in enumerate(shape) if i >= len(per_dim) or per_dim[i] is None]
    advanced = [i for i, idx in enumerate(per_dim) if idx is not None]
    if advanced == list(range(advanced[0], advanced[-1] + 1)):
        before = [s for i, s in enumerate(shape[: advanced[0]])]
        return tuple(before + list(bshape) + rest[len(before) :])
    return tuple(list(bshape) + rest)


_COVERED = object()  # a dim a multi-dim mask covers after its first


def _index_grad(c, g):
    x, indices = c.args
    return (index_put(g.new_zeros(tuple(x.shape)), indices, g, True),)


index.register_derivative(_index_grad, save_inputs=(1,))


# ------------------------------------------------------------------------------ index_put (prim)


@defop(kind="indexing", prim=True, autocast={"cuda": "promote"}, inplace_method=True)
def index_put(
    self: Tensor, indices: list[Tensor | None], values: Tensor, accumulate: bool = False
): ...


index_put.refuse_overlap("values")  # PyTorch's assert_no_overlap(self, values)


def _check_put_dtype(x, values) -> None:
    if isinstance(values, Tensor) and values._dtype is not x._dtype:
        raise RuntimeError(
            "Index put requires the source and destination dtypes match, got "
            f"{dt.torch_type_name(x._dtype)} for the destination and "
            f"{dt.torch_type_name(values._dtype)} "
            "for the source."
        )


def _put_values(x, indices, values):
    """Bounds and dtype checks; the values as a numpy array of ``x``'s dtype."""
    _check_bounds(x, indices)
    _check_put_dtype(x, values)
    if isinstance(values, Tensor):
        return values._data
    return np.asarray(values).astype(x._dtype.np)


def _assign(target: np.ndarray, idx: tuple, v: np.ndarray, accumulate: bool) -> None:
    try:
        if accumulate:
            if not (
                len(idx) == 1
                and isinstance(idx[0], np.ndarray)
                and accumulate_rows(target, idx[0], np.asarray(v))
            ):
                np.add.at(target, idx, v)
        else:
            target[idx] = v
    except ValueError:
        raise RuntimeError(
            f"shape mismatch: value tensor of shape {list(np.shape(v))} cannot be broadcast to "
            f"indexing result of shape {list(target[idx].shape)}"
        ) from None


@index_put.register_kernel
def _index_put_kernel(x, indices, values, accumulate):
    v = _put_values(x, indices, values)
    # PyTorch's out-of-place index_put clones ``x`` in its own layout (preserve_format)
    layout = clone_layout(x, None)
    if layout is None:  # (numpy's order "K" would order an expanded x's dims its own way)
        out = x._data.copy(order="C")
    else:
        out = laid_out(x._data.copy(order="K"), layout)
    _assign(out, _np_indices(indices), v, accumulate)
    return wrap(out, x._dtype)


@index_put.register_meta
def _index_put_meta(x, indices, values, accumulate=False):
    # the kernel's checks that need no index values: a compiled ``y[idx] = v`` refuses a value
    # of another dtype or one that does not broadcast to ``y[idx]``, as eager does
    _check_put_dtype(x, values)
    if isinstance(values, Tensor) and not any(
        idx is not None and idx._dtype in _MASK_DTYPES for idx in indices
    ):
        target = tuple(index_result_shape(x._shape, indices))
        value_shape = tuple(values._shape)
        while len(value_shape) > len(target) and value_shape[0] == 1:
            value_shape = value_shape[1:]  # leading 1s are dropped, in numpy's and PyTorch's
        shapes = (value_shape, target)
        if all(type(s) is int for shape in shapes for s in shape):
            try:
                fits = np.broadcast_shapes(*shapes) == shapes[1]
            except ValueError:
                fits = False
            if not fits:
                raise RuntimeError(
                    f"shape mismatch: value tensor of shape {list(shapes[0])} cannot be "
                    f"broadcast to indexing result of shape {list(shapes[1])}"
                )
    return fake(x._shape, x._dtype, x, clone_layout(x, None))


def _index_put_grad(c, g):
    x, indices, values, accumulate = c.args
    gx = None
    if c.needs_input_grad[0]:
        gx = g if accumulate else index_put(g, indices, g.new_zeros(()), False)
    gv = None
    if c.needs_input_grad[2]:
        gv = index(g, indices)
        if not known_same_shape(gv._shape, values._shape):
            gv = gv.sum_to_size(tuple(values.shape))
    return gx, None, gv


index_put.register_derivative(_index_put_grad, save_inputs=(1,))


def _index_put_inplace_kernel(x, indices, values, accumulate):
    """``index_put_`` writes straight into ``x``'s buffer (no copy of the whole tensor)."""
    v = _put_values(x, indices, values)
    target = writable_target(x._data)
    _assign(target, _np_indices(indices), v, accumulate)
    return x


def _install_index_put_inplace() -> None:
    from ..core.methods import _make_inplace_op

    _make_inplace_op(index_put).kernel = _index_put_inplace_kernel


_install_index_put_inplace()


# ------------------------------------------------------------------------------ .item() as an op


@defop(kind="indexing", differentiable=False)
def _local_scalar_dense(self: Tensor):
    """``t.item()`` of a one-element integer tensor, as a graph node: captured code uses the
    value as a size or an index without leaving the graph (PyTorch's name for it)."""


@_local_scalar_dense.register_kernel
def _local_scalar_dense_kernel(x):
    return x.item()


@_local_scalar_dense.register_meta
def _local_scalar_dense_meta(x):
    env = active_env()
    if env is None or x._dtype.category > 1:
        raise DataDependentOutputError(".item() needs the tensor's value")
    lower, upper = (0, 1) if x._dtype is dt.bool_ else (-INF, INF)
    return env.symint(env.create_unbacked(f"{list(x._shape)} tensor.item()", lower, upper))


# ------------------------------------------------------------------------------ nonzero / alias


@defop(kind="indexing")
def nonzero(self: Tensor): ...


# PyTorch lays the (count, ndim) positions out column by column (strides (1, count)), so that
# ``nonzero(as_tuple=True)``'s columns, and ``where(c)``'s, are contiguous


@nonzero.register_kernel
def _nonzero_kernel(x):
    columns = np.ascontiguousarray(np.argwhere(x._data).T, dtype=np.int64)
    out = wrap(columns.T, dt.int64)
    if not columns.size:  # numpy's strides of an empty array read as row-major ones
        out._stride = (1, columns.shape[1])
    return out


@nonzero.register_meta
def _nonzero_meta(x):
    count = true_count(x, f"nonzero of a {list(x._shape)} tensor")
    return fake((count, x.ndim), dt.int64, x, (1, count))


nonzero.differentiable = False


@defop(kind="view", prim=True, view=True)
def alias(self: Tensor): ...


alias.register_kernel(lambda x: Tensor._wrap_view(x._data[...], x))
alias.register_meta(
    lambda x: fake(x._shape, x._dtype, x, x.stride(), x._offset if x._data is None else 0)
)
alias.register_derivative(lambda c, g: (g,), save_inputs=())


# ------------------------------------------------------------------------------ index parsing


def _is_int(x) -> bool:
    kind = type(x)
    if kind is int:
        return True
    if kind is bool or kind is slice or x is None:
        return False
    return isinstance(x, numbers.Integral) and not isinstance(x, np.bool_)


def _sequence_as_tuple(seq: list) -> bool:
    """PyTorch's legacy rule: a short list holding slices, None, ... or sequences is a tuple."""
    if len(seq) >= 32:
        return False
    return any(
        i is None or i is Ellipsis or isinstance(i, (slice, Tensor, list, tuple, np.ndarray))
        for i in seq
    )


def _normalize(index) -> tuple:
    if isinstance(index, tuple):
        return index
    if isinstance(index, list) and _sequence_as_tuple(index):
        return tuple(index)
    return (index,)


def _convert(item, device):
    """One index item as int, slice, None, Ellipsis, bool or an index tensor."""
    kind = item.__class__
    if kind is int or kind is slice:  # the common items first
        return item
    if item is None or item is Ellipsis or isinstance(item, slice):
        return item
    if isinstance(item, (bool, np.bool_)):
        return bool(item)
    if _is_int(item):
        return item if item.__class__ is SymInt else int(item)
    if isinstance(item, np.ndarray):
        from ..creation.api import tensor

        item = tensor(item, device=device)
    elif isinstance(item, (list, tuple, range)):
        from ..creation.api import tensor

        # PyTorch: a list of only bools is a mask; any other list is int64 (floats truncated)
        dtype = dt.bool_ if item and _all_bools(item) else dt.int64
        item = tensor(item, dtype=dtype, device=device)
    if not isinstance(item, Tensor):
        raise IndexError(
            "only integers, slices (`:`), ellipsis (`...`), None and long or byte Variables are "
            f"valid indices (got {type(item).__name__})"
        )
    if item._dtype.is_floating_point:
        raise IndexError("tensors used as indices must be long, int, byte or bool tensors")
    if item.ndim == 0 and item._data is not None:
        if item._dtype is dt.bool_:
            return bool(item.item())
        if item._dtype is not dt.uint8:
            return int(item.item())  # a 0-d integer tensor indexes like an int: a view
    return item


def _all_bools(seq) -> bool:
    return all(
        _all_bools(v) if isinstance(v, (list, tuple)) else isinstance(v, (bool, np.bool_))
        for v in seq
    )


def _consumes(item) -> int:
    kind = item.__class__
    if kind is int or kind is slice:
        return 1
    if item is None or item is Ellipsis or isinstance(item, bool):
        return 0
    if isinstance(item, Tensor) and item._dtype in _MASK_DTYPES:
        return item.ndim
    return 1


def _slice_int(v):
    if v is None or type(v) is int or type(v) is SymInt:
        return v
    if isinstance(v, Tensor):
        return int(v.item())
    if not _is_int(v):
        raise TypeError(
            "slice indices must be integers or None or have an __index__ method "
            f"(got {type(v).__name__})"
        )
    return int(v)


def _apply_basic(x: Tensor, items: list):
    """Apply basic items as views; return the view and the advanced items as (dim, tensor)."""
    consumed = sum(_consumes(i) for i in items)
    if consumed > x.ndim:
        raise IndexError(f"too many indices for tensor of dimension {x.ndim}")
    out = x
    dim = 0
    ellipsis_seen = False
    advanced = []
    for item in items:
        if item is Ellipsis:
            # PyTorch lets a later Ellipsis stand for no dims at all
            if not ellipsis_seen:
                dim += x.ndim - consumed
                ellipsis_seen = True
            continue
        kind = item.__class__
        if kind is slice:
            if item.start is None and item.stop is None and item.step is None:
                dim += 1  # ``x[:, i]``'s first item: the whole dim, no op
                continue
            step = _slice_int(item.step)
            step = 1 if step is None else step
            if step == 0:
                raise ValueError("slice step cannot be zero")
            if step < 0:
                raise ValueError("step must be greater than zero")
            start, stop = _slice_int(item.start), _slice_int(item.stop)
            if not (start is None and stop is None and step == 1):
                out = OPS["slice"](out, dim, start, stop, step)
            dim += 1
        elif item is None:
            out = OPS["unsqueeze"](out, dim)
            dim += 1
        elif kind is bool:
            # a new size-1 dim indexed by [0] (True) or [] (False): a copy with a known shape,
            # as PyTorch's mask [True]/[False] gives
            from ..creation.api import tensor

            out = OPS["unsqueeze"](out, dim)
            rows = tensor([0] if item else [], dtype=dt.int64, device=x._device)
            advanced.append((dim, rows))
            dim += 1
        elif isinstance(item, (int, SymInt)):
            size = out._shape[dim]
            if not -size <= item < size:
                raise IndexError(
                    f"index {item} is out of bounds for dimension {dim} with size {size}"
                )
            out = OPS["select"](out, dim, item)
        else:
            advanced.append((dim, item))
            dim += _consumes(item)
    return out, advanced


def _index_list(out: Tensor, advanced) -> list:
    """Entries for ``index``/``index_put``: None for a whole dim, an integer index tensor for one
    dim, or a boolean mask for as many dims as it has (numpy's and PyTorch's mask rule)."""
    indices: list = []
    covered = 0
    for dim, t in advanced:
        while covered < dim:
            indices.append(None)
            covered += 1
        if t._dtype not in _MASK_DTYPES:
            indices.append(t)
            covered += 1
            continue
        mask_shape = tuple(out._shape[dim : dim + t.ndim])
        if tuple(t._shape) != mask_shape:
            raise IndexError(
                f"The shape of the mask {list(t._shape)} at index {dim} does not match the shape "
                f"of the indexed tensor {list(out._shape)} at index {dim}"
            )
        indices.append(t if t._dtype is dt.bool_ else t.to(dt.bool_))
        covered += t.ndim
    return indices


def _parse(x: Tensor, index):
    return _apply_basic(x, [_convert(i, x._device) for i in _normalize(index)])


def getitem(x: Tensor, index) -> Tensor:
    """``x[index]`` with PyTorch's semantics."""
    if index.__class__ is int or _is_int(index):
        if not x._shape:
            raise IndexError(
                "invalid index of a 0-dim tensor. Use `tensor.item()` in Python or "
                "`tensor.item<T>()` in C++ to convert a 0-dim tensor to a number"
            )
        if index.__class__ is not int and index.__class__ is not SymInt:
            index = int(index)
        return dispatch_self_only(OPS["select"], (x, 0, index))
    if index.__class__ is slice and x._shape:
        # ``x[a:b]``, ``x[::2]``: one slice of dim 0 with plain int bounds, straight to the view
        # op (parsing the index as a list of items cost 2 of a 7 us ``x[::2]``)
        start, stop, step = index.start, index.stop, index.step
        if (
            (start is None or start.__class__ is int)
            and (stop is None or stop.__class__ is int)
            and (step is None or (step.__class__ is int and step > 0))
            and not (start is None and stop is None and (step is None or step == 1))
        ):
            return dispatch_self_only(OPS["slice"], (x, 0, start, stop, step or 1))
    out, advanced = _parse(x, index)
    if not advanced:
        return OPS["alias"](x) if out is x else out
    return OPS["index"](out, _index_list(out, advanced))


def _strip_leading_ones(value: Tensor) -> Tensor:
    """PyTorch drops leading size-1 dims of an assigned value (``x[0] = v[None]`` works)."""
    k = 0
    while k < value.ndim and value._shape[k] == 1:
        k += 1
    return OPS["reshape"](value, value._shape[k:]) if k else value


def setitem(x: Tensor, index, value) -> None:
    """``x[index] = value``: copy into the basic view, or ``index_put_`` for advanced indices."""
    if not isinstance(value, (Tensor, bool, int, float, complex)):
        kind = type(value)
        name = (
            kind.__name__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__name__}"
        )
        raise TypeError(f"can't assign a {name} to a {x.type()}")
    if (
        isinstance(index, Tensor)
        and index._dtype is dt.bool_
        and same_shape(index._shape, x._shape)
        and (not isinstance(value, Tensor) or value.ndim == 0)
    ):
        # a whole-tensor mask with one value is a masked fill: no data-dependent shapes
        OPS["masked_fill_"](x, index, value)
        return
    if _is_int(index) and x.ndim:
        # a SymInt stays symbolic (a replay buffer's write pointer), as in getitem
        out, advanced = OPS["select"](x, 0, index if index.__class__ is SymInt else int(index)), []
    else:
        out, advanced = _parse(x, index)
    if isinstance(value, Tensor) and (advanced or not known_same_shape(value._shape, out._shape)):
        # (a value of the view's own shape is copied as it is, as PyTorch's ``copy_to`` does:
        # ``x[0:1] += 1`` writes the (1, 4) view back onto itself, which its reshape would not)
        value = _strip_leading_ones(value)
    if not advanced:
        if isinstance(value, Tensor) and not known_same_shape(value._shape, out._shape):
            expand_shape(value._shape, out._shape)  # PyTorch's expand error, not copy_'s
        OPS["copy_"](out, value)
        return
    if not isinstance(value, Tensor):
        from ..creation.api import full

        value = full((), value, dtype=out._dtype, device=out._device)
    elif value._dtype is not out._dtype and value.ndim == 0:
        # a 0-d value is cast when only masks index (PyTorch fills); integer indices need a match
        if all(t._dtype in _MASK_DTYPES for _, t in advanced):
            value = value.to(out._dtype)
    OPS["index_put_"](out, _index_list(out, advanced), value, False)


@torch_function()
def unravel_index(indices, shape) -> tuple:
    """The coordinates of flat ``indices`` in a tensor of ``shape`` (one tensor per dim),
    wrapping around as PyTorch's does (``-1`` is the last element)."""
    if not isinstance(indices, Tensor):
        indices = OPS["scalar_tensor"](indices, dtype=dt.int64)
    if indices.dtype.is_floating_point or indices.dtype.is_complex or indices.dtype is dt.bool_:
        raise TypeError(f"expected 'indices' to be integer dtype, but got {indices.dtype}")
    shape = [int(shape)] if isinstance(shape, numbers.Integral) else [int(s) for s in shape]
    if any(s < 0 for s in shape):
        raise ValueError("'shape' cannot have negative values, but got " + str(tuple(shape)))
    coordinates = []
    rest = indices.to(dt.int64)
    for size in reversed(shape):
        coordinates.append(rest.remainder(size))
        rest = rest.div(size, rounding_mode="floor")
    return tuple(reversed(coordinates))


@torch_function()
@tensor_method()
def nonzero_static(input: Tensor, *, size: int, fill_value: int = -1) -> Tensor:  # noqa: A002
    """``nonzero`` with a fixed number of rows: truncated to ``size``, or padded with rows of
    ``fill_value``."""
    found = OPS["nonzero"](input)
    if found.shape[0] >= size:
        return found[:size]
    padding = OPS["full"]([size - found.shape[0], input.ndim], fill_value, dtype=dt.int64)
    return OPS["cat"]([found, padding], 0)
