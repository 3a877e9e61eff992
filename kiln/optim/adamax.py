"""``Adamax``: Adam with the infinity norm of past gradients in place of their RMS.

State per parameter: ``step`` (0-d), ``exp_avg`` and ``exp_inf``, updated in PyTorch's
single-tensor order. The bias correction is a Python float eagerly and a 0-d tensor when
captured by ``kiln.compile`` or when ``capturable`` (no host reads of the step count).
"""

from __future__ import annotations

from ..runtime.tensor import Tensor
from .optimizer import (
    COMMON_OLD_GROUP_DEFAULTS,
    Optimizer,
    check_adam_options,
    group_options,
    lazy_state,
    saved_operand,
    scalar_for,
    scalar_value,
)
from .step_parts import advance_step, l2_weight_decay, params_with_grad

__all__ = ["Adamax"]


class Adamax(Optimizer):
    """Adamax (Kingma & Ba, section 7): ``exp_inf = max(beta2 * exp_inf, |grad| + eps)``."""

    _old_group_defaults = COMMON_OLD_GROUP_DEFAULTS
    _scalar_state = ("step",)

    def __init__(
        self,
        params,
        lr: float = 2e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0,
        foreach: bool | None = None,
        *,
        maximize: bool = False,
        differentiable: bool = False,
        capturable: bool = False,
    ) -> None:
        check_adam_options(lr, eps, betas, weight_decay)
        super().__init__(
            params,
            group_options(
                locals(), "lr betas eps weight_decay foreach maximize differentiable capturable"
            ),
        )

    def _state_for(self, param: Tensor, group: dict) -> dict:
        return lazy_state(self, param, group["capturable"], "exp_avg", "exp_inf")

    def _step_group(self, group: dict) -> None:
        lr = scalar_value(group["lr"])
        beta1, beta2 = group["betas"]
        eps, weight_decay = group["eps"], group["weight_decay"]
        capturable = group["capturable"]
        for param, grad in params_with_grad(group):
            state = self._state_for(param, group)
            step = advance_step(state, capturable)
            grad = l2_weight_decay(grad, param, weight_decay)
            exp_avg, exp_inf = state["exp_avg"], state["exp_inf"]
            exp_avg.lerp_(grad, 1 - beta1)
            exp_inf.copy_(exp_inf.mul(beta2).maximum(grad.abs().add_(eps)))
            clr = scalar_for(lr / (1 - beta1**step), param)
            differentiable = group["differentiable"]
            param.addcdiv_(
                saved_operand(exp_avg, differentiable),
                saved_operand(exp_inf, differentiable),
                value=-clr,
            )
