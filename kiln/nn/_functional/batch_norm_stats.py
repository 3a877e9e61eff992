"""The batch-norm pieces SyncBatchNorm-style code calls one by one (``torch.batch_norm_stats``,
``batch_norm_gather_stats``, ``batch_norm_elemt``, ``batch_norm_backward_reduce``,
``batch_norm_backward_elemt``, ``batch_norm_update_stats``).

Each worker reduces its own batch to per-channel statistics, the workers combine them, and each
normalizes (forward) or forms its input gradient (backward) from the combined sums. PyTorch has
these kernels on CUDA only (``batch_norm_update_stats`` on CPU too); kiln computes them with its
ops on every device, with the CUDA kernels' results: statistics in float32 for 16-bit inputs,
``(mean, 1 / sqrt(biased var + eps))`` pairs, and running statistics updated in place with the
unbiased variance. Like PyTorch's they have no derivative (SyncBatchNorm wraps them in an
autograd Function), so their results do not require grad.
"""

from __future__ import annotations

import math

from ...autograd.grad_mode import no_grad
from ...ops import OPS
from ...ops.core.registry import torch_function
from ...ops.public import var_mean
from ...runtime import dtypes as dt
from ...runtime.tensor import Tensor
from .normalization import update_running_stats


def _channel_view(input: Tensor) -> tuple:
    """(the dims reduced per channel, the shape a per-channel vector broadcasts as); an input
    without a channel dim raises PyTorch's IndexError."""
    return (0, *range(2, input.ndim)), (input.size(1),) + (1,) * (input.ndim - 2)


def _accumulate(t: Tensor) -> Tensor:
    """``t`` in the dtype the CUDA kernels accumulate in (float32 for 16-bit inputs)."""
    return t.float() if t.dtype in (dt.float16, dt.bfloat16) else t


@torch_function()
def batch_norm_stats(input: Tensor, eps: float) -> tuple[Tensor, Tensor]:
    """This worker's per-channel mean and 1 / sqrt(biased variance + eps)."""
    dims, _ = _channel_view(input)
    with no_grad():
        var, mean = var_mean(_accumulate(input), dims, correction=0)
        return mean, (var + eps).rsqrt()


@torch_function()
def batch_norm_elemt(
    input: Tensor,
    weight: Tensor | None,
    bias: Tensor | None,
    mean: Tensor,
    invstd: Tensor,
    eps: float,
) -> Tensor:
    """``(input - mean) * invstd * weight + bias`` per channel, in the input's dtype."""
    _, chan = _channel_view(input)
    with no_grad():
        out = (_accumulate(input) - mean.reshape(chan)) * invstd.reshape(chan)
        if weight is not None:
            out = out * weight.reshape(chan)
        if bias is not None:
            out = out + bias.reshape(chan)
        return out.to(input.dtype)


@torch_function()
def batch_norm_gather_stats_with_counts(
    input: Tensor,
    mean: Tensor,
    invstd: Tensor,
    running_mean: Tensor | None,
    running_var: Tensor | None,
    momentum: float,
    eps: float,
    counts: Tensor,
) -> tuple[Tensor, Tensor]:
    """Combine the workers' (mean, invstd) rows, weighted by their element counts, into the
    whole batch's, and update the running statistics with them. ``input`` only says the device
    (as in PyTorch); a worker with count 0 adds nothing."""
    with no_grad():
        weights = counts.to(mean.dtype).reshape(-1, 1)
        total = weights.sum()
        combined = (mean * weights).sum(0) / total
        worker_var = invstd.reciprocal().square() - eps
        spread = (worker_var + (mean - combined).square()) * weights
        var = spread.sum(0) / total
        update_running_stats(running_mean, running_var, combined, var, total, momentum)
        return combined, (var + eps).rsqrt()


@torch_function()
def batch_norm_gather_stats(
    input: Tensor,
    mean: Tensor,
    invstd: Tensor,
    running_mean: Tensor | None,
    running_var: Tensor | None,
    momentum: float,
    eps: float,
    count: int,
) -> tuple[Tensor, Tensor]:
    """``batch_norm_gather_stats_with_counts`` where every worker saw ``count`` elements."""
    counts = OPS["full"]((mean.shape[0],), count, dtype=mean.dtype, device=mean.device)
    return batch_norm_gather_stats_with_counts(
        input, mean, invstd, running_mean, running_var, momentum, eps, counts
    )


@torch_function()
def batch_norm_backward_reduce(
    grad_out: Tensor,
    input: Tensor,
    mean: Tensor,
    invstd: Tensor,
    weight: Tensor | None,
    input_g: bool,
    weight_g: bool,
    bias_g: bool,
) -> tuple:
    """This worker's per-channel sums for the backward pass: (sum of grad_out, sum of
    grad_out * (input - mean), weight gradient, bias gradient), each None where its flag is
    off (the first two go with ``input_g``)."""
    dims, chan = _channel_view(input)
    with no_grad():
        grad = _accumulate(grad_out)
        sum_dy = grad.sum(dims)
        sum_dy_xmu = (grad * (_accumulate(input) - mean.reshape(chan))).sum(dims)
        grad_dtype = mean.dtype if weight is None else weight.dtype
        return (
            sum_dy if input_g else None,
            sum_dy_xmu if input_g else None,
            (sum_dy_xmu * invstd).to(grad_dtype) if weight_g else None,
            sum_dy.to(grad_dtype) if bias_g else None,
        )


@torch_function()
def batch_norm_backward_elemt(
    grad_out: Tensor,
    input: Tensor,
    mean: Tensor,
    invstd: Tensor,
    weight: Tensor | None,
    sum_dy: Tensor,
    sum_dy_xmu: Tensor,
    count: Tensor,
) -> Tensor:
    """The input gradient from the workers' summed ``batch_norm_backward_reduce`` results over
    ``count.sum()`` elements per channel: batch norm's training-mode backward."""
    _, chan = _channel_view(input)
    with no_grad():
        total = count.sum().to(mean.dtype)
        mean_dy = (sum_dy / total).reshape(chan)
        mean_dy_xmu = (sum_dy_xmu / total).reshape(chan)
        invstd_c = invstd.reshape(chan)
        xmu = _accumulate(input) - mean.reshape(chan)
        scale = invstd_c if weight is None else invstd_c * weight.reshape(chan)
        grad = _accumulate(grad_out) - mean_dy - xmu * invstd_c.square() * mean_dy_xmu
        return (grad * scale).to(input.dtype)


@torch_function()
def batch_norm_update_stats(
    input: Tensor, running_mean: Tensor | None, running_var: Tensor | None, momentum: float
) -> tuple[Tensor, Tensor]:
    """The batch's per-channel mean and biased variance, and the running statistics moved
    towards them in place (PyTorch's CPU kernel: 16-bit statistics unless the running ones are
    float32)."""
    dims, _ = _channel_view(input)
    dtype = input.dtype
    if running_mean is not None and input.dtype in (dt.float16, dt.bfloat16):
        dtype = running_mean.dtype
    with no_grad():
        var, mean = var_mean(_accumulate(input), dims, correction=0)
        count = math.prod(input.shape[:1] + input.shape[2:])
        update_running_stats(running_mean, running_var, mean, var, count, momentum)
        return mean.to(dtype), var.to(dtype)
