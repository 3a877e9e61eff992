"""``RAdam``: Adam whose adaptive step is switched on only once the variance of the adaptive
learning rate is tractable (Liu et al., 2019), with PyTorch's update order.

Until the length of the approximated simple moving average ``rho_t`` exceeds 5 the update is
SGD with momentum; afterwards it is Adam scaled by the rectification term. Eagerly that is a
Python ``if`` on a float; captured (``kiln.compile``) or ``capturable`` it is a ``where`` on 0-d
tensors, arranged so both multiply the same factors in the same order.
"""

from __future__ import annotations

from .. import ops
from ..runtime.tensor import Tensor
from .optimizer import (
    COMMON_OLD_GROUP_DEFAULTS,
    Optimizer,
    check_adam_options,
    group_options,
    lazy_state,
    scalar_for,
    scalar_value,
)
from .step_parts import adam_weight_decay, advance_step, params_with_grad, update_moments

__all__ = ["RAdam"]


class RAdam(Optimizer):
    """Rectified Adam; ``decoupled_weight_decay=True`` decays the parameters directly."""

    _old_group_defaults = {**COMMON_OLD_GROUP_DEFAULTS, "decoupled_weight_decay": False}
    _scalar_state = ("step",)

    def __init__(
        self,
        params,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0,
        decoupled_weight_decay: bool = False,
        *,
        foreach: bool | None = None,
        maximize: bool = False,
        capturable: bool = False,
        differentiable: bool = False,
    ) -> None:
        check_adam_options(lr, eps, betas, weight_decay)
        super().__init__(
            params,
            group_options(
                locals(),
                "lr betas eps weight_decay maximize foreach capturable decoupled_weight_decay "
                "differentiable",
            ),
        )

    def _state_for(self, param: Tensor, group: dict) -> dict:
        return lazy_state(self, param, group["capturable"], "exp_avg", "exp_avg_sq")

    def _step_group(self, group: dict) -> None:
        lr = scalar_value(group["lr"])
        beta1, beta2 = group["betas"]
        eps = group["eps"]
        capturable = group["capturable"]
        # the maximum length of the approximated simple moving average
        rho_inf = 2 / (1 - beta2) - 1
        for param, grad in params_with_grad(group):
            state = self._state_for(param, group)
            step = advance_step(state, capturable)
            grad = adam_weight_decay(param, grad, lr, group)
            exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
            update_moments(exp_avg, exp_avg_sq, grad, beta1, beta2)
            bias_correction1 = 1 - beta1**step
            bias_correction2 = 1 - beta2**step
            update = exp_avg / scalar_for(bias_correction1, param) * lr
            rho_t = rho_inf - 2 * step * (beta2**step) / bias_correction2
            rect = (
                (rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t)
            ) ** 0.5
            adaptive_lr = _adaptive_lr(
                exp_avg_sq, eps, scalar_for(bias_correction2**0.5, param), group
            )
            if isinstance(rho_t, Tensor):
                # both factors are 1 while rho_t <= 5 (rect is NaN there), as eager skips them
                rectified = rho_t > 5.0
                update = update * ops.where(rectified, adaptive_lr, 1.0)
                update = update * ops.where(rectified, scalar_for(rect, param), 1.0)
            elif rho_t > 5.0:
                update = update * adaptive_lr * rect
            param.add_(update, alpha=-1.0)


def _adaptive_lr(exp_avg_sq: Tensor, eps: float, bias_correction2_sqrt, group: dict) -> Tensor:
    """``sqrt(bias_correction2) / (sqrt(exp_avg_sq) + eps)`` as PyTorch computes a number over
    a tensor (reciprocal, then multiply). In place unless ``differentiable``: ``sqrt`` and
    ``reciprocal`` save their outputs for the backward pass."""
    if group["differentiable"]:
        return exp_avg_sq.sqrt().add(eps).reciprocal().mul(bias_correction2_sqrt)
    return exp_avg_sq.sqrt().add_(eps).reciprocal_().mul_(bias_correction2_sqrt)
