"""``F`` resizing: interpolate and its upsample aliases, pixel_shuffle, pixel_unshuffle and
channel_shuffle.

interpolate supports nearest, nearest-exact, (bi/tri)linear, bicubic and area modes; the
shuffles are reshapes and permutes.
"""

from __future__ import annotations

import math
import warnings
from fractions import Fraction

from ...amp.autocast_mode import autocast_policy
from ...ops.core.common import in_suggested_format
from ...ops.core.grad_fn_naming import rename_grad_fn
from ...ops.core.registry import torch_function
from ...ops.nn import conv as _conv_ops
from ...ops.reductions.reduce import torch_type_name
from ...runtime import dtypes as dt
from ...runtime.symbolic import SymInt
from ...runtime.tensor import Tensor
from .pooling import adaptive_avg

_INTERP_DIMS = {"linear": 1, "bilinear": 2, "bicubic": 2, "trilinear": 3}
# the node PyTorch's upsampling kernel records, as tensor reprs print it
_UPSAMPLE_NAMES = {
    "nearest": "UpsampleNearest{dims}DBackward0",
    "nearest-exact": "UpsampleNearestExact{dims}DBackward0",
    "linear": "UpsampleLinear1DBackward0",
    "bilinear": "UpsampleBilinear2DBackward0",
    "bicubic": "UpsampleBicubic2DBackward0",
    "trilinear": "UpsampleTrilinear3DBackward0",
}


# the kernel PyTorch names when a dtype it has no kernel for reaches a nearest mode, by dims
_NEAREST_REFUSALS = {
    1: "compute_indices_weights_nearest",
    2: "upsample_nearest2d_channels_last",
    3: "compute_indices_weights_nearest",
}
# the modes whose kernels take no uint8 images
_UINT8_REFUSALS = ("linear", "trilinear", "area")
# the kernel PyTorch names when an integer, bool or complex tensor reaches a filtering mode
_INTEGER_REFUSALS = {
    "linear": "compute_indices_weights_linear",
    "trilinear": "compute_indices_weights_linear",
    "bilinear": "upsample_bilinear2d_channels_last",
    "bicubic": "compute_indices_weights_cubic",
    "area": "adaptive_avg_pool{dims}d",
}


@autocast_policy(cpu="none", cuda="fp32")
def interpolate(
    input: Tensor,
    size=None,
    scale_factor=None,
    mode: str = "nearest",
    align_corners: bool | None = None,
    recompute_scale_factor: bool | None = None,
    antialias: bool = False,
) -> Tensor:
    """Resize the spatial dims: nearest/nearest-exact, (bi/tri)linear, bicubic and area."""
    dims = input.ndim - 2
    if mode in ("nearest", "area", "nearest-exact"):
        if align_corners is not None:
            raise ValueError(
                "align_corners option can only be set with the interpolating modes: "
                "linear | bilinear | bicubic | trilinear"
            )
    elif mode in _INTERP_DIMS:
        if dims >= 1 and _INTERP_DIMS[mode] != dims:
            raise NotImplementedError(
                f"Got {input.ndim}D input, but {mode} mode needs {_INTERP_DIMS[mode] + 2}D input"
            )
        align_corners = bool(align_corners)
    else:
        raise NotImplementedError(_unsupported_dims(input, mode))
    if antialias and (mode not in ("bilinear", "bicubic") or input.ndim != 4):
        raise ValueError(
            "Anti-alias option is restricted to bilinear and bicubic modes and requires a 4-D "
            f"tensor as input (got mode {mode!r} and a {input.ndim}-D tensor)"
        )
    if size is not None and scale_factor is not None:
        raise ValueError("only one of size or scale_factor should be defined")
    spatial = input.shape[2:]
    if size is not None:
        sizes = [size] * max(dims, 0) if isinstance(size, int) else list(size)
        if not isinstance(size, int) and len(sizes) != dims:
            raise ValueError(
                f"Input and output must have the same number of spatial dimensions, but got input "
                f"with spatial dimensions of {list(spatial)} and output size of {sizes}."
            )
        scales = [None] * dims
    elif scale_factor is not None:
        single = isinstance(scale_factor, (int, float))
        factors = [scale_factor] * max(dims, 0) if single else list(scale_factor)
        if not single and len(factors) != dims:
            raise ValueError(
                f"Input and scale_factor must have the same number of spatial dimensions, but got "
                f"input with spatial dimensions of {list(spatial)} and scale_factor of {factors}."
            )
        sizes = [_scaled_size(s, f) for s, f in zip(spatial, factors)]
        scales = [None] * dims if recompute_scale_factor else [float(f) for f in factors]
        _check_resample_input(input, mode, dims, antialias)
        if (
            mode == "nearest"
            and (input.dtype.is_floating_point or input.dtype is dt.uint8)
            and all(_whole(f) and f >= 1 for f in factors)
        ):
            _conv_ops.check_resample_sizes(input, spatial, sizes)
            out = in_suggested_format(_repeat_nearest(input, [int(f) for f in factors]), input)
            rename_grad_fn(out, (input,), _UPSAMPLE_NAMES[mode].format(dims=dims))
            return out
    else:
        raise ValueError("either size or scale_factor should be defined")
    _check_resample_input(input, mode, dims, antialias)
    if input.dtype is dt.uint8 and mode in ("bilinear", "bicubic"):
        return _uint8_image(input, sizes, mode, bool(align_corners), scales, antialias)
    if mode == "area":
        return adaptive_avg(input, sizes, dims)
    out = _conv_ops.resample(input, sizes, mode, bool(align_corners), scales, antialias)
    out = in_suggested_format(out, input)  # PyTorch's upsampling kernels keep channels-last
    name = _UPSAMPLE_NAMES[mode].format(dims=dims)
    rename_grad_fn(out, (input,), name.replace("2D", "2DAa") if antialias else name)
    return out


def _unsupported_dims(input: Tensor, mode: str) -> str:
    return (
        f"Input Error: Only 3D, 4D and 5D input Tensors supported (got {input.ndim}D) for the "
        f"modes: nearest | linear | bilinear | bicubic | trilinear | lanczos | area | nearest-exact "
        f"(got {mode})"
    )


def _check_resample_input(input: Tensor, mode: str, dims: int, antialias: bool) -> None:
    """After the size arguments' checks: PyTorch's last error for inputs without spatial dims,
    then its kernels' dtypes. They compute floats, and uint8 images where nearest, bilinear
    and bicubic modes take them (antialiased ones floats of 32 bits up); other dtypes raise
    NotImplementedError naming the kernel."""
    if dims < 1:
        raise NotImplementedError(_unsupported_dims(input, mode))
    d = input.dtype
    if antialias and d in (dt.float16, dt.bfloat16):
        kernel = "compute_index_ranges_weights"
    elif d.is_floating_point or d is dt.uint8 and mode not in _UINT8_REFUSALS:
        return
    elif mode in ("nearest", "nearest-exact"):
        kernel = _NEAREST_REFUSALS[dims]
    elif antialias:
        kernel = "compute_index_ranges_weights"
    else:
        kernel = _INTEGER_REFUSALS[mode].format(dims=dims)
    raise NotImplementedError(f"\"{kernel}\" not implemented for '{torch_type_name(d)}'")


def _scaled_size(size, factor):
    """``floor(float(size) * factor)``, PyTorch's output size. A symbolic size stays symbolic
    for a whole factor and for the double nearest a fraction ``p/q`` (0.3, 1.5, q up to 2**16)
    as ``size * p // q``, where ``float(size)`` would fix the size: the rounded product floors
    as the exact one does (sizes below 2**30) except at an exact multiple ``size * p / q``
    when the double lies below ``p/q`` by enough for the product to round down (0.7 at size
    90: 62.99999999999999); a factor like that guards that the size is no such multiple."""
    if _whole(factor):
        return size * int(factor)
    if size.__class__ is SymInt and isinstance(factor, float) and 0 < factor < math.inf:
        exact = Fraction(factor)
        ratio = exact.limit_denominator(1 << 16)
        if abs(exact - ratio) <= ratio / (1 << 52):  # the double of a simple fraction
            scaled = size * ratio.numerator
            below = (ratio - exact) / ratio  # > 0: the double is smaller than the fraction
            if below < Fraction(1, 1 << 54) or scaled % ratio.denominator != 0:
                return scaled // ratio.denominator
    return int(math.floor(float(size) * factor))


def _whole(factor) -> bool:
    """A scale factor that is a whole number (2, 2.0), whose nearest neighbours repeat."""
    return (
        isinstance(factor, (int, float)) and not isinstance(factor, bool) and factor == int(factor)
    )


def _repeat_nearest(x: Tensor, factors: list[int]) -> Tensor:
    """Nearest upsampling by whole factors: output j of a dim reads input j // f, PyTorch's
    floor(j * (1 / f)) exactly. Each spatial dim is repeated by an expand and a reshape (views
    and one copy), not gathered through an index table built for one size: a compiled graph
    with symbolic image sizes keeps them symbolic, and the copy is one pass."""
    lead = list(x.shape[:2])
    spatial = list(x.shape[2:])
    shape = list(lead)
    expanded = list(lead)
    for s, f in zip(spatial, factors):
        shape += [s, 1]
        expanded += [s, f]
    out = x.reshape(shape).expand(expanded)
    return out.reshape(lead + [s * f for s, f in zip(spatial, factors)])


def _uint8_image(x: Tensor, sizes, mode: str, align_corners: bool, scales, antialias: bool):
    """PyTorch's separable uint8 path: along the width, then the height, each pass rounded
    half up and saturated to a byte (PyTorch's fixed-point weights can still differ by one)."""
    height, width = x.shape[2:]
    out = x.float()
    for size, scale in (([height, sizes[1]], [None, scales[1]]), (sizes, [scales[0], None])):
        out = _conv_ops.resample(out, size, mode, align_corners, scale, antialias)
        out = (out + 0.5).floor_().clamp_(0, 255)
    return out.to(dt.uint8)


def _deprecated(name: str) -> None:
    warnings.warn(
        f"`nn.functional.{name}` is deprecated. Use `nn.functional.interpolate` instead.",
        stacklevel=3,
    )


def upsample(input, size=None, scale_factor=None, mode="nearest", align_corners=None):
    _deprecated("upsample")
    return interpolate(input, size, scale_factor, mode, align_corners)


def upsample_nearest(input, size=None, scale_factor=None):
    _deprecated("upsample_nearest")
    return interpolate(input, size, scale_factor, mode="nearest")


def upsample_bilinear(input, size=None, scale_factor=None):
    _deprecated("upsample_bilinear")
    return interpolate(input, size, scale_factor, mode="bilinear", align_corners=True)


def _check_rank(name: str, input: Tensor) -> None:
    if input.ndim < 3:
        raise RuntimeError(
            f"{name} expects input to have at least 3 dimensions, but got input with "
            f"{input.ndim} dimension(s)"
        )


def pixel_shuffle(input: Tensor, upscale_factor: int) -> Tensor:
    """(*, C*r*r, H, W) -> (*, C, H*r, W*r)."""
    r = upscale_factor
    _check_rank("pixel_shuffle", input)
    *lead, c, h, w = input.shape
    if c % (r * r):
        raise RuntimeError(
            f"pixel_shuffle expects its input's 'channel' dimension to be divisible by the square "
            f"of upscale_factor, but input.size(-3)={c} is not divisible by {r * r}"
        )
    n = len(lead)
    x = input.reshape(lead + [c // (r * r), r, r, h, w])
    x = x.permute(list(range(n)) + [n, n + 3, n + 1, n + 4, n + 2])
    out = in_suggested_format(x.reshape(lead + [c // (r * r), h * r, w * r]), input)
    rename_grad_fn(out, (input,), "PixelShuffleBackward0")
    return out


def channel_shuffle(input: Tensor, groups: int) -> Tensor:
    """(N, g*k, *) -> (N, k*g, *): interleave the channels of ``groups`` groups."""
    if input.ndim <= 2:
        raise RuntimeError(
            f"channel_shuffle expects input with > 2 dims, but got input with sizes "
            f"{list(input.shape)}"
        )
    n, c = input.shape[:2]
    if groups <= 0 or c % groups:
        raise RuntimeError(
            f"Number of channels must be divisible by groups. Got {c} channels and {groups} groups."
        )
    rest = list(input.shape[2:])
    x = input.reshape([n, groups, c // groups] + rest).transpose(1, 2)
    out = in_suggested_format(x.reshape([n, c] + rest), input)
    rename_grad_fn(out, (input,), "ChannelShuffleBackward0")
    return out


def pixel_unshuffle(input: Tensor, downscale_factor: int) -> Tensor:
    """(*, C, H*r, W*r) -> (*, C*r*r, H, W)."""
    r = downscale_factor
    _check_rank("pixel_unshuffle", input)
    *lead, c, h, w = input.shape
    if h % r or w % r:
        raise RuntimeError(
            f"pixel_unshuffle expects height and width to be divisible by downscale_factor, but "
            f"got {h}x{w} and {r}"
        )
    if input.numel() == 0:  # PyTorch returns an empty input's copy, its shape unchanged
        return input.clone()
    n = len(lead)
    x = input.reshape(lead + [c, h // r, r, w // r, r])
    x = x.permute(list(range(n)) + [n, n + 2, n + 4, n + 1, n + 3])
    out = in_suggested_format(x.reshape(lead + [c * r * r, h // r, w // r]), input)
    rename_grad_fn(out, (input,), "PixelUnshuffleBackward0")
    return out


# ------------------------------------------------------------------------------ kiln.<name> forms
# ``torch.<name>`` versions of these functions take other argument orders (aten schemas)


@torch_function("pixel_shuffle")
def _torch_pixel_shuffle(input: Tensor, upscale_factor: int) -> Tensor:
    return pixel_shuffle(input, upscale_factor)


@torch_function("pixel_unshuffle")
def _torch_pixel_unshuffle(input: Tensor, downscale_factor: int) -> Tensor:
    return pixel_unshuffle(input, downscale_factor)


def native_channel_shuffle(input: Tensor, groups: int) -> Tensor:
    """``channel_shuffle`` under its ATen name (the same result, as in PyTorch)."""
    return channel_shuffle(input, groups)


# ------------------------------------------------------------------------------ kiln.<name> forms


@torch_function("channel_shuffle")
def _torch_channel_shuffle(input: Tensor, groups: int) -> Tensor:
    return channel_shuffle(input, groups)


@torch_function("native_channel_shuffle")
def _torch_native_channel_shuffle(input: Tensor, groups: int) -> Tensor:
    return channel_shuffle(input, groups)
