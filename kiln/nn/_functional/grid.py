"""``F.affine_grid`` and ``F.grid_sample``: spatial transformers as composites of kiln ops.

Sampling locations are normalized to [-1, 1] (x indexes the last dim, then y, then z). Each
interpolation gathers its taps from the flattened input (``gather``), so autograd gives the input
gradient (a scatter-add) and the grid gradient (through the interpolation weights) without a
kernel of our own, and the compiler sees ordinary ops.

PyTorch's conventions are kept where they are observable: ``nearest`` rounds half to even, the
grid gradient of ``border``/``reflection`` clipping is 0 on the border itself, ``bicubic`` uses
the cubic convolution kernel with A = -0.75 and pads each tap separately, and taps outside the
input read 0 under ``zeros`` padding.
"""

from __future__ import annotations

import warnings

from ...amp.autocast_mode import autocast_policy
from ...ops import OPS
from ...ops.core.grad_fn_naming import rename_grad_fn
from ...ops.core.registry import torch_function
from ...ops.reductions.reduce import torch_type_name
from ...runtime import dtypes as dt
from ...runtime.symbolic import is_int_like
from ...runtime.tensor import Tensor

__all__ = ["affine_grid", "grid_sample"]

_MODES = ("bilinear", "nearest", "bicubic")
_PADDING_MODES = ("zeros", "border", "reflection")
_CUBIC_A = -0.75


def _align_corners_default(align_corners: bool | None) -> bool:
    if align_corners is None:
        warnings.warn(
            "Default grid_sample and affine_grid behavior has changed to align_corners=False "
            "since 1.3.0. Please specify align_corners=True if the old behavior is desired. See "
            "the documentation of grid_sample for details.",
            stacklevel=3,
        )
        return False
    return align_corners


# ------------------------------------------------------------------------------ affine_grid


def _linspace_from_neg_one(steps: int, align_corners: bool, like: Tensor) -> Tensor:
    """Pixel centres (or corners) in [-1, 1]; a single step sits at 0."""
    if steps <= 1:
        return OPS["full"]((steps,), 0.0, dtype=like.dtype, device=like.device)
    line = OPS["linspace"](-1, 1, steps, dtype=like.dtype, device=like.device)
    return line if align_corners else line * ((steps - 1) / steps)


def affine_grid(theta: Tensor, size: list[int], align_corners: bool | None = None) -> Tensor:
    """The sampling grid (N, *spatial, k) of the affine maps ``theta`` (N, k, k+1)."""
    align_corners = _align_corners_default(align_corners)
    if not theta.is_floating_point():
        raise ValueError(f"Expected theta to have floating point type, but got {theta.dtype}")
    size = list(size)
    if len(size) not in (4, 5):
        raise NotImplementedError(
            "affine_grid only supports 4D and 5D sizes, for 2D and 3D affine transforms, "
            f"respectively. Got size {size}."
        )
    # the batch size stays symbolic under dynamic=True (only the grid's values read the rest)
    size = [size[0] if is_int_like(size[0]) else int(size[0]), *(int(s) for s in size[1:])]
    k = len(size) - 2
    if theta.dim() != 3 or theta.shape[-2] != k or theta.shape[-1] != k + 1:
        raise ValueError(
            f"Expected a batch of {k}D affine matrices of shape Nx{k}x{k + 1} for size {size}. "
            f"Got {theta.shape}."
        )
    spatial = size[2:]
    if align_corners and min(spatial) == 1:
        warnings.warn(
            "Since version 1.3.0, affine_grid behavior has changed for unit-size grids when "
            "align_corners=True. This is not an intended use case of affine_grid. See the "
            "documentation of affine_grid for details.",
            stacklevel=2,
        )
    elif min(size) <= 0:
        raise ValueError(f"Expected non-zero, positive output size. Got {size}")
    if theta.shape[0] != size[0]:
        raise RuntimeError(
            f"Expected size for first two dimensions of batch2 tensor to be: [{size[0]}, {k + 1}] "
            f"but got: [{theta.shape[0]}, {k + 1}]."
        )
    # base[..., i] is the coordinate along spatial dim k-1-i (x is the last dim), then a 1
    columns = []
    for axis in range(k):
        dim = k - 1 - axis
        line = _linspace_from_neg_one(spatial[dim], align_corners, theta)
        shape = [1] * k
        shape[dim] = spatial[dim]
        columns.append(line.reshape(shape).expand(spatial))
    columns.append(OPS["full"](tuple(spatial), 1.0, dtype=theta.dtype, device=theta.device))
    base = OPS["stack"](columns, -1).reshape(1, -1, k + 1)
    grid = OPS["matmul"](base, theta.transpose(1, 2))
    out = grid.reshape([size[0], *spatial, k])
    rename_grad_fn(out, (theta,), "AffineGridGeneratorBackward0")
    return out


# ------------------------------------------------------------------------------ coordinates


def _unnormalize(coord: Tensor, size: int, align_corners: bool) -> Tensor:
    """[-1, 1] to pixel units: -1/1 are the corner pixels' centres or their outer edges."""
    if align_corners:
        return (coord + 1) / 2 * (size - 1)
    return ((coord + 1) * size - 1) / 2


def _clip(coord: Tensor, size: int) -> Tensor:
    """Clamp to [0, size - 1]; the gradient is 0 on and beyond the border, as in PyTorch."""
    inside = (coord > 0) & (coord < size - 1)
    return OPS["where"](inside, coord, coord.detach().clamp(0, size - 1))


def _reflect(coord: Tensor, twice_low: int, twice_high: int) -> Tensor:
    """Reflect about the two borders until inside [low, high] (gradient sign flips each time)."""
    if twice_low == twice_high:
        return coord * 0
    low = twice_low / 2
    span = (twice_high - twice_low) / 2
    offset = coord - low
    distance = OPS["where"](offset < 0, -offset, offset)
    flips = (distance / span).floor()
    extra = distance - flips * span
    even = (flips.detach() % 2) == 0
    return OPS["where"](even, extra + low, span - extra + low)


def _pad_coordinates(coord: Tensor, size: int, padding_mode: str, align_corners: bool) -> Tensor:
    if padding_mode == "border":
        return _clip(coord, size)
    if padding_mode == "reflection":
        if align_corners:
            coord = _reflect(coord, 0, 2 * (size - 1))
        else:
            coord = _reflect(coord, -1, 2 * size - 1)
        return _clip(coord, size)
    return coord


# ------------------------------------------------------------------------------ grid_sample


class _Taps:
    """Reads input values at integer (float-valued) coordinates, 0 outside the input."""

    def __init__(self, input: Tensor, out_shape: tuple):
        self.batch, self.channels = input.shape[0], input.shape[1]
        self.sizes = tuple(input.shape[2:])[::-1]  # (W, H[, D]): the order of grid coordinates
        # explicit sizes, not -1: an empty batch leaves -1 ambiguous
        pixels = 1
        for size in self.sizes:
            pixels *= size
        self.flat = input.reshape(self.batch, self.channels, pixels)
        self.out_shape = out_shape
        self.points = 1
        for size in out_shape:
            self.points *= size

    def read(self, coords: list[Tensor]) -> tuple[Tensor, Tensor]:
        """(values (N, C, *out), in-bounds mask (N, *out)) at ``coords`` (x, y[, z])."""
        valid = None
        index = None
        stride = 1
        for coord, size in zip(coords, self.sizes):
            ok = (coord >= 0) & (coord <= size - 1)
            valid = ok if valid is None else valid & ok
        for coord, size in zip(coords, self.sizes):
            position = OPS["where"](valid, coord, 0.0).detach().to(dt.int64) * stride
            index = position if index is None else index + position
            stride *= size
        points = index.reshape(self.batch, 1, self.points)
        points = points.expand(self.batch, self.channels, self.points)
        values = OPS["gather"](self.flat, 2, points)
        values = values.reshape((self.batch, self.channels) + self.out_shape)
        return values, valid

    def weighted(self, coords: list[Tensor], weight: Tensor) -> Tensor:
        """Values times ``weight`` at in-bounds taps, 0 elsewhere."""
        values, valid = self.read(coords)
        return values * OPS["where"](valid, weight, 0.0).unsqueeze(1)


def _cubic_coefficients(t: Tensor) -> list[Tensor]:
    """Weights of the taps at -1, 0, 1, 2 for fractional offset ``t`` (Keys, A = -0.75)."""
    a = _CUBIC_A

    def near(x):  # |x| <= 1
        return ((a + 2) * x - (a + 3)) * x * x + 1

    def far(x):  # 1 < |x| < 2
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a

    return [far(t + 1), near(t), near(1 - t), far(2 - t)]


def _check_grid_sample(input: Tensor, grid: Tensor, rank: int | None = None) -> None:
    """PyTorch's checks; ``rank`` pins 4 or 5 dims (``grid_sampler_2d`` / ``_3d``)."""
    if input.dim() != grid.dim() or input.dim() not in (4, 5) or rank not in (None, input.dim()):
        raise RuntimeError(
            f"grid_sampler(): expected {rank or input.dim()}D input and grid with same number of "
            f"dimensions, but got input with sizes {list(input.shape)} and grid with sizes "
            f"{list(grid.shape)}"
        )
    if input.shape[0] != grid.shape[0]:
        raise RuntimeError(
            "grid_sampler(): expected grid and input to have same batch size, but got input with "
            f"sizes {list(input.shape)} and grid with sizes {list(grid.shape)}"
        )
    if grid.shape[-1] != input.dim() - 2:
        raise RuntimeError(
            f"grid_sampler(): expected grid to have size {input.dim() - 2} in last dimension, but "
            f"got grid with sizes {list(grid.shape)}"
        )
    for d in range(2, input.dim()):
        if input.shape[d] == 0:
            raise RuntimeError(
                "grid_sampler(): expected input to have non-empty spatial dimensions, but input "
                f"has sizes {list(input.shape)} with dimension {d} being empty"
            )
    if not input.is_floating_point():
        kind = "2d" if input.dim() == 4 else "3d"
        raise NotImplementedError(
            f'"grid_sampler_{kind}_cpu_kernel_impl" not implemented for '
            f"'{torch_type_name(input.dtype)}'"
        )
    if grid.dtype is not input.dtype:
        raise RuntimeError(
            f"expected scalar type {torch_type_name(input.dtype)} but found "
            f"{torch_type_name(grid.dtype)}"
        )


def _sample(input: Tensor, grid: Tensor, mode: str, padding_mode: str, align_corners: bool):
    if mode == "bicubic" and input.dim() != 4:
        raise RuntimeError("grid_sampler(): bicubic interpolation only supports 4D input")
    taps = _Taps(input, tuple(grid.shape[1:-1]))
    k = grid.shape[-1]
    raw = [_unnormalize(grid[..., i], taps.sizes[i], align_corners) for i in range(k)]
    if mode == "bicubic":
        return _bicubic(taps, raw, padding_mode, align_corners)
    coords = [
        _pad_coordinates(c, size, padding_mode, align_corners) for c, size in zip(raw, taps.sizes)
    ]
    if mode == "nearest":
        nearest = [c.round() for c in coords]
        # weight 1 with a zero gradient: the grid gets a zero gradient (not none), as in PyTorch
        return taps.weighted(nearest, nearest[0] * 0 + 1)
    lows = [c.floor() for c in coords]
    out = None
    for corner in range(2**k):
        points, weight = [], None
        for i, (c, low) in enumerate(zip(coords, lows)):
            high_side = (corner >> i) & 1
            # PyTorch's weights: (high - c) for the low tap, (c - low) for the high tap
            w = c - low if high_side else (low + 1) - c
            points.append(low + 1 if high_side else low)
            weight = w if weight is None else weight * w
        term = taps.weighted(points, weight)
        out = term if out is None else out + term
    return out


def _bicubic(taps: _Taps, raw: list[Tensor], padding_mode: str, align_corners: bool) -> Tensor:
    """16 taps around each point; each tap coordinate is padded on its own."""
    x, y = raw
    x0, y0 = x.floor(), y.floor()
    wx, wy = _cubic_coefficients(x - x0), _cubic_coefficients(y - y0)
    width, height = taps.sizes
    out = None
    for j in range(4):
        ty = _pad_coordinates(y0 + (j - 1), height, padding_mode, align_corners).detach()
        for i in range(4):
            tx = _pad_coordinates(x0 + (i - 1), width, padding_mode, align_corners).detach()
            # the padded tap coordinate is truncated to a pixel, as PyTorch's static_cast
            term = taps.weighted([tx.trunc(), ty.trunc()], wx[i] * wy[j])
            out = term if out is None else out + term
    return out


def grid_sample(
    input: Tensor,
    grid: Tensor,
    mode: str = "bilinear",
    padding_mode: str = "zeros",
    align_corners: bool | None = None,
) -> Tensor:
    """Sample ``input`` (N, C, H, W) or (N, C, D, H, W) at ``grid`` (N, *out, 2 or 3) points."""
    if mode not in _MODES:
        raise ValueError(
            "nn.functional.grid_sample(): expected mode to be 'bilinear', 'nearest' or "
            f"'bicubic', but got: '{mode}'"
        )
    if padding_mode not in _PADDING_MODES:
        raise ValueError(
            "nn.functional.grid_sample(): expected padding_mode to be 'zeros', 'border', or "
            f"'reflection', but got: '{padding_mode}'"
        )
    align_corners = _align_corners_default(align_corners)
    return _grid_sampler(input, grid, mode, padding_mode, align_corners)


@autocast_policy(cpu="fp32", cuda="promote")
def _grid_sampler(input, grid, mode: str, padding_mode: str, align_corners: bool) -> Tensor:
    """aten's ``grid_sampler``: the step CPU autocast runs in float32, checks included."""
    _check_grid_sample(input, grid)
    out = _sample(input, grid, mode, padding_mode, align_corners)
    rename_grad_fn(out, (input, grid), f"GridSampler{input.dim() - 2}DBackward0")
    return out


# ------------------------------------------------------------------------------ kiln.<name> forms


@torch_function("grid_sampler")
def _torch_grid_sampler(input, grid, interpolation_mode: int, padding_mode: int, align_corners):
    return _grid_sampler(
        input, grid, _MODES[interpolation_mode], _PADDING_MODES[padding_mode], align_corners
    )


@torch_function("grid_sampler_2d")
def _torch_grid_sampler_2d(input, grid, interpolation_mode: int, padding_mode: int, align_corners):
    _check_grid_sample(input, grid, 4)
    return _sample(
        input, grid, _MODES[interpolation_mode], _PADDING_MODES[padding_mode], align_corners
    )


@torch_function("grid_sampler_3d")
def _torch_grid_sampler_3d(input, grid, interpolation_mode: int, padding_mode: int, align_corners):
    _check_grid_sample(input, grid, 5)
    return _sample(
        input, grid, _MODES[interpolation_mode], _PADDING_MODES[padding_mode], align_corners
    )


@torch_function("affine_grid_generator")
def _torch_affine_grid_generator(theta, size, align_corners):
    return affine_grid(theta, size, align_corners)
