"""Questions scripts ask about objects and host memory: ``kiln.typename``, ``kiln.is_storage``,
``Tensor.pin_memory`` and ``Tensor.is_pinned``.

Pinned (page-locked) host memory only matters for copies to an accelerator. As in PyTorch,
``pin_memory()`` raises when no accelerator is present (a CPU-only PyTorch raises the same
error); with CUDA available kiln returns a copy marked pinned (its host copies go through
pageable buffers either way), and pinning a pinned tensor returns it unchanged.
"""

from __future__ import annotations

from ...runtime import cuda as runtime_cuda
from ...runtime.storage import Storage
from ...runtime.typed_storage import TypedStorage
from .common import Tensor
from .registry import tensor_method, torch_function

__all__ = ["typename", "is_storage"]

# set on a tensor's ``__dict__`` by ``pin_memory``; views and copies start unpinned
_PINNED = "_pinned"


@torch_function()
def typename(obj, /) -> str:
    """``"kiln.FloatTensor"`` for a float32 tensor, the qualified type name otherwise
    (``int``, ``kiln.nn.modules.linear.Linear``); classes and functions name themselves."""
    if isinstance(obj, Tensor):
        return obj.type()
    module = getattr(obj, "__module__", "") or ""
    if hasattr(obj, "__qualname__"):
        qualname = obj.__qualname__
    elif hasattr(obj, "__name__"):
        qualname = obj.__name__
    else:
        module = type(obj).__module__ or ""
        qualname = type(obj).__qualname__
    if module in ("", "builtins"):
        return qualname
    return f"{module}.{qualname}"


@torch_function()
def is_storage(obj, /) -> bool:
    """True for what ``Tensor.untyped_storage()`` and ``Tensor.storage()`` return."""
    return isinstance(obj, (Storage, TypedStorage))


@tensor_method()
def is_pinned(self: Tensor, device=None) -> bool:
    return bool(self.__dict__.get(_PINNED, False))


@tensor_method()
def pin_memory(self: Tensor, device=None) -> Tensor:
    """A pinned copy of a CPU tensor (``self`` if it already is pinned)."""
    if not runtime_cuda.is_available():
        raise RuntimeError("Cannot access accelerator device when none is available.")
    if self.device.type != "cpu":
        raise RuntimeError(f"cannot pin '{self.type()}' only dense CPU tensors can be pinned")
    if self.is_pinned():
        return self
    out = self.clone()
    out.__dict__[_PINNED] = True
    return out


@torch_function()
@tensor_method()
def is_signed(self: Tensor) -> bool:
    """Whether the dtype has negative values (every float and complex type, the signed ints)."""
    return self.dtype.is_signed


@torch_function()
@tensor_method()
def is_same_size(self: Tensor, other: Tensor) -> bool:
    return tuple(self.shape) == tuple(other.shape)


@torch_function()
@tensor_method()
def get_device(self: Tensor) -> int:
    """The CUDA ordinal of a CUDA tensor, -1 for a CPU one (PyTorch's convention)."""
    if self.device.type == "cuda":
        return runtime_cuda.device_index(self.device)
    return -1


@torch_function()
@tensor_method()
def is_distributed(self: Tensor) -> bool:
    """Always False: PyTorch's flag for the long-removed THD distributed tensors."""
    return False


@tensor_method()
def is_set_to(self: Tensor, tensor: Tensor) -> bool:
    """Same storage, offset, sizes and strides: the two tensors are the same view."""
    return (
        self.untyped_storage().data_ptr() == tensor.untyped_storage().data_ptr()
        and self.device == tensor.device
        and self.storage_offset() == tensor.storage_offset()
        and tuple(self.shape) == tuple(tensor.shape)
        and self.stride() == tensor.stride()
    )


@tensor_method()
def const_data_ptr(self: Tensor) -> int:
    """``data_ptr()``, for code that promises not to write through it."""
    return self.data_ptr()
