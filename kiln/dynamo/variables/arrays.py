"""numpy arrays that captured code turns into tensors (``kiln.from_numpy(obs)``,
``kiln.as_tensor(self.filterbank, dtype=...)``, ``kiln.tensor(obs)``): the array, read from its
source at each call, becomes a graph input sharing its memory (``ArrayTensorSource``), so new
values need no recompile. Anything else done to the array is a graph break, as before."""

from __future__ import annotations

from typing import Any

import numpy as np

from ...ops.creation import api
from ..exc import unsupported
from ..sources import ArrayTensorSource, array_as_tensor
from .misc import UserObjectVariable

__all__ = ["ArrayVariable", "is_capturable_array"]


def is_capturable_array(value: Any) -> bool:
    """A plain ndarray that a tensor can share (numeric or bool dtype, strides >= 0)."""
    return type(value) is np.ndarray and array_as_tensor(value) is not None


class ArrayVariable(UserObjectVariable):
    """An ndarray read from a source; guarded by type until a conversion reads it as a tensor
    (then by that tensor's dtype, shape and strides)."""

    _tensor = None

    def as_tensor(self, tx):
        """The graph input standing for the array (one per array: two conversions of it are one
        input, not two overlapping ones)."""
        if self._tensor is None:
            example = array_as_tensor(self.value)
            self._tensor = tx.output.input_tensor(example, ArrayTensorSource(self.source))
        return self._tensor

    def convert(self, tx, fn, args: list, kwargs: dict):
        """``fn(array, *args, **kwargs)`` for the kiln conversion functions: from_numpy is the
        input itself, as_tensor/asarray convert it like a tensor, tensor copies it."""
        from .tensor import call_kiln

        if fn is api.from_numpy and not args and not kwargs:
            return self.as_tensor(tx)
        if fn is api.as_tensor:
            return call_kiln(tx, api.as_tensor, [self.as_tensor(tx), *args], kwargs)
        if fn is api.tensor and set(kwargs) <= {"dtype", "device"}:
            converted = call_kiln(tx, api.as_tensor, [self.as_tensor(tx), *args], kwargs)
            return converted.call_method(tx, "clone", [], {})
        raise unsupported("unsupported_object", f"passing a numpy array to {fn.__name__}")
