"""The Tensor: a strided view of a buffer plus the autograd fields.

A CPU tensor wraps a numpy array that *is* the strided view (numpy shares memory between views
exactly as PyTorch does), so shape and strides are read off the array. A fake tensor (used while
capturing graphs) and a ``meta`` tensor have no data and carry shape, strides and offset
explicitly. Operator methods (``x.add``, ``x + y``, ``x[0]``) are attached by ``kiln.ops``;
``backward`` by ``kiln.autograd``; this module only knows storage and metadata.
"""

from __future__ import annotations

import copy

import numpy as np

from . import dtypes as _dt
from .device import cpu, device, meta
from .dtypes import c_type_name, torch_type_name
from .storage import Storage, data_address
from .symbolic import SymInt, same_shape, size_or_one

__all__ = ["Tensor", "Size", "contiguous_strides", "wrap_array", "make_fake"]


class Size(tuple):
    """``x.shape``: a tuple of ints with ``numel()``, printed like PyTorch."""

    __module__ = "kiln"  # printed as ``<class 'kiln.Size'>``, like torch's

    __slots__ = ()

    def __new__(cls, sizes=()):
        sizes = tuple(sizes)
        for i, s in enumerate(sizes):
            if type(s) is not int and type(s) is not SymInt:
                if not hasattr(s, "__index__"):
                    raise TypeError(
                        f"kiln.Size() takes an iterable of 'int' (item {i} is '{type(s).__name__}')"
                    )
                return tuple.__new__(
                    cls, (v if type(v) is SymInt else v.__index__() for v in sizes)
                )
        return tuple.__new__(cls, sizes)

    def numel(self) -> int:
        n = 1
        for s in self:
            n *= s
        return n

    def __repr__(self) -> str:
        return f"kiln.Size([{', '.join(str(s) for s in self)}])"

    def __getitem__(self, item):
        out = tuple.__getitem__(self, item)
        return _new_size(out) if isinstance(item, slice) else out

    def __add__(self, other):
        if not isinstance(other, tuple):
            return NotImplemented
        return _new_size(tuple.__add__(self, other))

    def __radd__(self, other):
        if not isinstance(other, tuple):
            return NotImplemented
        return _new_size(tuple.__add__(other, self))

    def __mul__(self, times):
        return _new_size(tuple.__mul__(self, times))

    __rmul__ = __mul__

    def __reduce__(self):
        return (Size, (tuple(self),))


def _new_size(sizes: tuple) -> Size:
    """A ``Size`` from a tuple of ints, skipping the item checks of ``Size(...)``."""
    return tuple.__new__(Size, sizes)


def contiguous_strides(shape: tuple) -> tuple:
    strides = []
    acc = 1
    for s in reversed(shape):
        strides.append(acc)
        acc *= max(s, 1) if s.__class__ is int else size_or_one(s)
    return tuple(reversed(strides))


def _on_device(device_type: str) -> property:
    """``Tensor.is_<device>``: whether the tensor lives on that kind of device."""
    return property(
        lambda self: self._device.type == device_type,
        doc=f"True if the tensor is on a {device_type} device.",
    )


# [whether any inference tensor was made in this process]: until one is, in-place ops and
# autograd nodes need not look for them
INFERENCE_SEEN = [False]


def mark_inference(t: Tensor, writable: bool = False) -> None:
    """Make ``t`` an inference tensor (made under ``inference_mode``, or a view of one).

    ``writable``: ``t`` is a ``detach()`` (or ``.data``) of one, which PyTorch gives a version
    counter of its own: in-place writes to it are allowed outside ``inference_mode`` (to its
    views not), while saving it for backward or making it require grad are still refused."""
    INFERENCE_SEEN[0] = True
    t._inference = True
    if writable:
        t._inference_writable = True


INFERENCE_SAVED = (
    "Inference tensors cannot be saved for backward. Please do not use Tensors created in "
    "inference mode in computation tracked by autograd. To work around this, you can make a "
    "clone to get a normal tensor and use it in autograd, or use `kiln.no_grad()` instead of "
    "`kiln.inference_mode()`."
)


class Tensor:
    """A multi-dimensional array with PyTorch's semantics (see the module docstring)."""

    __module__ = "kiln"  # printed as ``<class 'kiln.Tensor'>``, like torch's

    # hot fields live in slots; rare ones (grad, hooks, views) default from the class attributes
    __slots__ = (
        "_data",
        "_shape",
        "_dtype",
        "_device",
        "_storage",
        "_stride",
        "__dict__",
        "__weakref__",
    )

    _offset = 0
    _requires_grad = False
    grad_fn = None
    _output_nr = 0
    _grad = None
    _hooks = None
    _retains_grad = False
    _post_accumulate_hooks = None
    _is_param = False
    # a view made with grad mode off of a tensor that requires grad: it requires grad too (as
    # in PyTorch), but has no history while grad_fn is None: gradients reaching it are dropped
    # and an in-place op on it with grad mode on is an error
    _no_grad_view = False
    # a view's storage version when its history was recorded (-1: no view history): an in-place
    # op through another view of its base changes the version, and its history is then made
    # again from the base's (``dispatch.fresh_view_edge``), as PyTorch regenerates a view's
    # grad_fn
    _view_version = -1
    # made under ``inference_mode`` (see ``dispatch._inference_outputs``), or a view of such
    _inference = False
    # a view a custom Function returned: (output index, the Function's name); an in-place op on
    # it is PyTorch's error (its view history would replace the Function's backward)
    _custom_function_view = None
    # an output of split/chunk/unbind with history: (output index, "Split"/"Unbind"); an in-place
    # op on it is PyTorch's error (the pieces share their view history)
    _multi_output_view = None
    _inference_writable = False  # see ``mark_inference``
    _fw_grad = None  # the tangent in the open forward-AD level (``autograd.forward_ad``)

    # ------------------------------------------------------------------ construction
    def __new__(cls, *args, **kwargs):
        # ``kiln.Tensor(data)`` and ``kiln.Tensor(2, 3)`` as PyTorch's legacy constructor
        self = object.__new__(cls)
        if args or kwargs:
            from ..ops.creation.api import legacy_tensor_constructor

            return legacy_tensor_constructor(args, kwargs)
        self._data = np.empty((0,), np.float32)
        self._shape = (0,)
        self._dtype = _dt.float32
        self._device = cpu
        self._storage = None
        self._stride = None
        self._base = None
        self._view_src = None
        return self

    def __init__(self, *args, **kwargs):
        pass

    # ------------------------------------------------------------------ metadata
    @property
    def shape(self) -> Size:
        return _new_size(self._shape)

    def size(self, dim: int | None = None):
        if dim is None:
            return _new_size(self._shape)
        return self._shape[_wrap_dim(dim, len(self._shape))]

    @property
    def dtype(self) -> _dt.dtype:
        return self._dtype

    @property
    def device(self) -> device:
        return self._device

    @property
    def ndim(self) -> int:
        return len(self._shape)

    def dim(self) -> int:
        return len(self._shape)

    def ndimension(self) -> int:
        return len(self._shape)

    def numel(self) -> int:
        n = 1
        for s in self._shape:
            n *= s
        return n

    nelement = numel

    def element_size(self) -> int:
        return self._dtype.itemsize

    @property
    def itemsize(self) -> int:
        return self._dtype.itemsize

    @property
    def nbytes(self) -> int:
        return self.numel() * self._dtype.itemsize

    def stride(self, dim: int | None = None):
        st = self._stride
        if st is None:
            st = self._stride = self._strides_of_data()
        if dim is None:
            return st
        return st[_wrap_dim(dim, len(self._shape))]

    def _strides_of_data(self) -> tuple:
        """Strides read off the numpy array, except where numpy and PyTorch disagree: numpy
        zeroes an empty array's strides and picks its own for size-1 dims of views (neither
        changes which elements are addressed), so a view with such dims takes the strides its
        op's meta function computes, as PyTorch does."""
        data = self._data
        shape = self._shape
        src = self._view_src
        if src is not None and (1 in shape or data.size == 0):
            op, args = src
            out = op.meta(*args)
            if out.__class__ is Tensor:
                return out._stride if out._stride is not None else out.stride()
        if data.size == 0:
            return contiguous_strides(shape)
        item = data.itemsize
        st = tuple(s // item for s in data.strides)
        if any(s < 0 for s in st):
            raise RuntimeError("internal error: negative stride in a kiln tensor")
        return st

    def storage_offset(self) -> int:
        data = self._data
        if data is None:
            return self._offset
        if self._device is not cpu:  # a device array (kiln.runtime.cuda.CudaArray)
            return data.offset
        base = self._get_storage().base
        return (data_address(data) - data_address(base)) // data.itemsize

    def data_ptr(self) -> int:
        data = self._data
        if data is None:
            return 0
        if self._device is not cpu:
            return data.data_ptr()
        return data_address(data)

    def _get_storage(self) -> Storage:
        st = self._storage
        if st is None:
            base = self._data
            if base is not None:
                while isinstance(base.base, np.ndarray):
                    base = base.base
            st = self._storage = Storage(base)
        return st

    def untyped_storage(self) -> Storage:
        return self._get_storage()

    @property
    def _version(self) -> int:
        return self._get_storage().version

    def _bump_version(self) -> None:
        self._get_storage().version += 1

    def is_contiguous(self, memory_format=None) -> bool:
        if memory_format is not None:
            from .memory_format import is_contiguous_as

            return is_contiguous_as(self._shape, self.stride(), memory_format)
        shape = self._shape
        if 0 in shape:
            return True
        expected = 1
        strides = self.stride()
        for size, st in zip(reversed(shape), reversed(strides)):
            # the stride first: a symbolic size is only compared with 1 where it matters
            if st != expected and size != 1:
                return False
            expected *= size
        return True

    @property
    def is_meta(self) -> bool:
        return self._device is meta

    # PyTorch's device predicates, one per backend: kiln's tensors live on the CPU or CUDA
    is_cpu = _on_device("cpu")
    is_cuda = _on_device("cuda")
    is_xpu = _on_device("xpu")
    is_mps = _on_device("mps")
    is_hpu = _on_device("hpu")
    is_ipu = _on_device("ipu")
    is_xla = _on_device("xla")
    is_maia = _on_device("maia")
    is_mtia = _on_device("mtia")
    is_vulkan = _on_device("vulkan")

    @property
    def is_fake(self) -> bool:
        """True for shape-only tensors used during graph capture (no data, not ``meta``)."""
        return self._data is None and self._device is not meta

    def is_floating_point(self) -> bool:
        return self._dtype.is_floating_point

    def is_complex(self) -> bool:
        return self._dtype.is_complex

    @property
    def layout(self):
        from .layouts import strided

        return strided

    # layouts and kinds of tensor kiln does not have (every kiln tensor is dense and strided)
    is_sparse = False
    is_sparse_csr = False
    is_quantized = False
    is_mkldnn = False
    is_nested = False

    @property
    def output_nr(self) -> int:
        """Which output of its ``grad_fn`` this tensor is."""
        return self._output_nr

    def dim_order(self) -> tuple:
        """The dims from outermost to innermost in memory (largest stride first)."""
        strides = self.stride()
        return tuple(sorted(range(len(strides)), key=lambda d: -strides[d]))

    def is_shared(self) -> bool:
        return self._get_storage().shared

    def share_memory_(self) -> Tensor:
        """Move the storage into memory other processes map (``runtime.shared_memory``): passed
        to a ``kiln.multiprocessing`` process or queue, the tensor is the same memory there."""
        if self._device is cpu and self._data is not None:
            from .shared_memory import share_storage

            share_storage(self)
        else:
            self._get_storage().shared = True
        return self

    # ------------------------------------------------------------------ autograd fields
    @property
    def requires_grad(self) -> bool:
        return self._requires_grad

    @requires_grad.setter
    def requires_grad(self, value: bool) -> None:
        value = bool(value)
        if not self.is_leaf:
            if not value:
                raise RuntimeError(
                    "you can only change requires_grad flags of leaf variables. If you want to "
                    "use a computed variable in a subgraph that doesn't require differentiation "
                    "use var_no_grad = var.detach()."
                )
            return
        if value and self._dtype.category < 2:  # neither floating nor complex
            raise RuntimeError("only Tensors of floating point dtype can require gradients")
        if value and self._inference:
            from .state import per_thread

            if not per_thread.state.inference_mode:
                raise RuntimeError(
                    "Setting requires_grad=True on inference tensor outside InferenceMode is "
                    "not allowed."
                )
        self._requires_grad = value

    def requires_grad_(self, requires_grad: bool = True) -> Tensor:
        self.requires_grad = requires_grad
        return self

    def is_inference(self) -> bool:
        """Whether this tensor was made under ``kiln.inference_mode`` (or is a view of one)."""
        return self._inference

    @property
    def is_leaf(self) -> bool:
        return self.grad_fn is None

    @property
    def grad(self):
        return self._grad

    @grad.setter
    def grad(self, value) -> None:
        if value is not None:
            if not isinstance(value, Tensor):
                raise TypeError(
                    f"assigned grad expected to be a Tensor or None but got {type(value).__name__}"
                )
            if not same_shape(value._shape, self._shape):
                raise RuntimeError(
                    f"attempting to assign a gradient of size '{list(value._shape)}' to a tensor "
                    f"of size '{list(self._shape)}'. Please ensure that the gradient and the "
                    "tensor are the same size"
                )
            if value._dtype is not self._dtype:  # PyTorch's check (grad_dtype: the dtype)
                raise RuntimeError(
                    f"attempting to assign a gradient with dtype '{c_type_name(value._dtype)}' "
                    f"to a tensor with grad_dtype '{torch_type_name(self._dtype)}'. The gradient "
                    "must match the tensor's grad_dtype (defaults to the tensor's dtype)."
                )
        self._grad = value

    @property
    def retains_grad(self) -> bool:
        return self._retains_grad

    def _is_view(self) -> bool:
        return self._base is not None

    def _is_view_fn(self) -> bool:
        return self._base is not None

    def is_view(self) -> bool:
        return self._base is not None

    # ------------------------------------------------------------------ Python protocol
    def __len__(self) -> int:
        if not self._shape:
            raise TypeError("len() of a 0-d tensor")
        return self._shape[0]

    def __hash__(self) -> int:
        return id(self)

    def __array__(self, dtype=None, copy=None):
        arr = self.numpy()
        return arr if dtype is None else arr.astype(dtype)

    # numpy defers ``np.float64(2) * t`` and ``array > t`` to the tensor's reflected operator,
    # and wraps ufunc results (``np.sqrt(t)``, ``t + array``) back into tensors, as with PyTorch
    __array_priority__ = 1000

    def __array_wrap__(self, array, context=None, return_scalar=False):
        if array.dtype == np.bool_:
            array = array.astype(np.uint8)  # PyTorch's (historical) choice
        return wrap_array(np.require(array, requirements="C"), _dt.from_numpy_dtype(array.dtype))

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        """The tensor's memory as a DLPack capsule, made by numpy (which holds CPU buffers)."""
        if self._requires_grad:
            raise BufferError("Can't export tensors that require gradient, use tensor.detach()")
        if self._device.type != "cpu" or self._dtype is _dt.bfloat16:
            raise BufferError(
                f"kiln can export only CPU tensors of dtypes numpy knows through DLPack, not a "
                f"{self._dtype} tensor on {self._device}"
            )
        given = {"max_version": max_version, "dl_device": dl_device, "copy": copy}
        options = {k: v for k, v in given.items() if v is not None}
        return np.asarray(self._check_data("export")).__dlpack__(stream=stream, **options)

    def __dlpack_device__(self) -> tuple[int, int]:
        """(DLPack device type, index): 1 for the CPU, 2 for CUDA."""
        if self._device.type == "cuda":
            return (2, self._device.index or 0)
        return (1, 0)

    def __reduce_ex__(self, protocol):
        return (_rebuild_tensor, (self.detach().numpy().copy(), self._requires_grad))

    def __copy__(self):
        """A new tensor on the same storage, as PyTorch's (``copy.copy`` shares the data)."""
        out = self.detach()
        out._requires_grad = self._requires_grad
        return out

    def __deepcopy__(self, memo):
        """PyTorch's deep copy of a leaf: each storage copied once per ``deepcopy`` (views of one
        tensor stay views of one copy), with ``requires_grad``, ``.grad`` and user attributes."""
        if id(self) in memo:
            return memo[id(self)]
        if self.grad_fn is not None:
            raise RuntimeError(_DEEPCOPY_NON_LEAF)
        data = self._data
        result = None
        if data is not None and self._device.type == "cpu":
            storage = self._get_storage()
            base = storage.base
            copied = memo.get(id(storage))
            if copied is None and base is not None and base.flags.c_contiguous:
                copied = Storage(base.copy())
                memo[id(storage)] = copied
                memo.setdefault(id(memo), []).append(storage)  # keep the id's owner alive
            if copied is not None:
                offset = data.__array_interface__["data"][0] - storage.data_ptr()
                array = np.ndarray(
                    data.shape, data.dtype, copied.base, offset=offset, strides=data.strides
                )
                result = wrap_array(array, self._dtype)
                result._storage = copied
        if result is None:  # other devices and layouts: a fresh copy of the values
            result = _rebuild_tensor(self.detach().numpy().copy(), False)
        result._requires_grad = self._requires_grad
        memo[id(self)] = result
        if self._grad is not None:
            result._grad = copy.deepcopy(self._grad, memo)
        for name, value in self.__dict__.items():
            if not name.startswith("_"):
                setattr(result, name, copy.deepcopy(value, memo))
        return result

    def __format__(self, spec: str) -> str:
        if not self._shape and self._data is not None:
            return format(self.item(), spec)
        if spec:
            raise TypeError("unsupported format string passed to Tensor.__format__")
        return repr(self)

    @staticmethod
    def _wrap_view(array: np.ndarray, src: Tensor) -> Tensor:
        """Wrap a numpy view of ``src``'s data; dispatch links storage and base afterwards."""
        return wrap_array(array, src._dtype)

    def _check_data(self, what: str):
        if self._data is None:
            kind = "meta" if self._device is meta else "fake (being captured into a graph)"
            raise RuntimeError(f"cannot {what} a {kind} tensor: it has no data")
        return self._data


# Attributes that depend only on shape, dtype, device and layout: constants when code reading
# them is captured into a graph (the tensor's guards pin all of those)
METADATA_ATTRIBUTES = frozenset(
    {
        "shape", "dtype", "device", "ndim", "requires_grad", "layout", "itemsize", "nbytes",
        "is_meta", "is_cpu", "is_cuda", "is_xpu", "is_mps", "is_hpu", "is_ipu", "is_xla",
        "is_maia", "is_mtia", "is_vulkan", "is_sparse", "is_sparse_csr", "is_quantized",
        "is_mkldnn", "is_nested",
    }
)  # fmt: skip


_DEEPCOPY_NON_LEAF = (
    "Only Tensors created explicitly by the user (graph leaves) support the deepcopy protocol at "
    "the moment.  If you were attempting to deepcopy a module, this may be because of a "
    "torch.nn.utils.weight_norm usage, see https://github.com/pytorch/pytorch/pull/103001"
)


def _rebuild_tensor(array, requires_grad):
    t = wrap_array(np.require(array, requirements="C"), _dt.from_numpy_dtype(array.dtype))
    t._requires_grad = requires_grad
    return t


def _wrap_dim(dim: int, ndim: int) -> int:
    lo = -max(ndim, 1)
    hi = max(ndim, 1) - 1
    if not lo <= dim <= hi:
        raise IndexError(
            f"Dimension out of range (expected to be in range of [{lo}, {hi}], but got {dim})"
        )
    return dim + ndim if dim < 0 else dim


_new = object.__new__


def wrap_array(array: np.ndarray, dtype: _dt.dtype, storage: Storage | None = None) -> Tensor:
    """Make a CPU tensor around ``array`` without copying (the hot path of every kernel)."""
    t = _new(Tensor)
    t._data = array
    t._shape = array.shape
    t._dtype = dtype
    t._device = cpu
    t._storage = storage
    t._stride = None
    t._base = None
    t._view_src = None
    return t


def make_fake(shape, dtype: _dt.dtype, dev: device, stride=None, offset: int = 0) -> Tensor:
    """A data-less tensor carrying only metadata (graph capture and the ``meta`` device)."""
    t = _new(Tensor)
    t._data = None
    t._shape = tuple(shape)
    t._dtype = dtype
    t._device = dev
    t._storage = None
    t._base = None
    t._view_src = None
    t._stride = tuple(stride) if stride is not None else contiguous_strides(t._shape)
    if offset.__class__ is not int or offset:  # a symbolic offset (a select past an unbacked size)
        t._offset = offset
    return t
