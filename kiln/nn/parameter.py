"""``Parameter`` and ``Buffer``: tensors that a ``Module`` registers when assigned as attributes.

A Parameter is a Tensor subclass that shares its source's buffer (no copy) and requires grad by
default. Ops on a Parameter return plain Tensors, as in PyTorch, because kernels wrap fresh
arrays; only the Parameter object itself carries the subclass.
"""

from __future__ import annotations

import numpy as np

from ..runtime.tensor import Tensor, mark_inference

__all__ = ["Parameter", "Buffer", "is_lazy"]


def _alias_into(target: Tensor, source: Tensor) -> None:
    """Make ``target`` a second name for ``source``'s data (same storage and version counter)."""
    target._data = source._data
    target._shape = source._shape
    target._dtype = source._dtype
    target._device = source._device
    target._storage = source._get_storage() if source._data is not None else source._storage
    target._stride = source._stride
    target._base = None
    target._view_src = None
    if source._data is None and source._offset:
        target._offset = source._offset
    if source._inference:  # then requires_grad=True is refused outside inference_mode
        mark_inference(target)


class Parameter(Tensor):
    """A Tensor that is a module parameter: registered by ``Module.__setattr__``, grad by default."""

    _is_param = True

    def __new__(cls, data: Tensor | None = None, requires_grad: bool = True):
        if data is None:
            from ..ops.creation.api import empty

            data = empty(0)
        if not isinstance(data, Tensor):
            raise TypeError(
                f"Parameter() expects a Tensor as data, got {type(data).__name__}; "
                "wrap values with kiln.tensor(...) first"
            )
        if requires_grad and not (data.dtype.is_floating_point or data.dtype.is_complex):
            raise RuntimeError(
                "Only Tensors of floating point and complex dtype can require gradients"
            )
        self = object.__new__(cls)
        _alias_into(self, data)
        self.requires_grad = requires_grad
        return self

    def __init__(self, data: Tensor | None = None, requires_grad: bool = True):
        pass

    def __repr__(self) -> str:
        return Tensor.__repr__(self)

    def __reduce_ex__(self, protocol):
        return (
            _rebuild_parameter,
            (np.array(self.detach().cpu().numpy()), self._requires_grad, self.__class__),
        )

    def __deepcopy__(self, memo):
        if id(self) in memo:
            return memo[id(self)]
        # PyTorch's copy leaves .grad behind (an EMA copy of a model made after a backward
        # starts with none)
        result = type(self)(self.detach().clone(), self._requires_grad)
        memo[id(self)] = result
        return result


def _rebuild_parameter(array: np.ndarray, requires_grad: bool, cls=Parameter) -> Parameter:
    from ..ops.creation.api import from_numpy

    return cls(from_numpy(np.require(array, requirements="C")), requires_grad)


class _BufferMeta(type):
    """``isinstance(t, Buffer)`` is true for any tensor made by ``Buffer(...)``."""

    def __instancecheck__(cls, instance) -> bool:
        return isinstance(instance, Tensor) and bool(getattr(instance, "_is_buffer", False))


class Buffer(Tensor, metaclass=_BufferMeta):
    """Marks a tensor to be registered as a buffer when assigned to a ``Module`` attribute.

    ``Buffer(t)`` returns a detached plain Tensor flagged as a buffer (as PyTorch does), so the
    module stores an ordinary tensor; ``persistent=False`` keeps it out of ``state_dict``.
    """

    def __new__(cls, data: Tensor | None = None, *, persistent: bool = True):
        if data is None:
            from ..ops.creation.api import empty

            data = empty(0)
        t = data.detach().requires_grad_(data.requires_grad)
        t.persistent = persistent
        t._is_buffer = True
        return t


def is_lazy(param) -> bool:
    """True for an ``UninitializedParameter``/``UninitializedBuffer`` (``nn.modules.lazy``)."""
    return bool(getattr(param, "_is_uninitialized", False))


def __getattr__(name: str):
    # the placeholders live with the lazy modules (which import this module)
    if name in ("UninitializedParameter", "UninitializedBuffer", "UninitializedTensorMixin"):
        from .modules import lazy

        return getattr(lazy, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
