"""``Adafactor``: Adam-like steps with a factored second moment (Shazeer & Stern, 2018).

For a parameter of two or more dimensions only the row and column means of the squared gradient
over the last two dimensions are kept (``row_var``, ``col_var``); their outer product, divided by
the mean of the row factor, estimates the full second moment. Vectors keep a full ``variance``.
The step size is relative to the parameter's RMS and capped by ``lr``; the update is clipped to
RMS ``d``. Follows PyTorch's single-tensor implementation (its default), including its use of
``lr`` for the cap and for decoupled weight decay and of ``eps1`` after the factorisation.
"""

from __future__ import annotations

import math

from ..ops.creation import api
from ..runtime import dtype_info
from ..runtime.tensor import Tensor
from .optimizer import (
    Optimizer,
    group_options,
    scalar_dtype,
    scalar_value,
)
from .step_parts import params_with_grad

__all__ = ["Adafactor"]


class Adafactor(Optimizer):
    """Adafactor; ``eps=(eps1, eps2)`` with ``eps1=None`` meaning the parameter dtype's epsilon."""

    _old_group_defaults = {"foreach": None}
    _scalar_state = ("step",)

    def __init__(
        self,
        params,
        lr: float | Tensor = 1e-2,
        beta2_decay: float = -0.8,
        eps: tuple[float | None, float] = (None, 1e-3),
        d: float = 1.0,
        weight_decay: float = 0.0,
        *,
        foreach: bool | None = None,
        maximize: bool = False,
    ) -> None:
        if isinstance(lr, Tensor) and lr.numel() != 1:
            raise ValueError("Tensor lr must be 1-element")
        if not 0.0 <= scalar_value(lr):
            raise ValueError(f"Learning rate should be >= 0 but is: {lr}")
        if not 0.0 >= beta2_decay:
            raise ValueError(f"beta2_decay should be <= 0 but is: {beta2_decay}")
        if eps[0] is not None and not 0.0 <= eps[0]:
            raise ValueError(f"epsilon1 should be >= 0 but is: {eps[0]}")
        if not 0.0 <= eps[1]:
            raise ValueError(f"epsilon2 should be >= 0 but is: {eps[1]}")
        if not 1.0 <= d:
            raise ValueError(f"Clipping threshold d should be >= 1 but is: {d}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"weight_decay should be >= 0 but is: {weight_decay}")
        super().__init__(
            params, group_options(locals(), "lr beta2_decay eps d weight_decay foreach maximize")
        )

    def _state_for(self, param: Tensor, group: dict) -> dict:
        """``param``'s state, created at its first step: ``step``, then the second moment."""
        if param.is_complex():
            raise RuntimeError("Adafactor does not support complex parameters")
        state = self.state[param]
        if not state:
            grad = param.grad
            state["step"] = api.zeros((), dtype=scalar_dtype())
            if grad.dim() > 1:
                state["row_var"] = grad.new_zeros((*grad.shape[:-1], 1))
                state["col_var"] = grad.new_zeros((*grad.shape[:-2], 1, grad.shape[-1]))
            else:
                state["variance"] = api.zeros_like(grad)
        return state

    def _step_group(self, group: dict) -> None:
        lr = scalar_value(group["lr"])
        eps1, eps2 = group["eps"]
        for param, grad in params_with_grad(group):
            state = self._state_for(param, group)
            self._update(param, grad, state, group, lr, eps2, eps1)

    @staticmethod
    def _update(param, grad, state, group, lr: float, eps2: float, eps1) -> None:
        if eps1 is None:
            eps1 = dtype_info.finfo(param.dtype).eps
        step_t = state["step"]
        step_t += 1
        step = step_t.item()
        one_minus_beta2 = step ** group["beta2_decay"]
        rho = min(lr, 1 / step**0.5)
        # relative step size: the parameter's RMS (before weight decay) times rho
        alpha = max(eps2, param.norm(2).item() / math.sqrt(param.numel())) * rho
        if group["weight_decay"] != 0:
            param.mul_(1 - lr * group["weight_decay"])
        if grad.dim() > 1:
            row_var, col_var = state["row_var"], state["col_var"]
            row_var.lerp_(
                grad.norm(dim=-1, keepdim=True).square_().div_(grad.shape[-1]), one_minus_beta2
            )
            col_var.lerp_(
                grad.norm(dim=-2, keepdim=True).square_().div_(grad.shape[-2]), one_minus_beta2
            )
            variance = row_var @ col_var
            variance.div_(row_var.mean(dim=-2, keepdim=True).clamp_(min=eps1))
        else:
            state["variance"].lerp_(grad * grad, one_minus_beta2)
            variance = state["variance"].clone()
        # eps1 is squared because the square root is taken next
        update = variance.clamp_(min=eps1 * eps1).rsqrt_().mul_(grad)
        clip = max(1.0, update.norm(2).item() / (math.sqrt(update.numel()) * group["d"]))
        param.add_(update, alpha=-alpha / clip)
