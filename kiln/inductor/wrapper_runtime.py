"""Helpers the generated wrapper calls at run time: buffer allocation, views, extern calls."""

from __future__ import annotations

import numpy as np

from ..runtime.storage import empty_array
from ..runtime.symbolic import SymInt
from ..runtime.tensor import wrap_array
from .ir import ExternBuffer, Layout

__all__ = [
    "allocate",
    "strided_view",
    "storage_of_tensor",
    "input_storage",
    "input_storage_owned",
    "run_extern",
    "extern_layouts",
    "to_tensor",
]


def allocate(layout: Layout) -> np.ndarray:
    """A flat (pooled) storage array big enough for ``layout``."""
    return empty_array((layout.view_args[3],), layout.dtype.np)


def strided_view(storage: np.ndarray, layout: Layout) -> np.ndarray:
    """The numpy view of ``storage`` that ``layout`` describes (runs on every call: the
    ``ndarray`` constructor over the storage's buffer is ~10x cheaper than ``as_strided``)."""
    shape, offset, strides, _ = layout.view_args
    try:
        return np.ndarray(shape, storage.dtype, storage, offset, strides)
    except (TypeError, ValueError):  # a storage that is itself strided (a strided input's)
        start = storage[layout.offset :] if layout.offset else storage
        return np.lib.stride_tricks.as_strided(start, shape, strides, writeable=True)


def storage_of_tensor(t) -> np.ndarray:
    """A flat array whose element 0 is ``t``'s first element and that covers all of ``t``.

    Index expressions for inputs use the tensor's own strides from offset 0, so the storage
    handed to kernels starts at the tensor's data pointer.
    """
    a = t._data
    if a.size == 0:
        return np.empty(0, a.dtype)
    if a.flags.c_contiguous:
        return a.reshape(-1)
    extent = 1 + sum((s - 1) * st for s, st in zip(a.shape, t.stride()) if s > 0) if a.size else 1
    return np.lib.stride_tricks.as_strided(
        a, shape=(extent,), strides=(a.itemsize,), writeable=True
    )


def input_storage(t, layout: Layout) -> np.ndarray:
    """The storage of an input as the kernels expect it: its strides must be the compiled ones.

    A tensor with other strides (an expanded gradient, a transposed view) is copied into the
    compiled layout; the common case hands over the tensor's memory directly.
    """
    if tuple(t.stride()) == tuple(layout.stride) or t.numel() <= 1:
        if t.numel() <= 1 and tuple(t.stride()) != tuple(layout.stride):
            return np.array(t._data, copy=True).reshape(-1)
        return storage_of_tensor(t)
    storage = allocate(layout)
    np.copyto(strided_view(storage, layout), t._data)
    return storage


def input_storage_owned(t, layout: Layout) -> tuple:
    """``(input_storage(t, layout), whether that is t's own memory)``: a value written into an
    input's storage in place reaches the input only then."""
    own = tuple(t.stride()) == tuple(layout.stride) and t.numel() > 0
    return (storage_of_tensor(t) if own else input_storage(t, layout)), own


def run_extern(
    buf: ExternBuffer, storages: dict, layouts: tuple | None = None, values: dict | None = None
) -> None:
    """Call an extern kernel on views of its buffers; ``layouts``: for a graph compiled for every
    size, this call's concrete layouts of the buffer inputs then the output (worked out once per
    set of sizes with the other layouts, ``symbolic_sizes``), else the compiled ones; ``values``:
    that call's size symbol values, which scalar arguments that are size expressions take."""
    if layouts is None:
        layouts = extern_layouts(buf)
    arrays = []
    k = 0
    for item in buf.inputs:
        if isinstance(item, tuple):
            arrays.append(strided_view(storages[item[0].name], layouts[k]))
            k += 1
        else:
            arrays.append(item)
    out = strided_view(storages[buf.name], layouts[k])
    kwargs = buf.kwargs
    if buf.symbolic_scalars:
        if values is None:
            raise RuntimeError(f"internal error: {buf.name}'s scalar arguments need size values")
        arrays = [a if isinstance(a, np.ndarray) else _concrete(a, values) for a in arrays]
        kwargs = {key: _concrete(v, values) for key, v in kwargs.items()}
    buf.kernel(out, *arrays, **kwargs)


def _concrete(value, values: dict):
    """``value`` (a scalar, or a tuple/list of them) with each size expression evaluated."""
    cls = value.__class__
    if cls is SymInt:
        return value.expr.evaluate(values)
    if cls is tuple or cls is list:
        return cls(_concrete(v, values) for v in value)
    return value


def extern_layouts(buf: ExternBuffer) -> tuple:
    """The layouts an extern call views its buffers with: its buffer inputs', then its own."""
    return (*(item[1] for item in buf.inputs if isinstance(item, tuple)), buf.layout)


def to_tensor(storage: np.ndarray, layout: Layout):
    return wrap_array(strided_view(storage, layout), layout.dtype)
