"""``default_collate`` / ``default_convert``: turn lists of samples into batched tensors.

Tensors are stacked, numpy arrays and numbers become tensors (Python floats as float64, ints as
int64, as PyTorch does), and dicts, namedtuples and sequences are collated field by field.
"""

from __future__ import annotations

import collections.abc
import copy
import re

import numpy as np

from ...ops import api
from ...runtime import dtypes as dt
from ...runtime.tensor import Tensor

__all__ = ["default_collate", "default_convert"]

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


def default_collate(batch: list):
    """Stack a list of samples into a batch, recursing into dicts, namedtuples and sequences."""
    elem = batch[0]
    if isinstance(elem, Tensor):
        return _stack(batch)
    if type(elem).__module__ == "numpy" and not isinstance(elem, (np.str_, np.bytes_)):
        if isinstance(elem, np.ndarray):
            if _NUMPY_STRING_OR_OBJECT.search(elem.dtype.str) is not None:
                raise TypeError(_ERR.format(elem.dtype))
            return default_collate([api.as_tensor(b) for b in batch])
        if elem.shape == ():
            return api.as_tensor(np.array(batch))
    if isinstance(elem, float):
        return api.tensor(batch, dtype=dt.float64)
    if isinstance(elem, int):
        return api.tensor(batch)
    if isinstance(elem, (str, bytes)):
        return batch
    if isinstance(elem, collections.abc.Mapping):
        return _same_type_mapping(elem, {k: default_collate([d[k] for d in batch]) for k in elem})
    if _is_namedtuple(elem):
        return type(elem)(*(default_collate(samples) for samples in zip(*batch)))
    if isinstance(elem, collections.abc.Sequence):
        size = len(elem)
        if any(len(e) != size for e in batch):
            raise RuntimeError("each element in list of batch should be of equal size")
        columns = [default_collate(samples) for samples in zip(*batch)]
        if isinstance(elem, tuple):
            return columns
        try:
            return type(elem)(columns)
        except TypeError:
            return columns
    raise TypeError(_ERR.format(type(elem)))


def _stack(tensors: list[Tensor]) -> Tensor:
    """``kiln.stack(tensors, 0)`` (looked up at call time: the op module loads after this one)."""
    import kiln

    return kiln.stack(tensors, 0)
