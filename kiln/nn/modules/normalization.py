"""``LayerNorm``, ``RMSNorm`` and ``GroupNorm`` (affine weight ones, bias zeros, as PyTorch), and
the local response normalizations ``LocalResponseNorm`` and ``CrossMapLRN2d``."""

from __future__ import annotations

import numbers

import numpy as np

from ...ops import OPS
from ...ops.creation import api
from ...ops.creation.api import tensor as kiln_tensor
from ...runtime.tensor import Tensor
from .. import functional as F
from .. import init
from ..parameter import Parameter
from .module import Module

__all__ = ["LayerNorm", "RMSNorm", "GroupNorm", "LocalResponseNorm", "CrossMapLRN2d"]


def affine_parameters(module: Module, shape, affine: bool, bias: bool, device, dtype) -> None:
    """Register a norm's ``weight`` and ``bias`` of ``shape`` (uninitialised; ``None`` where the
    norm is not affine or has no bias), in PyTorch's order, shared by every norm layer."""
    for name, wanted in (("weight", affine), ("bias", affine and bias)):
        value = Parameter(api.empty(shape, device=device, dtype=dtype)) if wanted else None
        module.register_parameter(name, value)


def reset_affine(module: Module) -> None:
    """Weight ones and bias zeros, where the norm has them: every norm starts as the identity."""
    if module.weight is not None:
        init.ones_(module.weight)
    if getattr(module, "bias", None) is not None:
        init.zeros_(module.bias)


def _as_shape(normalized_shape) -> tuple:
    if isinstance(normalized_shape, numbers.Integral):
        return (int(normalized_shape),)
    return tuple(normalized_shape)


class LayerNorm(Module):
    """Normalises over the trailing ``normalized_shape`` dims, then scales and shifts."""

    def __init__(
        self,
        normalized_shape,
        eps: float = 1e-5,
        elementwise_affine: bool = True,
        bias: bool = True,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        self.normalized_shape = _as_shape(normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        affine_parameters(self, self.normalized_shape, elementwise_affine, bias, device, dtype)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        reset_affine(self)

    def forward(self, input: Tensor) -> Tensor:
        return F.layer_norm(input, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return (
            f"{self.normalized_shape}, eps={self.eps}, "
            f"elementwise_affine={self.elementwise_affine}, bias={self.bias is not None}"
        )


class RMSNorm(Module):
    """``x / sqrt(mean(x**2) + eps) * weight`` over the trailing dims (eps None: dtype's eps)."""

    def __init__(
        self,
        normalized_shape,
        eps: float | None = None,
        elementwise_affine: bool = True,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        self.normalized_shape = _as_shape(normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        if elementwise_affine:
            self.weight = Parameter(api.empty(self.normalized_shape, device=device, dtype=dtype))
        else:
            self.register_parameter("weight", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        reset_affine(self)

    def forward(self, x: Tensor) -> Tensor:
        return F.rms_norm(x, self.normalized_shape, self.weight, self.eps)

    def extra_repr(self) -> str:
        return (
            f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"
        )


class GroupNorm(Module):
    """Normalises each of ``num_groups`` channel groups per sample; per-channel affine."""

    def __init__(
        self,
        num_groups: int,
        num_channels: int,
        eps: float = 1e-5,
        affine: bool = True,
        device=None,
        dtype=None,
        *,
        bias: bool = True,
    ) -> None:
        super().__init__()
        if num_channels % num_groups != 0:
            raise ValueError(
                f"num_channels ({num_channels}) must be divisible by num_groups ({num_groups})"
            )
        self.num_groups = num_groups
        self.num_channels = num_channels
        self.eps = eps
        self.affine = affine
        affine_parameters(self, num_channels, affine, bias, device, dtype)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        reset_affine(self)

    def forward(self, input: Tensor) -> Tensor:
        return F.group_norm(input, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return (
            f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}, "
            f"bias={self.bias is not None}"
        )


class _LRNBase(Module):
    def __init__(self, size: int, alpha: float = 1e-4, beta: float = 0.75, k: float = 1.0) -> None:
        super().__init__()
        self.size = size
        self.alpha = alpha
        self.beta = beta
        self.k = k

    def extra_repr(self) -> str:
        return f"{self.size}, alpha={self.alpha}, beta={self.beta}, k={self.k}"


class LocalResponseNorm(_LRNBase):
    """Divide each channel by (k + alpha/size * sum of squares of ``size`` neighbours) ** beta."""

    def forward(self, input: Tensor) -> Tensor:
        return F.local_response_norm(input, self.size, self.alpha, self.beta, self.k)


def _cross_map_window(channels: int, size: int) -> np.ndarray:
    """(C, C) 0/1 matrix: row c marks the channels whose squares make channel c's scale.

    PyTorch's legacy CrossMapLRN2d builds each scale from the previous one, adding the channel
    entering the window and dropping the one leaving it, but it never drops channel 0 (its
    removal starts one step late); the recurrence is replayed here so the values agree.
    """
    pre_pad = int((size - 1) / 2 + 1)
    window = np.zeros((channels, channels), np.float64)
    window[0, : min(pre_pad, channels)] = 1
    for c in range(1, channels):
        window[c] = window[c - 1]
        if c < channels - pre_pad + 1:
            window[c, c + pre_pad - 1] += 1
        if c > pre_pad:
            window[c, c - pre_pad] -= 1
    return window


class CrossMapLRN2d(_LRNBase):
    """Legacy (Lua torch) local response norm over the channels of a 4-D input."""

    def __init__(self, size: int, alpha: float = 1e-4, beta: float = 0.75, k: float = 1) -> None:
        # PyTorch's default k is the int 1 here (1.0 in LocalResponseNorm); the repr shows it
        super().__init__(size, alpha, beta, k)

    def forward(self, input: Tensor) -> Tensor:
        if input.dim() != 4:
            raise ValueError(f"CrossMapLRN2d: Expected input to be 4D, got {input.dim()}D instead.")
        n, c, h, w = input.shape
        window = kiln_tensor(_cross_map_window(c, self.size), dtype=input.dtype)
        squares = (input * input).reshape(n, c, h * w)
        summed = OPS["matmul"](window.to(input.device), squares).reshape(n, c, h, w)
        scale = summed * (self.alpha / self.size) + self.k
        return input * scale ** (-self.beta)
