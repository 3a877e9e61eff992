"""``default_collate`` / ``default_convert``: turn lists of samples into batched tensors.

Tensors are stacked, numpy arrays and numbers become tensors (Python floats as float64, ints as
int64, as PyTorch does), and dicts, namedtuples and sequences are collated field by field. The
per-type rules are a table (``default_collate_fn_map``) that ``collate`` takes, so programs can
add their own types as they do with PyTorch's.
"""

from __future__ import annotations

import collections.abc
import copy
import re

import numpy as np

from ...ops.creation import api
from ...runtime import dtypes as dt
from ...runtime.tensor import Tensor, wrap_array

__all__ = [
    "collate",
    "collate_float_fn",
    "collate_int_fn",
    "collate_numpy_array_fn",
    "collate_numpy_scalar_fn",
    "collate_str_fn",
    "collate_tensor_fn",
    "default_collate",
    "default_collate_fn_map",
    "default_convert",
]

_NUMPY_STRING_OR_OBJECT = re.compile(r"[SaUO]")

_ERR = (
    "default_collate: batch must contain tensors, numpy arrays, numbers, dicts or lists; found {}"
)
_CONVERT_ERR = (
    "default_convert: batch must contain tensors, numpy arrays, numbers, dicts or lists; found {}"
)


def _is_namedtuple(x) -> bool:
    return isinstance(x, tuple) and hasattr(x, "_fields")


def _same_type_mapping(elem, values: dict):
    """A mapping of ``elem``'s type holding ``values`` (a plain dict if the type won't allow it)."""
    if isinstance(elem, collections.abc.MutableMapping):
        clone = copy.copy(elem)
        clone.update(values)
        return clone
    try:
        return type(elem)(values)
    except TypeError:
        return values


def default_convert(data):
    """Convert numpy arrays and numbers inside ``data`` to tensors without batching."""
    if isinstance(data, Tensor):
        return data
    if type(data).__module__ == "numpy" and not isinstance(data, (np.str_, np.bytes_)):
        if isinstance(data, np.ndarray) and _NUMPY_STRING_OR_OBJECT.search(data.dtype.str):
            return data
        return api.as_tensor(data)
    if isinstance(data, collections.abc.Mapping):
        return _same_type_mapping(data, {k: default_convert(v) for k, v in data.items()})
    if _is_namedtuple(data):
        return type(data)(*(default_convert(d) for d in data))
    if isinstance(data, tuple):
        return [default_convert(d) for d in data]
    if isinstance(data, collections.abc.Sequence) and not isinstance(data, (str, bytes)):
        converted = [default_convert(d) for d in data]
        try:
            return type(data)(converted)
        except TypeError:
            return converted
    return data


def collate(batch, *, collate_fn_map: dict | None = None):
    """Collate ``batch`` with per-type functions from ``collate_fn_map`` (exact type first, then
    the first ``isinstance`` match in the table's order), recursing into containers."""
    elem = batch[0]
    elem_type = type(elem)
    if collate_fn_map is not None:
        if elem_type in collate_fn_map:
            return collate_fn_map[elem_type](batch, collate_fn_map=collate_fn_map)
        for collate_type, fn in collate_fn_map.items():
            if isinstance(elem, collate_type):
                return fn(batch, collate_fn_map=collate_fn_map)

    def recurse(samples):
        return collate(samples, collate_fn_map=collate_fn_map)

    if isinstance(elem, collections.abc.Mapping):
        return _same_type_mapping(elem, {k: recurse([d[k] for d in batch]) for k in elem})
    if _is_namedtuple(elem):
        return elem_type(*(recurse(samples) for samples in zip(*batch)))
    if isinstance(elem, collections.abc.Sequence):
        size = len(elem)
        if any(len(e) != size for e in batch):
            raise RuntimeError("each element in list of batch should be of equal size")
        columns = [recurse(samples) for samples in zip(*batch)]
        if isinstance(elem, tuple):
            return columns
        try:
            if isinstance(elem, collections.abc.MutableSequence):
                clone = copy.copy(elem)
                for i, column in enumerate(columns):
                    clone[i] = column
                return clone
            return elem_type(columns)
        except TypeError:
            return columns
    raise TypeError(_ERR.format(elem_type))


def collate_tensor_fn(batch: list, *, collate_fn_map: dict | None = None) -> Tensor:
    stacked = stack_host_arrays(batch)
    return stacked if stacked is not None else _stack(batch)


def stack_host_arrays(tensors) -> Tensor | None:
    """``stack(tensors)`` straight from the numpy arrays when that is all it can mean.

    Data loading stacks thousands of small samples per epoch; plain CPU tensors of one dtype
    outside autograd need no dispatch. None when any tensor does (the caller uses ``stack``).
    """
    dtype, shape = tensors[0]._dtype, tensors[0]._shape
    for t in tensors:
        if t._dtype is not dtype or t._shape != shape or t._data is None or t._requires_grad:
            return None
        if t.device.type != "cpu":
            return None
    return wrap_array(np.stack([t._data for t in tensors]), dtype)


def collate_numpy_array_fn(batch: list, *, collate_fn_map: dict | None = None):
    if _NUMPY_STRING_OR_OBJECT.search(batch[0].dtype.str) is not None:
        raise TypeError(_ERR.format(batch[0].dtype))
    return collate([api.as_tensor(b) for b in batch], collate_fn_map=collate_fn_map)


def collate_numpy_scalar_fn(batch: list, *, collate_fn_map: dict | None = None) -> Tensor:
    return api.as_tensor(np.array(batch))


def collate_float_fn(batch: list, *, collate_fn_map: dict | None = None) -> Tensor:
    return api.tensor(batch, dtype=dt.float64)


def collate_int_fn(batch: list, *, collate_fn_map: dict | None = None) -> Tensor:
    return api.tensor(batch)


def collate_str_fn(batch: list, *, collate_fn_map: dict | None = None) -> list:
    return batch


# PyTorch's table, in its order: numpy scalars come before float/int (np.float64 is a float)
default_collate_fn_map: dict = {
    Tensor: collate_tensor_fn,
    np.ndarray: collate_numpy_array_fn,
    (np.bool_, np.number, np.object_): collate_numpy_scalar_fn,
    float: collate_float_fn,
    int: collate_int_fn,
    str: collate_str_fn,
    bytes: collate_str_fn,
}


def default_collate(batch: list):
    """Stack a list of samples into a batch, recursing into dicts, namedtuples and sequences."""
    return collate(batch, collate_fn_map=default_collate_fn_map)


def _stack(tensors: list[Tensor]) -> Tensor:
    """``kiln.stack(tensors, 0)`` (looked up at call time: the op module loads after this one)."""
    from ...ops.public import stack

    return stack(tensors, 0)
