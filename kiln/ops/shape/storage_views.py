"""A tensor re-pointed at memory: ``set_``, ``as_strided_``, and the storage accessors
``storage()`` / ``storage_type()``.

Checkpoint loaders and libraries written against PyTorch's storages build tensors over a
storage (``torch.tensor([]).set_(storage, offset, size, stride)``) and expect every tensor over it
to see the others' writes. kiln's tensors are numpy views: ``set_`` gives ``self`` a numpy view of
the storage's bytes and makes the storage its identity (``_storage``), so ``data_ptr`` and
``storage_offset`` count from the storage's start as PyTorch's do. These change a tensor's
metadata on CPU data, which no graph expresses: under capture they raise (a graph break).
"""

from __future__ import annotations

import numpy as np

from ...autograd.function import Function
from ...runtime import dtypes as dt
from ...runtime.device import cpu
from ...runtime.state import per_thread
from ...runtime.storage import Storage
from ...runtime.tensor import contiguous_strides
from ...runtime.typed_storage import TypedStorage, legacy_storage_class, warn_typed_storage_removal
from ..core.common import Tensor
from ..core.registry import tensor_method, torch_function
from .shape_functions import _inplace_view

__all__: list[str] = []


@tensor_method()
def storage(self: Tensor) -> TypedStorage:
    """The tensor's storage read as its dtype (PyTorch's deprecated ``TypedStorage``)."""
    warn_typed_storage_removal(stacklevel=2)
    return TypedStorage(wrap_storage=self.untyped_storage(), dtype=self.dtype, _internal=True)


@tensor_method()
def storage_type(self: Tensor) -> type:
    """The legacy storage class of the tensor's dtype (``kiln.FloatStorage`` for float32)."""
    return legacy_storage_class(self.dtype)


def _check_settable(self: Tensor) -> None:
    self._check_data("set_")
    if self._device is not cpu:
        raise RuntimeError("kiln's set_ works on CPU tensors only")
    if per_thread.state.grad_enabled and self._requires_grad and self.grad_fn is None:
        raise RuntimeError(
            "a leaf Variable that requires grad is being used in an in-place operation."
        )


def _untyped_of(self: Tensor, source) -> Storage:
    """The untyped storage behind ``source``, refusing a typed one of another dtype."""
    if isinstance(source, TypedStorage):
        if source.dtype is not self.dtype:
            raise RuntimeError(
                f"Expected a Storage of type {self.dtype} or an UntypedStorage, but got type "
                f"{dt.torch_type_name(source.dtype)} for argument 1 'storage'"
            )
        return source.untyped()
    if isinstance(source, Storage):
        return source
    raise TypeError(
        "set_() received an invalid combination of arguments: expected a Tensor, a storage or "
        f"nothing, got {type(source).__name__}"
    )


class _SetStorage(Function):
    """The history ``set_`` records when a gradient could flow (PyTorch records one too): the
    result requires grad, and reaching it in backward is PyTorch's error."""

    @staticmethod
    def forward(ctx, target, *sources):
        return target.detach()

    @staticmethod
    def backward(ctx, *grads):
        raise RuntimeError("derivative for set_ is not implemented")


def _history_node(self: Tensor, source) -> Tensor | None:
    """A tensor carrying ``_SetStorage`` when grad mode is on and ``self`` or a tensor
    ``source`` requires grad (taken before ``self`` changes, so its edge is self's old history)."""
    sources = (source,) if isinstance(source, Tensor) else ()
    if not per_thread.state.grad_enabled:
        return None
    if not (self._requires_grad or any(t._requires_grad for t in sources)):
        return None
    return _SetStorage.apply(self, *sources)


def _adopt(self: Tensor, data: np.ndarray, storage: Storage, history=None) -> Tensor:
    """Make ``self`` a plain (non-view) tensor over ``data`` with ``storage`` as its identity."""
    self._data = data
    self._shape = data.shape
    self._stride = None
    self._storage = storage
    self._base = None
    self._view_src = None
    storage.version += 1
    if history is not None:
        self.grad_fn = history.grad_fn
        self._output_nr = history._output_nr
        self._requires_grad = True
    return self


def _view_of_storage(
    storage: Storage, dtype: dt.dtype, offset: int, size: tuple, stride: tuple
) -> np.ndarray:
    """A numpy view of ``storage``'s bytes as elements of ``dtype``; the storage grows (as
    PyTorch's does) when the view reaches past its end."""
    item = dtype.itemsize
    if len(size) != len(stride):
        raise RuntimeError(f"mismatch in length of strides and shape: {len(stride)} vs {len(size)}")
    if offset < 0:
        raise RuntimeError(f"Tensor: invalid storage offset {offset}")
    if any(s < 0 for s in size):
        raise RuntimeError(f"Trying to create tensor with negative dimension: {list(size)}")
    if any(st < 0 for st in stride):
        raise RuntimeError(f"as_strided: Negative strides are not supported, got {list(stride)}")
    if 0 in size:
        need = 0
    else:
        need = (offset + 1 + sum((n - 1) * st for n, st in zip(size, stride, strict=True))) * item
    if need > storage.nbytes():
        storage.resize_(need)
    data = storage._bytes()
    if 0 in size:  # no element: an empty view at the offset (data_ptr counts from the storage)
        start = min(offset * item, data.size)
        return data[start:start].view(dtype.np).reshape(size)
    return np.ndarray(
        size, dtype.np, buffer=data, offset=offset * item, strides=[st * item for st in stride]
    )


@tensor_method()
def set_(self: Tensor, source=None, storage_offset: int = 0, size=None, stride=None) -> Tensor:
    """Point ``self`` at ``source``'s memory: a tensor's (its storage, offset, sizes and
    strides), a storage's (from ``storage_offset``, with ``size``/``stride``; all of it by
    default), or a new empty storage when called without arguments."""
    _check_settable(self)
    history = _history_node(self, source)
    if source is None:
        empty = Storage(np.empty(0, np.uint8))
        return _adopt(self, _view_of_storage(empty, self.dtype, 0, (0,), (1,)), empty, history)
    if isinstance(source, Tensor):
        if source.dtype is not self.dtype:
            raise RuntimeError(
                f"Could not set tensor of type {self.dtype} to a tensor of type {source.dtype}"
            )
        if source._device is not cpu:
            raise RuntimeError("kiln's set_ works on CPU tensors only")
        return _adopt(self, source._check_data("set_"), source._get_storage(), history)
    untyped = _untyped_of(self, source)
    if size is None:
        if storage_offset:
            raise RuntimeError("set_(): size is required with a storage offset")
        size = (untyped.nbytes() // self.dtype.itemsize,)
    size = tuple(int(s) for s in size)
    stride = contiguous_strides(size) if stride is None else tuple(int(s) for s in stride)
    data = _view_of_storage(untyped, self.dtype, int(storage_offset), size, stride)
    return _adopt(self, data, untyped, history)


@torch_function()
@tensor_method()
def as_strided_(
    self: Tensor, size: list[int], stride: list[int], storage_offset: int | None = None
) -> Tensor:
    """``self`` takes the sizes, strides and offset given over its own storage (the history of
    ``as_strided`` when it has one)."""
    # the storage identity first: numpy's as_strided arrays do not lead back to the owner
    self._get_storage()
    return _inplace_view(self, lambda t: t.as_strided(size, stride, storage_offset))
