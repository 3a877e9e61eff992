"""``SGD`` with momentum, dampening, Nesterov, weight decay and ``maximize`` (PyTorch's math)."""

from __future__ import annotations

from ..runtime.tensor import Tensor
from . import _numpy_step
from .optimizer import Optimizer, check_fused, group_options, scalar_value
from .step_parts import l2_weight_decay, params_with_grad

__all__ = ["SGD"]


class SGD(Optimizer):
    """Stochastic gradient descent; the momentum buffer starts as the first gradient."""

    _old_group_defaults = {"nesterov": False, "maximize": False}

    def __init__(
        self,
        params,
        lr: float = 1e-3,
        momentum: float = 0,
        dampening: float = 0,
        weight_decay: float = 0,
        nesterov: bool = False,
        *,
        maximize: bool = False,
        foreach: bool | None = None,
        differentiable: bool = False,
        fused: bool | None = None,
    ) -> None:
        if isinstance(lr, Tensor) and lr.numel() != 1:
            raise ValueError("Tensor lr must be 1-element")
        if lr < 0.0:
            raise ValueError(f"Invalid learning rate: {lr}")
        if momentum < 0.0:
            raise ValueError(f"Invalid momentum value: {momentum}")
        if weight_decay < 0.0:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        super().__init__(
            params,
            group_options(
                locals(),
                "lr momentum dampening weight_decay nesterov maximize foreach differentiable fused",
            ),
        )
        check_fused(fused, foreach, differentiable)

    def _step_group(self, group: dict) -> None:
        lr = scalar_value(group["lr"])
        momentum = group["momentum"]
        dampening = group["dampening"]
        weight_decay = group["weight_decay"]
        fast = _numpy_step.available() and not group["differentiable"]
        for param, grad in params_with_grad(group):
            if fast and _numpy_step.sgd_update(param, self.state, group, lr):
                continue
            grad = l2_weight_decay(grad, param, weight_decay)
            if momentum != 0:
                state = self.state[param]
                buf = state.get("momentum_buffer")
                if buf is None:
                    buf = grad.detach().clone()
                    state["momentum_buffer"] = buf
                else:
                    buf.mul_(momentum).add_(grad, alpha=1 - dampening)
                grad = grad.add(buf, alpha=momentum) if group["nesterov"] else buf
            param.add_(grad, alpha=-lr)
