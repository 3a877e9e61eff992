"""``NAdam``: Adam with Nesterov momentum and Dozat's momentum-decay schedule.

State per parameter: ``step``, ``mu_product`` (the running product of the momentum schedule,
a 0-d tensor like ``step``), ``exp_avg`` and ``exp_avg_sq``. The momentum coefficients are
Python floats eagerly and 0-d tensors under ``kiln.compile`` or ``capturable``; ``mu_product``
is multiplied in its own dtype in both cases, so captured steps reproduce eager ones.
"""

from __future__ import annotations

from collections.abc import Callable

from .optimizer import (
    COMMON_OLD_GROUP_DEFAULTS,
    Optimizer,
    check_adam_options,
    check_at_least_zero,
    group_options,
    lazy_state,
    run_closure,
    scalar_for,
    scalar_value,
    step_value,
)

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

    def step(self, closure: Callable[[], float] | None = None):
        loss = run_closure(closure)
        for group in self.param_groups:
            lr = scalar_value(group["lr"])
            beta1, beta2 = group["betas"]
            eps, weight_decay = group["eps"], group["weight_decay"]
            momentum_decay = group["momentum_decay"]
            capturable = group["capturable"]
            for param in group["params"]:
                if param.grad is None:
                    continue
                grad = -param.grad if group["maximize"] else param.grad
                state = lazy_state(self, param, capturable, "exp_avg", "exp_avg_sq", mu_product=1.0)
                step_t, mu_product = state["step"], state["mu_product"]
                step_t += 1
                step = step_t if capturable else step_value(step_t)
                if weight_decay != 0:
                    if group["decoupled_weight_decay"]:
                        param.mul_(1 - lr * weight_decay)
                    else:
                        grad = grad.add(param, alpha=weight_decay)
                # the momentum schedule mu_t and mu_{t+1}
                mu = beta1 * (1.0 - 0.5 * 0.96 ** (step * momentum_decay))
                mu_next = beta1 * (1.0 - 0.5 * 0.96 ** ((step + 1) * momentum_decay))
                mu_product *= scalar_for(mu, mu_product)
                exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
                exp_avg.lerp_(grad, 1 - beta1)
                exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
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
        return loss
