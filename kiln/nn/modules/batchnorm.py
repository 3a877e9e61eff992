"""``BatchNorm1d``/``2d``/``3d`` (and their lazy forms): batch statistics in training, running
statistics in eval.

Running statistics live in buffers updated in place by ``F.batch_norm``; ``momentum=None``
means a cumulative moving average over ``num_batches_tracked`` batches, as in PyTorch.
``_NormBase`` (parameters, buffers, repr) is shared with the instance norms, which, as in
PyTorch, are not batch norms. ``SyncBatchNorm`` is batch norm here: kiln runs one process,
where PyTorch's also falls back to plain batch norm.
"""

from __future__ import annotations

from ...autograd.grad_mode import no_grad
from ...ops.creation import api
from ...runtime import dtypes as dt
from ...runtime.tensor import Tensor
from .. import functional as F
from .lazy import LazyModuleMixin, UninitializedBuffer
from .module import Module
from .normalization import affine_parameters, reset_affine
from .spatial_variants import mixed_variants, spatial_variants

__all__ = [
    "BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "SyncBatchNorm", "LazyBatchNorm1d",
    "LazyBatchNorm2d", "LazyBatchNorm3d",
]  # fmt: skip


class _NormBase(Module):
    """The affine parameters and running-statistics buffers of batch and instance norms."""

    _version: int = 2

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        momentum: float | None = 0.1,
        affine: bool = True,
        track_running_stats: bool = True,
        device=None,
        dtype=None,
        *,
        bias: bool = True,
    ) -> None:
        super().__init__()
        self.num_features = num_features
        self.eps = eps
        self.momentum = momentum
        self.affine = affine
        self.track_running_stats = track_running_stats
        affine_parameters(self, num_features, affine, bias, device, dtype)
        if track_running_stats:
            self.register_buffer(
                "running_mean", api.zeros(num_features, device=device, dtype=dtype)
            )
            self.register_buffer("running_var", api.ones(num_features, device=device, dtype=dtype))
            self.register_buffer(
                "num_batches_tracked", api.tensor(0, dtype=dt.int64, device=device)
            )
        else:
            self.register_buffer("running_mean", None)
            self.register_buffer("running_var", None)
            self.register_buffer("num_batches_tracked", None)
        self.reset_parameters()

    def reset_running_stats(self) -> None:
        if self.track_running_stats:
            self.running_mean.zero_()
            self.running_var.fill_(1)
            self.num_batches_tracked.zero_()

    def reset_parameters(self) -> None:
        self.reset_running_stats()
        reset_affine(self)

    def _load_from_state_dict(
        self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
    ) -> None:
        # version-1 checkpoints (before num_batches_tracked existed) still load: PyTorch's rule
        key = prefix + "num_batches_tracked"
        version = local_metadata.get("version", None)
        old = version is None or version < 2
        if old and self.track_running_stats and key not in state_dict:
            state_dict[key] = (
                self.num_batches_tracked
                if self.num_batches_tracked is not None
                else api.tensor(0, dtype=dt.int64)
            )
        super()._load_from_state_dict(
            state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
        )

    def extra_repr(self) -> str:
        return (
            f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
            f"affine={self.affine}, bias={self.bias is not None}, "
            f"track_running_stats={self.track_running_stats}"
        )


class _BatchNorm(_NormBase):
    """Batch statistics in training (updating the running ones), running statistics in eval."""

    _variant_doc = "Batch norm over {layout} inputs (1d: also (N, C))."
    _dims = 0

    def _check_input_dim(self, input: Tensor) -> None:
        # (N, C, *spatial); the 1-d form also takes (N, C)
        expected = (2, 3) if self._dims == 1 else (self._dims + 2,)
        if input.dim() not in expected:
            wanted = " or ".join(f"{d}D" for d in expected)
            raise ValueError(f"expected {wanted} input (got {input.dim()}D input)")

    def forward(self, input: Tensor) -> Tensor:
        self._check_input_dim(input)
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats and self.num_batches_tracked is not None:
            self.num_batches_tracked.add_(1)
            if self.momentum is None:
                factor = 1.0 / float(self.num_batches_tracked)
        use_batch_stats = self.training or (self.running_mean is None and self.running_var is None)
        keep_running = not self.training or self.track_running_stats
        return F.batch_norm(
            input,
            self.running_mean if keep_running else None,
            self.running_var if keep_running else None,
            self.weight,
            self.bias,
            use_batch_stats,
            factor,
            self.eps,
        )


BatchNorm1d, BatchNorm2d, BatchNorm3d = spatial_variants(_BatchNorm, "BatchNorm{n}d")


class SyncBatchNorm(_BatchNorm):
    """Batch norm over inputs of any rank >= 2; ``convert_sync_batchnorm`` swaps it in.

    PyTorch synchronises the statistics across processes only when a distributed process group
    is running; kiln has none, so this is the single-process batch norm PyTorch falls back to.
    """

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        momentum: float | None = 0.1,
        affine: bool = True,
        track_running_stats: bool = True,
        process_group=None,
        device=None,
        dtype=None,
        *,
        bias: bool = True,
    ) -> None:
        super().__init__(
            num_features, eps, momentum, affine, track_running_stats, device, dtype, bias=bias
        )
        self.process_group = process_group

    def _check_input_dim(self, input: Tensor) -> None:
        if input.dim() < 2:
            raise ValueError(f"expected at least 2D input (got {input.dim()}D input)")
        if input.size(1) == 0:
            raise ValueError("SyncBatchNorm number of input channels should be non-zero")

    @classmethod
    def convert_sync_batchnorm(cls, module: Module, process_group=None) -> Module:
        """``module`` with every batch norm in it replaced by a ``SyncBatchNorm`` that shares its
        parameters and buffers (a new module if ``module`` itself is a batch norm)."""
        converted = module
        if isinstance(module, _BatchNorm):
            converted = cls(
                module.num_features,
                module.eps,
                module.momentum,
                module.affine,
                module.track_running_stats,
                process_group,
                bias=module.bias is not None,
            )
            if module.affine:
                converted.weight = module.weight
                converted.bias = module.bias
            converted.running_mean = module.running_mean
            converted.running_var = module.running_var
            converted.num_batches_tracked = module.num_batches_tracked
            converted.training = module.training
            if hasattr(module, "qconfig"):
                converted.qconfig = module.qconfig
        for name, child in module.named_children():
            converted.add_module(name, cls.convert_sync_batchnorm(child, process_group))
        return converted


class _LazyNormBase(LazyModuleMixin):
    """``num_features`` is read from dim 1 of the first input."""

    _inferred_size = "num_features"

    def __init__(
        self,
        eps: float = 1e-5,
        momentum: float | None = 0.1,
        affine: bool = True,
        track_running_stats: bool = True,
        device=None,
        dtype=None,
        *,
        bias: bool = True,
    ) -> None:
        super().__init__(0, eps, momentum, False, False, device, dtype, bias=False)
        self.affine = affine
        self.track_running_stats = track_running_stats
        if affine:
            self._lazy_weight_and_bias(bias, device, dtype)
        if track_running_stats:
            self.running_mean = UninitializedBuffer(device=device, dtype=dtype)
            self.running_var = UninitializedBuffer(device=device, dtype=dtype)
            self.num_batches_tracked = api.tensor(0, dtype=dt.int64, device=device)

    def initialize_parameters(self, input: Tensor) -> None:
        if not self.has_uninitialized_params():
            return
        self.num_features = input.shape[1]
        with no_grad():
            for name in ("weight", "bias", "running_mean", "running_var"):
                value = getattr(self, name)
                if value is not None:
                    value.materialize((self.num_features,))
            self.reset_parameters()


LazyBatchNorm1d, LazyBatchNorm2d, LazyBatchNorm3d = mixed_variants(
    _LazyNormBase, (BatchNorm1d, BatchNorm2d, BatchNorm3d), "LazyBatchNorm{n}d", becomes=True
)
