"""``F`` losses.

Legacy ``size_average``/``reduce`` parsing and per-element weights around the loss ops, the
losses composed from other ops (kl_div, poisson/gaussian nll, margin and triplet losses), and the
``kiln.<loss>`` forms with ATen's signatures.

``multi_margin_loss`` and ``multilabel_margin_loss`` are composites of gather/where/sum, so they
get autograd and the compiler for free. PyTorch's checks are reproduced (shape, dtype, target
range; the range check reads data, so it is skipped on fake tensors). A hinge counts only where
it is strictly positive, as PyTorch's kernels do, so the gradient is 0 on the hinge's kink.
"""

from __future__ import annotations

import math
import warnings

from ...amp.autocast_mode import autocast_policy
from ...autograd.grad_mode import is_grad_enabled
from ...ops import OPS
from ...ops.core.common import broadcast_shapes
from ...ops.core.grad_fn_naming import rename_grad_fn
from ...ops.core.registry import torch_function
from ...ops.nn import losses as _loss
from ...ops.reductions.reduce import torch_type_name
from ...ops.shape.shape_functions import broadcast_tensors
from ...runtime import dtypes as dt
from ...runtime.symbolic import known_same_shape
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


def _no_derivative(fn_name: str, arg_name: str, value) -> None:
    """PyTorch has no derivative for this argument: one that requires grad is refused in grad
    mode, not silently given no gradient."""
    if value is not None and value.requires_grad and is_grad_enabled():
        raise RuntimeError(
            f"The function '{fn_name}' is not differentiable with respect to argument "
            f"'{arg_name}'. This input cannot have requires_grad True."
        )


def _nll_name(input: Tensor) -> str:
    """The ATen function PyTorch's nll_loss runs for an input of this rank."""
    return "nll_loss2d_forward" if input.ndim >= 3 else "nll_loss_forward"


def _warn_size(input: Tensor, target: Tensor) -> None:
    if tuple(input.shape) != tuple(target.shape):
        warnings.warn(
            f"Using a target size ({target.shape}) that is different to the input size "
            f"({input.shape}). This will likely lead to incorrect results due to broadcasting. "
            "Please ensure they have the same size.",
            stacklevel=4,
        )


def _broadcast_pair(input: Tensor, target: Tensor) -> tuple:
    """``torch.broadcast_tensors(input, target)``, which PyTorch's elementwise losses call
    first: an expanded 0-d target is no longer 0-d, so it takes part in the type promotion
    (a float32 input and a 0-d float64 target give a float64 loss)."""
    if known_same_shape(tuple(input.shape), tuple(target.shape)):
        return input, target
    return tuple(broadcast_tensors(input, target))


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
    probabilities = target._dtype.is_floating_point
    if weight is not None and not probabilities:  # class indices go through nll_loss
        _no_derivative(_nll_name(input), "weight", weight)
    out = OPS["cross_entropy"](input, target, weight, reduction, ignore_index, label_smoothing)
    if probabilities and target.shape == input.shape:
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
    if weight is not None:
        _no_derivative(_nll_name(input), "weight", weight)
    return OPS["nll_loss"](input, target, weight, reduction, ignore_index)


def _weighted_elementwise(
    name, input, target, reduction, weight, mean_by_weight, *params, weighted_form=None
):
    """The loss ``name`` (an op), or with ``weight`` its unreduced values times the weight,
    reduced; ``weighted_form(input, target)`` stands for the op's values where PyTorch's
    weighted path computes them with other ops (whose dtypes it then takes)."""
    _warn_size(input, target)
    _loss.check_reduction(reduction)
    input, target = _broadcast_pair(input, target)
    if weight is None:
        return OPS[name](input, target, *params, reduction)
    if tuple(weight.shape) != tuple(input.shape):
        raise ValueError("Weights and input must have the same size.")
    if weighted_form is not None:
        loss = weighted_form(input, target) * weight
    else:
        loss = OPS[name](input, target, *params, "none") * weight
    if reduction == "none":
        return loss
    if reduction == "sum" or not mean_by_weight:
        return loss.sum() if reduction == "sum" else loss.mean()
    return loss.sum() / weight.sum()


def mse_loss(input, target, size_average=None, reduce=None, reduction="mean", weight=None):
    reduction = _reduction(size_average, reduce, reduction)
    return _weighted_elementwise(
        "mse_loss", input, target, reduction, weight, True, weighted_form=_squared_error
    )


def _squared_error(input: Tensor, target: Tensor) -> Tensor:
    """PyTorch's weighted mse: pow(input - target, 2), in any dtype the difference has."""
    return (input - target).pow(2)


@autocast_policy(cpu="fp32", cuda="fp32")
def l1_loss(input, target, size_average=None, reduce=None, reduction="mean", weight=None):
    reduction = _reduction(size_average, reduce, reduction)
    if weight is not None:
        return _weighted_elementwise("l1_loss", input, target, reduction, weight, True)
    _warn_size(input, target)
    return _l1(input, target, reduction)


def _l1(input: Tensor, target: Tensor, reduction: str) -> Tensor:
    """PyTorch's composite, (input - target).abs() reduced, over the broadcast pair: its
    backward keeps the difference, so the target may change in place before backward."""
    input, target = _broadcast_pair(input, target)
    return _loss.reduce_loss((input - target).abs(), _loss.check_reduction(reduction))


def smooth_l1_loss(input, target, size_average=None, reduce=None, reduction="mean", beta=1.0):
    reduction = _reduction(size_average, reduce, reduction)
    if beta < 0:
        raise RuntimeError(f"smooth_l1_loss does not support negative values for beta (got {beta})")
    if beta == 0.0:  # PyTorch calls l1_loss then
        _warn_size(input, target)
        return _l1(input, target, reduction)
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
    _no_derivative("binary_cross_entropy", "weight", weight)
    if weight is not None:  # (a weight broadcasting the input up is the op's error)
        weight = weight.expand(tuple(broadcast_shapes(tuple(target.shape), tuple(weight.shape))))
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
    _no_derivative("binary_cross_entropy_with_logits", "weight", weight)
    _no_derivative("binary_cross_entropy_with_logits", "pos_weight", pos_weight)
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
    _check_kl_div_dtypes(input, target)
    pointwise = kl_pointwise(input, target, log_target)
    if reduction == "batchmean":
        total = pointwise.sum()
        return total / input.shape[0] if input.ndim else total
    return _loss.reduce_loss(pointwise, _loss.check_reduction(reduction))


def _check_kl_div_dtypes(input: Tensor, target: Tensor) -> None:
    """PyTorch's kl_div computes floats only: complex, integer and bool operands are refused."""
    dtypes = (input.dtype, target.dtype)
    if any(d.is_complex for d in dtypes):
        raise RuntimeError("kl_div: Complex inputs not supported.")
    if not all(d.is_floating_point for d in dtypes):
        raise RuntimeError("kl_div: Integral inputs not supported.")


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
        var = float(var) * input.new_ones(tuple(input.shape))  # float32 for integer inputs
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
    if not (var.dtype.is_floating_point or var.dtype.is_complex):
        # PyTorch clamps a copy of var in place by the float eps
        raise RuntimeError(
            f"result type Float can't be cast to the desired output type {dt.c_type_name(var.dtype)}"
        )
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
    # PyTorch's margin is a double: integer inputs give a float loss
    loss = (-target * (input1 - input2) + float(margin)).clamp(min=0)
    return _loss.reduce_loss(loss, reduction)


@autocast_policy(cpu="fp32", cuda="fp32")
def hinge_embedding_loss(
    input, target, margin=1.0, size_average=None, reduce=None, reduction="mean"
) -> Tensor:
    reduction = _loss.check_reduction(_reduction(size_average, reduce, reduction))
    # PyTorch's ``margin - input`` fills a tensor like the input with the margin and subtracts:
    # the loss keeps the input's dtype (an integer margin truncated, differences wrapping)
    filled = OPS["full"]((), margin, dtype=input.dtype, device=input.device)
    margin_part = OPS["where"](target != 1, (filled - input).clamp(min=0), 0)
    self_part = OPS["where"](target != -1, input, 0)
    return _loss.reduce_loss(margin_part + self_part, reduction)


@autocast_policy(cpu="fp32", cuda="fp32")
def soft_margin_loss(input, target, size_average=None, reduce=None, reduction="mean") -> Tensor:
    reduction = _loss.check_reduction(_reduction(size_average, reduce, reduction))
    _no_derivative("soft_margin_loss", "target", target)
    # PyTorch's neg_out(input) then mul_(target): the input's layout and dtype, and a target
    # that would broadcast the input is refused; then exp_ in place, which an integer refuses
    product = (-input).mul_(target)
    if not (product.dtype.is_floating_point or product.dtype.is_complex):
        raise RuntimeError(
            "result type Float can't be cast to the desired output type "
            f"{torch_type_name(product.dtype)}"
        )
    out = _loss.reduce_loss(product.exp().log1p(), reduction)
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


# ------------------------------------------------------------------------------ margin classification


def _margin_geometry(input: Tensor) -> tuple[int, int]:
    """(number of samples, number of classes) of a vector or matrix input, as PyTorch checks."""
    ndims = input.ndim
    if not (
        (ndims == 2 and input.shape[1] != 0) or (ndims == 1 and input.shape[0] != 0) or ndims == 0
    ):
        raise RuntimeError(
            "Expected non-empty vector or matrix with optional 0-dim batch size, but got: "
            f"{list(input.shape)}"
        )
    if ndims <= 1:
        return 1, input.shape[0] if ndims == 1 else 1
    return input.shape[0], input.shape[1]


def _check_long_target(target: Tensor) -> None:
    if target.dtype is not dt.int64:
        raise RuntimeError(f"expected scalar type Long but found {torch_type_name(target.dtype)}")


def _check_floating(input: Tensor, kernel: str) -> None:
    """The margin losses' CPU kernels compute float32 and float64 only; an empty input runs
    none, so its 16-bit floats pass. (PyTorch returns an empty integer input's empty loss in its
    dtype; kiln refuses it.)"""
    halves = (dt.float16, dt.bfloat16)
    empty = input.numel().__class__ is int and input.numel() == 0
    if not input.is_floating_point() or input.dtype in halves and not empty:
        raise NotImplementedError(
            f"\"{kernel}\" not implemented for '{torch_type_name(input.dtype)}'"
        )


def _finish(loss: Tensor, reduction: str, per_sample: bool) -> Tensor:
    """Per-sample losses (N,) reduced; ``none`` keeps (N,) only when the target had a batch dim."""
    if reduction == "none":
        return loss if per_sample else loss.reshape(())
    return _loss.reduce_loss(loss, reduction)


@autocast_policy(cpu="fp32", cuda="fp32")
def multi_margin_loss(
    input: Tensor,
    target: Tensor,
    p: int = 1,
    margin: float = 1.0,
    weight: Tensor | None = None,
    size_average=None,
    reduce=None,
    reduction: str = "mean",
) -> Tensor:
    """Multi-class hinge: sum over j != y of (w[y] * max(0, margin - x[y] + x[j])**p) / C."""
    reduction = _loss.check_reduction(_reduction(size_average, reduce, reduction))
    if p not in (1, 2):
        raise ValueError("only p == 1 and p == 2 supported")
    if weight is not None and weight.ndim != 1:
        raise ValueError("weight must be one-dimensional")
    nframe, dim = _margin_geometry(input)
    if target.ndim > 1 or target.numel() != nframe:
        raise RuntimeError(
            "multi_margin_loss: target tensor should be 1-D with size equal to the number of "
            f"input samples (batch size). Expected target size [{nframe}], but got "
            f"{list(target.shape)}. Input has shape {list(input.shape)}."
        )
    _check_long_target(target)
    _check_floating(input, "multi_margin_loss_cpu_kernel")
    if weight is not None:
        if weight.numel() != dim:
            raise RuntimeError(
                f"inconsistent weight size, expected {dim} but got {list(weight.shape)}"
            )
        if weight.dtype is not input.dtype:
            raise RuntimeError(
                f"expected scalar type {torch_type_name(input.dtype)} but found "
                f"{torch_type_name(weight.dtype)}"
            )
    x = input.reshape(nframe, dim)
    t = target.reshape(nframe)
    if not t.is_fake and nframe and ((t < 0) | (t >= dim)).any().item():
        raise RuntimeError("target out of range")
    classes = OPS["arange"](0, dim, 1, dtype=dt.int64, device=x.device)
    is_target = classes.unsqueeze(0) == t.unsqueeze(1)
    z = margin - OPS["gather"](x, 1, t.unsqueeze(1)) + x
    hinge = OPS["where"](z > 0, z, 0.0)
    if p == 2:
        hinge = hinge * hinge
    if weight is not None:
        hinge = hinge * OPS["index"](weight, [t]).unsqueeze(1)
    loss = OPS["where"](is_target, 0.0, hinge).sum(1) / dim
    return _finish(loss, reduction, target.ndim > 0)


@autocast_policy(cpu="fp32", cuda="fp32")
def multilabel_margin_loss(
    input: Tensor, target: Tensor, size_average=None, reduce=None, reduction: str = "mean"
) -> Tensor:
    """Multi-label hinge: for each sample, sum over its labels y (the target row up to the first
    -1) and the non-label classes j of max(0, 1 - (x[y] - x[j])), divided by C."""
    reduction = _loss.check_reduction(_reduction(size_average, reduce, reduction))
    nframe, dim = _margin_geometry(input)
    if input.ndim <= 1:
        ok = target.ndim <= 1 and target.numel() == dim
    else:
        ok = target.ndim == 2 and tuple(target.shape) == (nframe, dim)
    if not ok:
        raise RuntimeError(
            f"inconsistent target size: {list(target.shape)} for input of size: {list(input.shape)}"
        )
    _check_long_target(target)
    _check_floating(input, "multilabel_margin_loss_forward_out_frame")
    x = input.reshape(nframe, dim)
    t = target.reshape(nframe, dim)
    if not t.is_fake and t.numel() and ((t < -1) | (t >= dim)).any().item():
        raise RuntimeError("argument #2 'target' is out of range")
    # the labels of a row are the entries before its first -1
    labelled = (t == -1).to(dt.int64).cumsum(1) == 0
    safe = OPS["where"](labelled, t, 0)
    classes = OPS["arange"](0, dim, 1, dtype=dt.int64, device=x.device)
    is_target = ((safe.unsqueeze(-1) == classes) & labelled.unsqueeze(-1)).any(1)
    z = 1 - (OPS["gather"](x, 1, safe).unsqueeze(-1) - x.unsqueeze(1))
    counted = labelled.unsqueeze(-1) & is_target.logical_not().unsqueeze(1) & (z > 0)
    loss = OPS["where"](counted, z, 0.0).sum((1, 2)) / dim
    return _finish(loss, reduction, target.ndim > 1)


# ------------------------------------------------------------------------------ kiln.<name> forms
# ``torch.<loss>`` takes ATen's integer reduction (0 none, 1 mean, 2 sum) and fixed positions

_ATEN_REDUCTIONS = ("none", "mean", "sum")


def _aten_reduction(reduction) -> str:
    return _ATEN_REDUCTIONS[reduction] if isinstance(reduction, int) else reduction


@torch_function("margin_ranking_loss")
def _torch_margin_ranking_loss(input1, input2, target, margin=0.0, reduction=1):
    return margin_ranking_loss(input1, input2, target, margin, reduction=_aten_reduction(reduction))


@torch_function("hinge_embedding_loss")
def _torch_hinge_embedding_loss(input, target, margin=1.0, reduction=1):
    return hinge_embedding_loss(input, target, margin, reduction=_aten_reduction(reduction))


@torch_function("cosine_embedding_loss")
def _torch_cosine_embedding_loss(input1, input2, target, margin=0.0, reduction=1):
    return cosine_embedding_loss(
        input1, input2, target, margin, reduction=_aten_reduction(reduction)
    )


@torch_function("triplet_margin_loss")
def _torch_triplet_margin_loss(
    anchor, positive, negative, margin=1.0, p=2, eps=1e-6, swap=False, reduction=1
):
    return triplet_margin_loss(
        anchor, positive, negative, margin, p, eps, swap, reduction=_aten_reduction(reduction)
    )


@torch_function("poisson_nll_loss")
def _torch_poisson_nll_loss(input, target, log_input, full, eps, reduction):
    return poisson_nll_loss(
        input, target, log_input, full, eps=eps, reduction=_aten_reduction(reduction)
    )


@torch_function("kl_div")
def _torch_kl_div(input, target, reduction=1, *, log_target=False):
    pointwise = kl_pointwise(input, target, log_target)
    return _loss.reduce_loss(pointwise, _loss.check_reduction(_aten_reduction(reduction)))
