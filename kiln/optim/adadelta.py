"""``Adadelta``: steps scaled by the ratio of running RMS of updates to running RMS of gradients.

State per parameter: ``step`` (0-d, counted but unused by the update, as in PyTorch),
``square_avg`` and ``acc_delta``. The update has no scalar that depends on the step, so it
captures under ``kiln.compile`` as straight-line tensor code.
"""

from __future__ import annotations

from ..runtime.tensor import Tensor
from .optimizer import (
    COMMON_OLD_GROUP_DEFAULTS,
    Optimizer,
    check_at_least_zero,
    check_lr,
    group_options,
    lazy_state,
    scalar_value,
)
from .step_parts import l2_weight_decay, params_with_grad

__all__ = ["Adadelta"]


class Adadelta(Optimizer):
    """Adadelta (Zeiler, 2012) with ``lr`` scaling the step, weight decay and ``maximize``."""

    _old_group_defaults = COMMON_OLD_GROUP_DEFAULTS
    _scalar_state = ("step",)

    def __init__(
        self,
        params,
        lr: float = 1.0,
        rho: float = 0.9,
        eps: float = 1e-6,
        weight_decay: float = 0,
        foreach: bool | None = None,
        *,
        capturable: bool = False,
        maximize: bool = False,
        differentiable: bool = False,
    ) -> None:
        check_lr(lr)
        if not 0.0 <= rho <= 1.0:
            raise ValueError(f"Invalid rho value: {rho}")
        check_at_least_zero(eps=eps, weight_decay=weight_decay)
        super().__init__(
            params,
            group_options(
                locals(), "lr rho eps weight_decay maximize capturable foreach differentiable"
            ),
        )

    def _state_for(self, param: Tensor, group: dict) -> dict:
        return lazy_state(self, param, group["capturable"], "square_avg", "acc_delta")

    def _step_group(self, group: dict) -> None:
        lr = scalar_value(group["lr"])
        rho, eps, weight_decay = group["rho"], group["eps"], group["weight_decay"]
        for param, grad in params_with_grad(group):
            state = self._state_for(param, group)
            state["step"] += 1
            grad = l2_weight_decay(grad, param, weight_decay)
            square_avg, acc_delta = state["square_avg"], state["acc_delta"]
            square_avg.mul_(rho).addcmul_(grad, grad, value=1 - rho)
            std = square_avg.add(eps).sqrt_()
            delta = acc_delta.add(eps).sqrt_().div_(std).mul_(grad)
            acc_delta.mul_(rho).addcmul_(delta, delta, value=1 - rho)
            param.add_(delta, alpha=-lr)
