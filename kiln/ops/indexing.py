"""``x[...]`` and ``x[...] = v``: basic indexing as view ops, advanced indexing as ``index``/``index_put``.

Basic items (ints, slices, None, Ellipsis) become ``select``/``slice``/``unsqueeze`` views, so the
result shares storage exactly as in PyTorch. Integer-tensor and boolean-mask items become one
``index`` op (numpy's advanced-indexing rules are PyTorch's: adjacent advanced dims stay in place,
separated ones move to the front). Assignment is a copy into the basic view, or ``index_put_``.
"""

from __future__ import annotations

import numbers

import numpy as np

from ..runtime import dtypes as dt
from .common import Tensor, broadcast_shapes, fake, wrap
from .registry import OPS, defop

__all__ = ["getitem", "setitem"]


class DataDependentOutputError(RuntimeError):
    """An op whose output shape depends on tensor values was asked for its shape without data."""


# ------------------------------------------------------------------------------ ops


@defop(kind="indexing", prim=True)
def index(self: Tensor, indices: list[Tensor | None]): ...


def _np_indices(x, indices):
    out = []
    for idx in indices:
        if idx is None:
            out.append(np.s_[:])
            continue
        if idx._dtype.is_floating_point:
            raise IndexError(
                f"tensors used as indices must be long, int, byte or bool tensors (got {idx._dtype.name})"
            )
        out.append(idx._data)
    return tuple(out)


def _check_bounds(x, indices):
    dim = 0
    for idx in indices:
        if idx is None:
            dim += 1
            continue
        if idx._dtype is dt.bool_ or idx._dtype is dt.uint8:
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


@index.register_kernel
def _index_kernel(x, indices):
    if len(indices) > x.ndim:
        raise IndexError(f"too many indices for tensor of dimension {x.ndim}")
    _check_bounds(x, indices)
    return wrap(np.require(x._data[_np_indices(x, indices)], requirements="C"), x._dtype)


@index.register_meta
def _index_meta(x, indices):
    for idx in indices:
        if idx is not None and (idx._dtype is dt.bool_ or idx._dtype is dt.uint8):
            raise DataDependentOutputError(
                "boolean-mask indexing has a data-dependent output shape"
            )
    shapes = [idx._shape for idx in indices if idx is not None]
    bshape = broadcast_shapes(*shapes) if shapes else ()
    positions = [i for i, idx in enumerate(indices) if idx is not None]
    adjacent = positions == list(range(positions[0], positions[-1] + 1)) if positions else True
    rest = [s for i, s in enumerate(x._shape) if i >= len(indices) or indices[i] is None]
    if adjacent and positions:
        before = list(x._shape[: positions[0]])
        after = [
            s
            for i, s in enumerate(x._shape)
            if i > positions[-1] and (i >= len(indices) or indices[i] is None)
        ]
        shape = before + list(bshape) + after
    else:
        shape = list(bshape) + rest
    return fake(shape, x._dtype, x)


def _index_grad(c, g):
    x, indices = c.args
    zeros = g.new_zeros(x.shape)
    return (index_put(zeros, indices, g, True),)


index.register_derivative(_index_grad, save_inputs=(1,))


@defop(kind="indexing", prim=True)
def index_put(
    self: Tensor, indices: list[Tensor | None], values: Tensor, accumulate: bool = False
): ...


@index_put.register_kernel
def _index_put_kernel(x, indices, values, accumulate):
    _check_bounds(x, indices)
    out = x._data.copy()
    idx = _np_indices(x, indices)
    v = values._data if isinstance(values, Tensor) else values
    if isinstance(values, Tensor) and values._dtype is not x._dtype:
        v = v.astype(x._dtype.np)
    if accumulate:
        np.add.at(out, idx, v)
    else:
        try:
            out[idx] = v
        except ValueError:
            raise RuntimeError(
                f"shape mismatch: value tensor of shape {list(np.shape(v))} cannot be broadcast to "
                f"indexing result of shape {list(out[idx].shape)}"
            ) from None
    return wrap(out, x._dtype)


index_put.register_meta(lambda x, indices, values, accumulate=False: fake(x._shape, x._dtype, x))


def _index_put_grad(c, g):
    x, indices, values, accumulate = c.args
    gx = None
    if c.needs_input_grad[0]:
        gx = g if accumulate else index_put(g, indices, g.new_zeros(()), False)
    gv = None
    if c.needs_input_grad[2]:
        gv = index(g, indices)
        gv = gv.sum_to_size(values.shape) if tuple(gv.shape) != tuple(values.shape) else gv
    return gx, None, gv


index_put.register_derivative(_index_put_grad, save_inputs=(1, 2))


@defop(kind="indexing")
def nonzero(self: Tensor): ...


@nonzero.register_kernel
def _nonzero_kernel(x):
    return wrap(np.require(np.argwhere(x._data).astype(np.int64), requirements="C"), dt.int64)


@nonzero.register_meta
def _nonzero_meta(x):
    raise DataDependentOutputError("nonzero has a data-dependent output shape")


nonzero.differentiable = False


# ------------------------------------------------------------------------------ index parsing


def _is_int(x) -> bool:
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)


def _as_index_tensor(item, device):
    from .api import tensor

    if isinstance(item, Tensor):
        return item
    if isinstance(item, np.ndarray):
        return tensor(item)
    if isinstance(item, (list, tuple)):
        return tensor(item, device=device)
    if isinstance(item, bool):
        return tensor(item, device=device)
    raise IndexError(
        "only integers, slices (`:`), ellipsis (`...`), None and long or byte Variables are valid indices "
        f"(got {type(item).__name__})"
    )


def _normalize(index) -> tuple:
    if isinstance(index, tuple):
        return index
    if isinstance(index, list) and any(
        isinstance(i, (slice, type(None), type(Ellipsis), list, Tensor)) for i in index
    ):
        return tuple(index)
    return (index,)


def _consumes(item) -> int:
    if item is None or item is Ellipsis or isinstance(item, bool):
        return 0
    if isinstance(item, Tensor) and item._dtype in (dt.bool_, dt.uint8):
        return item.ndim
    if isinstance(item, np.ndarray) and item.dtype == np.bool_:
        return item.ndim
    return 1


def _apply_basic(x: Tensor, index):
    """Apply ints/slices/None/Ellipsis as views; return the view and the advanced items per dim."""
    items = _normalize(index)
    n_ellipsis = sum(1 for i in items if i is Ellipsis)
    if n_ellipsis > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    consumed = sum(_consumes(i) for i in items)
    if consumed > x.ndim:
        raise IndexError(f"too many indices for tensor of dimension {x.ndim}")
    out = x
    dim = 0
    advanced = []  # (dim in `out`, index tensor)
    for item in items:
        if item is Ellipsis:
            dim += x.ndim - consumed
            continue
        if item is None:
            out = OPS["unsqueeze"](out, dim)
            dim += 1
            continue
        if _is_int(item) or _is_scalar_int_tensor(item):
            i = int(item)
            size = out._shape[dim]
            if not -size <= i < size:
                raise IndexError(f"index {i} is out of bounds for dimension {dim} with size {size}")
            out = OPS["select"](out, dim, i)
            continue
        if isinstance(item, slice):
            start, stop, step = item.start, item.stop, item.step
            step = 1 if step is None else int(step)
            if step <= 0:
                raise ValueError("step must be greater than zero")
            if not (start is None and stop is None and step == 1):
                out = OPS["slice"](out, dim, _opt_int(start), _opt_int(stop), step)
            dim += 1
            continue
        t = _as_index_tensor(item, x._device)
        if t._dtype.is_floating_point:
            raise IndexError("tensors used as indices must be long, int, byte or bool tensors")
        if isinstance(item, bool) or (t._dtype is dt.bool_ and t.ndim == 0):
            out = OPS["unsqueeze"](out, dim)
            advanced.append((dim, t.unsqueeze(0) if t.ndim == 0 else t))
            dim += 1
            continue
        advanced.append((dim, t))
        dim += t.ndim if t._dtype in (dt.bool_, dt.uint8) else 1
    return out, advanced


def _is_scalar_int_tensor(item) -> bool:
    """A 0-d integer tensor with data indexes like an int in PyTorch (a view, not a copy)."""
    return (
        isinstance(item, Tensor)
        and item.ndim == 0
        and item._dtype.category == 1
        and item._dtype is not dt.uint8
        and item._data is not None
    )


def _opt_int(v):
    if v is None:
        return None
    if isinstance(v, Tensor):
        return int(v.item())
    return int(v)


def _index_list(out: Tensor, advanced):
    """Expand bool masks to integer indices and lay out one entry per leading dim."""
    indices: list = []
    for dim, t in advanced:
        while len(indices) < dim:
            indices.append(None)
        if t._dtype in (dt.bool_, dt.uint8):
            mask_shape = out._shape[dim : dim + t.ndim]
            if tuple(t._shape) != tuple(mask_shape):
                raise IndexError(
                    f"The shape of the mask {list(t._shape)} at index {dim} does not match the shape "
                    f"of the indexed tensor {list(out._shape)} at index {dim}"
                )
            nz = OPS["nonzero"](t.to(dt.bool_))
            for k in range(t.ndim):
                indices.append(nz.select(1, k))
        else:
            indices.append(t)
    return indices


def getitem(x: Tensor, index) -> Tensor:
    """``x[index]`` with PyTorch's semantics."""
    if isinstance(index, (numbers.Integral,)) and not isinstance(index, bool):
        if x.ndim == 0:
            raise IndexError(
                "invalid index of a 0-dim tensor. Use `tensor.item()` to convert a 0-dim tensor to a number"
            )
        return OPS["select"](x, 0, int(index))
    out, advanced = _apply_basic(x, index)
    if not advanced:
        if out is x:
            out = OPS["alias"](x)
        return out
    return OPS["index"](out, _index_list(out, advanced))


def setitem(x: Tensor, index, value) -> None:
    """``x[index] = value``: copy into the basic view, or ``index_put_`` for advanced indices."""
    if isinstance(value, (list, tuple, np.ndarray)):
        from .api import tensor

        value = tensor(value, dtype=x._dtype, device=x._device)
    # whole-tensor boolean mask with a scalar: a masked fill (no data-dependent shapes)
    if (
        isinstance(index, Tensor)
        and index._dtype is dt.bool_
        and tuple(index._shape) == tuple(x._shape)
        and (not isinstance(value, Tensor) or value.ndim == 0)
    ):
        OPS["masked_fill_"](x, index, value)
        return
    out, advanced = _apply_basic(x, index)
    if not advanced:
        OPS["copy_"](out, value)
        return
    if not isinstance(value, Tensor):
        from .api import full

        value = full((), value, dtype=out._dtype, device=out._device)
    elif value._dtype is not out._dtype:
        value = value.to(out._dtype)
    OPS["index_put_"](out, _index_list(out, advanced), value, False)


@defop(kind="view", prim=True, view=True)
def alias(self: Tensor): ...


alias.register_kernel(lambda x: Tensor._wrap_view(x._data[...], x))
alias.register_meta(
    lambda x: fake(x._shape, x._dtype, x, x.stride(), x._offset if x._data is None else 0)
)
alias.register_derivative(lambda c, g: (g,), save_inputs=())
