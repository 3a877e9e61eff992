"""``F`` losses.

Legacy ``size_average``/``reduce`` parsing and per-element weights around the loss ops, and the
losses composed from other ops (kl_div, poisson/gaussian nll, margin and triplet losses).
"""

from __future__ import annotations

import math
import warnings

from ...amp.autocast_mode import autocast_policy
from ...ops import OPS
from ...ops.core.grad_fn_naming import rename_grad_fn
from ...ops.nn import losses as _loss
from ...runtime.tensor import Tensor
from .activations import logsigmoid
from .distances import pairwise_distance


def _reduction(size_average, reduce, reduction: str) -> str:
    """PyTorch's legacy ``size_average``/``reduce`` flags, mapped to a reduction string."""
    if size_average is None and reduce is None:
        return reduction
    warnings.warn(
        "size_average and reduce args will be deprecated, please use reduction='...' instead.",
        stacklevel=3,
    )
    size_average = True if size_average is None else size_average
    reduce = True if reduce is None else reduce
    if size_average and reduce:
        return "mean"
    return "sum" if reduce else "none"


def _warn_size(input: Tensor, target: Tensor) -> None:
    if tuple(input.shape) != tuple(target.shape):
        warnings.warn(
            f"Using a target size ({target.shape}) that is different to the input size "
            f"({input.shape}). This will likely lead to incorrect results due to broadcasting. "
            "Please ensure they have the same size.",
            stacklevel=4,
        )


def cross_entropy(
    input: Tensor,
    target: Tensor,
    weight: Tensor | None = None,
    size_average=None,
    ignore_index: int = -100,
    reduce=None,
    reduction: str = "mean",
    label_smoothing: float = 0.0,
) -> Tensor:
    reduction = _reduction(size_average, reduce, reduction)
    out = OPS["cross_entropy"](input, target, weight, reduction, ignore_index, label_smoothing)
    if target.is_floating_point() and target.shape == input.shape:
        # PyTorch's probability-target loss ends in a negation, or a division by the batch size
        rename_grad_fn(out, (input,), "DivBackward1" if reduction == "mean" else "NegBackward0")
    return out


def nll_loss(
    input: Tensor,
    target: Tensor,
    weight: Tensor | None = None,
    size_average=None,
    ignore_index: int = -100,
    reduce=None,
    reduction: str = "mean",
) -> Tensor:
    reduction = _reduction(size_average, reduce, reduction)
    return OPS["nll_loss"](input, target, weight, reduction, ignore_index)


def _weighted_elementwise(name, input, target, reduction, weight, mean_by_weight, *params):
    _warn_size(input, target)
    _loss.check_reduction(reduction)
    if weight is None:
        return OPS[name](input, target, *params, reduction)
    if tuple(weight.shape) != tuple(input.shape):
        raise ValueError("Weights and input must have the same size.")
    loss = OPS[name](input, target, *params, "none") * weight
    if reduction == "none":
        return loss
    if reduction == "sum" or not mean_by_weight:
        return loss.sum() if reduction == "sum" else loss.mean()
    return loss.sum() / weight.sum()


def mse_loss(input, target, size_average=None, reduce=None, reduction="mean", weight=None):
    reduction = _reduction(size_average, reduce, reduction)
    return _weighted_elementwise("mse_loss", input, target, reduction, weight, True)


def l1_loss(input, target, size_average=None, reduce=None, reduction="mean", weight=None):
    reduction = _reduction(size_average, reduce, reduction)
    return _weighted_elementwise("l1_loss", input, target, reduction, weight, True)


def smooth_l1_loss(input, target, size_average=None, reduce=None, reduction="mean", beta=1.0):
    reduction = _reduction(size_average, reduce, reduction)
    if beta < 0:
        raise RuntimeError(f"smooth_l1_loss does not support negative values for beta (got {beta})")
    return _weighted_elementwise("smooth_l1_loss", input, target, reduction, None, True, beta)


def huber_loss(input, target, reduction="mean", delta=1.0, weight=None):
    if delta <= 0:
        raise RuntimeError(
            f"huber_loss does not support non-positive values for delta (got {delta})"
        )
    return _weighted_elementwise("huber_loss", input, target, reduction, weight, False, delta)


def binary_cross_entropy(
    input, target, weight=None, size_average=None, reduce=None, reduction="mean"
) -> Tensor:
    reduction = _reduction(size_average, reduce, reduction)
    if tuple(target.shape) != tuple(input.shape):
        raise ValueError(
            f"Using a target size ({target.shape}) that is different to the input size "
            f"({input.shape}) is deprecated. Please ensure they have the same size."
        )
    if weight is not None:
        weight = weight.expand(tuple(input.shape))
    return OPS["binary_cross_entropy"](input, target, weight, reduction)


def binary_cross_entropy_with_logits(
    input,
    target,
    weight=None,
    size_average=None,
    reduce=None,
    reduction="mean",
    pos_weight=None,
) -> Tensor:
    reduction = _reduction(size_average, reduce, reduction)
    return OPS["binary_cross_entropy_with_logits"](input, target, weight, pos_weight, reduction)


@autocast_policy(cpu="fp32", cuda="fp32")
def kl_div(input, target, size_average=None, reduce=None, reduction="mean", log_target=False):
    if size_average is not None or reduce is not None:
        reduction = _reduction(size_average, reduce, reduction)
    elif reduction == "mean":
        warnings.warn(
            "reduction: 'mean' divides the total loss by both the batch size and the support "
            "size.'batchmean' divides only by the batch size, and aligns with the KL div math "
            "definition.'mean' will be changed to behave the same as 'batchmean' in the next "
            "major release.",
            stacklevel=3,  # one frame for the autocast_policy wrapper
        )
    pointwise = kl_pointwise(input, target, log_target)
    if reduction == "batchmean":
        total = pointwise.sum()
        return total / input.shape[0] if input.ndim else total
    return _loss.reduce_loss(pointwise, _loss.check_reduction(reduction))


def kl_pointwise(input: Tensor, target: Tensor, log_target: bool) -> Tensor:
    """target * (log target - input), with 0 where target is 0 (``xlogy``)."""
    if log_target:
        return target.exp() * (target - input)
    return OPS["xlogy"](target, target) - target * input


@autocast_policy(cpu="fp32", cuda="fp32")
def poisson_nll_loss(
    input,
    target,
    log_input=True,
    full=False,
    size_average=None,
    eps=1e-8,
    reduce=None,
    reduction="mean",
) -> Tensor:
    reduction = _loss.check_reduction(_reduction(size_average, reduce, reduction))
    if log_input:
        loss = input.exp() - target * input
    else:
        loss = input - target * (input + eps).log()
    if full:
        stirling = target * target.log() - target + 0.5 * (2 * math.pi * target).log()
        loss = loss + OPS["where"](target > 1, stirling, 0.0)
    return _loss.reduce_loss(loss, reduction)


def gaussian_nll_loss(input, target, var, full=False, eps=1e-6, reduction="mean") -> Tensor:
    # PyTorch checks the sign before the size
    if not isinstance(var, Tensor):
        if var < 0:
            raise ValueError("var has negative entry/entries")
        var = OPS["full"](tuple(input.shape), float(var), dtype=input.dtype, device=input.device)
    elif not var.is_fake and (var < 0).any().item():
        raise ValueError("var has negative entry/entries")
    if tuple(var.shape) != tuple(input.shape):
        if tuple(input.shape[:-1]) == tuple(var.shape):
            var = var.unsqueeze(-1)
        elif not (
            input.ndim == var.ndim and sum(v for i, v in zip(input.shape, var.shape) if i != v) == 1
        ):
            raise ValueError("var is of incorrect size")
    if reduction not in ("none", "mean", "sum"):
        raise ValueError(reduction + " is not valid")
    var = var + (var.clamp(min=eps) - var).detach()
    loss = 0.5 * (var.log() + (input - target) ** 2 / var)
    if full:
        loss = loss + 0.5 * math.log(2 * math.pi)
    return _loss.reduce_loss(loss, reduction)


@autocast_policy(cpu="fp32", cuda="fp32")
def margin_ranking_loss(
    input1, input2, target, margin=0, size_average=None, reduce=None, reduction="mean"
) -> Tensor:
    reduction = _loss.check_reduction(_reduction(size_average, reduce, reduction))
    if not input1.ndim == input2.ndim == target.ndim:
        raise RuntimeError(
            f"margin_ranking_loss : All input tensors should have same dimension but got sizes: "
            f"input1: {input1.shape}, input2: {input2.shape}, target: {target.shape} "
        )
    loss = (-target * (input1 - input2) + margin).clamp(min=0)
    return _loss.reduce_loss(loss, reduction)


@autocast_policy(cpu="fp32", cuda="fp32")
def hinge_embedding_loss(
    input, target, margin=1.0, size_average=None, reduce=None, reduction="mean"
) -> Tensor:
    reduction = _loss.check_reduction(_reduction(size_average, reduce, reduction))
    margin_part = OPS["where"](target != 1, (margin - input).clamp(min=0), 0.0)
    self_part = OPS["where"](target != -1, input, 0.0)
    return _loss.reduce_loss(margin_part + self_part, reduction)


@autocast_policy(cpu="fp32", cuda="fp32")
def soft_margin_loss(input, target, size_average=None, reduce=None, reduction="mean") -> Tensor:
    reduction = _loss.check_reduction(_reduction(size_average, reduce, reduction))
    out = _loss.reduce_loss((-target * input).exp().log1p(), reduction)
    rename_grad_fn(out, (input,), "SoftMarginLossBackward0")
    return out


@autocast_policy(cpu="fp32", cuda="fp32")
def cosine_embedding_loss(
    input1, input2, target, margin=0, size_average=None, reduce=None, reduction="mean"
) -> Tensor:
    reduction = _loss.check_reduction(_reduction(size_average, reduce, reduction))
    if target.ndim > 1:
        raise RuntimeError("0D or 1D target tensor expected, multi-target not supported")
    inputs_ndim = 2 if target.ndim == 1 else 1
    if input1.ndim != inputs_ndim or input2.ndim != inputs_ndim:
        raise RuntimeError(
            f"{target.ndim}D target tensor expects {inputs_ndim}D input tensors, but found inputs "
            f"with sizes {list(input1.shape)} and {list(input2.shape)}."
        )
    dim = target.ndim
    dot = (input1 * input2).sum(dim)
    mag1 = (input1 * input1).sum(dim) + 1e-12
    mag2 = (input2 * input2).sum(dim) + 1e-12
    cos = dot / (mag1 * mag2).sqrt()
    pos = OPS["where"](target == 1, 1 - cos, 0.0)
    neg = OPS["where"](target == -1, (cos - margin).clamp(min=0), 0.0)
    return _loss.reduce_loss(pos + neg, reduction)


def _check_triplet_dims(anchor: Tensor, positive: Tensor, negative: Tensor) -> None:
    if not anchor.ndim == positive.ndim == negative.ndim:
        raise RuntimeError(
            "The anchor, positive, and negative tensors are expected to have the same number of "
            f"dimensions, but got: anchor {anchor.ndim}D, positive {positive.ndim}D, and negative "
            f"{negative.ndim}D inputs"
        )


@autocast_policy(cpu="fp32", cuda="fp32")
def triplet_margin_loss(
    anchor,
    positive,
    negative,
    margin=1.0,
    p=2,
    eps=1e-6,
    swap=False,
    size_average=None,
    reduce=None,
    reduction="mean",
) -> Tensor:
    reduction = _loss.check_reduction(_reduction(size_average, reduce, reduction))
    if margin <= 0:
        raise ValueError(
            f"TripletMarginLoss: expected margin to be greater than 0, got {margin} instead"
        )
    _check_triplet_dims(anchor, positive, negative)
    d_pos = pairwise_distance(anchor, positive, p, eps)
    d_neg = pairwise_distance(anchor, negative, p, eps)
    if swap:
        d_neg = OPS["minimum"](d_neg, pairwise_distance(positive, negative, p, eps))
    return _loss.reduce_loss((margin + d_pos - d_neg).clamp(min=0), reduction)


def triplet_margin_with_distance_loss(
    anchor, positive, negative, *, distance_function=None, margin=1.0, swap=False, reduction="mean"
) -> Tensor:
    reduction = _loss.check_reduction(reduction)
    if margin <= 0:
        raise ValueError(
            f"TripletMarginWithDistanceLoss: expected margin to be greater than 0, got {margin} instead"
        )
    _check_triplet_dims(anchor, positive, negative)
    distance = distance_function or pairwise_distance
    d_pos = distance(anchor, positive)
    d_neg = distance(anchor, negative)
    if swap:
        d_neg = OPS["minimum"](d_neg, distance(positive, negative))
    return _loss.reduce_loss((margin + d_pos - d_neg).clamp(min=0), reduction)


def multilabel_soft_margin_loss(
    input, target, weight=None, size_average=None, reduce=None, reduction="mean"
) -> Tensor:
    reduction = _loss.check_reduction(_reduction(size_average, reduce, reduction))
    loss = -(target * logsigmoid(input) + (1 - target) * logsigmoid(-input))
    if weight is not None:
        loss = loss * weight
    class_dim = input.ndim - 1
    loss = loss.sum(class_dim) / input.shape[class_dim]
    return _loss.reduce_loss(loss, reduction)
