"""``F.linear_cross_entropy``: a linear classifier head and ``cross_entropy`` in one call, with
PyTorch's ``LinearCrossEntropyOptions`` (chunking knobs validated as PyTorch does; kiln always
computes the unchunked reference form, which has the same value)."""

from __future__ import annotations

import dataclasses
import math
import warnings

from ...ops import OPS
from ...runtime import dtypes as dt
from ...runtime.tensor import Tensor
from .losses import cross_entropy

__all__ = ["linear_cross_entropy", "LinearCrossEntropyOptions"]


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
    return cross_entropy(
        logits, target, weight=weight, reduction=reduction, ignore_index=ignore_index,
        label_smoothing=label_smoothing,
    )  # fmt: skip
