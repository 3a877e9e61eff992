"""``F`` margin classification losses, ``linear_cross_entropy`` and the ``kiln.<loss>``
(ATen-signature) forms.

``multi_margin_loss`` and ``multilabel_margin_loss`` are composites of gather/where/sum, so they
get autograd and the compiler for free. PyTorch's checks are reproduced (shape, dtype, target
range; the range check reads data, so it is skipped on fake tensors). A hinge counts only where
it is strictly positive, as PyTorch's kernels do, so the gradient is 0 on the hinge's kink.
"""

from __future__ import annotations

import dataclasses
import math
import warnings

from ...amp.autocast_mode import autocast_policy
from ...ops import OPS
from ...ops.core.registry import torch_function
from ...ops.nn import losses as _loss
from ...ops.reductions.reduce import torch_type_name
from ...runtime import dtypes as dt
from ...runtime.tensor import Tensor
from . import losses as _losses

__all__ = [
    "multi_margin_loss",
    "multilabel_margin_loss",
    "linear_cross_entropy",
    "LinearCrossEntropyOptions",
]


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
    """Integer and bool inputs have no kernel in PyTorch (half/bfloat16 are accepted here)."""
    if not input.is_floating_point():
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
    reduction = _loss.check_reduction(_losses._reduction(size_average, reduce, reduction))
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
    reduction = _loss.check_reduction(_losses._reduction(size_average, reduce, reduction))
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


# ------------------------------------------------------------------------------ linear_cross_entropy

_ACC_POLICIES = ("auto", "accurate", "balanced", "compact")


@dataclasses.dataclass(slots=True, frozen=True)
class LinearCrossEntropyOptions:
    """PyTorch's knobs for its chunked ``linear_cross_entropy`` (batch chunk size, accumulation
    policy and dtype). They trade peak memory for speed without changing the loss, so kiln
    validates them as PyTorch does and always computes the reference (unchunked) form."""

    allow_retain_graph: bool = False
    batch_chunk_size: int | None = None
    chunking_method: str | None = "auto"
    acc_policy: str = "auto"
    acc_dtype: dt.dtype | None = None

    def __post_init__(self) -> None:
        if self.acc_policy not in _ACC_POLICIES:
            raise ValueError(f"invalid acc_policy: {self.acc_policy!r}")
        if self.chunking_method is not None and self.chunking_method != "auto":
            name, sep, factor = self.chunking_method.partition(":")
            factor = factor if sep else "1"
            if name != "aspect_ratio" or not factor.isdigit() or int(factor) <= 0:
                raise ValueError(f"invalid chunking_method: {self.chunking_method!r}")
        size = self.batch_chunk_size
        if size is not None and not (isinstance(size, int) and size > 0):
            raise ValueError(f"batch_chunk_size must be positive int or None, got {size!r}")
        allowed = (dt.float16, dt.bfloat16, dt.float32, dt.float64)
        if self.acc_dtype is not None and self.acc_dtype not in allowed:
            raise ValueError(
                "acc_dtype must be one of {None, torch.float16, torch.bfloat16, torch.float32, "
                f"torch.float64}}, got {self.acc_dtype!r}. Pass acc_dtype=None to let the op "
                "pick automatically."
            )


def _check_chunking(options: LinearCrossEntropyOptions, rows: int, features: int, classes: int):
    """PyTorch rejects an explicit chunk size that its explicit chunking method contradicts."""
    method, size = options.chunking_method, options.batch_chunk_size
    if method in (None, "auto") or size is None:
        return
    factor = int(method.partition(":")[2] or 1)
    groups = -(-rows // -(-classes // features))  # ceil(rows / ceil(classes / features))
    chunk = min((1 << (groups - 1).bit_length()) // factor, rows)
    if chunk != size:
        raise ValueError(
            f"batch_chunk_size (={size}) and chunking_method ('{method}') give different chunk "
            f"sizes ({size} vs {chunk}); pass only one."
        )


def linear_cross_entropy(
    input: Tensor,
    linear_weight: Tensor,
    target: Tensor,
    *,
    linear_bias: Tensor | None = None,
    weight: Tensor | None = None,
    reduction: str = "mean",
    ignore_index: int | None = None,
    label_smoothing: float = 0.0,
    options: LinearCrossEntropyOptions | None = None,
) -> Tensor:
    """``cross_entropy(linear(input, linear_weight, linear_bias), target, ...)``.

    ``linear_weight`` is (C, in) or (C, d1..dK, in) for a K-dimensional loss (then ``input`` must
    be batched); the logits are (N, C, d1..dK). ``options`` (chunking) does not change the value;
    kiln warns where PyTorch would ignore them and otherwise computes the same reference form.
    """
    if input.dim() < 1 or input.dim() > 2:
        raise RuntimeError(f"expected input with dimensionality 1 or 2, got {input.dim()}")
    if linear_weight.dim() < 2:
        raise RuntimeError(
            f"expected linear_weight with dimensionality at least 2, got {linear_weight.dim()}"
        )
    batch = tuple(input.shape[:-1])
    in_features = input.shape[-1]
    if in_features != linear_weight.shape[-1]:
        raise RuntimeError(
            "expected equal input and linear_weight last dimensions (in_features), got "
            f"{in_features} and {linear_weight.shape[-1]}, respectively"
        )
    classes = linear_weight.shape[0]
    extra = tuple(linear_weight.shape[1:-1])
    if linear_bias is not None and tuple(linear_bias.shape) != (classes, *extra):
        raise RuntimeError(
            f"expected linear_bias shape {(classes, *extra)}, got {tuple(linear_bias.shape)}"
        )
    if extra and not batch:
        raise RuntimeError(
            f"K-dimensional loss defined by linear_weight shape {tuple(linear_weight.shape)} "
            f"requires batched input, (N, {in_features}), got unbatched input with shape "
            f"{tuple(input.shape)}"
        )
    logits_shape = (*batch, classes, *extra)
    if tuple(target.shape) == logits_shape and ignore_index is not None:
        raise RuntimeError("ignore_index cannot be specified when target contains probabilities")
    ignore_index = -100 if ignore_index is None else ignore_index
    if options is not None and (
        extra
        or reduction not in ("mean", "sum", "none")
        or label_smoothing != 0.0
        or target.dtype is not dt.int64
    ):
        bias_shape = tuple(linear_bias.shape) if linear_bias is not None else None
        warnings.warn(
            "linear_cross_entropy: ``options`` ignored; chunked path needs reduction in "
            "{'mean','sum','none'}, label_smoothing == 0, target.dtype == int64, "
            f"out_features == (). Got reduction={reduction!r}, label_smoothing={label_smoothing}, "
            f"target.dtype={target.dtype}, out_features={extra}, tracing=False, "
            f"linear_bias.shape={bias_shape}.",
            stacklevel=2,
        )
    elif options is not None:
        _check_chunking(options, batch[0] if batch else 1, in_features, classes)
    rows = math.prod(extra, start=classes)
    flat_weight = linear_weight.reshape(rows, in_features) if extra else linear_weight
    flat_bias = linear_bias.reshape(rows) if extra and linear_bias is not None else linear_bias
    logits = OPS["linear"](input, flat_weight, flat_bias).reshape(logits_shape)
    return _losses.cross_entropy(
        logits, target, weight=weight, reduction=reduction, ignore_index=ignore_index,
        label_smoothing=label_smoothing,
    )  # fmt: skip


# ------------------------------------------------------------------------------ kiln.<name> forms
# ``torch.<loss>`` takes ATen's integer reduction (0 none, 1 mean, 2 sum) and fixed positions

_ATEN_REDUCTIONS = ("none", "mean", "sum")


def _aten_reduction(reduction) -> str:
    return _ATEN_REDUCTIONS[reduction] if isinstance(reduction, int) else reduction


@torch_function("margin_ranking_loss")
def _torch_margin_ranking_loss(input1, input2, target, margin=0.0, reduction=1):
    return _losses.margin_ranking_loss(
        input1, input2, target, margin, reduction=_aten_reduction(reduction)
    )


@torch_function("hinge_embedding_loss")
def _torch_hinge_embedding_loss(input, target, margin=1.0, reduction=1):
    return _losses.hinge_embedding_loss(input, target, margin, reduction=_aten_reduction(reduction))


@torch_function("cosine_embedding_loss")
def _torch_cosine_embedding_loss(input1, input2, target, margin=0.0, reduction=1):
    return _losses.cosine_embedding_loss(
        input1, input2, target, margin, reduction=_aten_reduction(reduction)
    )


@torch_function("triplet_margin_loss")
def _torch_triplet_margin_loss(
    anchor, positive, negative, margin=1.0, p=2, eps=1e-6, swap=False, reduction=1
):
    return _losses.triplet_margin_loss(
        anchor, positive, negative, margin, p, eps, swap, reduction=_aten_reduction(reduction)
    )


@torch_function("poisson_nll_loss")
def _torch_poisson_nll_loss(input, target, log_input, full, eps, reduction):
    return _losses.poisson_nll_loss(
        input, target, log_input, full, eps=eps, reduction=_aten_reduction(reduction)
    )


@torch_function("kl_div")
def _torch_kl_div(input, target, reduction=1, *, log_target=False):
    pointwise = _losses.kl_pointwise(input, target, log_target)
    return _loss.reduce_loss(pointwise, _loss.check_reduction(_aten_reduction(reduction)))
