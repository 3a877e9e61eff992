"""``kiln.autograd.Variable``: the pre-0.4 PyTorch wrapper, kept so old code runs.

Variables and tensors merged long ago: ``Variable(t, requires_grad=...)`` returns a plain tensor
sharing ``t``'s data with no history, and every tensor is an instance of ``Variable``.
"""

from __future__ import annotations

import warnings

from ..runtime.tensor import Tensor
from .engine import execution_engine

__all__ = ["Variable"]


class _VariableMeta(type):
    def __instancecheck__(cls, other) -> bool:
        return isinstance(other, Tensor)


class Variable(metaclass=_VariableMeta):
    """``Variable(data, requires_grad=False, volatile=False)`` -> a detached alias of ``data``.

    ``Variable._execution_engine.queue_callback(fn)`` runs ``fn`` when the current backward pass
    ends (PyTorch's hook for work that must follow every gradient, such as DDP's)."""

    _execution_engine = execution_engine

    def __new__(cls, data: Tensor | None = None, requires_grad: bool = False, volatile=False):
        if volatile:
            warnings.warn(
                "volatile was removed and now has no effect. Use `with torch.no_grad():` instead.",
                UserWarning,
                stacklevel=2,
            )
        if data is None:
            from ..ops.creation.api import empty

            data = empty(0)
        if not isinstance(data, Tensor):
            raise TypeError(f"Variable data has to be a tensor, but got {type(data).__name__}")
        return data.detach().requires_grad_(bool(requires_grad))
