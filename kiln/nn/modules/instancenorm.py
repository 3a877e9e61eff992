"""Per-sample normalizations: ``InstanceNorm1d``/``2d``/``3d`` and their lazy forms.

Instance norm shares batch norm's parameters, buffers and repr (``_NormBase``) but normalizes
each (sample, channel) plane on its own; it uses batch statistics unless it tracks running
statistics and is in eval mode, and never counts batches, as in PyTorch.
"""

from __future__ import annotations

import warnings

from ...runtime.tensor import Tensor
from .. import functional as F
from .batchnorm import _LazyNormBase, _NormBase
from .spatial_variants import mixed_variants, spatial_variants

__all__ = [
    "InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d", "LazyInstanceNorm1d",
    "LazyInstanceNorm2d", "LazyInstanceNorm3d",
]  # fmt: skip


class _InstanceNorm(_NormBase):
    """``_dims`` spatial dims after (N, C); unbatched (C, *spatial) inputs are allowed."""

    _variant_doc = "Instance norm over {layout} inputs, or unbatched ones (without N)."

    _dims = 0

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
        unbatched = self._dims + 1
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
        unbatched = input.dim() == self._dims + 1
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


InstanceNorm1d, InstanceNorm2d, InstanceNorm3d = spatial_variants(_InstanceNorm, "InstanceNorm{n}d")
LazyInstanceNorm1d, LazyInstanceNorm2d, LazyInstanceNorm3d = mixed_variants(
    _LazyNormBase,
    (InstanceNorm1d, InstanceNorm2d, InstanceNorm3d),
    "LazyInstanceNorm{n}d",
    becomes=True,
)
