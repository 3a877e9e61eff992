"""Tensor methods PyTorch has that the op table does not give: ``narrow_copy``, ``type_as``,
``as_subclass``, ``module_load``, ``fill_diagonal_``, ``resize_``/``resize_as_`` and the
element-by-element Python escapes ``apply_``/``map_``. (In-place variants of linear-algebra and scan ops, ``addmm_``, ``cumsum_``...,
are generated from their ops' records, ``defop(inplace_method=True)``, like ``add_``.)

``resize_``, ``apply_`` and ``map_`` work on CPU data directly: they change storage or call
Python per element, which no graph can express (under capture they raise, a graph break).
"""

from __future__ import annotations

import numpy as np

from ...runtime import dtypes as dt
from ...runtime.device import cpu
from ...runtime.memory_format import contiguous_format
from ...runtime.storage import Storage
from ...runtime.symbolic import as_int, is_negative
from ...runtime.tensor import Size
from ..creation.api import tensor
from .common import Tensor, checked_scalar
from .out_arguments import writes_out
from .registry import OPS, tensor_method, torch_function

__all__: list[str] = []


@torch_function()
@writes_out
@tensor_method()
def narrow_copy(self: Tensor, dim: int, start: int, length: int) -> Tensor:
    """``narrow`` into fresh memory (contiguous, no view of ``self``)."""
    return self.narrow(dim, start, length).clone(memory_format=contiguous_format)


@tensor_method()
def type_as(self: Tensor, other: Tensor) -> Tensor:
    """``self`` converted to ``other``'s dtype and device (``self`` itself if they match)."""
    return self.to(device=other.device, dtype=other.dtype)


@tensor_method()
def as_subclass(self: Tensor, cls: type) -> Tensor:
    """``self``'s data as an instance of the Tensor subclass ``cls``, without calling its
    constructor: an alias (same storage, an ``AliasBackward0`` node when ``self`` requires
    grad), so writes through either show in both and gradients flow back to ``self``."""
    if not isinstance(cls, type):
        raise TypeError(f"cls must be a type (got {type(cls).__name__})")
    if not issubclass(cls, Tensor):
        raise TypeError(
            "Creating a Tensor subclass from a class that does not inherit from Tensor is not "
            "possible. Make sure your class inherits from Tensor."
        )
    out = OPS["alias"](self)
    try:
        out.__class__ = cls
    except TypeError:  # ``cls`` adds slots: a fresh object of it takes the alias's fields
        retyped = object.__new__(cls)
        for name in Tensor.__slots__:
            if name not in ("__dict__", "__weakref__") and hasattr(out, name):
                setattr(retyped, name, getattr(out, name))
        retyped.__dict__.update(out.__dict__)
        return retyped
    return out


@tensor_method()
def module_load(self: Tensor, other: Tensor, assign: bool = False) -> Tensor:
    """What ``Module.load_state_dict`` swaps in for the parameter or buffer ``self`` given the
    state dict's ``other``: ``other`` detached with ``assign``, else ``self`` after copying
    ``other`` into it, detached (a new object either way). Subclasses override it."""
    if assign:
        return other.detach()
    return self.copy_(other).detach()


def _diagonal_mask(shape: tuple, wrap: bool) -> np.ndarray:
    """Where ``fill_diagonal_`` writes: the positions with all indices equal; for a tall matrix
    with ``wrap`` the diagonal restarts every ``columns + 1`` rows (flat positions
    ``k * (columns + 1)``), as in PyTorch and numpy."""
    mask = np.zeros(int(np.prod(shape)), bool)
    if mask.size:
        if len(shape) == 2:
            step = shape[1] + 1
            stop = mask.size if wrap else min(shape) * shape[1]
        else:
            step = sum(shape[0] ** k for k in range(len(shape)))
            stop = mask.size
        mask[:stop:step] = True
    return mask.reshape(shape)


@tensor_method()
def fill_diagonal_(self: Tensor, fill_value, wrap: bool = False) -> Tensor:
    """Write ``fill_value`` on the main diagonal of a matrix (or of a tensor whose dims are all
    equal); the filled elements get no gradient, like ``masked_fill_``."""
    if self.ndim < 2:
        raise RuntimeError("dimensions must larger than 1")
    if self.ndim > 2 and len(set(self.shape)) > 1:
        raise RuntimeError("all dimensions of input must be of equal length")
    if isinstance(fill_value, Tensor):
        fill_value = fill_value.item()
    # cast the value to self's kind first (2.7 fills an int tensor with 2; -1.5 does not fit a
    # uint8 one), so that no decomposition of masked_fill can promote the result; a complex
    # tensor takes a real value as it is
    if self.dtype is dt.bool_:
        fill_value = bool(fill_value)
    elif self.dtype.category == 1:
        fill_value = int(checked_scalar(fill_value, self.dtype))
    mask = tensor(_diagonal_mask(tuple(self.shape), wrap), device=self.device)
    return self.masked_fill_(mask, fill_value)


def _size_args(sizes) -> tuple:
    if len(sizes) == 1 and isinstance(sizes[0], (tuple, list, Size)):
        sizes = tuple(sizes[0])
    shape = tuple(as_int(s) for s in sizes)
    for s in shape:
        if is_negative(s):
            raise RuntimeError(
                f"Trying to create tensor with negative dimension {s}: {list(shape)}"
            )
    return shape


def _writable_cpu_data(self: Tensor, what: str) -> np.ndarray:
    """``self``'s numpy data; a tensor without data (graph capture) raises the usual "it has no
    data" error, which dynamo turns into a graph break."""
    data = self._check_data(what)
    if self._device is not cpu:
        raise TypeError(f"{what} is only implemented on CPU tensors")
    return data


@tensor_method()
def resize_(self: Tensor, *sizes, memory_format=None) -> Tensor:
    """Give ``self`` a new shape with contiguous strides over the same storage from its offset;
    the storage grows (old contents kept, new elements zero) when it is too small. Growing gives
    ``self`` a new buffer: other views keep seeing the old one (PyTorch resizes the storage they
    share)."""
    shape = _size_args(sizes)
    if self._requires_grad:
        raise RuntimeError("cannot resize variables that require grad")
    data = _writable_cpu_data(self, "resize_")
    n = int(np.prod(shape, dtype=np.int64))
    storage = self._get_storage()
    base = storage.base
    offset = self.storage_offset()
    flat = base.reshape(-1) if base.flags.c_contiguous else None
    if flat is not None and flat.dtype != data.dtype:
        flat = flat.view(np.uint8)[: flat.nbytes - flat.nbytes % data.itemsize].view(data.dtype)
    if flat is not None and offset + n <= flat.size:
        self._data = flat[offset : offset + n].reshape(shape)
        storage.version += 1
    else:
        grown = np.zeros(offset + n, data.dtype)
        if flat is not None:
            kept = min(flat.size, grown.size)
            grown[:kept] = flat[:kept]
        else:
            grown[offset : offset + data.size] = data.reshape(-1)[:n]
        fresh = Storage(grown)
        fresh.version = storage.version + 1
        self._storage = fresh
        self._data = grown[offset : offset + n].reshape(shape)
    self._shape = shape
    self._stride = None
    return self


@tensor_method()
def resize_as_(self: Tensor, the_template: Tensor, *, memory_format=None) -> Tensor:
    """``resize_`` to ``the_template``'s shape."""
    return resize_(self, the_template.shape)


def _no_grad_escape(self: Tensor, name: str) -> None:
    if self._requires_grad:
        raise RuntimeError(
            f"Can't call {name}() on Variable that requires grad. Use var.detach().{name}() "
            "instead."
        )


def _store(self: Tensor, data: np.ndarray, values: list) -> Tensor:
    """Write Python results back (cast like an assignment: floats truncate into ints)."""
    result = np.asarray(values).reshape(data.shape)
    if result.dtype.kind == "f" and data.dtype.kind in "iu":
        result = np.trunc(result)
    np.copyto(data, result, casting="unsafe")
    self._get_storage().version += 1
    return self


@tensor_method()
def apply_(self: Tensor, callable) -> Tensor:  # noqa: A002
    """Replace each element ``v`` by ``callable(v)`` (a Python call per element; CPU only)."""
    _no_grad_escape(self, "apply_")
    data = _writable_cpu_data(self, "apply_")
    return _store(self, data, [callable(v) for v in data.ravel().tolist()])


@tensor_method()
def map_(self: Tensor, tensor: Tensor, callable) -> Tensor:  # noqa: A002
    """Replace each element ``a`` by ``callable(a, b)``, ``b`` the matching element of
    ``tensor`` broadcast to ``self``'s shape (same dtype required; CPU only)."""
    _no_grad_escape(self, "map_")
    data = _writable_cpu_data(self, "map_")
    if tensor.dtype is not self.dtype:
        raise TypeError(f"map_: expected {self.type()} for 'other' (got {tensor.type()})")
    other = tensor.detach().expand(self.shape)._read_numpy("map_")
    pairs = zip(data.ravel().tolist(), np.ravel(other).tolist())
    return _store(self, data, [callable(a, b) for a, b in pairs])
