"""Old Tensor spellings PyTorch still accepts: ``Tensor.new`` (the legacy constructor),
``cfloat`` / ``cdouble``, ``new_empty_strided``, ``to_dense`` (a no-op for strided tensors),
``record_stream`` and the long-removed ``volatile`` flag."""

from __future__ import annotations

import warnings

from ...runtime import dtypes as dt
from ...runtime.tensor import Size
from ..creation import api
from .common import Tensor
from .registry import METHODS, tensor_method

__all__: list[str] = []


@tensor_method()
def new(self: Tensor, *args, device=None) -> Tensor:
    """``t.new(2, 3)``: uninitialised, ``t.new([1, 2])``: those values, ``t.new(other)``:
    ``other`` itself; always ``t``'s dtype (and device unless given)."""
    device = device or self.device
    if len(args) == 1 and isinstance(args[0], Tensor):
        return args[0]
    if len(args) == 1 and isinstance(args[0], (list, tuple)) and not isinstance(args[0], Size):
        return api.tensor(args[0], dtype=self.dtype, device=device)
    sizes = args[0] if len(args) == 1 and isinstance(args[0], Size) else args
    return (
        api.empty(*sizes, dtype=self.dtype, device=device)
        if sizes
        else api.empty(0, dtype=self.dtype, device=device)
    )


@tensor_method()
def cfloat(self: Tensor, memory_format=None) -> Tensor:
    return self.to(dt.complex64)


@tensor_method()
def cdouble(self: Tensor, memory_format=None) -> Tensor:
    return self.to(dt.complex128)


@tensor_method()
def new_empty_strided(
    self: Tensor, size, stride, *, dtype=None, device=None, requires_grad=False, **kwargs
) -> Tensor:
    return api.empty_strided(
        size, stride, dtype=dtype or self.dtype, device=device or self.device,
        requires_grad=requires_grad,
    )  # fmt: skip


@tensor_method()
def to_dense(self: Tensor, dtype=None, *, masked_grad=None) -> Tensor:
    """Every kiln tensor is dense: ``self`` (converted to ``dtype`` when given)."""
    return self if dtype is None else self.to(dtype)


@tensor_method()
def record_stream(self: Tensor, stream) -> None:
    """Keep this cuda tensor's memory from reuse until the work queued on ``stream`` so far has
    finished (the caching allocator reuses a block on its own stream only)."""
    if self._device.type == "cuda":
        self._data.buffer.record_stream(stream)


def _volatile(self: Tensor) -> bool:
    warnings.warn(
        "volatile was removed (Variable.volatile is always False)", UserWarning, stacklevel=2
    )
    return False


METHODS["volatile"] = property(_volatile, doc="Always False (removed in PyTorch 0.4).")
