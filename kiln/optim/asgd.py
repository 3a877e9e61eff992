"""``ASGD``: averaged stochastic gradient descent (Polyak & Juditsky) with PyTorch's schedule.

State per parameter: ``step``, ``eta`` (the current step size), ``mu`` (the averaging rate), all
0-d tensors of the scalar dtype, and ``ax`` (the running average of the parameter). Eagerly
``eta`` and ``mu`` are read as Python numbers, as PyTorch does; captured by ``kiln.compile`` or
with ``capturable`` they stay tensors and the ``mu == 1`` branch becomes a ``where``.
"""

from __future__ import annotations

from .. import ops
from ..ops.creation import api
from ..runtime import dtypes as dt
from ..runtime.tensor import Tensor
from .optimizer import (
    COMMON_OLD_GROUP_DEFAULTS,
    Optimizer,
    check_at_least_zero,
    check_lr,
    group_options,
    scalar_dtype,
    scalar_for,
    scalar_value,
    step_value,
)
from .step_parts import advance_step, l2_weight_decay, params_with_grad

__all__ = ["ASGD"]


class ASGD(Optimizer):
    """SGD whose iterates are averaged from step ``t0`` on; ``eta`` decays as
    ``lr / (1 + lambd * lr * step) ** alpha``."""

    _old_group_defaults = COMMON_OLD_GROUP_DEFAULTS
    _scalar_state = ("step", "eta", "mu")

    def __init__(
        self,
        params,
        lr: float = 1e-2,
        lambd: float = 1e-4,
        alpha: float = 0.75,
        t0: float = 1e6,
        weight_decay: float = 0,
        foreach: bool | None = None,
        maximize: bool = False,
        differentiable: bool = False,
        capturable: bool = False,
    ) -> None:
        check_lr(lr)
        check_at_least_zero(weight_decay=weight_decay)
        super().__init__(
            params,
            group_options(
                locals(),
                "lr lambd alpha t0 weight_decay foreach maximize differentiable capturable",
            ),
        )

    def _state_for(self, param: Tensor, group: dict) -> dict:
        state = self.state[param]
        if not state:
            lr = scalar_value(group["lr"])
            state["step"] = api.zeros((), dtype=scalar_dtype(), device=param.device)
            state["eta"] = api.tensor(lr, dtype=scalar_dtype(), device=param.device)
            state["mu"] = api.ones((), dtype=scalar_dtype(), device=param.device)
            state["ax"] = api.zeros_like(param)
        return state

    def _step_group(self, group: dict) -> None:
        lr = scalar_value(group["lr"])
        lambd, alpha, t0 = group["lambd"], group["alpha"], group["t0"]
        weight_decay = group["weight_decay"]
        capturable = group["capturable"]
        for param, grad in params_with_grad(group):
            state = self._state_for(param, group)
            eta, mu, ax = state["eta"], state["mu"], state["ax"]
            step = advance_step(state, capturable)
            grad = l2_weight_decay(grad, param, weight_decay)
            if capturable:
                param.mul_(1 - lambd * eta)
                param.addcmul_(grad, eta, value=-1)
            else:
                eta_value = step_value(eta)
                param.mul_(scalar_for(1 - lambd * eta_value, param))
                _add_scaled(param, grad, -scalar_for(eta_value, param))
            _average(ax, param, mu, capturable)
            _assign(eta, lr / ((1 + lambd * lr * step) ** alpha))
            _assign(mu, 1 / _at_least_one(step - t0))


def _average(ax: Tensor, param: Tensor, mu: Tensor, capturable: bool) -> None:
    """``ax += (param - ax) * mu``, except that ``mu == 1`` (before ``t0``) copies ``param``
    exactly; a captured step decides that with ``where`` instead of reading ``mu``."""
    if capturable:
        ax.add_(param.sub(ax).mul_(mu))
        return
    mu_value = step_value(mu)
    if isinstance(mu_value, Tensor):
        ax.copy_(ops.where(mu_value != 1, ax.add(param.sub(ax).mul_(mu)), param))
    elif mu_value != 1:
        ax.add_(param.sub(ax).mul_(mu))
    else:
        ax.copy_(param)


def _add_scaled(param: Tensor, grad: Tensor, scale) -> None:
    """``param += scale * grad``; a 0-d tensor ``scale`` (captured code) goes through
    ``addcmul_``, whose tensor operand every backend lowers, and rounds as ``alpha`` does."""
    if isinstance(scale, Tensor):
        param.addcmul_(grad, scale)
    else:
        param.add_(grad, alpha=scale)


def _assign(target: Tensor, value) -> None:
    """Store a number or a 0-d tensor into a 0-d state tensor. PyTorch stores
    ``torch.as_tensor(value)``, so the value is rounded to the default dtype first even when
    the state is wider (``load_state_dict`` casts ``eta`` and ``mu`` to a float64 parameter's
    dtype); rounding the same way keeps resumed runs on the uninterrupted trajectory."""
    default = dt.get_default_dtype()
    if isinstance(value, Tensor):
        target.copy_(value.to(default))
    else:
        target.copy_(api.tensor(value, dtype=default))


def _at_least_one(x):
    return x.clamp_min(1) if isinstance(x, Tensor) else max(1, x)
