"""Finite differences and integrals along one dim: ``diff``, ``gradient`` (central differences
with first- or second-order edges, for even steps or given sample coordinates), ``trapezoid``
/``trapz`` and ``cumulative_trapezoid``.

All are composites of slices (``narrow``), arithmetic and ``cat``, so autograd and the compiler
handle them without kernels of their own. PyTorch's promotion is kept on purpose: the edge
coefficients of ``gradient`` are 0-d tensors, so wider coordinates do not widen the edges.
"""

from __future__ import annotations

import numpy as np

from ...runtime import dtypes as dt
from ..core.common import Tensor, result_dtype, wrap_dim
from ..core.out_arguments import writes_out
from ..core.registry import tensor_method, torch_function
from ..creation.factories import full
from ..shape.cat_split import cat
from ..shape.shape_functions import narrow, select
from .reduce import sum

__all__: list[str] = []


# ------------------------------------------------------------------------------ differences


def _narrow_diff(x: Tensor, d: int) -> Tensor:
    """``x[1:] - x[:-1]`` along ``d`` (exclusive or for bool, as PyTorch)."""
    n = x.shape[d]
    later, earlier = narrow(x, d, 1, n - 1), narrow(x, d, 0, n - 1)
    if x.dtype is dt.bool_:
        return later.logical_xor(earlier)
    return later - earlier


@torch_function()
@writes_out(name="sub")
@tensor_method()
def diff(
    input: Tensor,
    n: int = 1,
    dim: int = -1,
    prepend: Tensor | None = None,
    append: Tensor | None = None,
) -> Tensor:
    """The ``n``-th forward difference along ``dim``, after joining ``prepend``/``append``."""
    if input.ndim == 0:
        raise RuntimeError("diff expects input to be at least one-dimensional")
    if n < 0:
        raise RuntimeError(f"order must be non-negative but got {n}")
    d = wrap_dim(dim, input.ndim)
    if n == 0:  # PyTorch copies the input, without prepend and append
        return input.clone()
    parts = []
    for name, extra in (("prepend", prepend), ("append", append)):
        if extra is None:
            continue
        if not isinstance(extra, Tensor):
            raise TypeError(f"diff(): argument '{name}' must be Tensor, not {type(extra).__name__}")
        if extra.ndim != input.ndim:
            raise RuntimeError("diff expects prepend or append to be the same dimension as input")
    if prepend is not None:
        parts.append(prepend)
    parts.append(input)
    if append is not None:
        parts.append(append)
    x = cat(parts, d) if len(parts) > 1 else input
    for _ in range(n):
        if x.shape[d] == 0:
            break
        x = _narrow_diff(x, d)
    return x


def _trapezoid_dx(y: Tensor, x: Tensor | None, dx: float | None, d: int):
    """Spacing of the sample points along ``d``: a number, or a tensor broadcasting with y."""
    if x is None:
        return 1.0 if dx is None else dx
    if x.ndim == 1:
        if x.shape[0] != y.shape[d]:
            raise RuntimeError("trapezoid: There must be one `x` value for each sample point")
        step = x[1:] - x[:-1]
        return step.reshape((-1,) + (1,) * (y.ndim - 1 - d))
    return _narrow_diff(x, wrap_dim(d - y.ndim, x.ndim))


def _trapezoid_sides(name: str, y: Tensor, x, dx, dim: int):
    """(dim, spacing, left samples, right samples); no sides for an empty ``dim``."""
    d = wrap_dim(dim, y.ndim)
    if x is not None and dx is not None:
        raise TypeError(f"{name}() received both x and dx")
    n = y.shape[d]
    if n == 0:
        return d, None, None, None
    _refuse_bool(name, y, x)
    return d, _trapezoid_dx(y, x, dx, d), narrow(y, d, 0, n - 1), narrow(y, d, 1, n - 1)


def _refuse_bool(name: str, y: Tensor, x) -> None:
    if y.dtype is dt.bool_ or isinstance(x, Tensor) and x.dtype is dt.bool_:
        which = "`y`" if x is None else "`x` or `y`"
        raise RuntimeError(f"{name}: received a bool input for {which}, but bool is not supported")


@torch_function()
def trapezoid(
    y: Tensor, x: Tensor | None = None, *, dx: float | None = None, dim: int = -1
) -> Tensor:
    """Integral of ``y`` along ``dim`` by the trapezoidal rule (samples at ``x`` or spacing
    ``dx``). The sums are PyTorch's, in its order and dtypes: an integer ``y``'s neighbours are
    added in its own dtype (int8 wraps around) before any float enters."""
    d, step, left, right = _trapezoid_sides("trapezoid", y, x, dx, dim)
    if left is None:  # zeros of y's dtype, one per integral
        return full(y.shape[:d] + y.shape[d + 1 :], 0, dtype=y.dtype, device=y.device)
    if isinstance(step, Tensor):
        return sum((left + right) * step, d) / 2.0
    ends = select(y, d, 0) + select(y, d, -1)
    return (sum(y, d) - ends * 0.5) * step


@torch_function()
def trapz(y: Tensor, x: Tensor | None = None, *, dx: float | None = None, dim: int = -1) -> Tensor:
    """``trapezoid`` under its older name."""
    return trapezoid(y, x, dx=dx, dim=dim)


@torch_function()
def cumulative_trapezoid(
    y: Tensor, x: Tensor | None = None, *, dx: float | None = None, dim: int = -1
) -> Tensor:
    """Running trapezoidal integral: one value per interval (``n - 1`` along ``dim``), summed
    in PyTorch's order and dtypes as ``trapezoid`` is (a bool ``y`` is refused even empty)."""
    _refuse_bool("cumulative_trapezoid", y, x)
    d, step, left, right = _trapezoid_sides("cumulative_trapezoid", y, x, dx, dim)
    if left is None:
        return full(y.shape, 0, dtype=result_dtype(y, 1.0), device=y.device)
    if isinstance(step, Tensor):
        return ((left + right) * step).cumsum(d) / 2.0
    return (step / 2.0 * (left + right)).cumsum(d)


def _gradient_dims(input: Tensor, dim) -> list[int]:
    if dim is None:
        return list(range(input.ndim))
    dims = [dim] if isinstance(dim, (int, np.integer)) else list(dim)
    wrapped = [wrap_dim(d, input.ndim) for d in dims]
    for i, d in enumerate(wrapped):
        if d in wrapped[:i]:
            raise RuntimeError(f"dim {d} appears multiple times in the list of dims")
    return wrapped


def _gradient_spacings(input: Tensor, spacing, dims: list[int], dim_given: bool) -> list:
    """One spacing per differentiated dim: a number (uniform steps) or 1-D coordinates."""
    if isinstance(spacing, Tensor) and spacing.ndim == 0:
        spacing = spacing.item()
    if isinstance(spacing, (int, float, np.integer, np.floating)):
        return [spacing] * len(dims)
    spacing = list(spacing)
    if dim_given and len(spacing) != len(dims):
        raise RuntimeError(
            "torch.gradient expected spacing to be unspecified, a scalar or it's spacing and dim "
            f"arguments to have the same length, but got a spacing argument of length "
            f"{len(spacing)} and a dim argument of length {len(dims)}."
        )
    if not dim_given and len(spacing) != input.ndim:
        raise RuntimeError(
            "torch.gradient expected spacing to be unspecified, a scalar, or a list of length "
            f"equal to 'self.dim() = {input.ndim}', since dim argument was not given, but got a "
            f"list of length {len(spacing)}"
        )
    if spacing and isinstance(spacing[0], Tensor):
        for i, s in enumerate(spacing):
            if not isinstance(s, Tensor):
                raise TypeError(
                    f"expected Tensor as element {i} in argument 1, but got {type(s).__name__}"
                )
            if s.ndim != 1:
                raise RuntimeError(
                    "torch.gradient expected each element of spacing to have one dimension, but "
                    f"got an element with {s.ndim} dimensions!"
                )
    elif any(isinstance(s, Tensor) for s in spacing):
        raise TypeError("gradient(): spacing must be a scalar, a list of scalars or of tensors")
    return spacing


def _slice(x: Tensor, d: int, start: int, stop: int | None = None) -> Tensor:
    """``x[start:stop]`` along ``d``, with Python's slice bounds."""
    begin, end, _ = slice(start, stop).indices(x.shape[d])
    return narrow(x, d, begin, max(end - begin, 0))


def _gradient_uniform(x: Tensor, d: int, h, edge_order: int) -> Tensor:
    center = (_slice(x, d, 2) - _slice(x, d, 0, -2)) / h
    if edge_order == 1:
        first = (_slice(x, d, 1, 2) - _slice(x, d, 0, 1)) / h
        last = (_slice(x, d, -1) - _slice(x, d, -2, -1)) / h
    else:
        first = (_slice(x, d, 0, 1) * -1.5 + _slice(x, d, 1, 2) * 2 + _slice(x, d, 2, 3) * -0.5) / h
        last = (_slice(x, d, -3, -2) * 0.5 + _slice(x, d, -2, -1) * -2 + _slice(x, d, -1) * 1.5) / h
    return cat([first, center / 2, last], d)


def _gradient_coordinates(x: Tensor, d: int, coords: Tensor, edge_order: int) -> Tensor:
    # second-order differences for uneven steps (numpy's and PyTorch's formulas); the edge
    # coefficients are 0-d tensors, so they promote like PyTorch's (a wider coordinate dtype
    # does not widen the edges)
    steps = coords[1:] - coords[:-1]
    left, right = steps[:-1], steps[1:]
    shape = [1] * x.ndim
    shape[d] = -1
    a = (-right / (left * (left + right))).reshape(shape)
    b = ((right - left) / (left * right)).reshape(shape)
    c = (left / (right * (left + right))).reshape(shape)
    x0, x1, x2 = _slice(x, d, 0, -2), _slice(x, d, 1, -1), _slice(x, d, 2)
    center = a * x0 + b * x1 + c * x2
    h0, hn = steps[0], steps[-1]
    if edge_order == 1:
        first = (_slice(x, d, 1, 2) - _slice(x, d, 0, 1)) / h0
        last = (_slice(x, d, -1) - _slice(x, d, -2, -1)) / hn
    else:
        h1, hm = steps[1], steps[-2]
        first = (
            -(2.0 * h0 + h1) / (h0 * (h0 + h1)) * _slice(x, d, 0, 1)
            + (h0 + h1) / (h0 * h1) * _slice(x, d, 1, 2)
            + -h0 / (h1 * (h0 + h1)) * _slice(x, d, 2, 3)
        )
        last = (
            hn / (hm * (hn + hm)) * _slice(x, d, -3, -2)
            + -(hn + hm) / (hn * hm) * _slice(x, d, -2, -1)
            + (2 * hn + hm) / (hn * (hn + hm)) * _slice(x, d, -1)
        )
    return cat([first, center, last], d)


@torch_function()
def gradient(input: Tensor, *, spacing=1, dim=None, edge_order: int = 1) -> tuple[Tensor, ...]:
    """Derivative estimates of ``input`` along each of ``dim`` (all dims by default): central
    differences inside, one-sided differences of order ``edge_order`` at the ends. ``spacing`` is
    the step (a number, one per dim) or the sample coordinates (one 1-D tensor per dim)."""
    if input.dtype is dt.uint8:
        raise RuntimeError("torch.gradient does not support uint8 input.")
    spacing = 1 if spacing is None else spacing  # PyTorch's default, spelled out or not
    dims = _gradient_dims(input, dim)
    spacings = _gradient_spacings(input, spacing, dims, dim is not None)
    if edge_order not in (1, 2):
        raise RuntimeError("torch.gradient only supports edge_order=1 and edge_order=2.")
    for d in dims if dim is not None else range(input.ndim):
        if input.shape[d] < edge_order + 1:
            raise RuntimeError(
                "torch.gradient expected each dimension size to be at least edge_order+1"
            )
    return tuple(
        _gradient_coordinates(input, d, s, edge_order)
        if isinstance(s, Tensor)
        else _gradient_uniform(input, d, s, edge_order)
        for d, s in zip(dims, spacings)
    )
