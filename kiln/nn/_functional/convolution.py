"""``F`` convolutions: conv1d-3d, conv_transpose1d-3d, and unfold/fold.

``padding='same'`` pads asymmetrically for even kernels, as PyTorch does; unfold/fold are grouped
convolutions with one-hot filters. ``ntuple`` and ``batched`` are shared with pooling.
"""

from __future__ import annotations

import math

from ...amp.autocast_mode import autocast_policy
from ...ops import OPS
from ...ops.core.grad_fn_naming import rename_grad_fn
from ...ops.core.registry import torch_function
from ...ops.nn import conv as _conv_ops
from ...runtime import dtypes as dt
from ...runtime.symbolic import SymInt, is_int_like
from ...runtime.tensor import Tensor


def ntuple(value, n: int, name: str = "argument") -> list:
    """An int or sequence argument as a list of ``n`` ints (a single value repeats), named in errors."""
    if is_int_like(value):  # a SymInt too (``max_pool1d(x, x.size(2))``): kept symbolic
        return [value] * n
    value = list(value)
    if len(value) == 1:
        return value * n
    if len(value) != n:
        raise RuntimeError(
            f"expected {name} to be a single integer or a list of {n} integers, got {value}"
        )
    return [v if isinstance(v, SymInt) else int(v) for v in value]


def batched(input: Tensor, dims: int, name: str):
    """``(input with a batch dim, whether one was added)`` for an op taking ``dims`` spatial dims."""
    if input.ndim == dims + 2:
        return input, False
    if input.ndim == dims + 1:
        return input.unsqueeze(0), True
    raise RuntimeError(
        f"Expected {dims + 1}D (unbatched) or {dims + 2}D (batched) input to {name}, but got "
        f"input of size: {list(input.shape)}"
    )


def _conv(input, weight, bias, stride, padding, dilation, groups, dims, name):
    x, unbatched = batched(input, dims, name)
    stride = ntuple(stride, dims, "stride")
    dilation = ntuple(dilation, dims, "dilation")
    if isinstance(padding, str):
        if padding == "valid":
            padding = [0] * dims
        elif padding == "same":
            if any(s != 1 for s in stride):
                raise RuntimeError("padding='same' is not supported for strided convolutions")
            x, padding = _same_padding(x, weight, dilation, dims)
        else:
            raise RuntimeError(f"Invalid padding string: '{padding}'")
    else:
        padding = ntuple(padding, dims, "padding")
    out = OPS["convolution"](x, weight, bias, stride, padding, dilation, False, [0] * dims, groups)
    return out.squeeze(0) if unbatched else out


def _same_padding(x, weight, dilation, dims):
    """Symmetric padding plus, for even kernels, one extra zero on the right (PyTorch's rule)."""
    left, extra = [], []
    for i in range(dims):
        total = dilation[i] * (weight.shape[2 + i] - 1)
        left.append(total // 2)
        extra = [0, total - 2 * (total // 2)] + extra
    if any(extra):
        x = OPS["constant_pad_nd"](x, extra, 0)
    return x, left


@autocast_policy(cpu="lower", cuda="lower")
def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1) -> Tensor:
    return _conv(input, weight, bias, stride, padding, dilation, groups, 1, "conv1d")


@autocast_policy(cpu="lower", cuda="lower")
def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1) -> Tensor:
    return _conv(input, weight, bias, stride, padding, dilation, groups, 2, "conv2d")


@autocast_policy(cpu="lower", cuda="lower")
def conv3d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1) -> Tensor:
    return _conv(input, weight, bias, stride, padding, dilation, groups, 3, "conv3d")


def _conv_transpose(input, weight, bias, stride, padding, output_padding, groups, dilation, dims):
    name = f"conv_transpose{dims}d"
    x, unbatched = batched(input, dims, name)
    stride = ntuple(stride, dims, "stride")
    padding = ntuple(padding, dims, "padding")
    output_padding = ntuple(output_padding, dims, "output_padding")
    dilation = ntuple(dilation, dims, "dilation")
    for op_, s, d in zip(output_padding, stride, dilation):
        if op_ >= s and op_ >= d:
            raise RuntimeError(
                f"output padding must be smaller than either stride or dilation, but got "
                f"output_padding={output_padding}, stride={stride}, dilation={dilation}"
            )
    out = OPS["convolution"](
        x, weight, bias, stride, padding, dilation, True, output_padding, groups
    )
    return out.squeeze(0) if unbatched else out


@autocast_policy(cpu="lower", cuda="lower")
def conv_transpose1d(
    input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1
) -> Tensor:
    return _conv_transpose(
        input, weight, bias, stride, padding, output_padding, groups, dilation, 1
    )


@autocast_policy(cpu="lower", cuda="lower")
def conv_transpose2d(
    input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1
) -> Tensor:
    return _conv_transpose(
        input, weight, bias, stride, padding, output_padding, groups, dilation, 2
    )


@autocast_policy(cpu="lower", cuda="lower")
def conv_transpose3d(
    input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1
) -> Tensor:
    return _conv_transpose(
        input, weight, bias, stride, padding, output_padding, groups, dilation, 3
    )


# ------------------------------------------------------------------------------ unfold / fold


def _patch_weight(channels: int, kernel, like: Tensor) -> Tensor:
    """(C*K, 1, *kernel) one-hot filters: a grouped convolution with them extracts patches."""
    k = math.prod(kernel)
    eye = OPS["arange"](0, k, 1, dtype=dt.int64, device=like.device)
    onehot = (eye.unsqueeze(1) == eye.unsqueeze(0)).to(like.dtype).reshape([k, 1] + list(kernel))
    return (
        onehot.unsqueeze(0)
        .expand([channels, k, 1] + list(kernel))
        .reshape([channels * k, 1] + list(kernel))
    )


def _blocks_dtype(input: Tensor, kernel: str) -> dt.dtype | None:
    """PyTorch's im2col/col2im take bools (an overlap of blocks is their OR) but no integers.
    The dtype the blocks are moved in by the one-hot convolution: int64 for bools (a bool
    convolution has no kernel), None for the input's own."""
    if input.dtype.is_integral:
        raise NotImplementedError(
            f"\"{kernel}\" not implemented for '{dt.torch_type_name(input.dtype)}'"
        )
    return dt.int64 if input.dtype is dt.bool_ else None


def unfold(input: Tensor, kernel_size, dilation=1, padding=0, stride=1) -> Tensor:
    """im2col: (N, C, H, W) -> (N, C*kh*kw, L) sliding blocks, as a grouped convolution."""
    if input.ndim < 2:  # PyTorch reads the channel size (dim 1) first: an IndexError
        raise IndexError(
            "Dimension specified as 1 but tensor has no dimensions"
            if input.ndim == 0
            else "Dimension out of range (expected to be in range of [-1, 0], but got 1)"
        )
    x, unbatched = batched(input, 2, "unfold")
    moved_as = _blocks_dtype(x, "im2col_out_cpu")
    if moved_as is not None:
        x = x.to(moved_as)
    # row-major, as PyTorch's im2col reads it: a channels-last input's blocks and its gradient
    # are row-major there too (the convolution would keep channels-last)
    x = x.contiguous()
    kernel = ntuple(kernel_size, 2, "kernel_size")
    c = x.shape[1]
    weight = _patch_weight(c, kernel, x)
    cols = OPS["convolution"](
        x,
        weight,
        None,
        ntuple(stride, 2, "stride"),
        ntuple(padding, 2, "padding"),
        ntuple(dilation, 2, "dilation"),
        False,
        [0, 0],
        c,
    )
    cols = cols.flatten(2)  # (N, C*kh*kw, blocks): no size to infer when N is 0
    if moved_as is not None:
        cols = cols.to(input.dtype)
    cols = cols.squeeze(0) if unbatched else cols
    rename_grad_fn(cols, (input,), "Im2ColBackward0")
    return cols


def fold(input: Tensor, output_size, kernel_size, dilation=1, padding=0, stride=1) -> Tensor:
    """col2im, the adjoint of ``unfold``: overlapping blocks are summed."""
    if input.ndim not in (2, 3):
        raise RuntimeError(
            "Expected 2D or 3D (batch mode) tensor for input with possibly 0 batch size and "
            f"non-zero dimensions for input, but got: {list(input.shape)}"
        )
    unbatched = input.ndim == 2
    cols = input.unsqueeze(0) if unbatched else input
    moved_as = _blocks_dtype(input, "col2im_out_cpu")
    if moved_as is not None:
        cols = cols.to(moved_as)
    kernel = ntuple(kernel_size, 2, "kernel_size")
    size = ntuple(output_size, 2, "output_size")
    stride, padding = ntuple(stride, 2, "stride"), ntuple(padding, 2, "padding")
    dilation = ntuple(dilation, 2, "dilation")
    k = math.prod(kernel)
    if cols.shape[1] % k:
        raise RuntimeError(
            f"Expected size of input's dimension 1 to be divisible by the product of kernel_size, "
            f"but got input.size(1)={cols.shape[1]} and kernel_size={tuple(kernel)}"
        )
    blocks = [
        _conv_ops.conv_output_size(size[i], kernel[i], stride[i], padding[i], dilation[i])
        for i in range(2)
    ]
    if blocks[0] * blocks[1] != cols.shape[2]:
        raise RuntimeError(
            f"Given output_size={tuple(size)}, kernel_size={tuple(kernel)}, dilation="
            f"{tuple(dilation)}, padding={tuple(padding)}, stride={tuple(stride)}, expected "
            f"size of input's dimension 2 to match the calculated number of sliding blocks "
            f"{blocks[0]} * {blocks[1]} = {blocks[0] * blocks[1]}, but got input.size(2)="
            f"{cols.shape[2]}."
        )
    c = cols.shape[1] // k
    grid = cols.reshape([cols.shape[0], c * k] + blocks)
    # output padding: rows past the last block that the transposed convolution must still emit
    extra = [
        size[i] - ((blocks[i] - 1) * stride[i] - 2 * padding[i] + dilation[i] * (kernel[i] - 1) + 1)
        for i in range(2)
    ]
    out = OPS["convolution"](
        grid, _patch_weight(c, kernel, cols), None, stride, padding, dilation, True, extra, c
    )
    if moved_as is not None:
        out = out.to(input.dtype)
    out = out.squeeze(0) if unbatched else out
    rename_grad_fn(out, (input,), "Col2ImBackward0")
    return out


@torch_function()
def conv_tbc(input: Tensor, weight: Tensor, bias: Tensor, pad: int = 0) -> Tensor:
    """A 1-d convolution in fairseq's time-batch-channel layout: ``input`` (time, batch,
    in_channels), ``weight`` (kernel_width, in_channels, out_channels); the result is
    (time, batch, out_channels), contiguous, as PyTorch's kernel makes it."""
    if input.ndim != 3:
        raise RuntimeError("Input must have 3 dims: time, batch, in_channel")
    if weight.ndim != 3:
        raise RuntimeError(
            "Weight tensor must have 3 dims: kernel_width, in_channels, out_channels."
        )
    if bias.ndim != 1:
        raise RuntimeError("Bias must be 1-D")
    if input.shape[2] != weight.shape[1]:
        raise RuntimeError("Input dim 2 (input channels) is not == dim 1 in the weight tensor")
    if bias.shape[0] != weight.shape[2]:
        raise RuntimeError("Bias size must equal dim 2 in the weight tensor (output channels).")
    length = input.shape[0] + 2 * pad - weight.shape[0] + 1
    if length < 0:
        raise RuntimeError(
            f"Trying to create tensor with negative dimension {length}: "
            f"[{length}, {input.shape[1]}, {weight.shape[2]}]"
        )
    if input.dtype != weight.dtype:
        raise RuntimeError(
            "self and mat2 must have the same dtype, but got "
            f"{dt.torch_type_name(input.dtype)} and {dt.torch_type_name(weight.dtype)}"
        )
    out = conv1d(input.permute(1, 2, 0), weight.permute(2, 1, 0), bias, padding=pad)
    out = out.permute(2, 0, 1).contiguous()
    rename_grad_fn(out, (input, weight, bias), "ConvTbcBackward0")
    return out


# ------------------------------------------------------------------------------ kiln.<name> forms
# ``torch.<name>`` versions of these functions take other argument orders (aten schemas)


@torch_function("conv1d")
def _torch_conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    return conv1d(input, weight, bias, stride, padding, dilation, groups)


@torch_function("conv2d")
def _torch_conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    return conv2d(input, weight, bias, stride, padding, dilation, groups)


@torch_function("conv3d")
def _torch_conv3d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    return conv3d(input, weight, bias, stride, padding, dilation, groups)


@torch_function("conv_transpose1d")
def _torch_conv_transpose1d(
    input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1
):
    return conv_transpose1d(input, weight, bias, stride, padding, output_padding, groups, dilation)


@torch_function("conv_transpose2d")
def _torch_conv_transpose2d(
    input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1
):
    return conv_transpose2d(input, weight, bias, stride, padding, output_padding, groups, dilation)


@torch_function("conv_transpose3d")
def _torch_conv_transpose3d(
    input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1
):
    return conv_transpose3d(input, weight, bias, stride, padding, output_padding, groups, dilation)
