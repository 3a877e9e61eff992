"""``Adagrad``: per-coordinate learning rates from the running sum of squared gradients."""

from __future__ import annotations

from ..ops.creation import api
from ..runtime.tensor import Tensor
from .optimizer import (
    Optimizer,
    check_at_least_zero,
    check_fused,
    check_lr,
    group_options,
    scalar_dtype,
    scalar_for,
    scalar_value,
)
from .step_parts import advance_step, l2_weight_decay, params_with_grad

__all__ = ["Adagrad"]


class Adagrad(Optimizer):
    """Adagrad (Duchi et al.) with ``lr_decay``, weight decay and an initial accumulator."""

    _old_group_defaults = {"maximize": False}

    def __init__(
        self,
        params,
        lr: float = 1e-2,
        lr_decay: float = 0,
        weight_decay: float = 0,
        initial_accumulator_value: float = 0,
        eps: float = 1e-10,
        foreach: bool | None = None,
        *,
        maximize: bool = False,
        differentiable: bool = False,
        fused: bool | None = None,
    ) -> None:
        check_lr(lr)
        check_at_least_zero(
            lr_decay=lr_decay,
            weight_decay=weight_decay,
            initial_accumulator_value=initial_accumulator_value,
            eps=eps,
        )
        super().__init__(
            params,
            group_options(
                locals(),
                "lr lr_decay eps weight_decay initial_accumulator_value foreach maximize "
                "differentiable fused",
            ),
        )
        check_fused(fused, foreach, differentiable)
        # PyTorch creates Adagrad's state eagerly, so it appears in state_dict before any step
        for group in self.param_groups:
            for p in group["params"]:
                self._state_for(p, group)

    def _state_for(self, param: Tensor, group: dict) -> dict:
        """``param``'s state, made here for a group added after construction (at its first
        step, as PyTorch's)."""
        state = self.state[param]
        if not state:
            state["step"] = api.tensor(0.0, dtype=scalar_dtype())
            state["sum"] = api.full_like(param, group["initial_accumulator_value"])
        return state

    def _step_group(self, group: dict) -> None:
        lr = scalar_value(group["lr"])
        lr_decay, eps = group["lr_decay"], group["eps"]
        weight_decay = group["weight_decay"]
        for param, grad in params_with_grad(group):
            state = self._state_for(param, group)
            step = advance_step(state, capturable=False)
            grad = l2_weight_decay(grad, param, weight_decay)
            clr = scalar_for(lr / (1 + (step - 1) * lr_decay), param)
            state_sum = state["sum"]
            state_sum.addcmul_(grad, grad, value=1)
            std = state_sum.sqrt().add(eps)  # not in place: sqrt saves its output for autograd
            param.addcdiv_(grad, std, value=-clr)
