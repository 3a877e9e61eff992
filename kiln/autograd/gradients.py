"""Resetting the ``.grad`` of many parameters: what ``Module.zero_grad`` and
``Optimizer.zero_grad`` share."""

from __future__ import annotations

from collections.abc import Iterable

from ..runtime.tensor import Tensor

__all__ = ["zero_grads"]


def zero_grads(params: Iterable[Tensor], set_to_none: bool = True) -> None:
    """``set_to_none``: every ``.grad`` becomes None, assigned whether or not it was one, so
    compiled code never reads the old gradient (reading it guards on ``grad is None``: a training
    step compiled on its first call, before any backward, would compile again on its second).
    Otherwise each existing gradient is detached and zeroed in place, as PyTorch does."""
    if set_to_none:
        for p in params:
            p.grad = None
        return
    for p in params:
        grad = p.grad
        if grad is None:
            continue
        if grad.grad_fn is not None:
            grad.detach_()
        else:
            grad.requires_grad_(False)
        grad.zero_()
