"""Questions scripts ask about objects and host memory: ``kiln.typename``, ``kiln.is_storage``,
``Tensor.pin_memory`` and ``Tensor.is_pinned``.

Pinned (page-locked) host memory only matters for copies to an accelerator. As in PyTorch,
``pin_memory()`` raises when no accelerator is present (a CPU-only PyTorch raises the same
error); with CUDA available kiln returns a copy marked pinned (its host copies go through
pageable buffers either way), and pinning a pinned tensor returns it unchanged.
"""

from __future__ import annotations

from ..runtime import cuda as runtime_cuda
from ..runtime.storage import Storage
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
    """True for what ``Tensor.untyped_storage()`` returns."""
    return isinstance(obj, Storage)


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
