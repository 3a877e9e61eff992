"""``F`` normalizations: layer, rms, group, batch, instance and local response norm.

batch_norm updates the running statistics in place (unbiased variance); instance_norm is batch
norm over a (1, N*C, ...) view.
"""

from __future__ import annotations

import math

from ...autograd.grad_mode import no_grad
from ...ops import OPS
from ...ops.core.grad_fn_naming import rename_grad_fn
from ...ops.core.registry import torch_function
from ...runtime import dtypes as dt
from ...runtime.symbolic import SymInt
from ...runtime.tensor import Tensor
from .layers import pad
from .pooling import avg_pool2d


def layer_norm(
    input: Tensor,
    normalized_shape,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    eps: float = 1e-5,
) -> Tensor:
    return OPS["layer_norm"](input, _shape_list(normalized_shape), weight, bias, eps)


def rms_norm(
    input: Tensor, normalized_shape, weight: Tensor | None = None, eps: float | None = None
) -> Tensor:
    out = OPS["rms_norm"](input, _shape_list(normalized_shape), weight, eps)
    rename_grad_fn(
        out, (input, weight), "MulBackward0"
    )  # PyTorch's is a composite ending in a product
    return out


def group_norm(
    input: Tensor,
    num_groups: int,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    eps: float = 1e-5,
) -> Tensor:
    if input.ndim < 2:
        raise RuntimeError(
            f"Expected at least 2 dimensions for input tensor but received {input.ndim}"
        )
    if num_groups and input.shape[1] % num_groups == 0:
        # PyTorch's _verify_batch_size on [N * C // G, G, *spatial]: one value per group
        # normalizes to zero whatever it is
        size = [input.shape[0] * input.shape[1] // num_groups, num_groups, *input.shape[2:]]
        if math.prod(size[:1] + size[2:]) == 1:
            raise ValueError(
                f"Expected more than 1 value per channel when training, got input size {size}"
            )
    return OPS["group_norm"](input, num_groups, weight, bias, eps)


def _shape_list(shape) -> list:
    return [shape] if isinstance(shape, int) else list(shape)


def batch_norm(
    input: Tensor,
    running_mean: Tensor | None,
    running_var: Tensor | None,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    training: bool = False,
    momentum: float = 0.1,
    eps: float = 1e-5,
) -> Tensor:
    """Batch norm; in training the running stats are updated in place with the unbiased variance."""
    if training:
        if input.ndim == 0:  # PyTorch's _verify_batch_size reads size[0] of the shape tuple
            raise IndexError("batch_norm: a 0-d input has no batch size (tuple index out of range)")
        # values per channel, as PyTorch's _verify_batch_size counts them (no division by the
        # channel count, which may be 0)
        if math.prod(input.shape[:1] + input.shape[2:]) == 1:
            raise ValueError(
                f"Expected more than 1 value per channel when training, got input size {input.shape}"
            )
    return _batch_norm_impl(input, weight, bias, running_mean, running_var, training, momentum, eps)


def _batch_norm_impl(input, weight, bias, running_mean, running_var, training, momentum, eps):
    """PyTorch's C++ batch_norm before its kernel: an empty input comes back as a copy times
    ``weight[0]`` plus ``bias[0]`` (an empty weight raises select's IndexError) with no checks
    and no running-stat update; a 0-d one has 0 features (its statistics must be empty)."""
    if input.numel() == 0:
        out = input.clone()
        if weight is not None:
            out = out * weight[0]
        if bias is not None:
            out = out + bias[0]
        return out
    if input.ndim == 0:
        named = ("running_mean", running_mean), ("running_var", running_var)
        for name, t in (*named, ("weight", weight), ("bias", bias)):
            if t is not None and t.numel() != 0:
                raise RuntimeError(
                    f"{name} should contain 0 elements not {t.numel()} (a 0-d input has no "
                    "channel dimension)"
                )
    out, mean, var = OPS["_native_batch_norm"](
        input, weight, bias, running_mean, running_var, training, momentum, eps
    )
    if training:
        per_channel = math.prod(input.shape[:1] + input.shape[2:])
        update_running_stats(running_mean, running_var, mean, var, per_channel, momentum)
    return out


def update_running_stats(
    running_mean: Tensor | None,
    running_var: Tensor | None,
    mean: Tensor,
    var: Tensor,
    count,
    momentum: float,
) -> None:
    """Move the running statistics (either may be None) ``momentum`` of the way to a batch's
    ``mean`` and biased ``var`` over ``count`` values per channel, in place; the variance is
    made unbiased first, as every PyTorch batch-norm kernel does."""
    with no_grad():
        if running_mean is not None:
            running_mean.mul_(1 - momentum).add_(mean.to(running_mean.dtype) * momentum)
        if running_var is not None:
            if isinstance(count, (SymInt, Tensor)):  # a count under capture stays a graph value
                unbiased = var * count / (count - 1)  # (a float of it would pin the batch size)
            else:
                unbiased = var * (count / (count - 1))
            running_var.mul_(1 - momentum).add_(unbiased.to(running_var.dtype) * momentum)


def instance_norm(
    input: Tensor,
    running_mean: Tensor | None = None,
    running_var: Tensor | None = None,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    use_input_stats: bool = True,
    momentum: float = 0.1,
    eps: float = 1e-5,
) -> Tensor:
    """Batch norm over a (1, N*C, *spatial) view: each (sample, channel) is its own channel."""
    if use_input_stats and math.prod(input.shape[2:]) == 1:
        raise ValueError(
            f"Expected more than 1 spatial element when training, got input size {input.shape}"
        )
    if input.ndim < 2:  # PyTorch's C++ instance_norm reads sizes 0 and 1 first
        raise IndexError(
            "Dimension specified as 0 but tensor has no dimensions"
            if input.ndim == 0
            else "Dimension out of range (expected to be in range of [-1, 0], but got 1)"
        )
    n, c = input.shape[:2]

    def repeat(t):  # PyTorch's repeat_if_defined: t.repeat(n), whatever t's size
        return None if t is None else t.repeat(n)

    stats = [repeat(t) for t in (running_mean, running_var)]
    stats = [None if s is None else s.clone() for s in stats]
    flat = input.reshape([1, n * c] + list(input.shape[2:]))
    out = _batch_norm_impl(
        flat, repeat(weight), repeat(bias), stats[0], stats[1], use_input_stats, momentum, eps
    )
    if use_input_stats:  # (evaluation leaves the statistics as they are)
        with no_grad():
            for running, updated in zip((running_mean, running_var), stats):
                if running is not None:
                    running.copy_(updated.reshape(n, c).mean(0))
    return out.reshape(tuple(input.shape))


def local_response_norm(
    input: Tensor, size: int, alpha: float = 1e-4, beta: float = 0.75, k: float = 1.0
) -> Tensor:
    """Divide by (k + alpha * mean of squares over ``size`` neighbouring channels) ** beta."""
    if input.ndim < 3:
        raise ValueError(
            f"Expected 3D or higher dimensionality input (got {input.ndim} dimensions)"
        )
    if input.numel() == 0:
        return input
    if input.ndim > 3 and input.dtype not in (dt.float32, dt.float64, dt.int64):
        # PyTorch averages 4-D and wider inputs with avg_pool3d, whose kernel takes these only
        raise NotImplementedError(
            f"\"avg_pool3d_out_frame\" not implemented for '{dt.torch_type_name(input.dtype)}'"
        )
    sq = (input * input).unsqueeze(1)
    shape = list(input.shape)
    flat = sq.reshape([shape[0], 1, shape[1], -1])
    padded = pad(flat, (0, 0, size // 2, (size - 1) // 2))
    div = avg_pool2d(padded, (size, 1), stride=1).reshape(shape)
    return input / (div * alpha + k) ** beta


# ------------------------------------------------------------------------------ kiln.<name> forms
# ``torch.<name>`` versions of these functions take other argument orders (aten schemas)


@torch_function("batch_norm")
def _torch_batch_norm(
    input, weight, bias, running_mean, running_var, training, momentum, eps, cudnn_enabled=True
):
    # (no batch-size check: that is torch.nn.functional's)
    return _batch_norm_impl(input, weight, bias, running_mean, running_var, training, momentum, eps)


@torch_function("instance_norm")
def _torch_instance_norm(
    input, weight, bias, running_mean, running_var, use_input_stats, momentum, eps, cudnn_enabled
):
    return instance_norm(
        input, running_mean, running_var, weight, bias, use_input_stats, momentum, eps
    )


@torch_function("layer_norm")
def _torch_layer_norm(
    input, normalized_shape, weight=None, bias=None, eps=1e-5, cudnn_enable=True
) -> Tensor:
    return layer_norm(input, normalized_shape, weight, bias, eps)


@torch_function("group_norm")
def _torch_group_norm(
    input, num_groups, weight=None, bias=None, eps=1e-5, cudnn_enabled=True
) -> Tensor:
    return group_norm(input, num_groups, weight, bias, eps)
