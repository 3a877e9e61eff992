"""``torch.nn.grad``: a convolution's input and weight gradients as functions of their own.

Code that writes its own backward for a convolution layer (custom ``autograd.Function``s,
gradient checkpointing helpers, per-sample-gradient libraries) calls these instead of running
the forward. The input gradient is the transposed convolution of ``grad_output`` (with the
output padding that gives back ``input_size``); the weight gradient is what kiln's convolution
derivative gives for a weight of ``weight_size``. Both stay differentiable, as PyTorch's are.
"""

from __future__ import annotations

from ..autograd.engine import grad as _autograd_grad
from ..autograd.grad_mode import enable_grad, is_grad_enabled
from ..ops.public import zeros
from ..runtime.tensor import Tensor
from ._functional.convolution import (
    conv1d,
    conv2d,
    conv3d,
    conv_transpose1d,
    conv_transpose2d,
    conv_transpose3d,
    ntuple,
)

__all__ = [
    "conv1d_input",
    "conv1d_weight",
    "conv2d_input",
    "conv2d_weight",
    "conv3d_input",
    "conv3d_weight",
]

_CONVOLUTIONS = {1: conv1d, 2: conv2d, 3: conv3d}
_TRANSPOSED = {1: conv_transpose1d, 2: conv_transpose2d, 3: conv_transpose3d}


def _input_grad(dims, input_size, weight, grad_output, stride, padding, dilation, groups):
    """The transposed convolution of ``grad_output`` sized back to ``input_size``."""
    stride = ntuple(stride, dims, "stride")
    padding = ntuple(padding, dims, "padding")
    dilation = ntuple(dilation, dims, "dilation")
    input_size = tuple(input_size)
    if len(input_size) != dims + 2:
        raise ValueError(
            f"input_size must have {dims + 2} elements (batch, channels and {dims} spatial), "
            f"got {len(input_size)}"
        )
    output_padding = []
    for d in range(dims):
        kernel = weight.shape[2 + d]
        made = (
            (grad_output.shape[2 + d] - 1) * stride[d]
            - 2 * padding[d]
            + dilation[d] * (kernel - 1)
            + 1
        )
        extra = input_size[2 + d] - made
        if not 0 <= extra < max(stride[d], dilation[d]):
            raise ValueError(
                f"requested an input grad size of {list(input_size[2:])}, but valid sizes range "
                f"from {made} to {made + max(stride[d], dilation[d]) - 1} in dim {d} (for a "
                f"grad_output of {list(grad_output.shape[2:])})"
            )
        output_padding.append(extra)
    return _TRANSPOSED[dims](
        grad_output, weight, None, stride, padding, output_padding, groups, dilation
    )


def _weight_grad(dims, input, weight_size, grad_output, stride, padding, dilation, groups):
    """The convolution derivative's weight gradient, taken from kiln's autograd (a weight of
    zeros: the gradient does not depend on the weight's values)."""
    weight_size = tuple(weight_size)
    if len(weight_size) != dims + 2:
        raise ValueError(f"weight_size must have {dims + 2} elements, got {len(weight_size)}")
    keep_graph = is_grad_enabled() and (input.requires_grad or grad_output.requires_grad)
    with enable_grad():
        weight = zeros(weight_size, dtype=input.dtype, device=input.device, requires_grad=True)
        output = _CONVOLUTIONS[dims](input, weight, None, stride, padding, dilation, groups)
        if tuple(output.shape) != tuple(grad_output.shape):
            raise RuntimeError(
                f"grad_output of shape {list(grad_output.shape)} does not match the convolution "
                f"output {list(output.shape)} for input {list(input.shape)} and weight "
                f"{list(weight_size)}"
            )
        (result,) = _autograd_grad(output, weight, grad_output, create_graph=keep_graph)
    return result


def conv1d_input(
    input_size, weight: Tensor, grad_output: Tensor, stride=1, padding=0, dilation=1, groups=1
) -> Tensor:
    """Gradient of ``conv1d`` with respect to an input of ``input_size``."""
    return _input_grad(1, input_size, weight, grad_output, stride, padding, dilation, groups)


def conv1d_weight(
    input: Tensor, weight_size, grad_output: Tensor, stride=1, padding=0, dilation=1, groups=1
) -> Tensor:
    """Gradient of ``conv1d`` with respect to a weight of ``weight_size``."""
    return _weight_grad(1, input, weight_size, grad_output, stride, padding, dilation, groups)


def conv2d_input(
    input_size, weight: Tensor, grad_output: Tensor, stride=1, padding=0, dilation=1, groups=1
) -> Tensor:
    """Gradient of ``conv2d`` with respect to an input of ``input_size``."""
    return _input_grad(2, input_size, weight, grad_output, stride, padding, dilation, groups)


def conv2d_weight(
    input: Tensor, weight_size, grad_output: Tensor, stride=1, padding=0, dilation=1, groups=1
) -> Tensor:
    """Gradient of ``conv2d`` with respect to a weight of ``weight_size``."""
    return _weight_grad(2, input, weight_size, grad_output, stride, padding, dilation, groups)


def conv3d_input(
    input_size, weight: Tensor, grad_output: Tensor, stride=1, padding=0, dilation=1, groups=1
) -> Tensor:
    """Gradient of ``conv3d`` with respect to an input of ``input_size``."""
    return _input_grad(3, input_size, weight, grad_output, stride, padding, dilation, groups)


def conv3d_weight(
    input: Tensor, weight_size, grad_output: Tensor, stride=1, padding=0, dilation=1, groups=1
) -> Tensor:
    """Gradient of ``conv3d`` with respect to a weight of ``weight_size``."""
    return _weight_grad(3, input, weight_size, grad_output, stride, padding, dilation, groups)
