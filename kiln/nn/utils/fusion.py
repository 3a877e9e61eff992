"""Fold an eval-mode BatchNorm into the preceding Conv or Linear layer.

In eval mode ``bn(conv(x))`` is an affine map of ``conv(x)`` per output channel, so it can be
absorbed into the layer's weight and bias: one layer, the same output, less work at inference.
"""

from __future__ import annotations

import copy
from typing import TypeVar

from ...ops.public import ones_like, rsqrt, zeros_like
from ...runtime.tensor import Tensor
from ..modules.module import Module
from ..parameter import Parameter

__all__ = [
    "fuse_conv_bn_eval",
    "fuse_conv_bn_weights",
    "fuse_linear_bn_eval",
    "fuse_linear_bn_weights",
]

ConvT = TypeVar("ConvT", bound=Module)
LinearT = TypeVar("LinearT", bound=Module)


def fuse_conv_bn_eval(conv: ConvT, bn: Module, transpose: bool = False) -> ConvT:
    """A copy of ``conv`` whose output equals ``bn(conv(x))`` (both must be in eval mode)."""
    if conv.training or bn.training:
        raise AssertionError("Fusion only for eval!")
    fused = copy.deepcopy(conv)
    if bn.running_mean is None or bn.running_var is None:
        raise AssertionError("bn.running_mean and bn.running_var must not be None")
    fused.weight, fused.bias = fuse_conv_bn_weights(
        fused.weight,
        fused.bias,
        bn.running_mean,
        bn.running_var,
        bn.eps,
        bn.weight,
        bn.bias,
        transpose,
    )
    return fused


def fuse_conv_bn_weights(
    conv_w: Tensor,
    conv_b: Tensor | None,
    bn_rm: Tensor,
    bn_rv: Tensor,
    bn_eps: float,
    bn_w: Tensor | None,
    bn_b: Tensor | None,
    transpose: bool = False,
) -> tuple[Parameter, Parameter]:
    """(weight, bias) of the fused convolution; the channel axis is 0 (1 for ``transpose``)."""
    weight_dtype = conv_w.dtype
    bias_dtype = conv_b.dtype if conv_b is not None else weight_dtype
    if conv_b is None:
        conv_b = zeros_like(bn_rm)
    if bn_w is None:
        bn_w = ones_like(bn_rm)
    if bn_b is None:
        bn_b = zeros_like(bn_rm)
    inv_std = rsqrt(bn_rv + bn_eps)
    spatial = [1] * (conv_w.dim() - 2)
    shape = [1, -1, *spatial] if transpose else [-1, 1, *spatial]
    fused_w = (conv_w * (bn_w * inv_std).reshape(shape)).to(dtype=weight_dtype)
    fused_b = ((conv_b - bn_rm) * inv_std * bn_w + bn_b).to(dtype=bias_dtype)
    return Parameter(fused_w, conv_w.requires_grad), Parameter(fused_b, conv_b.requires_grad)


def fuse_linear_bn_eval(linear: LinearT, bn: Module) -> LinearT:
    """A copy of ``linear`` whose output equals ``bn(linear(x))`` (both in eval mode)."""
    if linear.training or bn.training:
        raise AssertionError("Fusion only for eval!")
    fused = copy.deepcopy(linear)
    if linear.out_features != bn.num_features and bn.num_features != 1:
        raise AssertionError(
            "To fuse, linear.out_features == bn.num_features or bn.num_features == 1, got "
            f"linear.out_features={linear.out_features} and bn.num_features={bn.num_features}"
        )
    if bn.running_mean is None or bn.running_var is None:
        raise AssertionError("bn.running_mean and bn.running_var must not be None")
    fused.weight, fused.bias = fuse_linear_bn_weights(
        fused.weight, fused.bias, bn.running_mean, bn.running_var, bn.eps, bn.weight, bn.bias
    )
    return fused


def fuse_linear_bn_weights(
    linear_w: Tensor,
    linear_b: Tensor | None,
    bn_rm: Tensor,
    bn_rv: Tensor,
    bn_eps: float,
    bn_w: Tensor,
    bn_b: Tensor,
) -> tuple[Parameter, Parameter]:
    """(weight, bias) of the fused linear layer."""
    weight_dtype = linear_w.dtype
    bias_dtype = linear_b.dtype if linear_b is not None else weight_dtype
    if linear_b is None:
        linear_b = zeros_like(bn_rm)
    scale = bn_w * rsqrt(bn_rv + bn_eps)
    fused_w = linear_w * scale.unsqueeze(-1).to(dtype=weight_dtype)
    fused_b = ((linear_b - bn_rm) * scale + bn_b).to(dtype=bias_dtype)
    return Parameter(fused_w, linear_w.requires_grad), Parameter(fused_b, linear_b.requires_grad)
