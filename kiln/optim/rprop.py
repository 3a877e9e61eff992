"""``Rprop``: resilient backpropagation, per-element step sizes driven by gradient signs only.

State per parameter: ``step`` (0-d), ``prev`` (the previous, possibly zeroed, gradient) and
``step_size``. Sign changes shrink a step size by ``etaminus`` (and skip that element's update),
agreements grow it by ``etaplus``; written with ``where`` rather than masked assignment, so a
step captures under ``kiln.compile`` as straight-line tensor code and eager gives the same bits.
"""

from __future__ import annotations

from .. import ops
from ..ops.creation import api
from ..runtime.tensor import Tensor
from .optimizer import (
    COMMON_OLD_GROUP_DEFAULTS,
    Optimizer,
    check_lr,
    group_options,
    saved_operand,
    scalar_dtype,
    scalar_value,
)
from .step_parts import params_with_grad

__all__ = ["Rprop"]


class Rprop(Optimizer):
    """Rprop (Riedmiller & Braun) as PyTorch runs it: the step sizes start at ``lr`` and stay
    within ``step_sizes``."""

    _old_group_defaults = COMMON_OLD_GROUP_DEFAULTS
    _scalar_state = ("step",)

    def __init__(
        self,
        params,
        lr: float = 1e-2,
        etas: tuple[float, float] = (0.5, 1.2),
        step_sizes: tuple[float, float] = (1e-6, 50),
        *,
        capturable: bool = False,
        foreach: bool | None = None,
        maximize: bool = False,
        differentiable: bool = False,
    ) -> None:
        check_lr(lr)
        if not 0.0 < etas[0] < 1.0 < etas[1]:
            raise ValueError(f"Invalid eta values: {etas[0]}, {etas[1]}")
        super().__init__(
            params,
            group_options(
                locals(), "lr etas step_sizes foreach maximize differentiable capturable"
            ),
        )

    def _state_for(self, param: Tensor, group: dict) -> dict:
        state = self.state[param]
        if not state:
            device = param.device if group["capturable"] else None
            state["step"] = api.zeros((), dtype=scalar_dtype(), device=device)
            state["prev"] = api.zeros_like(param)
            state["step_size"] = api.full_like(param, scalar_value(group["lr"]))
        return state

    def _step_group(self, group: dict) -> None:
        etaminus, etaplus = group["etas"]
        step_size_min, step_size_max = group["step_sizes"]
        for param, grad in params_with_grad(group):
            state = self._state_for(param, group)
            state["step"] += 1
            prev, step_size = state["prev"], state["step_size"]
            # sign() has a zero derivative: nothing needs recording
            sign = grad.detach().mul(prev.detach()).sign()
            flipped = sign < 0
            # the sign becomes the step-size factor: etaplus, etaminus, or 1 where zero
            factor = ops.where(sign > 0, etaplus, sign)
            factor = ops.where(flipped, etaminus, factor)
            factor = ops.where(factor == 0, 1.0, factor)
            step_size.mul_(factor).clamp_(step_size_min, step_size_max)
            # where the sign flipped, forget the gradient: no step now, no comparison next
            grad = ops.where(flipped, 0.0, grad)
            param.addcmul_(grad.sign(), saved_operand(step_size, group["differentiable"]), value=-1)
            prev.copy_(grad)
