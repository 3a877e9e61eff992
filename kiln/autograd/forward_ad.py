"""PyTorch's ``torch.autograd.forward_ad``: dual levels, ``make_dual`` and ``unpack_dual``.

A dual tensor is an ordinary ``Tensor`` whose ``_fw_grad`` holds its tangent. While a level is
open, ``DUAL_ACTIVE[0]`` is true and the dispatcher hands every op call to
``ops.core.forward_grad``, which gives the results the tangents ``J . t``; with no level open
that flag is the only thing an op call pays. As in PyTorch there is one level at a time (a
second is refused), levels are process-wide, and closing a level forgets every tangent made in
it.
"""

from __future__ import annotations

import functools
import threading
from typing import Any, NamedTuple
from weakref import ref as _weak_ref

from ..runtime.tensor import Tensor

__all__ = [
    "UnpackedDualTensor",
    "enter_dual_level",
    "exit_dual_level",
    "make_dual",
    "unpack_dual",
    "dual_level",
]

# [whether a dual level is open]: the dispatcher's one test per op call
DUAL_ACTIVE = [False]

_current_level = -1
# the tensors given a tangent in the open level, by weak reference: closing the level clears
# their tangents (pruned of dead ones whenever the list's length reaches a power of two past 64)
_dual_tensors: list = []
_dual_tensors_lock = threading.Lock()  # other threads' ops give tangents too


def enter_dual_level() -> int:
    """Open a forward-AD level and make it the default of ``make_dual``/``unpack_dual``."""
    global _current_level
    if _current_level >= 0:
        raise RuntimeError("Nested forward mode AD is not supported at the moment")
    _current_level = 0
    DUAL_ACTIVE[0] = True
    return _current_level


def exit_dual_level(*, level: int | None = None) -> None:
    """Close the open level, dropping every tangent made in it."""
    global _current_level
    if level is None:
        level = _current_level
    if level != _current_level:
        raise RuntimeError(
            "Trying to exit a forward AD level that was not the last one that was created. "
            "This is not supported."
        )
    if level < 0:
        raise RuntimeError("Dual level must be a positive number.")
    DUAL_ACTIVE[0] = False
    _current_level = -1
    with _dual_tensors_lock:
        for held in _dual_tensors:
            t = held()
            if t is not None:
                t.__dict__.pop("_fw_grad", None)
        _dual_tensors.clear()


def tangent_of(t: Tensor) -> Tensor | None:
    """``t``'s tangent in the open level; a view without one of its own reads its base's,
    viewed the same way (a base given a tangent after the view was made: ``z.add_(dual)``)."""
    tangent = t._fw_grad
    if tangent is not None or t._base is None:
        return tangent
    base_tangent = t._base._fw_grad
    if base_tangent is None:
        return None
    from ..ops.core.dispatch import view_replay

    with suspended_dual():
        tangent = view_replay(t)(base_tangent)
    set_tangent(t, tangent)
    return tangent


def set_tangent(t: Tensor, tangent: Tensor) -> None:
    """Give ``t`` the tangent ``tangent`` in the open level."""
    t._fw_grad = tangent
    with _dual_tensors_lock:
        _dual_tensors.append(_weak_ref(t))
        n = len(_dual_tensors)
        if n >= 64 and not n & (n - 1):
            _dual_tensors[:] = [r for r in _dual_tensors if r() is not None]


class _Suspension(threading.local):
    depth = 0


_suspension = _Suspension()


def dual_suspended() -> bool:
    """Whether this thread is computing tangents (its ops carry none)."""
    return _suspension.depth > 0


class suspended_dual:  # noqa: N801  (a context manager, named like PyTorch's)
    """This thread's ops inside run as plain ops, carrying no tangents: the tangent
    computations themselves (other threads' ops keep theirs). Nests."""

    def __enter__(self) -> None:
        _suspension.depth += 1

    def __exit__(self, *exc) -> None:
        _suspension.depth -= 1


def make_dual(tensor: Tensor, tangent: Tensor, *, level: int | None = None) -> Tensor:
    """A view of ``tensor`` carrying ``tangent`` (as is where its strides are ``tensor``'s,
    else copied into ``tensor``'s layout), as PyTorch's: differentiable in ``tensor`` by
    backward AD, and its tangent propagates through every op until the level closes."""
    if level is None:
        level = _current_level
    if level < 0:
        raise RuntimeError(
            "Trying to create a dual Tensor for forward AD but no level exists, make sure to "
            "enter_dual_level() first."
        )
    if not (tensor.is_floating_point() or tensor.is_complex()):
        raise ValueError(
            f"Expected primal to be floating point or complex, but got: {tensor.dtype}"
        )
    if not (tangent.is_floating_point() or tangent.is_complex()):
        raise ValueError(
            f"Expected tangent to be floating point or complex, but got: {tangent.dtype}"
        )
    if level != _current_level:
        raise RuntimeError("Invalid level given to _make_dual")
    if tangent_of(tensor) is not None:
        raise RuntimeError(
            "Making a dual Tensor based on a Tensor that already has a forward gradient at the "
            f"same level {level} is not supported."
        )
    if tuple(tangent.shape) != tuple(tensor.shape):
        raise RuntimeError(
            "Trying to set a forward gradient that has a different size than that of the "
            "original Tensor, this is not supported. Tensor is of size "
            f"{list(tensor.shape)} while the given forward gradient is of size "
            f"{list(tangent.shape)}."
        )
    from ..ops.core.registry import OPS
    from ..ops.public import empty_strided

    with suspended_dual():
        dual = OPS["alias"](tensor)
        if dual.grad_fn is not None:
            dual.grad_fn.rename("ViewBackward0")  # PyTorch's name for make_dual's node
        if tangent.numel() > 1 and tuple(tangent.stride()) != tuple(tensor.stride()):
            laid_out = empty_strided(
                tensor.shape, tensor.stride(), dtype=tangent.dtype, device=tangent.device
            )
            tangent = laid_out.copy_(tangent)
    set_tangent(dual, tangent)
    return dual


class UnpackedDualTensor(NamedTuple):
    """What ``unpack_dual`` returns: the primal (a view without the tangent) and the tangent."""

    primal: Tensor
    tangent: Tensor | None


def unpack_dual(tensor: Tensor, *, level: int | None = None) -> UnpackedDualTensor:
    """``(primal, tangent)`` of ``tensor`` at ``level``: the primal is a view of ``tensor``
    carrying no tangent, the tangent ``tensor``'s as is (None when it has none or outside a
    level; another level than the open one is an error for a dual tensor, as PyTorch's)."""
    if level is None:
        level = _current_level
    if level < 0:
        return UnpackedDualTensor(tensor, None)
    from ..ops.core.registry import OPS

    # (a custom Function's forward runs suspended: its inputs show no tangent, as in PyTorch)
    tangent = None if dual_suspended() else tangent_of(tensor)
    if level != _current_level:
        if tangent is not None:
            raise RuntimeError("Invalid level given to _fw_primal")
    with suspended_dual():
        primal = OPS["alias"](tensor)
    return UnpackedDualTensor(primal, tangent)


class dual_level:  # noqa: N801  (PyTorch's name)
    """Context manager (and decorator) that opens a forward-AD level for its body."""

    def __enter__(self) -> int:
        return enter_dual_level()

    def __exit__(self, exc_type: Any, exc_value: Any, traceback: Any) -> None:
        exit_dual_level()

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with dual_level():
                return fn(*args, **kwargs)

        return wrapper

    def clone(self) -> dual_level:
        return dual_level()
