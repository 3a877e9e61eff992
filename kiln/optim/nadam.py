"""``NAdam``: Adam with Nesterov momentum and Dozat's momentum-decay schedule.

State per parameter: ``step``, ``mu_product`` (the running product of the momentum schedule,
a 0-d tensor like ``step``), ``exp_avg`` and ``exp_avg_sq``. The momentum coefficients are
Python floats eagerly and 0-d tensors under ``kiln.compile`` or ``capturable``; ``mu_product``
is multiplied in its own dtype in both cases, so captured steps reproduce eager ones.
"""

from __future__ import annotations

from ..runtime.tensor import Tensor
from .optimizer import (
    COMMON_OLD_GROUP_DEFAULTS,
    Optimizer,
    check_adam_options,
    check_at_least_zero,
    group_options,
    lazy_state,
    scalar_for,
    scalar_value,
    step_value,
)
from .step_parts import adam_weight_decay, advance_step, params_with_grad, update_moments

__all__ = ["NAdam"]


class NAdam(Optimizer):
    """NAdam (Dozat, 2016); ``decoupled_weight_decay=True`` gives NAdamW."""

    _old_group_defaults = {**COMMON_OLD_GROUP_DEFAULTS, "decoupled_weight_decay": False}
    _scalar_state = ("step", "mu_product")

    def __init__(
        self,
        params,
        lr: float = 2e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0,
        momentum_decay: float = 4e-3,
        decoupled_weight_decay: bool = False,
        *,
        foreach: bool | None = None,
        maximize: bool = False,
        capturable: bool = False,
        differentiable: bool = False,
    ) -> None:
        check_adam_options(lr, eps, betas, weight_decay)
        check_at_least_zero(momentum_decay=momentum_decay)
        super().__init__(
            params,
            group_options(
                locals(),
                "lr betas eps weight_decay momentum_decay decoupled_weight_decay maximize "
                "foreach capturable differentiable",
            ),
        )

    def _state_for(self, param: Tensor, group: dict) -> dict:
        return lazy_state(self, param, group["capturable"], "exp_avg", "exp_avg_sq", mu_product=1.0)

    def _step_group(self, group: dict) -> None:
        lr = scalar_value(group["lr"])
        beta1, beta2 = group["betas"]
        eps = group["eps"]
        momentum_decay = group["momentum_decay"]
        capturable = group["capturable"]
        for param, grad in params_with_grad(group):
            state = self._state_for(param, group)
            mu_product = state["mu_product"]
            step = advance_step(state, capturable)
            grad = adam_weight_decay(param, grad, lr, group)
            # the momentum schedule mu_t and mu_{t+1}
            mu = beta1 * (1.0 - 0.5 * 0.96 ** (step * momentum_decay))
            mu_next = beta1 * (1.0 - 0.5 * 0.96 ** ((step + 1) * momentum_decay))
            mu_product *= scalar_for(mu, mu_product)
            exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
            update_moments(exp_avg, exp_avg_sq, grad, beta1, beta2)
            denom = exp_avg_sq.div(scalar_for(1 - beta2**step, param)).sqrt().add(eps)
            if capturable or group["differentiable"]:
                # PyTorch's form: the scales multiply the tensors (so autograd sees them),
                # computed from mu_product in its own dtype
                grad = grad * (-lr * (1.0 - mu) / (1.0 - mu_product))
                exp_avg = exp_avg * (-lr * mu_next / (1.0 - mu_product * mu_next))
                param.addcdiv_(grad, denom)
                param.addcdiv_(exp_avg, denom)
                continue
            product = step_value(mu_product)
            grad_scale = -lr * (1.0 - mu) / (1.0 - product)
            avg_scale = -lr * mu_next / (1.0 - product * mu_next)
            param.addcdiv_(grad, denom, value=scalar_for(grad_scale, param))
            param.addcdiv_(exp_avg, denom, value=scalar_for(avg_scale, param))
