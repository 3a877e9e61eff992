"""``SparseAdam``: the lazy Adam variant PyTorch offers for sparse gradients.

PyTorch's SparseAdam updates the moments and the parameter only at the entries a sparse gradient
holds (for ``nn.Embedding(sparse=True)``: the rows that were looked up) and refuses dense
gradients. kiln's takes sparse COO gradients that way; it also takes a dense gradient (from
code written before kiln had sparse gradients), treating as present the rows (slices
along the first dimension) where the gradient is not all zero, which is exactly the set of rows
an embedding lookup touches unless a looked-up row's gradient is zero in every entry. On those
rows the arithmetic is PyTorch's, in its order, so trajectories agree bit for bit; the other
rows, and their moments, are left alone.
"""

from __future__ import annotations

import math

from .. import ops
from ..ops.creation import api
from ..runtime.tensor import Tensor
from .optimizer import Optimizer, group_options, scalar_value
from .step_parts import params_with_grad

__all__ = ["SparseAdam"]


class SparseAdam(Optimizer):
    """Adam updating only the rows the gradient touches (see the module docstring)."""

    def __init__(
        self,
        params,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        maximize: bool = False,
    ) -> None:
        if isinstance(lr, Tensor) and lr.numel() != 1:
            raise ValueError("Tensor lr must be 1-element")
        if not 0.0 < scalar_value(lr):
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 < eps:
            raise ValueError(f"Invalid epsilon value: {eps}")
        if not 0.0 <= betas[0] < 1.0:
            raise ValueError(f"Invalid beta parameter at index 0: {betas[0]}")
        if not 0.0 <= betas[1] < 1.0:
            raise ValueError(f"Invalid beta parameter at index 1: {betas[1]}")
        super().__init__(params, group_options(locals(), "lr betas eps maximize"))

    def _step_group(self, group: dict) -> None:
        lr = scalar_value(group["lr"])
        beta1, beta2 = group["betas"]
        eps = group["eps"]
        for param, grad in params_with_grad(group):
            state = self.state[param]
            if not state:
                state["step"] = 0  # a Python int, as in PyTorch
                state["exp_avg"] = api.zeros_like(param)
                state["exp_avg_sq"] = api.zeros_like(param)
            state["step"] += 1
            if grad.is_sparse:
                _sparse_adam_update(param, grad, state, lr, (beta1, beta2), eps)
            else:
                _lazy_adam_update(param, grad, state, lr, (beta1, beta2), eps)


def _sparse_adam_update(param, grad, state: dict, lr, betas, eps: float) -> None:
    """PyTorch's SparseAdam step for a sparse gradient: its arithmetic, in its order, at the
    gradient's (coalesced) indices; the other entries and their moments stay as they are."""
    exp_avg, exp_avg_sq, step = state["exp_avg"], state["exp_avg_sq"], state["step"]
    beta1, beta2 = betas
    grad = grad.coalesce()
    where = tuple(grad._indices())
    values = grad._values()
    old_avg, old_sq = exp_avg[where], exp_avg_sq[where]
    avg_update = values.sub(old_avg).mul_(1 - beta1)
    sq_update = values.pow(2).sub_(old_sq).mul_(1 - beta2)
    exp_avg.index_put_(where, avg_update, accumulate=True)
    exp_avg_sq.index_put_(where, sq_update, accumulate=True)
    numer = avg_update.add_(old_avg)
    denom = sq_update.add_(old_sq).sqrt_().add_(eps)
    step_size = lr * math.sqrt(1 - beta2**step) / (1 - beta1**step)
    param.index_put_(where, numer.div_(denom).mul(-step_size), accumulate=True)


def _touched_rows(grad: Tensor) -> Tensor:
    """A mask, broadcastable to ``grad``, of the rows where ``grad`` has a non-zero entry (the
    rows a sparse gradient of an embedding would hold)."""
    nonzero = grad != 0
    if grad.dim() <= 1:
        return nonzero
    return nonzero.flatten(1).any(1).view(-1, *([1] * (grad.dim() - 1)))


def _lazy_adam_update(param, grad, state: dict, lr, betas, eps: float) -> None:
    """PyTorch's sparse Adam step restricted to the touched rows: moments move by
    ``(1 - beta) * (new - old)``; the parameter by ``-step_size * m / (sqrt(v) + eps)``."""
    exp_avg, exp_avg_sq, step = state["exp_avg"], state["exp_avg_sq"], state["step"]
    beta1, beta2 = betas
    touched = _touched_rows(grad)
    avg_update = grad.sub(exp_avg).mul_(1 - beta1)
    sq_update = grad.pow(2).sub_(exp_avg_sq).mul_(1 - beta2)
    numer = avg_update.add(exp_avg)
    second = sq_update.add(exp_avg_sq)
    exp_avg.copy_(ops.where(touched, numer, exp_avg))
    exp_avg_sq.copy_(ops.where(touched, second, exp_avg_sq))
    denom = second.sqrt().add_(eps)
    step_size = lr * math.sqrt(1 - beta2**step) / (1 - beta1**step)
    delta = numer.div(denom).mul_(-step_size)
    param.copy_(ops.where(touched, param.add(delta), param))
