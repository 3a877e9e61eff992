"""Shape functions: transpose/flatten/narrow/movedim and friends, in-place views, broadcasting.

These are Python functions (registered as ``kiln.<name>`` and ``Tensor.<name>``) over the view
prims, plus ``unfold``, a view op: a window of ``as_strided`` whose decomposition gathers the
windows with ``index_select``. Joining and splitting live in ``cat_split``; repeating, flipping
and rolling in ``repeat_flip``.
"""

from __future__ import annotations

import warnings

import numpy as np

from ...runtime import dtypes as dt
from ...runtime.memory_format import preserved_strides
from ...runtime.symbolic import SymInt, known_same_shape
from ...runtime.tensor import Size
from ..core.common import (
    Tensor,
    broadcast_shapes,
    fake,
    laid_out_as,
    tensor_sequence,
    wrap_dim,
)
from ..core.dispatch import dispatch
from ..core.grad_fn_naming import renames_grad_fn
from ..core.registry import OPS, defop, tensor_method, torch_function

__all__ = [
    "transpose",
    "flatten",
    "unflatten",
    "narrow",
    "unbind",
    "movedim",
    "tensor_args",
    "unfold_scatter",
]


_as_strided_np = np.lib.stride_tricks.as_strided


@torch_function("transpose", "swapaxes", "swapdims")
@tensor_method("transpose", "swapaxes", "swapdims")
@renames_grad_fn("TransposeBackward0")
def transpose(input: Tensor, dim0: int, dim1: int) -> Tensor:
    n = len(input._shape)
    if dim0.__class__ is int and dim1.__class__ is int and -n <= dim0 < n and -n <= dim1 < n:
        d0 = dim0 + n if dim0 < 0 else dim0  # (the common call, without wrap_dim's checks)
        d1 = dim1 + n if dim1 < 0 else dim1
    else:
        d0 = wrap_dim(dim0, n)
        d1 = wrap_dim(dim1, n)
    if n < 2 or d0 == d1:
        return OPS["alias"](input)  # a view of its own, as PyTorch's (a 0-d one too)
    perm = list(range(n))
    perm[d0], perm[d1] = perm[d1], perm[d0]
    return dispatch(OPS["permute"], (input, perm))  # (bound already: no schema binding)


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
    if not input.ndim:
        raise RuntimeError("narrow() cannot be applied to a 0-dim tensor.")
    d = wrap_dim(dim, input.ndim)
    if isinstance(start, Tensor):
        start = int(start.item())
    elif start.__class__ is not SymInt:  # a symbolic start stays one (cat's backward narrows
        start = int(start)  # at the sizes before it: int() would pin them)
    size = input.shape[d]
    if not -size <= start <= size:
        raise IndexError(
            f"start out of range (expected to be in range of [{-size}, {size}], but got {start})"
        )
    if length < 0:
        raise RuntimeError("narrow(): length must be non-negative.")
    if start < 0:
        start += size
    if start + length > size:
        raise RuntimeError(f"start ({start}) + length ({length}) exceeds dimension size ({size}).")
    return OPS["slice"](input, d, start, start + length, 1)


def _need_dims(input: Tensor, dim: int) -> None:
    if input.ndim == 0:
        raise IndexError(f"Dimension specified as {dim} but tensor has no dimensions")


@torch_function()
@tensor_method()
@renames_grad_fn("UnbindBackward0")
def unbind(input: Tensor, dim: int = 0) -> tuple:
    _need_dims(input, dim)
    d = wrap_dim(dim, input.ndim)
    return tuple(OPS["select"](input, d, i) for i in range(input.shape[d]))


@torch_function("movedim", "moveaxis")
@tensor_method("movedim", "moveaxis")
def movedim(input: Tensor, source, destination) -> Tensor:
    n = input.ndim
    if n == 0:  # dims 0 and -1 name the scalar itself (wrap_dim checks them): nothing moves
        for d in ([source] if isinstance(source, int) else list(source)) + (
            [destination] if isinstance(destination, int) else list(destination)
        ):
            wrap_dim(d, 0)
        return OPS["permute"](input, [])
    given_src = [source] if isinstance(source, int) else list(source)
    given_dst = [destination] if isinstance(destination, int) else list(destination)
    if len(given_src) != len(given_dst):
        raise RuntimeError(
            f"movedim: Invalid source or destination dims: source ({given_src} dims) should "
            f"contain the same number of dims as destination ({given_dst} dims)"
        )
    src = [wrap_dim(s, n) for s in given_src]
    dst = [wrap_dim(s, n) for s in given_dst]
    for name, given, dims in (("source", given_src, src), ("destination", given_dst, dst)):
        if len(set(dims)) != len(dims):
            raise RuntimeError(f"movedim: repeated dim in `{name}` ({given})")
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


def int_list_args(args: tuple, keyword) -> tuple:
    """``f(1, 2)``, ``f((1, 2))`` or ``f(name=(1, 2))``: PyTorch's int-list argument forms."""
    if keyword is not None:
        return (keyword,) if isinstance(keyword, int) else tuple(keyword)
    if len(args) == 1 and isinstance(args[0], (list, tuple, Size)):
        return tuple(args[0])
    return tuple(args)


@torch_function("broadcast_to")
def broadcast_to(input: Tensor, size) -> Tensor:
    return OPS["expand"](input, int_list_args((size,), None))


@tensor_method("broadcast_to")
def _broadcast_to_method(self: Tensor, *sizes, size=None) -> Tensor:
    return OPS["expand"](self, int_list_args(sizes, size))


@tensor_method("sum_to_size")
def _sum_to_size_method(self: Tensor, *sizes, size=None) -> Tensor:
    return OPS["sum_to_size"](self, int_list_args(sizes, size))


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
    from ...runtime.state import per_thread

    if per_thread.state.grad_enabled and self._requires_grad and self.grad_fn is None:
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


# ------------------------------------------------------------------------------ broadcasting


def tensor_args(tensors: tuple, name: str) -> list:
    """The tensors of ``f(t1, t2)`` or ``f([t1, t2])`` (checked to be tensors): the argument
    convention of meshgrid and atleast_Nd (broadcast_tensors takes ``f(t1, t2)`` only)."""
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tensors[0]
    return tensor_sequence(tensors, name)


@torch_function("broadcast_shapes")
def _broadcast_shapes_fn(*shapes) -> Size:
    return Size(broadcast_shapes(*((s,) if isinstance(s, int) else tuple(s) for s in shapes)))


@torch_function()
def broadcast_tensors(*tensors) -> tuple:
    tensors = tensor_sequence(tensors, "broadcast_tensors")
    shape = broadcast_shapes(*(t._shape for t in tensors))
    return tuple(
        t if known_same_shape(t._shape, shape) else OPS["expand"](t, shape) for t in tensors
    )


@torch_function()
def meshgrid(*tensors, indexing: str | None = None) -> tuple:
    """Coordinate grids as expanded views; ``indexing='xy'`` swaps the first two output dims."""
    tensors = tensor_args(tensors, "meshgrid")
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


def _window_index(windows, size, step, device):
    """The flat positions along the unfolded dimension that each window's elements read."""
    arange = OPS["arange"]
    starts = arange(0, windows * step, step, dtype=dt.int64, device=device)
    index = starts.unsqueeze(1) + arange(0, size, 1, dtype=dt.int64, device=device)
    return index.reshape(-1)


@unfold.register_decomposition
def _unfold_decomp(x, dimension, size, step):
    """Gather the windows with ``index_select``: overlapping windows then sum their gradients.
    The gathered copy is laid out like eager's view (dense in its dim order), so what reads
    its layout (a view scatter, a clone, an output) sees eager's strides."""
    shape, stride = _unfold_geometry(x, dimension, size, step)
    if x.ndim == 0:
        return OPS["reshape"](x, (1,))[:size]
    d = wrap_dim(dimension, x.ndim)
    windows = shape[d]
    picked = OPS["index_select"](x, d, _window_index(windows, size, step, x.device))
    out = movedim(unflatten(picked, d, (windows, size)), d + 1, -1)
    if any(v.__class__ is not int for v in (*shape, *stride)):
        return out
    return laid_out_as(out, preserved_strides(tuple(shape), tuple(stride), None, "unfold"))


def unfold_scatter(x: Tensor, src: Tensor, dimension: int, size: int, step: int) -> Tensor:
    """``x`` with ``x.unfold(dimension, size, step)`` replaced by ``src``, out of place (what
    functionalization writes back through an ``unfold`` view). Windows must not overlap
    (``step >= size``): an overlapping element would take one window's value arbitrarily."""
    if x.ndim == 0:
        return OPS["reshape"](src, ())
    shape, _ = _unfold_geometry(x, dimension, size, step)
    d = wrap_dim(dimension, x.ndim)
    windows = shape[d]
    flat = flatten(movedim(src, -1, d + 1), d, d + 1)
    return OPS["index_copy"](x, d, _window_index(windows, size, step, x.device), flat)
