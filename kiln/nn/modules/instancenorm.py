"""Per-sample normalizations: ``InstanceNorm1d``/``2d``/``3d``, ``LocalResponseNorm`` and the
legacy ``CrossMapLRN2d``.

Instance norm shares batch norm's parameters, buffers and repr (``_NormBase``) but normalizes
each (sample, channel) plane on its own; it uses batch statistics unless it tracks running
statistics and is in eval mode, and never counts batches, as in PyTorch.
"""

from __future__ import annotations

import warnings

import numpy as np

from ...ops import OPS
from ...ops.api import tensor as kiln_tensor
from ...runtime.tensor import Tensor
from .. import functional as F
from .batchnorm import _NormBase
from .module import Module

__all__ = [
    "CrossMapLRN2d",
    "InstanceNorm1d",
    "InstanceNorm2d",
    "InstanceNorm3d",
    "LocalResponseNorm",
]


class _InstanceNorm(_NormBase):
    """``_spatial_dims`` spatial dims after (N, C); unbatched (C, *spatial) inputs are allowed."""

    _spatial_dims = 0

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        momentum: float | None = 0.1,
        affine: bool = False,
        track_running_stats: bool = False,
        device=None,
        dtype=None,
        *,
        bias: bool = True,
    ) -> None:
        super().__init__(
            num_features, eps, momentum, affine, track_running_stats, device, dtype, bias=bias
        )

    def _check_input_dim(self, input: Tensor) -> None:
        unbatched = self._spatial_dims + 1
        if input.dim() not in (unbatched, unbatched + 1):
            raise ValueError(
                f"expected {unbatched}D or {unbatched + 1}D input (got {input.dim()}D input)"
            )

    def _apply_instance_norm(self, input: Tensor) -> Tensor:
        return F.instance_norm(
            input,
            self.running_mean,
            self.running_var,
            self.weight,
            self.bias,
            self.training or not self.track_running_stats,
            self.momentum if self.momentum is not None else 0.0,
            self.eps,
        )

    def forward(self, input: Tensor) -> Tensor:
        self._check_input_dim(input)
        unbatched = input.dim() == self._spatial_dims + 1
        feature_dim = 0 if unbatched else 1
        if input.size(feature_dim) != self.num_features:
            if self.affine:
                raise ValueError(
                    f"expected input's size at dim={feature_dim} to match num_features"
                    f" ({self.num_features}), but got: {input.size(feature_dim)}."
                )
            warnings.warn(
                f"input's size at dim={feature_dim} does not match num_features. You can silence "
                "this warning by not passing in num_features, which is not used because "
                "affine=False",
                stacklevel=2,
            )
        if unbatched:
            return self._apply_instance_norm(input.unsqueeze(0)).squeeze(0)
        return self._apply_instance_norm(input)

    def _load_from_state_dict(
        self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
    ) -> None:
        # running stats saved by a module that tracked them cannot load into one that does not
        if not self.track_running_stats:
            keys = [prefix + n for n in ("running_mean", "running_var") if prefix + n in state_dict]
            if keys:
                name = type(self).__name__
                error_msgs.append(
                    f"Unexpected running stats buffer(s) {' and '.join(repr(k) for k in keys)} "
                    f"for {name} with track_running_stats=False. If state_dict is a checkpoint "
                    f"saved before 0.4.0, this may be expected because {name} does not track "
                    "running stats by default since 0.4.0. Please remove these keys from "
                    "state_dict. If the running stats are actually needed, instead set "
                    f"track_running_stats=True in {name} to enable them. See the documentation "
                    f"of {name} for details."
                )
                state_dict = {k: v for k, v in state_dict.items() if k not in keys}
        super()._load_from_state_dict(
            state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
        )


class InstanceNorm1d(_InstanceNorm):
    """Over (N, C, L) or unbatched (C, L) inputs."""

    _spatial_dims = 1


class InstanceNorm2d(_InstanceNorm):
    """Over (N, C, H, W) or unbatched (C, H, W) inputs."""

    _spatial_dims = 2


class InstanceNorm3d(_InstanceNorm):
    """Over (N, C, D, H, W) or unbatched (C, D, H, W) inputs."""

    _spatial_dims = 3


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
