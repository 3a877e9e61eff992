"""Shape functions: joining (cat, stack), splitting, repeating, flipping and rolling, broadcasting.

``cat`` is a prim; the rest are Python functions (registered as ``kiln.<name>`` and
``Tensor.<name>``) or composite ops whose decompositions record view prims and ``cat``, which is
all a graph needs. ``flip``/``roll`` keep numpy kernels for eager speed and decompose into
``index_select``/``cat`` for compilers. ``unfold`` is a view: a window of ``as_strided``.
"""

from __future__ import annotations

import warnings

import numpy as np

from ..runtime import dtypes as dt
from ..runtime.tensor import Size
from .common import Tensor, TensorList, broadcast_shapes, fake, wrap, wrap_dim, wrap_dims
from .registry import OPS, defop, tensor_method, torch_function

__all__ = ["transpose", "flatten", "unflatten", "narrow", "unbind", "movedim", "split", "chunk"]

_as_strided_np = np.lib.stride_tricks.as_strided


@torch_function("transpose", "swapaxes", "swapdims")
@tensor_method("transpose", "swapaxes", "swapdims")
def transpose(input: Tensor, dim0: int, dim1: int) -> Tensor:
    n = input.ndim
    d0 = wrap_dim(dim0, n)
    d1 = wrap_dim(dim1, n)
    if n < 2 or d0 == d1:
        return OPS["alias"](input) if n else input
    perm = list(range(n))
    perm[d0], perm[d1] = perm[d1], perm[d0]
    return OPS["permute"](input, perm)


@torch_function()
@tensor_method()
def flatten(input: Tensor, start_dim: int = 0, end_dim: int = -1) -> Tensor:
    n = input.ndim
    if n == 0:
        return OPS["reshape"](input, (1,))
    s = wrap_dim(start_dim, n)
    e = wrap_dim(end_dim, n)
    if s > e:
        raise RuntimeError("flatten() has invalid args: start_dim cannot come after end_dim")
    if s == e:
        return input
    shape = list(input.shape)
    merged = 1
    for d in range(s, e + 1):
        merged *= shape[d]
    return OPS["reshape"](input, shape[:s] + [merged] + shape[e + 1 :])


@torch_function()
@tensor_method()
def unflatten(input: Tensor, dim: int, sizes) -> Tensor:
    d = wrap_dim(dim, input.ndim)
    shape = list(input.shape)
    sizes = list(sizes)
    if -1 in sizes:
        known = 1
        for s in sizes:
            if s != -1:
                known *= s
        sizes[sizes.index(-1)] = shape[d] // known if known else 0
    return OPS["reshape"](input, shape[:d] + sizes + shape[d + 1 :])


@torch_function()
@tensor_method()
def narrow(input: Tensor, dim: int, start, length: int) -> Tensor:
    d = wrap_dim(dim, input.ndim)
    start = int(start.item()) if isinstance(start, Tensor) else int(start)
    size = input.shape[d]
    if start < 0:
        start += size
    if start < 0 or start + length > size or length < 0:
        raise RuntimeError(f"start ({start}) + length ({length}) exceeds dimension size ({size}).")
    return OPS["slice"](input, d, start, start + length, 1)


def _need_dims(input: Tensor, dim: int) -> None:
    if input.ndim == 0:
        raise IndexError(f"Dimension specified as {dim} but tensor has no dimensions")


@torch_function()
@tensor_method()
def unbind(input: Tensor, dim: int = 0) -> tuple:
    _need_dims(input, dim)
    d = wrap_dim(dim, input.ndim)
    return tuple(OPS["select"](input, d, i) for i in range(input.shape[d]))


@torch_function("movedim", "moveaxis")
@tensor_method("movedim", "moveaxis")
def movedim(input: Tensor, source, destination) -> Tensor:
    n = input.ndim
    src = [wrap_dim(s, n) for s in ((source,) if isinstance(source, int) else source)]
    dst = [
        wrap_dim(s, n) for s in ((destination,) if isinstance(destination, int) else destination)
    ]
    if len(src) != len(dst):
        raise RuntimeError("movedim: Invalid source or destination dims")
    order = [d for d in range(n) if d not in src]
    perm = [0] * n
    for s, t in zip(src, dst):
        perm[t] = s
    rest = iter(order)
    for i in range(n):
        if i not in dst:
            perm[i] = next(rest)
    return OPS["permute"](input, perm)


@tensor_method()
def view_as(self: Tensor, other: Tensor) -> Tensor:
    return OPS["view"](self, tuple(other.shape))


@tensor_method()
def reshape_as(self: Tensor, other: Tensor) -> Tensor:
    return OPS["reshape"](self, tuple(other.shape))


@tensor_method()
def expand_as(self: Tensor, other: Tensor) -> Tensor:
    return OPS["expand"](self, tuple(other.shape))


@tensor_method()
def select(self: Tensor, dim: int, index) -> Tensor:
    return OPS["select"](self, dim, int(index))


@torch_function("select")
def _select_fn(input: Tensor, dim: int, index) -> Tensor:
    return OPS["select"](input, dim, int(index))


@torch_function("broadcast_to")
@tensor_method("broadcast_to")
def broadcast_to(input: Tensor, size) -> Tensor:
    return OPS["expand"](input, tuple(size))


@torch_function("squeeze")
@tensor_method("squeeze")
def squeeze(input: Tensor, dim=None) -> Tensor:
    return OPS["squeeze"](input, dim)


@torch_function("reshape")
def _reshape_fn(input: Tensor, shape) -> Tensor:
    return OPS["reshape"](input, tuple(shape))


@torch_function("permute")
def _permute_fn(input: Tensor, dims) -> Tensor:
    return OPS["permute"](input, tuple(dims))


@torch_function("t")
def _t_fn(input: Tensor) -> Tensor:
    return input.t()


# ------------------------------------------------------------------------------ in-place views


def _inplace_view(self: Tensor, make_view) -> Tensor:
    """``squeeze_`` and friends: ``self`` takes the metadata (and history) of a view of itself.

    The view is made from a shallow twin of ``self``, so the recorded view chain (and the
    autograd edge) point at the tensor as it was, not at the mutated object.
    """
    from ..runtime import state

    if state.grad_enabled[0] and self._requires_grad and self.grad_fn is None:
        raise RuntimeError(
            "a leaf Variable that requires grad is being used in an in-place operation."
        )
    old = object.__new__(Tensor)
    for slot in ("_data", "_shape", "_dtype", "_device", "_storage", "_stride"):
        setattr(old, slot, getattr(self, slot))
    old.__dict__.update(self.__dict__)
    old._base = self._base
    old._view_src = self._view_src
    out = make_view(old)
    self._data = out._data
    self._shape = out._shape
    self._stride = out._stride
    if out._data is None:
        self._offset = out._offset
    if self._base is not None:
        self._view_src = out._view_src
    if out.grad_fn is not None:
        self.grad_fn = out.grad_fn
        self._output_nr = out._output_nr
    return self


@tensor_method()
def squeeze_(self: Tensor, dim=None) -> Tensor:
    return _inplace_view(self, lambda t: OPS["squeeze"](t, dim))


@tensor_method()
def unsqueeze_(self: Tensor, dim: int) -> Tensor:
    return _inplace_view(self, lambda t: OPS["unsqueeze"](t, dim))


@tensor_method("transpose_", "swapaxes_", "swapdims_")
def transpose_(self: Tensor, dim0: int, dim1: int) -> Tensor:
    return _inplace_view(self, lambda t: transpose(t, dim0, dim1))


@tensor_method()
def t_(self: Tensor) -> Tensor:
    return _inplace_view(self, lambda t: t.t())


# ------------------------------------------------------------------------------ cat / stack


@defop(kind="shape", prim=True)
def cat(tensors: TensorList, dim: int = 0): ...


def _is_legacy_empty(shape) -> bool:
    """1-D empty tensors are skipped by ``cat`` whatever the other shapes (PyTorch's legacy rule)."""
    return tuple(shape) == (0,)


def _cat_geometry(tensors, dim):
    """Output shape, wrapped dim and promoted dtype of ``cat``, with PyTorch's checks."""
    if not tensors:
        raise ValueError("torch.cat(): expected a non-empty list of Tensors")
    for i, t in enumerate(tensors):
        if not isinstance(t, Tensor):
            raise TypeError(
                f"cat(): expected Tensor as element {i} in argument 0, but got {type(t).__name__}"
            )
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


@cat.register_kernel
def _cat_kernel(tensors, dim):
    tensors = list(tensors)
    shape, d, dtype, kept = _cat_geometry(tensors, dim)
    if not kept:
        return wrap(np.empty(shape, dtype.np), dtype)
    arrays = [t._data if t._dtype is dtype else t._data.astype(dtype.np) for t in kept]
    return wrap(np.concatenate(arrays, axis=d), dtype)


@cat.register_meta
def _cat_meta(tensors, dim=0):
    tensors = list(tensors)
    shape, _, dtype, kept = _cat_geometry(tensors, dim)
    return fake(shape, dtype, (kept or tensors)[0])


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


@torch_function("concat", "concatenate")
def _concat(tensors, dim: int = 0, *, axis: int | None = None, out=None) -> Tensor:
    return cat(tensors, dim if axis is None else axis)


@defop(kind="shape")
def stack(tensors: TensorList, dim: int = 0): ...


@stack.register_decomposition
def _stack_decomp(tensors, dim=0):
    tensors = list(tensors)
    if not tensors:
        raise RuntimeError("stack expects a non-empty TensorList")
    first = tuple(tensors[0]._shape)
    for i, t in enumerate(tensors):
        if tuple(t._shape) != first:
            raise RuntimeError(
                f"stack expects each tensor to be equal size, but got {list(first)} at entry 0 "
                f"and {list(t._shape)} at entry {i}"
            )
    d = wrap_dim(dim, len(first) + 1)
    return cat([OPS["unsqueeze"](t, d) for t in tensors], d)


def _tensor_args(tensors, name: str) -> list:
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tensors[0]
    for t in tensors:
        if not isinstance(t, Tensor):
            raise TypeError(f"{name}(): expected Tensors, but got {type(t).__name__}")
    return list(tensors)


def _atleast(tensors, ndim: int, name: str):
    """``atleast_Nd``: one tensor in, one out; several (or a sequence) in, a tuple out."""
    single = len(tensors) == 1 and isinstance(tensors[0], Tensor)
    out = tuple(_atleast_one(t, ndim) for t in _tensor_args(tensors, name))
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
def hstack(tensors, *, out=None) -> Tensor:
    ts = [_atleast_one(t, 1) for t in _tensor_args((tensors,), "hstack")]
    return cat(ts, 0 if ts and ts[0].ndim == 1 else 1)


@torch_function("vstack", "row_stack")
def vstack(tensors, *, out=None) -> Tensor:
    return cat([_atleast_one(t, 2) for t in _tensor_args((tensors,), "vstack")], 0)


@torch_function()
def dstack(tensors, *, out=None) -> Tensor:
    return cat([_atleast_one(t, 3) for t in _tensor_args((tensors,), "dstack")], 2)


@torch_function()
def column_stack(tensors, *, out=None) -> Tensor:
    ts = _tensor_args((tensors,), "column_stack")
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
    sizes = [int(s) for s in split_sizes]
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


def _varargs(args: tuple, keyword) -> tuple:
    """``f(1, 2)``, ``f((1, 2))`` or ``f(name=(1, 2))``: PyTorch's int-list argument forms."""
    if keyword is not None:
        return (keyword,) if isinstance(keyword, int) else tuple(keyword)
    if len(args) == 1 and isinstance(args[0], (list, tuple, Size)):
        return tuple(args[0])
    return tuple(args)


@tensor_method("split")
def _split_method(self: Tensor, split_size, dim: int = 0) -> tuple:
    return split(self, split_size, dim)


@torch_function()
def split(input: Tensor, split_size_or_sections, dim: int = 0) -> tuple:
    if isinstance(split_size_or_sections, (list, tuple)):
        return split_with_sizes(input, split_size_or_sections, dim)
    if input.ndim == 0:
        raise RuntimeError("split expects at least a 1-dimensional tensor")
    d = wrap_dim(dim, input.ndim)
    step = int(split_size_or_sections)
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
        bounds = [0] + [int(i) for i in spec]
        return tuple(
            OPS["slice"](input, d, lo, hi, 1) for lo, hi in zip(bounds, bounds[1:] + [None])
        )
    sections = int(spec)
    if sections <= 0:
        raise RuntimeError(f"number of sections must be larger than 0, got {sections}")
    base, extra = divmod(input.shape[d], sections)
    return _pieces(input, d, [base + (1 if i < extra else 0) for i in range(sections)])


# ------------------------------------------------------------------------------ repeating


@defop(kind="shape")
def repeat(self: Tensor, repeats: list[int]): ...


@repeat.register_decomposition
def _repeat_decomp(x, repeats):
    repeats = tuple(int(r) for r in repeats)
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
    return OPS["view"](OPS["clone"](grid, memory_format="contiguous"), final)


@tensor_method("repeat")
def _repeat_method(self: Tensor, *sizes, repeats=None) -> Tensor:
    return repeat(self, _varargs(sizes, repeats))


@torch_function()
def tile(input: Tensor, dims) -> Tensor:
    dims = (dims,) if isinstance(dims, int) else tuple(dims)
    return repeat(input, (1,) * (input.ndim - len(dims)) + dims)


@tensor_method("tile")
def _tile_method(self: Tensor, *dims_args, dims=None) -> Tensor:
    return tile(self, _varargs(dims_args, dims))


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
        from .indexing import DataDependentOutputError

        raise DataDependentOutputError(
            "repeat_interleave with tensor repeats has a data-dependent output shape"
        )
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
    return OPS["view"](OPS["clone"](grid, memory_format="contiguous"), shape)


# ------------------------------------------------------------------------------ flip / roll / rot90


@defop(kind="shape")
def flip(self: Tensor, dims: list[int]): ...


def _flip_dims(x, dims):
    return wrap_dims((dims,) if isinstance(dims, int) else tuple(dims), x.ndim) if x.ndim else ()


@flip.register_kernel
def _flip_kernel(x, dims):
    axes = _flip_dims(x, dims)
    a = x._data
    return wrap((np.flip(a, axes) if axes else a).copy(), x._dtype)


@flip.register_meta
def _flip_meta(x, dims):
    _flip_dims(x, dims)
    return fake(x._shape, x._dtype, x)


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


@tensor_method("flip")
def _flip_method(self: Tensor, *dims_args, dims=None) -> Tensor:
    return flip(self, _varargs(dims_args, dims))


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
    shifts = (shifts,) if isinstance(shifts, int) else tuple(int(s) for s in shifts)
    if dims is None:
        if len(shifts) != 1:
            raise RuntimeError(f"shifts and dimensions must align. shifts: {len(shifts)}, dims:0")
        return shifts, None
    dims = (dims,) if isinstance(dims, int) else tuple(dims)
    if len(shifts) != len(dims):
        raise RuntimeError(
            f"shifts and dimensions must align. shifts: {len(shifts)}, dims:{len(dims)}"
        )
    return shifts, tuple(wrap_dim(d, x.ndim) for d in dims)


@roll.register_kernel
def _roll_kernel(x, shifts, dims):
    shifts, dims = _roll_args(x, shifts, dims)
    a = x._data
    out = np.roll(a, shifts[0]) if dims is None else np.roll(a, shifts, dims)
    return wrap(np.require(out, requirements="C"), x._dtype)


@roll.register_meta
def _roll_meta(x, shifts, dims=None):
    _roll_args(x, shifts, dims)
    return fake(x._shape, x._dtype, x)


def _roll_grad(c, g):
    x, shifts, dims = c.args
    shifts, _ = _roll_args(x, shifts, dims)
    return (roll(g, tuple(-s for s in shifts), dims),)


roll.register_derivative(_roll_grad, save_inputs=())


@roll.register_decomposition
def _roll_decomp(x, shifts, dims=None):
    shifts, dims = _roll_args(x, shifts, dims)
    if dims is None:
        return OPS["view"](roll(flatten(x), shifts, (0,)), tuple(x.shape))
    out = x
    for s, d in zip(shifts, dims):
        n = x.shape[d]
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


# ------------------------------------------------------------------------------ broadcasting


@torch_function("broadcast_shapes")
def _broadcast_shapes_fn(*shapes) -> Size:
    return Size(broadcast_shapes(*((s,) if isinstance(s, int) else tuple(s) for s in shapes)))


@torch_function()
def broadcast_tensors(*tensors) -> tuple:
    tensors = _tensor_args(tensors, "broadcast_tensors")
    shape = broadcast_shapes(*(t._shape for t in tensors))
    return tuple(t if t._shape == shape else OPS["expand"](t, shape) for t in tensors)


@torch_function()
def meshgrid(*tensors, indexing: str | None = None) -> tuple:
    """Coordinate grids as expanded views; ``indexing='xy'`` swaps the first two output dims."""
    tensors = _tensor_args(tensors, "meshgrid")
    if not tensors:
        raise RuntimeError("meshgrid expects a non-empty TensorList")
    if indexing is None:
        warnings.warn(
            "torch.meshgrid: in an upcoming release, it will be required to pass the indexing "
            "argument.",
            UserWarning,
            stacklevel=2,
        )
        indexing = "ij"
    if indexing not in ("ij", "xy"):
        raise RuntimeError(
            f'torch.meshgrid: indexing must be one of "xy" or "ij", but received: {indexing}'
        )
    for t in tensors:
        if t.ndim > 1:
            raise RuntimeError(
                f"torch.meshgrid: Expected 0D or 1D tensor in the tensor list but got a tensor of "
                f"shape {list(t.shape)}"
            )
        if t.dtype is not tensors[0].dtype:
            raise RuntimeError("meshgrid expects all tensors to have the same dtype")
        if t.device != tensors[0].device:
            raise RuntimeError("meshgrid expects all tensors to have the same device")
    n = len(tensors)
    order = list(range(n))
    if indexing == "xy" and n >= 2:
        order[0], order[1] = 1, 0
    sizes = [0] * n
    for i, t in enumerate(tensors):
        sizes[order[i]] = t.numel()
    out = []
    for i, t in enumerate(tensors):
        shape = [1] * n
        shape[order[i]] = t.numel()
        out.append(OPS["expand"](OPS["reshape"](t, shape), sizes))
    return tuple(out)


# ------------------------------------------------------------------------------ unfold (a view)


@defop(kind="view", view=True)
def unfold(self: Tensor, dimension: int, size: int, step: int): ...


def _unfold_geometry(x, dimension, size, step):
    d = wrap_dim(dimension, x.ndim)
    dim_size = x._shape[d] if x.ndim else 1
    if size < 0:
        raise RuntimeError(f"size is {size} but must be >= 0")
    if size > dim_size:
        raise RuntimeError(
            f"maximum size for tensor at dimension {d} is {dim_size} but size is {size}"
        )
    if step <= 0:
        raise RuntimeError(f"step is {step} but must be > 0")
    if x.ndim == 0:
        return [size], [1]
    shape, stride = list(x._shape), list(x.stride())
    shape[d] = (dim_size - size) // step + 1
    stride.append(stride[d])
    stride[d] *= step
    shape.append(size)
    return shape, stride


@unfold.register_kernel
def _unfold_kernel(x, dimension, size, step):
    shape, stride = _unfold_geometry(x, dimension, size, step)
    a = x._data
    item = a.itemsize
    r = _as_strided_np(a, tuple(shape), tuple(s * item for s in stride), writeable=True)
    return Tensor._wrap_view(r, x)


@unfold.register_meta
def _unfold_meta(x, dimension, size, step):
    shape, stride = _unfold_geometry(x, dimension, size, step)
    return fake(shape, x._dtype, x, stride, x._offset if x._data is None else 0)


def _unfold_grad(c, g):
    """Windows may overlap: each input element collects the gradient of every window holding it."""
    x, dimension, size, step = c.args
    if x.ndim == 0:
        return (g.sum(),)
    d = wrap_dim(dimension, x.ndim)
    windows = g.shape[d]
    arange = OPS["arange"]
    starts = arange(0, windows * step, step, dtype=dt.int64, device=g.device)
    index = starts.unsqueeze(1) + arange(0, size, 1, dtype=dt.int64, device=g.device)
    flat = flatten(movedim(g, -1, d + 1), d, d + 1)
    zeros = g.new_zeros(tuple(x.shape))
    return (OPS["index_add"](zeros, d, index.reshape(-1), flat),)


unfold.register_derivative(_unfold_grad, save_inputs=())


@unfold.register_decomposition
def _unfold_decomp(x, dimension, size, step):
    """Gather the windows with ``index_select``: overlapping windows then sum their gradients."""
    shape, _ = _unfold_geometry(x, dimension, size, step)
    if x.ndim == 0:
        return OPS["reshape"](x, (1,))[:size]
    d = wrap_dim(dimension, x.ndim)
    windows = shape[d]
    arange = OPS["arange"]
    starts = arange(0, windows * step, step, dtype=dt.int64, device=x.device)
    index = starts.unsqueeze(1) + arange(0, size, 1, dtype=dt.int64, device=x.device)
    picked = OPS["index_select"](x, d, index.reshape(-1))
    return movedim(unflatten(picked, d, (windows, size)), d + 1, -1)
