"""``Adam`` (and the decoupled weight decay that ``AdamW`` turns on), as PyTorch computes it.

State per parameter: ``step`` (a float32 0-d tensor), ``exp_avg``, ``exp_avg_sq`` and, with
``amsgrad``, ``max_exp_avg_sq``. The update order and scalar folding follow PyTorch's
single-tensor implementation so trajectories agree to float32 rounding. Under ``kiln.compile``
the step count is never read as a Python number, so a whole ``step()`` is one graph.
"""

from __future__ import annotations

from ..ops.complex_fft.complex_numbers import view_as_real
from ..ops.creation import api
from ..runtime.compiling import mark_compile_region
from ..runtime.tensor import Tensor
from . import _numpy_step
from .optimizer import (
    COMMON_OLD_GROUP_DEFAULTS,
    Optimizer,
    check_adam_options,
    check_fused,
    group_options,
    saved_operand,
    scalar_dtype,
    scalar_for,
    scalar_value,
    step_value,
)
from .step_parts import adam_weight_decay, params_with_grad, update_moments

__all__ = ["Adam"]


class Adam(Optimizer):
    """Adam (Kingma & Ba); ``decoupled_weight_decay=True`` gives AdamW."""

    _old_group_defaults = {
        **COMMON_OLD_GROUP_DEFAULTS,
        "amsgrad": False,
        "decoupled_weight_decay": False,
        "fused": None,
    }

    def __init__(
        self,
        params,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0,
        amsgrad: bool = False,
        *,
        foreach: bool | None = None,
        maximize: bool = False,
        capturable: bool = False,
        differentiable: bool = False,
        fused: bool | None = None,
        decoupled_weight_decay: bool = False,
    ) -> None:
        if isinstance(lr, Tensor) and foreach and not capturable:
            raise ValueError(
                "lr as a Tensor is not supported for capturable=False and foreach=True"
            )
        check_adam_options(lr, eps, betas, weight_decay)
        betas = _check_betas(betas, foreach, capturable)
        super().__init__(
            params,
            group_options(
                locals(),
                "lr betas eps weight_decay amsgrad maximize foreach capturable differentiable "
                "fused decoupled_weight_decay",
            ),
        )
        check_fused(fused, foreach, differentiable)

    def _state_for(self, param: Tensor, group: dict) -> dict:
        state = self.state[param]
        if not state:
            state["step"] = api.tensor(
                0.0, dtype=scalar_dtype(), device=param.device if group["capturable"] else None
            )
            state["exp_avg"] = api.zeros_like(param)
            state["exp_avg_sq"] = api.zeros_like(param)
            if group["amsgrad"]:
                state["max_exp_avg_sq"] = api.zeros_like(param)
        return state

    def _step_group(self, group: dict) -> None:
        lr = scalar_value(group["lr"])
        beta1, beta2 = scalar_value(group["betas"][0]), scalar_value(group["betas"][1])
        fast = None
        if _numpy_step.available() and not group["capturable"] and not group["differentiable"]:
            fast = _numpy_step.AdamScalars(group, lr, (beta1, beta2))
        for param, grad in params_with_grad(group):
            state = self._state_for(param, group)
            if fast is not None and _numpy_step.adam_update(param, state, fast):
                continue
            _param_step(param, grad, state, group, lr, beta1, beta2)


def _param_step(param, grad, state: dict, group: dict, lr, beta1, beta2) -> None:
    """One parameter's update (a region of its own in a large compiled step: see below)."""
    eps = group["eps"]
    step_t = state["step"]
    step_t += 1
    grad = adam_weight_decay(param, grad, lr, group)
    exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
    if param.is_complex():  # as PyTorch: the real and imaginary parts separately
        param, grad, exp_avg, exp_avg_sq = (
            view_as_real(t) for t in (param, grad, exp_avg, exp_avg_sq)
        )
    update_moments(exp_avg, exp_avg_sq, grad, beta1, beta2)
    second = exp_avg_sq
    differentiable = group["differentiable"]
    if group["amsgrad"]:
        second = state["max_exp_avg_sq"]
        second = view_as_real(second) if second.is_complex() else second
        second.copy_(
            saved_operand(second, differentiable).maximum(saved_operand(exp_avg_sq, differentiable))
        )
    if group["capturable"] or differentiable:
        # PyTorch's differentiable Adam also keeps the bias corrections as tensors
        exp_avg = saved_operand(exp_avg, differentiable)
        _capturable_update(param, exp_avg, second, step_t, lr, beta1, beta2, eps)
        return
    step = step_value(step_t)
    step_size = scalar_for(lr / (1 - beta1**step), param)
    bias_correction2_sqrt = scalar_for((1 - beta2**step) ** 0.5, param)
    denom = (second.sqrt() / bias_correction2_sqrt).add_(eps)
    param.addcdiv_(exp_avg, denom, value=-step_size)


# A compiled step over many parameters (GPT-2 small's 148) traces this update once per
# parameter: as a region, the parameters of one shape share one compile of it (compile time
# ~1.2 s less there). Each region costs a call per step, so small steps stay one graph.
mark_compile_region(_param_step, min_graph_ops=2000)


def _capturable_update(param, exp_avg, second, step_t, lr, beta1, beta2, eps) -> None:
    """PyTorch's ``capturable`` form: bias corrections stay tensors (no ``.item()``), so a
    captured optimizer step has no host synchronisation; they are computed in float32."""
    step_size_neg = (lr / (1 - beta1**step_t)).neg()
    bias_correction2_sqrt = (1 - beta2**step_t).sqrt()
    denom = (second.sqrt() / (bias_correction2_sqrt * step_size_neg)).add_(eps / step_size_neg)
    param.addcdiv_(exp_avg, denom)


def _check_betas(betas, foreach, capturable) -> tuple:
    """PyTorch's rules for ``betas``: both floats or both one-element tensors (made 0-d)."""
    first, second = betas
    if not (
        (isinstance(first, float) and isinstance(second, float))
        or (isinstance(first, Tensor) and isinstance(second, Tensor))
    ):
        raise ValueError("betas must be either both floats or both Tensors")
    for i, beta in enumerate(betas):
        if isinstance(beta, Tensor):
            if foreach and not capturable:
                raise ValueError(
                    f"betas[{i}] as a Tensor is not supported for capturable=False and foreach=True"
                )
            if beta.numel() != 1:
                raise ValueError(f"Tensor betas[{i}] must be 1-element")
    return tuple(b.squeeze() if isinstance(b, Tensor) and b.dim() != 0 else b for b in betas)
