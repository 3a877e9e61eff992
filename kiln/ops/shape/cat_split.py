"""Joining and splitting along a dim.

``cat`` (a prim) follows PyTorch's legacy rule that 1-D empty tensors are skipped; ``stack`` is a
composite (unsqueeze + cat); hstack/vstack/dstack/column_stack and atleast_Nd are Python
functions over them. split, chunk and tensor_split return ``slice`` views.
"""

from __future__ import annotations

import numpy as np

from ...runtime import dtypes as dt
from ...runtime.device import cpu
from ...runtime.memory_format import format_strides, suggest_memory_format
from ...runtime.storage import empty_array
from ...runtime.symbolic import as_int, statically_known_true
from ...runtime.tensor import contiguous_strides, wrap_array
from ..core.common import (
    Tensor,
    TensorList,
    cast_array,
    empty_laid_out,
    empty_like_layout,
    fake,
    tensor_sequence,
    wrap,
    wrap_dim,
)
from ..core.grad_fn_naming import renames_grad_fn
from ..core.out_arguments import writes_out
from ..core.registry import OPS, defop, tensor_method, torch_function
from .shape_functions import narrow, tensor_args

__all__ = ["split", "chunk"]

# ------------------------------------------------------------------------------ cat / stack


@defop(kind="shape", prim=True, recomputable=True, autocast={"cpu": "promote"})
def cat(tensors: TensorList, dim: int = 0): ...


def _checks_tensor_list(op) -> None:
    """Refuse what PyTorch's parser refuses in ``op``'s first argument (a tensor, whose rows
    were joined, a generator, a number among the tensors) before dispatch iterates it."""

    @op.canonicalize_args
    def checked(args: tuple) -> tuple:
        tensor_sequence(args[0], op.name)
        return args


_checks_tensor_list(cat)


def _is_legacy_empty(shape) -> bool:
    """1-D empty tensors are skipped by ``cat`` whatever the other shapes (PyTorch's legacy rule).
    A symbolic length counts as empty only where it is known to be 0: a boolean mask's count
    cannot be decided while tracing, and PyTorch's size-oblivious check takes it as non-empty."""
    if len(shape) != 1:
        return False
    return shape[0] == 0 if shape[0].__class__ is int else statically_known_true("==", shape[0], 0)


def _cat_geometry(tensors, dim):
    """Output shape, wrapped dim and promoted dtype of ``cat``, with PyTorch's checks."""
    if not tensors:
        raise ValueError("torch.cat(): expected a non-empty list of Tensors")
    for i, t in enumerate(tensors):
        if t.ndim == 0:
            raise RuntimeError(f"zero-dimensional tensor (at position {i}) cannot be concatenated")
        if t._device is not tensors[0]._device:
            raise RuntimeError(
                "Expected all tensors to be on the same device, but found at least two devices, "
                f"{tensors[0]._device} and {t._device}! (while running cat)"
            )
    kept = [t for t in tensors if not _is_legacy_empty(t._shape)]
    ref = kept[0] if kept else tensors[0]
    d = wrap_dim(dim, ref.ndim)
    total = 0
    for i, t in enumerate(tensors):
        if _is_legacy_empty(t._shape) and kept:
            continue
        if t.ndim != ref.ndim:
            raise RuntimeError(
                f"Tensors must have same number of dimensions: got {ref.ndim} and {t.ndim}"
            )
        for k in range(ref.ndim):
            if k != d and t._shape[k] != ref._shape[k]:
                raise RuntimeError(
                    f"Sizes of tensors must match except in dimension {d}. Expected size "
                    f"{ref._shape[k]} but got size {t._shape[k]} for tensor number {i} in the list."
                )
        total += t._shape[d]
    shape = list(ref._shape)
    shape[d] = total
    dtype = tensors[0]._dtype
    for t in tensors[1:]:
        dtype = dt.promote_types(dtype, t._dtype)
    return tuple(shape), d, dtype, kept


def _cat_strides(shape: tuple, kept) -> tuple:
    """PyTorch's layout for cat's result: channels-last where every input suggests the same
    channels-last format, else contiguous (numpy would follow a transposed first input, and a
    later ``view`` of the result would fail)."""
    return _joined_strides(shape, [(t._shape, t.stride()) for t in kept])


def _joined_strides(shape: tuple, layouts) -> tuple:
    """``_cat_strides`` of inputs given as (shape, strides) pairs."""
    fmt = None
    for t_shape, t_stride in layouts:
        suggested = "contiguous_format"
        # (channels outside the last dim: row-major's order, the common call, decided here)
        if len(t_shape) in (4, 5) and t_stride[1] <= t_stride[-1]:
            suggested = suggest_memory_format(t_shape, t_stride)
        if fmt is None:
            fmt = suggested
        elif suggested != fmt:
            return format_strides(shape, "contiguous_format")
    return format_strides(shape, fmt or "contiguous_format")


def _cat_plain(tensors, dim):
    """The common call's result, joined without ``_cat_geometry``'s general rules: CPU tensors
    of one dtype and one rank below 4 (no channels-last format to follow, so the result is
    contiguous whatever the inputs' strides) and sizes agreeing off ``dim`` (a 1-D empty
    tensor among 1-D ones adds nothing, as PyTorch's legacy rule has it). None for any other call, which the general path checks and refuses as
    PyTorch does (its messages and exception types)."""
    first = tensors[0]
    ref = first._shape
    rank = len(ref)
    dtype = first._dtype
    if not 0 < rank < 4 or dim.__class__ is not int or not -rank <= dim < rank:
        return None
    d = dim + rank if dim < 0 else dim
    total = 0
    arrays = []
    for t in tensors:
        shape = t._shape
        data = t._data
        if data is None or t._dtype is not dtype or t._device is not cpu or len(shape) != rank:
            return None
        for k in range(rank):
            if k != d and shape[k] != ref[k]:
                return None
        total += shape[d]
        arrays.append(data)
    shape = ref[:d] + (total,) + ref[d + 1 :]
    return wrap_array(np.concatenate(arrays, axis=d, out=empty_array(shape, dtype.np)), dtype)


@cat.register_kernel
def _cat_kernel(tensors, dim):
    if tensors:
        plain = _cat_plain(tensors, dim)
        if plain is not None:
            return plain
    tensors = list(tensors)
    shape, d, dtype, kept = _cat_geometry(tensors, dim)
    if not kept:
        return wrap(np.empty(shape, dtype.np), dtype)
    arrays = [t._data if t._dtype is dtype else cast_array(t._data, dtype.np) for t in kept]
    strides = _cat_strides(shape, kept)
    if strides == contiguous_strides(shape):
        return wrap(np.concatenate(arrays, axis=d, out=empty_array(shape, dtype.np)), dtype)
    out = empty_like_layout(shape, dtype, strides)
    return wrap(np.concatenate(arrays, axis=d, out=out), dtype)


@cat.register_meta
def _cat_meta(tensors, dim=0):
    tensors = list(tensors)
    shape, _, dtype, kept = _cat_geometry(tensors, dim)
    return fake(shape, dtype, (kept or tensors)[0], _cat_strides(shape, kept))


def _cat_grad(c, g):
    tensors, dim = c.args
    shapes = [tuple(t.shape) for t in tensors]
    ref = next((s for s in shapes if not _is_legacy_empty(s)), shapes[0])
    d = wrap_dim(dim, len(ref))
    grads = []
    offset = 0
    for s in shapes:
        if _is_legacy_empty(s) and s != ref:
            grads.append(g.new_zeros(s))
            continue
        grads.append(narrow(g, d, offset, s[d]))
        offset += s[d]
    return grads, None


cat.register_derivative(_cat_grad, save_inputs=())


@torch_function("concat")
@writes_out
def _concat(tensors, dim: int = 0, *, axis: int | None = None, out=None) -> Tensor:
    tensor_sequence(tensors, "concat")
    return cat(tensors, dim if axis is None else axis)


@torch_function("concatenate")
@writes_out
def _concatenate(tensors, dim: int = 0, *, axis: int | None = None, out=None) -> Tensor:
    tensor_sequence(tensors, "concatenate")
    return cat(tensors, dim if axis is None else axis)


@defop(kind="shape", autocast={"cpu": "promote"}, grad_fn_name="StackBackward0")
def stack(tensors: TensorList, dim: int = 0): ...


_checks_tensor_list(stack)


def _stack_check(tensors) -> tuple:
    tensor_sequence(tensors, "stack")
    if not tensors:
        raise RuntimeError("stack expects a non-empty TensorList")
    first = tuple(tensors[0]._shape)
    for i, t in enumerate(tensors):
        if tuple(t._shape) != first:
            raise RuntimeError(
                f"stack expects each tensor to be equal size, but got {list(first)} at entry 0 "
                f"and {list(t._shape)} at entry {i}"
            )
    return first


@stack.register_kernel
def _stack_kernel(tensors, dim=0):
    """One np.stack (a DataLoader's collate stacks a batch of samples each step): the
    decomposition dispatches an unsqueeze per tensor."""
    first = _stack_check(tensors)
    tensors = list(tensors)
    dtype = tensors[0]._dtype
    if any(t._dtype is not dtype for t in tensors):
        return _stack_decomp(tensors, dim)  # promotion as cat's
    d = wrap_dim(dim, len(first) + 1)
    shape = first[:d] + (len(tensors),) + first[d:]
    strides = _stack_strides(tensors, d)
    if strides is None or strides == contiguous_strides(shape):
        out = empty_array(shape, dtype.np)
    else:
        out = empty_laid_out(shape, dtype.np, strides)
    return wrap(np.stack([t._data for t in tensors], axis=d, out=out), dtype)


def _stack_strides(tensors: list, d: int) -> tuple | None:
    """PyTorch's layout for stack's result: inside the rank, ``cat`` along ``d`` (channels-last
    inputs give channels-last) with ``d`` then split in two; at the end, ``cat`` of the inputs
    unsqueezed there (contiguous but for odd layouts). None: row-major, decided cheaply."""
    first = tuple(tensors[0]._shape)
    rank = len(first) + (d == len(first))
    last = -1 if d < len(first) else None  # (the unsqueezed dim's stride is 1)
    if rank not in (4, 5) or all(
        t.stride()[1] > (1 if last is None else t.stride()[last]) for t in tensors
    ):  # no channels-last format to follow (a batch of 3-d images, row-major inputs)
        return None
    if d < len(first):
        joined = first[:d] + (first[d] * len(tensors),) + first[d + 1 :]
        strides = _joined_strides(joined, [(t._shape, t.stride()) for t in tensors])
        return strides[:d] + (first[d] * strides[d], strides[d]) + strides[d + 1 :]
    shape = first + (len(tensors),)
    return _joined_strides(shape, [(tuple(t._shape) + (1,), t.stride() + (1,)) for t in tensors])


@stack.register_decomposition
def _stack_decomp(tensors, dim=0):
    first = _stack_check(tensors)
    tensors = list(tensors)
    d = wrap_dim(dim, len(first) + 1)
    if d < len(first):  # as PyTorch's: a cat, then a view splitting the joined dim
        return OPS["view"](cat(tensors, d), first[:d] + (len(tensors),) + first[d:])
    return cat([OPS["unsqueeze"](t, d) for t in tensors], d)


@stack.register_meta
def _stack_meta(tensors, dim=0):
    first = _stack_check(tensors)
    tensors = list(tensors)
    d = wrap_dim(dim, len(first) + 1)
    dtype = tensors[0]._dtype
    for t in tensors[1:]:
        dtype = dt.promote_types(dtype, t._dtype)
    shape = first[:d] + (len(tensors),) + first[d:]
    return fake(shape, dtype, tensors[0], _stack_strides(tensors, d))


def _stack_grad(c, g):
    tensors, dim = c.args
    d = wrap_dim(dim, len(tensors[0].shape) + 1)
    return [OPS["select"](g, d, i) for i in range(len(tensors))], None


stack.register_derivative(_stack_grad, save_inputs=())


def _atleast(tensors, ndim: int, name: str):
    """``atleast_Nd``: one tensor in, one out; several (or a sequence) in, a tuple out."""
    single = len(tensors) == 1 and isinstance(tensors[0], Tensor)
    out = tuple(_atleast_one(t, ndim) for t in tensor_args(tensors, name))
    return out[0] if single else out


def _atleast_one(t: Tensor, ndim: int) -> Tensor:
    n = t.ndim
    if n >= ndim:
        return t
    if n == 0:
        return OPS["reshape"](t, (1,) * ndim)
    if ndim == 2:
        return OPS["unsqueeze"](t, 0)
    if n == 1:  # atleast_3d of a vector: (1, n, 1), as numpy
        return OPS["unsqueeze"](OPS["unsqueeze"](t, 0), 2)
    return OPS["unsqueeze"](t, 2)


@torch_function()
def atleast_1d(*tensors):
    return _atleast(tensors, 1, "atleast_1d")


@torch_function()
def atleast_2d(*tensors):
    return _atleast(tensors, 2, "atleast_2d")


@torch_function()
def atleast_3d(*tensors):
    return _atleast(tensors, 3, "atleast_3d")


@torch_function()
@writes_out
def hstack(tensors, *, out=None) -> Tensor:
    ts = [_atleast_one(t, 1) for t in tensor_sequence(tensors, "hstack")]
    return cat(ts, 0 if ts and ts[0].ndim == 1 else 1)


@torch_function()
@writes_out
def vstack(tensors, *, out=None) -> Tensor:
    return cat([_atleast_one(t, 2) for t in tensor_sequence(tensors, "vstack")], 0)


@torch_function()
@writes_out
def row_stack(tensors, *, out=None) -> Tensor:
    return cat([_atleast_one(t, 2) for t in tensor_sequence(tensors, "row_stack")], 0)


@torch_function()
@writes_out
def dstack(tensors, *, out=None) -> Tensor:
    return cat([_atleast_one(t, 3) for t in tensor_sequence(tensors, "dstack")], 2)


@torch_function()
@writes_out
def column_stack(tensors, *, out=None) -> Tensor:
    ts = tensor_sequence(tensors, "column_stack")
    return hstack([OPS["reshape"](t, (t.numel(), 1)) if t.ndim <= 1 else t for t in ts])


# ------------------------------------------------------------------------------ splitting


def _pieces(input: Tensor, d: int, sizes) -> tuple:
    out = []
    start = 0
    for n in sizes:
        out.append(OPS["slice"](input, d, start, start + n, 1))
        start += n
    return tuple(out)


@torch_function()
@tensor_method()
def split_with_sizes(input: Tensor, split_sizes, dim: int = 0) -> tuple:
    if input.ndim == 0:
        raise RuntimeError("split expects at least a 1-dimensional tensor")
    d = wrap_dim(dim, input.ndim)
    sizes = [as_int(s) for s in split_sizes]
    size = input.shape[d]
    if any(s < 0 for s in sizes):
        raise RuntimeError(
            f"split_with_sizes expects split_sizes have only non-negative entries, but got "
            f"split_sizes={sizes}"
        )
    if sum(sizes) != size:
        raise RuntimeError(
            f"split_with_sizes expects split_sizes to sum exactly to {size} (input tensor's size "
            f"at dimension {d}), but got split_sizes={sizes}"
        )
    return _pieces(input, d, sizes)


@tensor_method("split")
def _split_method(self: Tensor, split_size, dim: int = 0) -> tuple:
    return split(self, split_size, dim)


def _split_grad_fn_name(args, kwargs) -> str:
    sizes = args[1] if len(args) > 1 else kwargs.get("split_size_or_sections")
    return "SplitWithSizesBackward0" if isinstance(sizes, (list, tuple)) else "SplitBackward0"


@torch_function()
@renames_grad_fn(_split_grad_fn_name)
def split(input: Tensor, split_size_or_sections, dim: int = 0) -> tuple:
    if isinstance(split_size_or_sections, (list, tuple)):
        return split_with_sizes(input, split_size_or_sections, dim)
    if input.ndim == 0:
        raise RuntimeError("split expects at least a 1-dimensional tensor")
    d = wrap_dim(dim, input.ndim)
    step = as_int(split_size_or_sections)  # chunk's symbolic step stays symbolic
    size = input.shape[d]
    if step < 0:
        raise RuntimeError(f"split expects split_size be non-negative, but got split_size={step}")
    if step == 0 and size != 0:
        raise RuntimeError(
            f"split_size can only be 0 if dimension size is 0, but got dimension size of {size}"
        )
    count = max(-(-size // step), 1) if step else 1
    sizes = [step] * (count - 1) + [size - step * (count - 1)]
    return _pieces(input, d, sizes)


@torch_function()
@tensor_method()
@renames_grad_fn("SplitBackward0")
def chunk(input: Tensor, chunks: int, dim: int = 0) -> tuple:
    if input.ndim == 0:
        raise RuntimeError("chunk expects at least a 1-dimensional tensor")
    if chunks <= 0:
        raise RuntimeError(f"chunk expects `chunks` to be greater than 0, got: {chunks}")
    d = wrap_dim(dim, input.ndim)
    size = input.shape[d]
    step = -(-size // chunks)
    if step == 0:
        return _pieces(input, d, [0] * chunks)
    return split(input, step, d)


@torch_function()
@tensor_method()
def tensor_split(
    input: Tensor, indices_or_sections=None, dim: int = 0, *, sections=None, indices=None
) -> tuple:
    spec = next(s for s in (indices_or_sections, sections, indices, 1) if s is not None)
    if isinstance(spec, Tensor):
        if spec.dtype is not dt.int64:
            raise RuntimeError(
                "tensor_split expected tensor_indices_or_sections to have dtype of long, but got "
                f"{spec.dtype.name.capitalize()}"
            )
        if spec.ndim > 1:
            raise RuntimeError(
                "tensor_split expected tensor_indices_or_sections to be a zero-dimensional or "
                f"one-dimensional tensor, but got a tensor with {spec.ndim} dims"
            )
        spec = int(spec.item()) if spec.ndim == 0 else spec.tolist()
    if input.ndim == 0:
        raise RuntimeError(
            "tensor_split expected at least a 1-dimensional tensor, but got a tensor with 0 dims"
        )
    d = wrap_dim(dim, input.ndim)
    if isinstance(spec, (list, tuple)):
        bounds = [0] + [as_int(i) for i in spec]
        return tuple(
            OPS["slice"](input, d, lo, hi, 1) for lo, hi in zip(bounds, bounds[1:] + [None])
        )
    sections = int(spec)
    if sections <= 0:
        raise RuntimeError(f"number of sections must be larger than 0, got {sections}")
    base, extra = divmod(input.shape[d], sections)
    return _pieces(input, d, [base + (1 if i < extra else 0) for i in range(sections)])


# PyTorch's "unsafe" spellings skip a check on views kiln does not make: the same functions
for _unsafe, _safe in (
    ("unsafe_chunk", chunk),
    ("unsafe_split", split),
    ("unsafe_split_with_sizes", split_with_sizes),
):
    torch_function(_unsafe)(_safe)
    tensor_method(_unsafe)(_safe)
