"""The pieces of the per-parameter step loop that PyTorch's optimizers share.

Every update rule walks its parameter groups, skips parameters without a gradient, negates the
gradient for ``maximize``, counts the step and folds in weight decay before its own arithmetic;
those shared moves live here once, in the order and form PyTorch's single-tensor loops use them
(so eager and captured steps keep computing the same numbers).
"""

from __future__ import annotations

from collections.abc import Iterator

from ..runtime.tensor import Tensor
from .optimizer import step_value

__all__ = [
    "adam_weight_decay",
    "advance_step",
    "l2_weight_decay",
    "params_with_grad",
    "update_moments",
]


def params_with_grad(group: dict) -> Iterator[tuple[Tensor, Tensor]]:
    """Each parameter of ``group`` that has a gradient, with the gradient to descend along:
    negated when the group asks to ``maximize`` (a group without that option minimizes)."""
    for param in group["params"]:
        if param.grad is None:
            continue
        yield param, -param.grad if group.get("maximize", False) else param.grad


def l2_weight_decay(grad: Tensor, param: Tensor, weight_decay: float) -> Tensor:
    """``grad + weight_decay * param``: weight decay as an L2 penalty's gradient (a new tensor,
    so the parameter's ``.grad`` is left as backward wrote it)."""
    return grad.add(param, alpha=weight_decay) if weight_decay != 0 else grad


def adam_weight_decay(param: Tensor, grad: Tensor, lr: float, group: dict) -> Tensor:
    """The Adam family's weight decay: decoupled (``param *= 1 - lr * weight_decay``, AdamW's
    form) when the group says so, else the L2 penalty folded into the gradient."""
    weight_decay = group["weight_decay"]
    if weight_decay != 0 and group["decoupled_weight_decay"]:
        param.mul_(1 - lr * weight_decay)
        return grad
    return l2_weight_decay(grad, param, weight_decay)


def advance_step(state: dict, capturable: bool):
    """Count one more step in ``state["step"]`` and return the count for scalar math: the 0-d
    tensor itself when ``capturable`` (no host read), else ``step_value``'s number."""
    step_t = state["step"]
    step_t += 1
    return step_t if capturable else step_value(step_t)


def update_moments(
    exp_avg: Tensor, exp_avg_sq: Tensor, grad: Tensor, beta1: float, beta2: float
) -> None:
    """Adam's running moments, in place: ``exp_avg`` moves toward ``grad`` by ``1 - beta1``;
    ``exp_avg_sq`` decays by ``beta2`` and gains ``(1 - beta2) * grad**2``."""
    exp_avg.lerp_(grad, 1 - beta1)
    exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
