"""Loss modules over ``nn.functional`` losses, with PyTorch's ``reduction`` handling -- the
pointwise and classification losses, margin, embedding and ranking losses, Poisson/Gaussian NLL,
CTC, the deprecated ``NLLLoss2d`` and ``LinearCrossEntropyLoss``.

Each module stores its options as PyTorch does (same attribute names, same constructor checks)
and calls the ``nn.functional`` loss, so modules and functions cannot disagree. The deprecated
``size_average``/``reduce`` arguments still map to a ``reduction`` string (with PyTorch's
warning), so old code keeps working.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable

from ...runtime.tensor import Tensor
from .. import functional as F
from .._functional.linear_cross_entropy import LinearCrossEntropyOptions
from .distance import PairwiseDistance
from .linear import Linear
from .module import Module

__all__ = [
    "L1Loss", "MSELoss", "SmoothL1Loss", "HuberLoss", "NLLLoss", "CrossEntropyLoss", "BCELoss",
    "BCEWithLogitsLoss", "KLDivLoss", "MarginRankingLoss", "HingeEmbeddingLoss",
    "SoftMarginLoss", "CosineEmbeddingLoss", "TripletMarginLoss",
    "TripletMarginWithDistanceLoss", "MultiLabelSoftMarginLoss", "MultiLabelMarginLoss",
    "MultiMarginLoss", "PoissonNLLLoss", "GaussianNLLLoss", "CTCLoss", "NLLLoss2d",
    "LinearCrossEntropyLoss",
]  # fmt: skip


def _legacy_reduction(size_average, reduce) -> str:
    size_average = True if size_average is None else size_average
    reduce = True if reduce is None else reduce
    reduction = "mean" if size_average and reduce else "sum" if reduce else "none"
    warnings.warn(
        "size_average and reduce args will be deprecated, please use "
        f"reduction='{reduction}' instead.",
        stacklevel=3,
    )
    return reduction


class _Loss(Module):
    def __init__(self, size_average=None, reduce=None, reduction: str = "mean") -> None:
        super().__init__()
        if size_average is not None or reduce is not None:
            reduction = _legacy_reduction(size_average, reduce)
        self.reduction = reduction


class _WeightedLoss(_Loss):
    def __init__(
        self, weight: Tensor | None = None, size_average=None, reduce=None, reduction="mean"
    ) -> None:
        super().__init__(size_average, reduce, reduction)
        self.register_buffer("weight", weight)


class _ReducedLoss(_Loss):
    """A loss whose only option is the reduction: ``_fn(input, target, reduction=...)``."""

    _fn = None

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return type(self)._fn(input, target, reduction=self.reduction)


class _ReducedWeightedLoss(_WeightedLoss):
    """A loss with per-class ``weight`` and the reduction: ``_fn(input, target, weight=...)``."""

    _fn = None

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return type(self)._fn(input, target, weight=self.weight, reduction=self.reduction)


class L1Loss(_ReducedLoss):
    """Mean absolute error."""

    _fn = staticmethod(F.l1_loss)


class MSELoss(_ReducedLoss):
    """Mean squared error."""

    _fn = staticmethod(F.mse_loss)


class SmoothL1Loss(_Loss):
    """Quadratic below ``beta``, linear above (scaled by 1/beta)."""

    def __init__(self, size_average=None, reduce=None, reduction="mean", beta: float = 1.0):
        super().__init__(size_average, reduce, reduction)
        self.beta = beta

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return F.smooth_l1_loss(input, target, reduction=self.reduction, beta=self.beta)


class HuberLoss(_Loss):
    """Quadratic below ``delta``, linear above (not rescaled)."""

    def __init__(self, reduction: str = "mean", delta: float = 1.0) -> None:
        super().__init__(reduction=reduction)
        self.delta = delta

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return F.huber_loss(input, target, reduction=self.reduction, delta=self.delta)


class NLLLoss(_WeightedLoss):
    """Negative log-likelihood of class indices given log-probabilities."""

    def __init__(
        self,
        weight: Tensor | None = None,
        size_average=None,
        ignore_index: int = -100,
        reduce=None,
        reduction: str = "mean",
    ) -> None:
        super().__init__(weight, size_average, reduce, reduction)
        self.ignore_index = ignore_index

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return F.nll_loss(
            input, target, weight=self.weight, ignore_index=self.ignore_index,
            reduction=self.reduction,
        )  # fmt: skip


class CrossEntropyLoss(_WeightedLoss):
    """``log_softmax`` + ``nll_loss``; also probability targets and label smoothing."""

    def __init__(
        self,
        weight: Tensor | None = None,
        size_average=None,
        ignore_index: int = -100,
        reduce=None,
        reduction: str = "mean",
        label_smoothing: float = 0.0,
    ) -> None:
        super().__init__(weight, size_average, reduce, reduction)
        self.ignore_index = ignore_index
        self.label_smoothing = label_smoothing

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return F.cross_entropy(
            input, target, weight=self.weight, ignore_index=self.ignore_index,
            reduction=self.reduction, label_smoothing=self.label_smoothing,
        )  # fmt: skip


class BCELoss(_ReducedWeightedLoss):
    """Binary cross-entropy of probabilities."""

    _fn = staticmethod(F.binary_cross_entropy)


class BCEWithLogitsLoss(_Loss):
    """Binary cross-entropy of logits (sigmoid fused, numerically stable), with ``pos_weight``."""

    def __init__(
        self,
        weight: Tensor | None = None,
        size_average=None,
        reduce=None,
        reduction: str = "mean",
        pos_weight: Tensor | None = None,
    ) -> None:
        super().__init__(size_average, reduce, reduction)
        self.register_buffer("weight", weight)
        self.register_buffer("pos_weight", pos_weight)

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return F.binary_cross_entropy_with_logits(
            input, target, self.weight, pos_weight=self.pos_weight, reduction=self.reduction
        )


class KLDivLoss(_Loss):
    """KL divergence with ``input`` as log-probabilities (``target`` too if ``log_target``)."""

    def __init__(
        self, size_average=None, reduce=None, reduction: str = "mean", log_target: bool = False
    ) -> None:
        super().__init__(size_average, reduce, reduction)
        self.log_target = log_target

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return F.kl_div(input, target, reduction=self.reduction, log_target=self.log_target)


class _MarginLoss(_Loss):
    """A loss with a ``margin`` option before the legacy reduction flags."""

    def __init__(self, margin: float, size_average=None, reduce=None, reduction="mean") -> None:
        super().__init__(size_average, reduce, reduction)
        self.margin = margin


class MarginRankingLoss(_MarginLoss):
    """max(0, -y * (x1 - x2) + margin): ``x1`` should rank above ``x2`` where y = 1."""

    def __init__(self, margin: float = 0.0, size_average=None, reduce=None, reduction="mean"):
        super().__init__(margin, size_average, reduce, reduction)

    def forward(self, input1: Tensor, input2: Tensor, target: Tensor) -> Tensor:
        return F.margin_ranking_loss(
            input1, input2, target, margin=self.margin, reduction=self.reduction
        )


class HingeEmbeddingLoss(_MarginLoss):
    """x where y = 1, max(0, margin - x) where y = -1 (x is usually a distance)."""

    def __init__(self, margin: float = 1.0, size_average=None, reduce=None, reduction="mean"):
        super().__init__(margin, size_average, reduce, reduction)

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return F.hinge_embedding_loss(input, target, margin=self.margin, reduction=self.reduction)


class CosineEmbeddingLoss(_MarginLoss):
    """1 - cos(x1, x2) where y = 1, max(0, cos(x1, x2) - margin) where y = -1."""

    def __init__(self, margin: float = 0.0, size_average=None, reduce=None, reduction="mean"):
        super().__init__(margin, size_average, reduce, reduction)

    def forward(self, input1: Tensor, input2: Tensor, target: Tensor) -> Tensor:
        return F.cosine_embedding_loss(
            input1, input2, target, margin=self.margin, reduction=self.reduction
        )


class SoftMarginLoss(_ReducedLoss):
    """log(1 + exp(-y * x)): a two-class logistic loss with targets in {1, -1}."""

    _fn = staticmethod(F.soft_margin_loss)


class TripletMarginLoss(_Loss):
    """max(0, d(a, p) - d(a, n) + margin) with the p-norm pairwise distance."""

    def __init__(
        self,
        margin: float = 1.0,
        p: float = 2.0,
        eps: float = 1e-6,
        swap: bool = False,
        size_average=None,
        reduce=None,
        reduction: str = "mean",
    ) -> None:
        super().__init__(size_average, reduce, reduction)
        if margin <= 0:
            raise ValueError(
                f"TripletMarginLoss: expected margin to be greater than 0, got {margin} instead"
            )
        self.margin = margin
        self.p = p
        self.eps = eps
        self.swap = swap

    def forward(self, anchor: Tensor, positive: Tensor, negative: Tensor) -> Tensor:
        return F.triplet_margin_loss(
            anchor, positive, negative, margin=self.margin, p=self.p, eps=self.eps,
            swap=self.swap, reduction=self.reduction,
        )  # fmt: skip


class TripletMarginWithDistanceLoss(_Loss):
    """The triplet loss with any distance (default: a ``PairwiseDistance`` submodule)."""

    def __init__(
        self,
        *,
        distance_function: Callable[[Tensor, Tensor], Tensor] | None = None,
        margin: float = 1.0,
        swap: bool = False,
        reduction: str = "mean",
    ) -> None:
        super().__init__(reduction=reduction)
        if margin <= 0:
            raise ValueError(
                "TripletMarginWithDistanceLoss: expected margin to be greater than 0, got "
                f"{margin} instead"
            )
        self.distance_function = (
            distance_function if distance_function is not None else PairwiseDistance()
        )
        self.margin = margin
        self.swap = swap

    def forward(self, anchor: Tensor, positive: Tensor, negative: Tensor) -> Tensor:
        return F.triplet_margin_with_distance_loss(
            anchor, positive, negative, distance_function=self.distance_function,
            margin=self.margin, swap=self.swap, reduction=self.reduction,
        )  # fmt: skip


class MultiLabelSoftMarginLoss(_ReducedWeightedLoss):
    """Per-class logistic loss averaged over classes (targets are 0/1 per class)."""

    _fn = staticmethod(F.multilabel_soft_margin_loss)


class MultiLabelMarginLoss(_ReducedLoss):
    """Multi-label hinge; each target row lists class indices, ended by the first -1."""

    _fn = staticmethod(F.multilabel_margin_loss)


class MultiMarginLoss(_WeightedLoss):
    """Multi-class hinge loss (``p`` 1 or 2), with optional per-class weights."""

    def __init__(
        self,
        p: int = 1,
        margin: float = 1.0,
        weight: Tensor | None = None,
        size_average=None,
        reduce=None,
        reduction: str = "mean",
    ) -> None:
        super().__init__(weight, size_average, reduce, reduction)
        if p not in (1, 2):
            raise ValueError("only p == 1 and p == 2 supported")
        if weight is not None and weight.dim() != 1:
            raise ValueError(
                "MultiMarginLoss: expected weight to be None or 1D tensor, got "
                f"{weight.dim()}D instead"
            )
        self.p = p
        self.margin = margin

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return F.multi_margin_loss(
            input, target, p=self.p, margin=self.margin, weight=self.weight,
            reduction=self.reduction,
        )  # fmt: skip


class PoissonNLLLoss(_Loss):
    """Negative log-likelihood of a Poisson target given its (log-)rate."""

    def __init__(
        self,
        log_input: bool = True,
        full: bool = False,
        size_average=None,
        eps: float = 1e-8,
        reduce=None,
        reduction: str = "mean",
    ) -> None:
        super().__init__(size_average, reduce, reduction)
        self.log_input = log_input
        self.full = full
        self.eps = eps

    def forward(self, log_input: Tensor, target: Tensor) -> Tensor:
        return F.poisson_nll_loss(
            log_input, target, log_input=self.log_input, full=self.full, eps=self.eps,
            reduction=self.reduction,
        )  # fmt: skip


class GaussianNLLLoss(_Loss):
    """Negative log-likelihood of a Gaussian target given its mean and variance."""

    def __init__(self, *, full: bool = False, eps: float = 1e-6, reduction: str = "mean") -> None:
        super().__init__(None, None, reduction)
        self.full = full
        self.eps = eps

    def forward(self, input: Tensor, target: Tensor, var: Tensor | float) -> Tensor:
        return F.gaussian_nll_loss(
            input, target, var, full=self.full, eps=self.eps, reduction=self.reduction
        )


class CTCLoss(_Loss):
    """Connectionist Temporal Classification loss over (T, N, C) log-probabilities."""

    def __init__(self, blank: int = 0, reduction: str = "mean", zero_infinity: bool = False):
        super().__init__(reduction=reduction)
        self.blank = blank
        self.zero_infinity = zero_infinity

    def forward(self, log_probs: Tensor, targets: Tensor, input_lengths, target_lengths) -> Tensor:
        return F.ctc_loss(
            log_probs, targets, input_lengths, target_lengths, self.blank, self.reduction,
            self.zero_infinity,
        )  # fmt: skip


class NLLLoss2d(NLLLoss):
    """The old name of ``NLLLoss`` for (N, C, H, W) inputs; ``NLLLoss`` handles any rank."""

    def __init__(
        self,
        weight: Tensor | None = None,
        size_average=None,
        ignore_index: int = -100,
        reduce=None,
        reduction: str = "mean",
    ) -> None:
        warnings.warn(
            "`NLLLoss2d` has been deprecated. Please use `NLLLoss` instead as a drop-in "
            "replacement and see https://pytorch.org/docs/main/nn.html#torch.nn.NLLLoss for more "
            "details.",
            FutureWarning,
            stacklevel=2,
        )
        super().__init__(weight, size_average, ignore_index, reduce, reduction)


class LinearCrossEntropyLoss(_WeightedLoss):
    """A ``Linear`` classifier head and ``cross_entropy`` in one module (``F.linear_cross_entropy``).

    The head's weight is stored flat, (C * prod(out_features), in_features), as in PyTorch, and
    reshaped to (C, *out_features, in_features) in ``forward`` for a K-dimensional loss.
    """

    def __init__(
        self,
        in_features: int,
        num_classes: int,
        *,
        out_features: tuple[int, ...] = (),
        bias: bool = False,
        device=None,
        dtype=None,
        reduction: str = "mean",
        weight: Tensor | None = None,
        ignore_index: int | None = None,
        label_smoothing: float = 0.0,
        options: LinearCrossEntropyOptions | None = None,
    ) -> None:
        if weight is not None and tuple(weight.shape) != (num_classes,):
            raise RuntimeError(
                f"expected weight shape to be {(num_classes,)}, got {tuple(weight.shape)}"
            )
        if label_smoothing < 0 or label_smoothing > 1.0:
            raise RuntimeError(
                f"expected label_smoothing to be in range [0, 1], got {label_smoothing}"
            )
        super().__init__(weight, None, None, reduction)
        self.num_classes = num_classes
        self.out_features = out_features
        self.ignore_index = ignore_index
        self.label_smoothing = label_smoothing
        rows = math.prod(out_features, start=num_classes)
        self.linear = Linear(in_features, rows, bias=bias, device=device, dtype=dtype)
        self.options = options

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        shape = (self.num_classes, *self.out_features)
        bias = self.linear.bias.reshape(shape) if self.linear.bias is not None else None
        return F.linear_cross_entropy(
            input, self.linear.weight.reshape((*shape, self.linear.in_features)), target,
            linear_bias=bias, weight=self.weight, reduction=self.reduction,
            ignore_index=self.ignore_index, label_smoothing=self.label_smoothing,
            options=self.options,
        )  # fmt: skip

    def extra_repr(self) -> str:
        return (
            f"in_features={self.linear.in_features}, num_classes={self.num_classes}, "
            f"out_features={self.out_features}, bias={self.linear.bias is not None}, "
            f"reduction={self.reduction}, ignore_index={self.ignore_index}, "
            f"label_smoothing={self.label_smoothing}, options={self.options}"
        )
