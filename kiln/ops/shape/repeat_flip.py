"""Repeating, flipping and rolling: repeat, tile, repeat_interleave, flip, roll, rot90.

``repeat`` and ``repeat_interleave`` decompose into expand + one contiguous copy; ``flip`` and
``roll`` keep numpy kernels for eager speed and decompose into ``index_select``/``cat`` for
compilers.
"""

from __future__ import annotations

import numpy as np

from ...runtime import dtypes as dt
from ...runtime.memory_format import contiguous_format
from ...runtime.symbolic import as_int, is_int_like
from ..core.common import (
    Tensor,
    fake,
    laid_out,
    preserved_layout,
    suggested_strides,
    wrap,
    wrap_dim,
    wrap_dims,
)
from ..core.registry import OPS, defop, tensor_method, torch_function
from .cat_split import cat
from .shape_functions import flatten, int_list_args, narrow, transpose
from .views import own_tensor

__all__ = ["flip", "roll"]


# ------------------------------------------------------------------------------ repeating


@defop(kind="shape", grad_fn_name="RepeatBackward0")
def repeat(self: Tensor, repeats: list[int]): ...


@repeat.register_decomposition
def _repeat_decomp(x, repeats):
    repeats = tuple(as_int(r) for r in repeats)
    if len(repeats) < x.ndim:
        raise RuntimeError(
            "Number of dimensions of repeat dims can not be smaller than number of dimensions of "
            "tensor"
        )
    if any(r < 0 for r in repeats):
        raise RuntimeError(f"Trying to create tensor with negative dimension: {list(repeats)}")
    shape = (1,) * (len(repeats) - x.ndim) + tuple(x.shape)
    interleaved, expanded, final = [], [], []
    for r, s in zip(repeats, shape):
        interleaved += [1, s]
        expanded += [r, s]
        final.append(r * s)
    # one copy: broadcast each dim against its repeat count, then merge the pairs
    grid = OPS["expand"](OPS["reshape"](x, interleaved), expanded)
    return own_tensor(OPS["view"](OPS["clone"](grid, memory_format=contiguous_format), final))


@tensor_method("repeat")
def _repeat_method(self: Tensor, *sizes, repeats=None) -> Tensor:
    return repeat(self, int_list_args(sizes, repeats))


@torch_function()
def tile(input: Tensor, dims) -> Tensor:
    dims = (dims,) if isinstance(dims, int) else tuple(dims)
    return repeat(input, (1,) * (input.ndim - len(dims)) + dims)


@tensor_method("tile")
def _tile_method(self: Tensor, *dims_args, dims=None) -> Tensor:
    return tile(self, int_list_args(dims_args, dims))


@defop(kind="indexing", differentiable=False)
def repeat_interleave_indices(repeats: Tensor, *, output_size: int | None = None): ...


def _check_repeats(repeats: Tensor) -> None:
    if repeats.ndim != 1:
        raise RuntimeError("repeat_interleave only accept 1D vector as repeat")
    if repeats.dtype not in (dt.int64, dt.int32):
        raise RuntimeError(
            f"repeats has to be Long or Int tensor, got {repeats.dtype.name.capitalize()}"
        )


@repeat_interleave_indices.register_kernel
def _repeat_interleave_indices_kernel(repeats, output_size):
    _check_repeats(repeats)
    r = repeats._data
    if r.size and r.min() < 0:
        raise RuntimeError("repeats can not be negative")
    out = np.repeat(np.arange(r.size, dtype=r.dtype), r)
    if output_size is not None and out.size != output_size:
        raise RuntimeError(f"output_size {output_size} does not match the repeats sum {out.size}")
    return wrap(out, repeats._dtype)


@repeat_interleave_indices.register_meta
def _repeat_interleave_indices_meta(repeats, output_size=None):
    _check_repeats(repeats)
    if output_size is None:
        from ..indexing.subscript import data_dependent_size

        output_size = data_dependent_size("repeat_interleave with tensor repeats")
    return fake((output_size,), repeats._dtype, repeats)


@torch_function()
@tensor_method()
def repeat_interleave(
    input: Tensor, repeats=None, dim: int | None = None, *, output_size: int | None = None
) -> Tensor:
    """Repeat each element (along ``dim``, or of the flattened input) ``repeats`` times."""
    if repeats is None:  # repeat_interleave(repeats): the index form
        return repeat_interleave_indices(input, output_size=output_size)
    if dim is None:
        input = flatten(input)
        dim = 0
    d = wrap_dim(dim, input.ndim)
    if isinstance(repeats, Tensor) and repeats.numel() == 1 and repeats.ndim <= 1:
        repeats = int(repeats.item())
    if isinstance(repeats, Tensor):
        if repeats.ndim == 1 and repeats.shape[0] != input.shape[d]:
            raise RuntimeError(
                "repeats must have the same size as input along dim, but got "
                f"repeats.size(0) = {repeats.shape[0]} and input.size({d}) = {input.shape[d]}"
            )
        index = repeat_interleave_indices(repeats, output_size=output_size)
        return OPS["index_select"](input, d, index)
    repeats = int(repeats)
    if repeats < 0:
        raise RuntimeError("Repeats must be non-negative")
    if input.ndim == 0:
        input = OPS["reshape"](input, (1,))
    shape = list(input.shape)
    grid = OPS["expand"](
        OPS["unsqueeze"](input, d + 1), shape[: d + 1] + [repeats] + shape[d + 1 :]
    )
    shape[d] *= repeats
    return own_tensor(OPS["view"](OPS["clone"](grid, memory_format=contiguous_format), shape))


# ------------------------------------------------------------------------------ flip / roll / rot90


@defop(kind="shape")
def flip(self: Tensor, dims: list[int]): ...


def _flip_dims(x, dims):
    # checked for a scalar too (dims -1 and 0, once), which then has nothing to reverse
    axes = wrap_dims((dims,) if isinstance(dims, int) else tuple(dims), x.ndim)
    return axes if x.ndim else ()


@flip.register_kernel
def _flip_kernel(x, dims):
    axes = _flip_dims(x, dims)
    a = x._data
    out = laid_out(np.flip(a, axes) if axes else a, preserved_layout(x))  # as PyTorch's
    return wrap(out if out is not a else a.copy(order="K"), x._dtype)


@flip.register_meta
def _flip_meta(x, dims):
    _flip_dims(x, dims)
    return fake(x._shape, x._dtype, x, preserved_layout(x))


flip.register_derivative(lambda c, g: (flip(g, c.args[1]),), save_inputs=())


@flip.register_decomposition
def _flip_decomp(x, dims):
    axes = _flip_dims(x, dims)
    if not axes:
        return OPS["clone"](x)
    for d in axes:
        n = x.shape[d]
        reverse = OPS["arange"](n - 1, -1, -1, dtype=dt.int64, device=x.device)
        x = OPS["index_select"](x, d, reverse)
    return x


flip.result_layout = "preserved"  # as PyTorch's (and the kernel's)


@tensor_method("flip")
def _flip_method(self: Tensor, *dims_args, dims=None) -> Tensor:
    return flip(self, int_list_args(dims_args, dims))


@torch_function()
@tensor_method()
def fliplr(input: Tensor) -> Tensor:
    if input.ndim < 2:
        raise RuntimeError("Input must be >= 2-d.")
    return flip(input, (1,))


@torch_function()
@tensor_method()
def flipud(input: Tensor) -> Tensor:
    if input.ndim < 1:
        raise RuntimeError("Input must be >= 1-d.")
    return flip(input, (0,))


@defop(kind="shape")
def roll(self: Tensor, shifts: list[int], dims: list[int] | None = None): ...


def _roll_args(x, shifts, dims):
    """(shifts, wrapped dims) as tuples; a symbolic shift (``x.shape[1] // 2`` under
    ``dynamic=True``) stays a SymInt, which the decomposition reads modulo the length."""
    shifts = (shifts,) if is_int_like(shifts) else tuple(as_int(s) for s in shifts)
    if dims is None:
        if len(shifts) != 1:
            raise RuntimeError(f"shifts and dimensions must align. shifts: {len(shifts)}, dims:0")
        return shifts, None
    dims = (dims,) if isinstance(dims, int) else tuple(dims)
    if len(shifts) != len(dims):
        raise RuntimeError(
            f"shifts and dimensions must align. shifts: {len(shifts)}, dims:{len(dims)}"
        )
    if not x.ndim:  # PyTorch reads the scalar's size along the dim
        raise IndexError(f"Dimension specified as {dims[0]} but tensor has no dimensions")
    return shifts, tuple(wrap_dim(d, x.ndim) for d in dims)


@roll.register_kernel
def _roll_kernel(x, shifts, dims):
    shifts, dims = _roll_args(x, shifts, dims)
    a = x._data
    out = np.roll(a, shifts[0]) if dims is None else np.roll(a, shifts, dims)
    return wrap(laid_out(out, _roll_strides(x, dims)), x._dtype)


def _roll_strides(x, dims) -> tuple | None:
    """PyTorch's roll along dims keeps a channels-last input's layout (any other is made
    row-major, as is a roll of the flattened tensor)."""
    return None if dims is None else suggested_strides(x._shape, x)


def _roll_format(x, shifts, dims=None) -> str:
    return "contiguous" if dims is None else "suggested"


@roll.register_meta
def _roll_meta(x, shifts, dims=None):
    _roll_args(x, shifts, dims)
    return fake(x._shape, x._dtype, x, _roll_strides(x, dims))


def _roll_grad(c, g):
    x, shifts, dims = c.args
    shifts, _ = _roll_args(x, shifts, dims)
    return (roll(g, tuple(-s for s in shifts), dims),)


roll.register_derivative(_roll_grad, save_inputs=())
roll.result_layout = _roll_format  # as PyTorch's


@roll.register_decomposition
def _roll_decomp(x, shifts, dims=None):
    shifts, dims = _roll_args(x, shifts, dims)
    if dims is None:
        return OPS["view"](roll(flatten(x), shifts, (0,)), tuple(x.shape))
    out = x
    for s, d in zip(shifts, dims):
        n = x.shape[d]
        if n.__class__ is not int and (s % n).__class__ is not int:
            # a symbolic length: where ``s % n`` falls is not known, so each position reads
            # ``(i - s) % n`` instead of splitting at it (which asked the split's sign)
            source = OPS["remainder"](
                OPS["arange"](0, n, 1, dtype=dt.int64, device=x.device) - s, n
            )
            out = OPS["index_select"](out, d, source)
            continue
        s = s % n if n else 0
        if s:
            out = cat([narrow(out, d, n - s, s), narrow(out, d, 0, n - s)], d)
    return OPS["clone"](out) if out is x else out


@torch_function()
@tensor_method()
def rot90(input: Tensor, k: int = 1, dims=(0, 1)) -> Tensor:
    dims = tuple(dims)
    if len(dims) != 2:
        raise RuntimeError(f"expected total rotation dims == 2, but got dims = {len(dims)}")
    if input.ndim < 2:
        raise RuntimeError(f"expected total dims >= 2, but got total dims = {input.ndim}")
    if dims[0] == dims[1] or abs(dims[0] - dims[1]) == input.ndim:
        raise RuntimeError(
            f"expected rotation dims to be different, but got dim0 = {dims[0]} and dim1 = {dims[1]}"
        )
    d0, d1 = wrap_dim(dims[0], input.ndim), wrap_dim(dims[1], input.ndim)
    k %= 4
    if k == 1:
        return transpose(flip(input, (d1,)), d0, d1)
    if k == 2:
        return flip(input, (d0, d1))
    if k == 3:
        return transpose(flip(input, (d0,)), d0, d1)
    return OPS["clone"](input)
