"""``RMSprop`` (optionally centered, with momentum), following PyTorch's update order."""

from __future__ import annotations

from ..ops.creation import api
from ..runtime.tensor import Tensor
from .optimizer import (
    Optimizer,
    check_at_least_zero,
    check_lr,
    group_options,
    saved_operand,
    scalar_dtype,
    scalar_value,
)
from .step_parts import l2_weight_decay, params_with_grad

__all__ = ["RMSprop"]


class RMSprop(Optimizer):
    """Divide the gradient by a running RMS of recent gradients (Hinton's lecture 6e)."""

    _old_group_defaults = {"momentum": 0, "centered": False, "maximize": False}

    def __init__(
        self,
        params,
        lr: float = 1e-2,
        alpha: float = 0.99,
        eps: float = 1e-8,
        weight_decay: float = 0,
        momentum: float = 0,
        centered: bool = False,
        capturable: bool = False,
        foreach: bool | None = None,
        maximize: bool = False,
        differentiable: bool = False,
    ) -> None:
        check_lr(lr)
        check_at_least_zero(eps=eps, momentum=momentum, weight_decay=weight_decay, alpha=alpha)
        super().__init__(
            params,
            group_options(
                locals(),
                "lr momentum alpha eps centered weight_decay capturable foreach maximize "
                "differentiable",
            ),
        )

    def _state_for(self, param: Tensor, group: dict) -> dict:
        state = self.state[param]
        if not state:
            state["step"] = api.zeros((), dtype=scalar_dtype())
            state["square_avg"] = api.zeros_like(param)
            if group["momentum"] > 0:
                state["momentum_buffer"] = api.zeros_like(param)
            if group["centered"]:
                state["grad_avg"] = api.zeros_like(param)
        return state

    def _step_group(self, group: dict) -> None:
        lr = scalar_value(group["lr"])
        alpha, eps = group["alpha"], group["eps"]
        momentum, weight_decay = group["momentum"], group["weight_decay"]
        for param, grad in params_with_grad(group):
            state = self._state_for(param, group)
            state["step"] += 1
            grad = l2_weight_decay(grad, param, weight_decay)
            square_avg = state["square_avg"]
            square_avg.mul_(alpha).addcmul_(grad, grad, value=1 - alpha)
            if group["centered"]:
                grad_avg = state["grad_avg"]
                grad_avg.lerp_(grad, 1 - alpha)
                grad_avg = saved_operand(grad_avg, group["differentiable"])
                avg = square_avg.addcmul(grad_avg, grad_avg, value=-1).sqrt_()
            else:
                avg = square_avg.sqrt()
            avg = avg.add(eps)  # not in place: sqrt saves its output for autograd
            if momentum > 0:
                buf = state["momentum_buffer"]
                buf.mul_(momentum).addcdiv_(grad, avg)
                param.add_(buf, alpha=-lr)
            else:
                param.addcdiv_(grad, avg, value=-lr)
