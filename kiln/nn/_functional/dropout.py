"""``F`` dropout family: plain, feature (channel-wise) and alpha dropout.

Masks come from ``kiln.rand``, so ``manual_seed`` reproduces them; plain and feature dropout apply
theirs with the ``_masked_scale`` op.
"""

from __future__ import annotations

import math
import warnings

from ...ops import OPS
from ...ops.core.registry import torch_function
from ...runtime import dtypes as dt
from ...runtime.tensor import Tensor


def _check_p(p: float) -> None:
    if p < 0.0 or p > 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")


def _apply_mask(input: Tensor, p: float, mask_shape, inplace: bool) -> Tensor:
    """input * keep / (1 - p) with keep ~ Bernoulli(1 - p) drawn from kiln's generator."""
    if p == 1.0:  # times a zero of input's dtype: a bool input stays bool, NaNs stay NaN
        out = input * OPS["full"]((), 0, dtype=input.dtype, device=input.device)
    elif input.dtype.is_complex:  # PyTorch draws the mask in the input's dtype
        raise NotImplementedError(
            f"\"bernoulli_scalar_cpu_\" not implemented for '{dt.torch_type_name(input.dtype)}'"
        )
    else:
        keep = OPS["rand"](mask_shape, dtype=dt.float32, device=input.device) < 1.0 - p
        out = OPS["_masked_scale"](input, keep, 1.0 / (1.0 - p))
    return input.copy_(out) if inplace else out


def dropout(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
    _check_p(p)
    if not training or p == 0.0 or input.numel() == 0:
        return input
    return _apply_mask(input, p, tuple(input.shape), inplace)


def _feature_dropout(input: Tensor, p: float, training: bool, inplace: bool) -> Tensor:
    """Channel-wise dropout of an (N, C, *) input: one keep/drop draw per (sample, channel)."""
    if not training or p == 0.0 or input.numel() == 0:
        return input
    if input.ndim < 2:
        raise RuntimeError("Feature dropout requires at least 2 dimensions in the input")
    mask_shape = tuple(input.shape[:2]) + (1,) * (input.ndim - 2)
    out = _apply_mask(input, p, mask_shape, False)
    return input.copy_(out) if inplace else out


def _unbatched_feature_dropout(input, p, training, inplace) -> Tensor:
    """Feature dropout of an input without its batch dim (a batch of one)."""
    if not training or p == 0.0 or input.numel() == 0:
        return input
    out = _feature_dropout(input.unsqueeze(0), p, training, False).squeeze(0)
    return input.copy_(out) if inplace else out


def dropout1d(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False):
    _check_p(p)
    if input.ndim not in (2, 3):
        raise RuntimeError(
            f"dropout1d: Expected 2D or 3D input, but received a {input.ndim}D input. Note that "
            "dropout1d exists to provide channel-wise dropout on inputs with 1 spatial "
            "dimension, a channel dimension, and an optional batch dimension (i.e. 2D or 3D "
            "inputs)."
        )
    if input.ndim == 3:
        return _feature_dropout(input, p, training, inplace)
    return _unbatched_feature_dropout(input, p, training, inplace)


def _warn_feature_rank(name: str, input: Tensor, dims: int) -> None:
    if input.ndim not in (dims + 1, dims + 2):
        warnings.warn(
            f"{name}: Received a {input.ndim}-D input to {name}, which is deprecated and will "
            "result in an error in a future release. To retain the behavior and silence this "
            f"warning, please use dropout instead. Note that {name} exists to provide "
            f"channel-wise dropout on inputs with {dims} spatial dimensions, a channel "
            f"dimension, and an optional batch dimension (i.e. {dims + 1}D or {dims + 2}D "
            "inputs).",
            stacklevel=3,
        )


def dropout2d(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False):
    """Channel-wise dropout; as in PyTorch a 3-D input is read as (N, C, L), not unbatched."""
    _check_p(p)
    _warn_feature_rank("dropout2d", input, 2)
    if input.ndim == 3:
        warnings.warn(
            "dropout2d: Received a 3D input to dropout2d and assuming that channel-wise 1D "
            "dropout behavior is desired - input is interpreted as shape (N, C, L), where C is "
            "the channel dim. This behavior will change in a future release to interpret the "
            "input as one without a batch dimension, i.e. shape (C, H, W). To maintain the 1D "
            "channel-wise dropout behavior, please switch to using dropout1d instead.",
            stacklevel=2,
        )
    return _feature_dropout(input, p, training, inplace)


def dropout3d(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False):
    _check_p(p)
    _warn_feature_rank("dropout3d", input, 3)
    if input.ndim == 5:
        return _feature_dropout(input, p, training, inplace)
    return _unbatched_feature_dropout(input, p, training, inplace)


_SELU_ALPHA_PRIME = 1.7580993408473766


def _alpha_dropout(input, p, training, inplace, mask_shape):
    _check_p(p)
    if not training or p == 0.0 or input.numel() == 0:
        return input
    if p == 1.0:  # times a zero of input's dtype: a bool input stays bool, NaNs stay NaN
        out = input * OPS["full"]((), 0, dtype=input.dtype, device=input.device)
    else:
        keep = (OPS["rand"](mask_shape, dtype=dt.float32, device=input.device) < 1.0 - p).to(
            input.dtype
        )
        a = 1.0 / math.sqrt((_SELU_ALPHA_PRIME**2 * p + 1) * (1 - p))
        shift = (keep - 1) * (_SELU_ALPHA_PRIME * a) + _SELU_ALPHA_PRIME * a * p
        out = input * (keep * a) + shift
    return input.copy_(out) if inplace else out


def alpha_dropout(input: Tensor, p: float = 0.5, training: bool = False, inplace: bool = False):
    """Dropout that keeps SELU's self-normalizing mean and variance."""
    return _alpha_dropout(input, p, training, inplace, tuple(input.shape))


def feature_alpha_dropout(
    input: Tensor, p: float = 0.5, training: bool = False, inplace: bool = False
):
    shape = tuple(input.shape[:2]) + (1,) * (input.ndim - 2)
    return _alpha_dropout(input, p, training, inplace, shape)


# ------------------------------------------------------------------------------ kiln.<name> forms
# ``torch.<name>`` versions of these functions take other argument orders (aten schemas)


def _aten_form(name: str, fn, inplace: bool) -> None:
    """Register ``kiln.<name>(input, p, train)``: ``fn`` in the aten argument order."""

    def form(input: Tensor, p: float, train: bool) -> Tensor:
        return fn(input, p, train, inplace)

    form.__name__ = form.__qualname__ = name
    torch_function(name)(form)


for _name, _fn in (
    ("dropout", dropout),
    ("feature_dropout", _feature_dropout),
    ("alpha_dropout", alpha_dropout),
    ("feature_alpha_dropout", feature_alpha_dropout),
):
    _aten_form(_name, _fn, inplace=False)
    _aten_form(_name + "_", _fn, inplace=True)
