"""Tensors over raw memory: ``kiln.frombuffer`` views a Python buffer (bytes, bytearray,
``array.array``, mmap ...) without copying, ``kiln.empty_permuted`` allocates uninitialised
memory laid out in a chosen dim order. Checks and messages are PyTorch's."""

from __future__ import annotations

import warnings

import numpy as np

from ...runtime import dtypes as dt
from ...runtime.tensor import Tensor, wrap_array
from ..core.registry import torch_function

__all__ = ["frombuffer", "empty_permuted"]

_READ_ONLY_WARNED = [False]


@torch_function()
def frombuffer(
    buffer, *, dtype: dt.dtype, count: int = -1, offset: int = 0, requires_grad: bool = False
) -> Tensor:
    """A 1-D tensor viewing ``count`` elements of ``buffer`` from byte ``offset`` (all of
    them when ``count`` is -1); writes through the tensor change the buffer."""
    view = memoryview(buffer).cast("B")
    length = view.nbytes
    item = dtype.itemsize
    if length == 0 or count == 0:
        raise ValueError(f"both buffer length ({length}) and count ({count}) must not be 0")
    if not 0 <= offset < length:
        raise ValueError(
            f"offset ({offset} bytes) must be non-negative and no greater than buffer length "
            f"({length} bytes) minus 1"
        )
    if count < 0:
        if (length - offset) % item:
            raise ValueError(
                f"buffer length ({length - offset} bytes) after offset ({offset} bytes) must be a "
                f"multiple of element size ({item})"
            )
        count = (length - offset) // item
    elif offset + count * item > length:
        raise ValueError(
            f"requested buffer length ({count} * {item} bytes) after offset ({offset} bytes) must "
            f"not be greater than actual buffer length ({length} bytes)"
        )
    if view.readonly and not _READ_ONLY_WARNED[0]:
        _READ_ONLY_WARNED[0] = True
        warnings.warn(
            "The given buffer is not writable, and kiln does not support non-writable tensors. "
            "Writes through the tensor are refused; copy the buffer (or make it writable) first "
            "if you need to change the values.",
            UserWarning,
            stacklevel=2,
        )
    array = np.frombuffer(view, dtype.np, count=count, offset=offset)
    t = wrap_array(array, dtype)
    return t.requires_grad_(True) if requires_grad else t


@torch_function()
def empty_permuted(
    size, physical_layout, *, dtype=None, layout=None, device=None, requires_grad=False,
    pin_memory=False,
) -> Tensor:  # fmt: skip
    """Uninitialised memory of logical shape ``size`` whose dims lie in memory in the order
    ``physical_layout`` (outermost first): ``empty_permuted((2, 3, 4), (0, 2, 1))`` has
    strides (12, 1, 3)."""
    from . import api

    size, order = list(size), list(physical_layout)
    if sorted(order) != list(range(len(size))):
        raise RuntimeError(
            f"Number of dimensions in size does not match the length of the physical_layout; "
            f"or physical_layout is not a permutation: size {size}, physical_layout {order}"
        )
    inverse = [order.index(d) for d in range(len(size))]
    physical = api.empty([size[d] for d in order], dtype=dtype, device=device, requires_grad=False)
    out = physical.permute(inverse)
    return out.requires_grad_(True) if requires_grad else out
