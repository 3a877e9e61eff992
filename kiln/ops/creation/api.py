"""The ``kiln.*`` creation functions with PyTorch's argument conventions.

``kiln.zeros(2, 3)``, ``kiln.zeros((2, 3))``, ``kiln.tensor([[1, 2]])``... parse their arguments
here and call the creation ops; ``requires_grad`` is applied afterwards (creation ops are leaves).
"""

from __future__ import annotations

import numbers
import warnings

import numpy as np

from ...runtime import dtypes as dt
from ...runtime.device import as_device, cpu, meta
from ...runtime.memory_format import (
    check_memory_format,
    format_strides,
    preserve_format,
    preserved_strides,
)
from ...runtime.state import per_thread
from ...runtime.storage import Storage
from ...runtime.symbolic import SymInt, as_int, sym_int
from ...runtime.tensor import (
    Size,
    Tensor,
    contiguous_strides,
    make_fake,
    mark_inference,
    wrap_array,
)
from ..core.common import checked_scalar
from ..core.out_arguments import writes_out
from ..core.registry import OPS, torch_function
from .factories import check_size, logspace_values

__all__ = [
    "tensor",
    "as_tensor",
    "from_numpy",
    "asarray",
    "zeros",
    "ones",
    "empty",
    "full",
    "zeros_like",
    "ones_like",
    "empty_like",
    "full_like",
    "rand_like",
    "randn_like",
    "randint_like",
    "arange",
    "linspace",
    "logspace",
    "eye",
    "rand",
    "randn",
    "randint",
    "randperm",
    "normal",
    "multinomial",
    "bernoulli",
    "scalar_tensor",
    "empty_strided",
    "result_type",
    "promote_types",
    "is_tensor",
    "is_inference",
    "is_floating_point",
    "numel",
]


def _size(args, fn: str = "zeros", keyword=None) -> tuple:
    """A size from ``f(2, 3)``, ``f((2, 3))`` or ``f(size=(2, 3))`` (``keyword``), with the
    TypeErrors PyTorch's parser raises."""
    if keyword is not None:
        if args:
            raise TypeError(f"{fn}() got multiple values for argument 'size'")
        args = (keyword,)
    if len(args) == 1 and isinstance(args[0], (tuple, list)):
        args = tuple(args[0])
    elif len(args) == 1 and not _is_int_like(args[0]):
        raise TypeError(
            f"{fn}(): argument 'size' (position 1) must be tuple of ints, not "
            f"{type(args[0]).__name__}"
        )
    for s in args:  # plain ints within int64, the common case
        if s.__class__ is not int or not -(2**63) <= s < 2**63:
            break
    else:
        return tuple(args)
    out = []
    for i, s in enumerate(args):
        if not _is_int_like(s):
            raise TypeError(
                f"{fn}(): argument 'size' failed to unpack the object at pos {i + 1} with error "
                f'"type must be tuple of ints,but got {type(s).__name__}"'
            )
        value = as_int(s)
        if value.__class__ is SymInt:
            out.append(value)
            continue
        if not -(2**63) <= value < 2**63:  # PyTorch's parser reads sizes as int64
            raise TypeError(
                f"{fn}(): argument 'size' failed to unpack the object at pos {i + 1} with error "
                '"Overflow when unpacking long long"'
            )
        out.append(value)
    return tuple(out)


def _is_int_like(s) -> bool:
    if s.__class__ is int:
        return True
    if isinstance(s, Tensor):
        return s.ndim == 0 and s._dtype.category == 1
    return isinstance(s, numbers.Integral)


def _finish(t: Tensor, requires_grad: bool) -> Tensor:
    if per_thread.state.inference_mode:  # a new tensor made there is an inference tensor
        mark_inference(t)
    if requires_grad:
        if t._dtype.category < 2:  # neither floating nor complex
            raise RuntimeError(
                "Only Tensors of floating point and complex dtype can require gradients"
            )
        t.requires_grad_(True)
    return t


# ------------------------------------------------------------------------------ from data


def _is_sequence(x) -> bool:
    return isinstance(x, (list, tuple, range, np.ndarray))


_NOT_FOREIGN = (
    list,
    tuple,
    range,
    np.ndarray,
    Tensor,
    str,
    bytes,
    dict,
    numbers.Number,
    np.generic,
)


def _is_foreign_sequence(x) -> bool:
    """PyTorch reads any object with the sequence protocol (CPython's PySequence_Check: a
    ``collections.deque``, an ``array.array``, a class with ``__len__`` and ``__getitem__``)
    as the list of its items; dicts, sets and generators it refuses."""
    kind = type(x)
    return (
        not isinstance(x, _NOT_FOREIGN)
        and hasattr(kind, "__getitem__")
        and hasattr(kind, "__len__")
    )


_PLAIN_NUMBERS = frozenset((bool, int, float, complex))


def _plain_leaf_types(data) -> set | None:
    """The leaf types of nested lists/tuples of Python numbers (C-speed ``map(type, ...)`` per
    innermost list), or None if anything else is inside: the fast path of ``kiln.tensor``."""
    types = set(map(type, data))
    if types <= _PLAIN_NUMBERS:
        return types
    if not types <= {list, tuple}:
        return None
    leaves = set()
    for item in data:
        inner = _plain_leaf_types(item)
        if inner is None:
            return None
        leaves |= inner
    return leaves


def _infer_dtype(data) -> dt.dtype:
    """PyTorch's inference: each leaf has a dtype (Python float: the default dtype, int: int64,
    bool: bool, numpy scalars, arrays and tensors: their own) and a sequence promotes its items."""
    if isinstance(data, (list, tuple)):
        leaves = _plain_leaf_types(data)
        if leaves is not None:
            if complex in leaves:
                return dt.default_complex_dtype()
            if float in leaves or not leaves:
                return dt.get_default_dtype()
            return dt.int64 if int in leaves else dt.bool_
    return _infer_leaf_dtype(data)


def _infer_leaf_dtype(data) -> dt.dtype:
    if isinstance(data, Tensor):
        return data._dtype
    if isinstance(data, np.ndarray):
        return dt.from_numpy_dtype(data.dtype)
    if isinstance(data, (bool, np.bool_)):
        return dt.bool_
    if isinstance(data, np.generic):
        return dt.from_numpy_dtype(data.dtype)
    if isinstance(data, numbers.Integral):
        return dt.int64
    if isinstance(data, numbers.Real):
        return dt.get_default_dtype()
    if isinstance(data, numbers.Complex):
        return dt.default_complex_dtype()
    if isinstance(data, (list, tuple, range)) or _is_foreign_sequence(data):
        out = None
        for item in data:
            d = _infer_leaf_dtype(item)
            out = d if out is None else dt.promote_types(out, d)
        return dt.get_default_dtype() if out is None else out
    if isinstance(data, (str, bytes)):
        raise TypeError(f"new(): invalid data type '{type(data).__name__}'")
    raise RuntimeError(f"Could not infer dtype of {type(data).__name__}")


def _scalars_for_tensors(data):
    """Tensors inside a sequence are scalars to PyTorch: one-element ones give their value."""
    if isinstance(data, Tensor):
        if data.numel() != 1:
            raise ValueError("only one element tensors can be converted to Python scalars")
        return data.item()
    if isinstance(data, (list, tuple)) or _is_foreign_sequence(data):
        return [_scalars_for_tensors(v) for v in data]
    return data


def _sequence_sizes(data) -> list[int]:
    """The shape PyTorch reads off the first element at each depth."""
    sizes = []
    while _is_sequence(data):
        sizes.append(len(data))
        if not len(data):
            break
        data = data[0]
    return sizes


def _check_nested(data, sizes, depth=0) -> None:
    """Raise PyTorch's error for the first element that does not fit ``sizes``."""
    if depth == len(sizes):
        if _is_sequence(data):
            raise TypeError(f"'{type(data).__name__}' object cannot be interpreted as a number")
        return
    if not _is_sequence(data):
        raise TypeError("not a sequence")
    if len(data) != sizes[depth]:
        raise ValueError(
            f"expected sequence of length {sizes[depth]} at dim {depth} (got {len(data)})"
        )
    for item in data:
        _check_nested(item, sizes, depth + 1)


def _to_nested_numpy(data, d: dt.dtype) -> np.ndarray:
    if isinstance(data, Tensor):
        return data.detach()._read_numpy("convert")
    if isinstance(data, range):
        return np.arange(data.start, data.stop, data.step, dtype=np.int64)
    if isinstance(data, (list, tuple)):
        leaves = _plain_leaf_types(data)
        if leaves is not None and complex in leaves:
            _refuse_complex_numbers(d)
        if leaves is None:
            data = _scalars_for_tensors(data)
        try:
            arr = np.array(data)
        except ValueError:
            arr = None
        if arr is not None and arr.dtype == object and d.category == 2:
            arr = np.array(data, dtype=np.float64)  # ints beyond int64 read as doubles
        if arr is None or arr.dtype == object:
            _check_nested(data, _sequence_sizes(data))
            raise ValueError("Overflow when unpacking long long")
        if leaves is not None and d.category == 1 and arr.size:
            _check_python_ints(arr, d, float in leaves)
        return arr
    if d.category == 1 and isinstance(data, (int, float)):
        checked_scalar(data, d, c_names=False)
    if isinstance(data, complex):
        _refuse_complex_numbers(d)
    return np.asarray(data)


def _refuse_complex_numbers(d: dt.dtype) -> None:
    """PyTorch reads Python complex numbers for a real dtype as Python does: a TypeError (bool
    takes their truth), where numpy would drop the imaginary part."""
    if d.is_complex or d is dt.bool_:
        return
    if d.is_floating_point:
        raise TypeError("must be real number, not complex")
    raise TypeError("'complex' object cannot be interpreted as an integer")


def _check_python_ints(arr: np.ndarray, d: dt.dtype, has_floats: bool) -> None:
    """Python numbers bound for an integer dtype must fit it (``checked_scalar``'s rule)."""
    if arr.dtype == np.uint64 or (arr.dtype.kind == "f" and not has_floats):
        raise ValueError("Overflow when unpacking long long")  # ints beyond int64
    if arr.dtype.kind in "iuf" and not (d is dt.int64 and arr.dtype.kind in "iu"):
        checked_scalar(arr.min().item(), d, c_names=False)
        checked_scalar(arr.max().item(), d, c_names=False)


def tensor(
    data, *, dtype=None, device=None, requires_grad: bool = False, pin_memory: bool = False
) -> Tensor:
    """A new leaf tensor copying ``data`` (nested lists, numbers, numpy arrays or tensors). A
    numpy array's copy keeps its layout, as PyTorch's (``from_numpy(data).to(copy=True)``)."""
    source_strides = None
    if isinstance(data, np.ndarray):
        source_strides = numpy_element_strides(data)  # PyTorch's checks, though it copies here
    if isinstance(data, np.ndarray) and dtype is None:
        d = dt.from_numpy_dtype(data.dtype)
        arr = np.array(data, copy=True)
    else:
        if _is_foreign_sequence(data):
            data = list(data)
        d = dtype if dtype is not None else _infer_dtype(data)
        if isinstance(data, (list, tuple)) and not data:
            arr = np.zeros((0,), d.np)
        else:
            raw = _to_nested_numpy(data, d)
            if d.category >= 2 or d is dt.bool_ or raw.dtype.kind != "f":
                arr = np.array(dt.through_float32(np.asarray(raw), d.np), dtype=d.np, copy=True)
            else:
                arr = np.trunc(raw).astype(d.np)
    arr = np.require(arr, requirements="C")
    out = wrap_array(arr, d)
    if source_strides is not None:
        out = _with_layout(out, preserved_strides(arr.shape, source_strides, None, "tensor"))
    dev = as_device(device)
    if dev is not cpu:
        out = to_device(out, dev)
    return _finish(out, requires_grad)


def asarray(
    obj, *, dtype=None, device=None, copy: bool | None = None, requires_grad: bool = False
) -> Tensor:
    """``obj`` as a tensor, sharing its memory where it can (a tensor, or a numpy array of the
    dtype asked for on the CPU); ``copy=True`` always copies, ``copy=False`` refuses to copy."""
    dev = None if device is None else as_device(device)
    if isinstance(obj, Tensor):
        converts = (dtype is not None and dtype is not obj._dtype) or (
            dev is not None and dev != obj._device
        )
        if copy is False and converts:
            raise ValueError(
                f"can't alias tensor with dtype '{obj._dtype}' into dtype '{dtype}'."
                if dtype is not None and dtype is not obj._dtype
                else f"can't alias tensor from device '{obj._device}' to '{dev}'."
            )
        out = obj
        if converts:
            out = obj.to(device=dev, dtype=dtype)
        elif copy:
            out = obj.clone()
        return _finish(out, requires_grad) if out is not obj or requires_grad else out
    if isinstance(obj, np.ndarray):
        shares = (dtype is None or dtype.np == obj.dtype) and dev in (None, cpu)
        if copy is False and not shares:
            target = dt.from_numpy_dtype(obj.dtype)
            raise ValueError(f"can't alias tensor with dtype '{target}' into dtype '{dtype}'.")
        if shares and not copy and obj.ndim:  # (PyTorch copies a 0-d array)
            return _finish(from_numpy(obj), requires_grad)
    elif copy is False:
        raise ValueError("can't alias arbitrary sequence into a tensor.")
    return tensor(obj, dtype=dtype, device=device, requires_grad=requires_grad)


def as_tensor(data, dtype=None, device=None) -> Tensor:
    """Share memory with ``data`` when it already is a tensor or numpy array of the right kind."""
    if isinstance(data, Tensor):
        out = data
        if dtype is not None and dtype is not out._dtype:
            out = out.to(dtype)
        if device is not None and as_device(device) != out._device:
            out = out.to(device)
        return out
    if (
        isinstance(data, np.ndarray)
        and (dtype is None or dtype.np == data.dtype)
        and device in (None, "cpu", cpu)
    ):
        return from_numpy(data)
    return tensor(data, dtype=dtype, device=device)


def numpy_element_strides(array: np.ndarray) -> tuple:
    """``array``'s strides in elements, with PyTorch's refusals of arrays a tensor cannot view
    (``tensor_from_numpy``: every constructor reading an array makes that view first)."""
    if not array.dtype.isnative:
        raise ValueError(
            "given numpy array has byte order different from the native byte order. Conversion "
            "between byte orders is currently not supported."
        )
    if any(s < 0 for s in array.strides):
        raise ValueError(
            "At least one stride in the given numpy array is negative, and tensors with negative "
            "strides are not currently supported. (You can probably work around this by making a "
            "copy of your array  with array.copy().) "
        )
    if any(s % array.itemsize for s in array.strides):
        raise ValueError(
            "given numpy array strides not a multiple of the element byte size. Copy the numpy "
            "array to reallocate the memory."
        )
    return tuple(s // array.itemsize for s in array.strides)


def from_numpy(array: np.ndarray) -> Tensor:
    """A tensor sharing ``array``'s memory (writes through either are seen by both): its
    strides are the array's (an empty array's too), and its storage starts at the array's
    first element (``storage_offset()`` 0), as PyTorch's."""
    if not isinstance(array, np.ndarray):
        raise TypeError(f"expected np.ndarray (got {type(array).__name__})")
    d = dt.from_numpy_dtype(array.dtype)
    strides = numpy_element_strides(array)
    if not array.flags.writeable:
        array = array.view()
    out = wrap_array(array, d)
    out._storage = Storage(array)
    if array.size == 0:
        out._stride = strides
    return _finish(out, False)


def scalar_tensor(value, *, dtype=None, device=None, requires_grad=False) -> Tensor:
    return full(
        (), value, dtype=dtype or dt.get_default_dtype(), device=device, requires_grad=requires_grad
    )


# ------------------------------------------------------------------------------ filled


@writes_out
def zeros(
    *size_args,
    size=None,
    dtype=None,
    device=None,
    requires_grad=False,
    out=None,
    layout=None,
    pin_memory=False,
) -> Tensor:
    shape = _size(size_args, "zeros", size)
    if any(s < 0 for s in shape):
        raise RuntimeError("zeros: Dimension size must be non-negative.")
    return _finish(
        OPS["full"](shape, 0, dtype=dtype or dt.get_default_dtype(), device=device),
        requires_grad,
    )


@writes_out
def ones(
    *size_args,
    size=None,
    dtype=None,
    device=None,
    requires_grad=False,
    out=None,
    layout=None,
    pin_memory=False,
) -> Tensor:
    return _finish(
        OPS["full"](
            _size(size_args, "ones", size),
            1,
            dtype=dtype or dt.get_default_dtype(),
            device=device,
        ),
        requires_grad,
    )


@writes_out
def empty(
    *size_args,
    size=None,
    dtype=None,
    device=None,
    requires_grad=False,
    out=None,
    layout=None,
    pin_memory=False,
    memory_format=None,
) -> Tensor:
    out = OPS["empty"](
        _size(size_args, "empty", size),
        dtype=dtype or dt.get_default_dtype(),
        device=device,
    )
    if memory_format is not None:
        fmt = check_memory_format(memory_format, out.ndim, "empty")
        if fmt == "preserve_format":
            raise RuntimeError("preserve memory format is unsupported by the contiguous operator")
        out = _with_layout(out, format_strides(out._shape, fmt))
    return _finish(out, requires_grad)


@writes_out
def full(
    size, fill_value, *, dtype=None, device=None, requires_grad=False, out=None, layout=None
) -> Tensor:
    if not isinstance(size, (tuple, list)):
        raise TypeError(
            f"full(): argument 'size' (position 1) must be tuple of ints, not {type(size).__name__}"
        )
    size = _size((size,), "full")
    if isinstance(fill_value, Tensor):
        if fill_value.ndim:
            raise TypeError("full(): argument 'fill_value' (position 2) must be Number, not Tensor")
        fill_value = fill_value.item()
    if dtype is None:
        dtype = _scalar_fill_dtype(fill_value)
    return _finish(OPS["full"](size, fill_value, dtype=dtype, device=device), requires_grad)


def _scalar_fill_dtype(value) -> dt.dtype:
    """``full``'s dtype for a fill value read as a PyTorch Scalar: bool, int64, the default float
    or complex; numpy scalars count as the Python number they convert to (a numpy bool as a
    float, as PyTorch's parser reads it)."""
    if isinstance(value, np.generic):
        if isinstance(value, np.integer):
            return dt.int64
        if isinstance(value, np.complexfloating):
            return dt.default_complex_dtype()
        return dt.get_default_dtype()
    return dt.dtype_of_python_scalar(value)


def empty_strided(size, stride, *, dtype=None, device=None, requires_grad=False) -> Tensor:
    return _finish(
        OPS["empty_strided"](
            tuple(size), tuple(stride), dtype=dtype or dt.get_default_dtype(), device=device
        ),
        requires_grad,
    )


def _with_layout(t: Tensor, strides: tuple) -> Tensor:
    """``t``'s values in a tensor with the given (dense) strides."""
    if t.stride() == strides:
        return t
    out = OPS["empty_strided"](t._shape, strides, dtype=t._dtype, device=t._device)
    return out.copy_(t)


def _like(fn_name):
    def like(
        input: Tensor,
        *args,
        dtype=None,
        device=None,
        requires_grad=False,
        memory_format=None,
        layout=None,
        **kwargs,
    ):
        d = dtype or input._dtype
        dev = device or input._device
        if fn_name == "full":
            out = full(
                input._shape, args[0] if args else kwargs.pop("fill_value"), dtype=d, device=dev
            )
        elif fn_name == "randint":
            low, high = (0, args[0]) if len(args) == 1 else (args[0], args[1])
            out = randint(low, high, input._shape, dtype=d, device=dev)
        else:
            out = globals()[fn_name](input._shape, dtype=d, device=dev, **kwargs)
        if memory_format not in (None, preserve_format) or input.stride() != contiguous_strides(
            input._shape
        ):
            strides = preserved_strides(input._shape, input.stride(), memory_format, like.__name__)
            out = _with_layout(out, strides)
        return _finish(out, requires_grad)

    like.__name__ = fn_name + "_like"
    return like


zeros_like = _like("zeros")
ones_like = _like("ones")
empty_like = _like("empty")
full_like = _like("full")
rand_like = _like("rand")
randn_like = _like("randn")
randint_like = _like("randint")


# ------------------------------------------------------------------------------ ranges


@writes_out
def arange(
    start=0,
    end=None,
    step=1,
    *,
    dtype=None,
    device=None,
    requires_grad=False,
    out=None,
    layout=None,
) -> Tensor:
    if end is None:
        start, end = 0, start
    return _finish(OPS["arange"](start, end, step, dtype=dtype, device=device), requires_grad)


@torch_function("range")
@writes_out
def _range_inclusive(
    start=0, end=None, step=1, *, dtype=None, device=None, requires_grad=False, out=None
) -> Tensor:
    """Deprecated ``torch.range``: like ``arange`` but including ``end``, default float dtype."""
    warnings.warn(
        "kiln.range is deprecated and will be removed in a future release because its behavior "
        "is inconsistent with Python's range builtin. Instead, use kiln.arange, which produces "
        "values in [start, end).",
        UserWarning,
        stacklevel=2,
    )
    if end is None:
        start, end = 0, start
    values = [v.item() if isinstance(v, Tensor) else v for v in (start, end, step)]
    start, end, step = values
    if step == 0:
        raise RuntimeError("step must be nonzero")
    if (end - start) * step < 0:
        raise RuntimeError("upper bound and lower bound inconsistent with step sign")
    count = int((end - start) / step) + 1
    d = dtype or dt.get_default_dtype()
    steps = OPS["arange"](0, count, 1, dtype=dt.float64, device=device)
    return _finish((steps * step + start).to(d), requires_grad)


def _check_steps(fn: str, start, end, steps):
    """``steps`` as the int PyTorch's argument parser makes of it: an int, or a 0-d integer
    tensor read through ``__index__`` (Deformable DETR's ``linspace(0.5, H_ - 0.5, H_)`` with
    ``H_`` from a shapes tensor); a float, bool or 1-d tensor is a TypeError."""
    if isinstance(steps, numbers.Integral):
        return steps
    if (
        isinstance(steps, Tensor)
        and steps.dim() == 0
        and not (steps.dtype.is_floating_point or steps.dtype.is_complex or steps.dtype == dt.bool_)
    ):
        return steps.__index__()
    got = ", ".join(type(v).__name__ for v in (start, end, steps))
    raise TypeError(
        f"{fn}() received an invalid combination of arguments - got ({got}), but expected one of:"
    )


def _spaced_dtype(start, end, dtype):
    """linspace's and logspace's dtype: a complex endpoint makes the default one complex."""
    if dtype is None and (isinstance(start, complex) or isinstance(end, complex)):
        return dt.default_complex_dtype()
    return dtype


@writes_out
def linspace(
    start, end, steps, *, dtype=None, device=None, requires_grad=False, out=None
) -> Tensor:
    steps = _check_steps("linspace", start, end, steps)
    start = start.item() if isinstance(start, Tensor) else start
    end = end.item() if isinstance(end, Tensor) else end
    dtype = _spaced_dtype(start, end, dtype)
    return _finish(
        OPS["linspace"](start, end, sym_int(steps), dtype=dtype, device=device), requires_grad
    )


@writes_out
def logspace(
    start, end, steps, base=10.0, *, dtype=None, device=None, requires_grad=False, out=None
) -> Tensor:
    steps = _check_steps("logspace", start, end, steps)
    start = start.item() if isinstance(start, Tensor) else start
    end = end.item() if isinstance(end, Tensor) else end
    d = _spaced_dtype(start, end, dtype) or dt.get_default_dtype()
    if steps < 0:
        raise RuntimeError("number of steps must be non-negative")
    dev = as_device(device)
    if dev is meta:
        return _finish(make_fake((int(steps),), d, dev), requires_grad)
    values = wrap_array(logspace_values(start, end, int(steps), float(base), d), d)
    return _finish(values if dev is cpu else to_device(values, dev), requires_grad)


@writes_out
def eye(n, m=None, *, dtype=None, device=None, requires_grad=False, out=None) -> Tensor:
    m = n if m is None else m
    for name, size in (("n", n), ("m", m)):
        if size < 0:
            raise RuntimeError(f"{name} must be greater or equal to 0, got {size}")
    if n * m >= 2**63:
        raise RuntimeError("numel: integer multiplication overflow")
    check_size((n, m), dtype or dt.get_default_dtype())  # before arange allocates anything
    r = arange(n, device=device).unsqueeze(1)
    c = arange(m, device=device).unsqueeze(0)
    return _finish((r == c).to(dtype or dt.get_default_dtype()), requires_grad)


# ------------------------------------------------------------------------------ random


def _require_float_dtype(dtype, kernel: str) -> None:
    """Uniform and normal samples exist only for floating dtypes (PyTorch names its kernel)."""
    if dtype is not None and dtype.category < 2:
        from ..reductions.reduce import torch_type_name

        raise NotImplementedError(f"\"{kernel}\" not implemented for '{torch_type_name(dtype)}'")


@writes_out
def rand(
    *size_args,
    size=None,
    generator=None,
    dtype=None,
    device=None,
    requires_grad=False,
    out=None,
    layout=None,
) -> Tensor:
    _require_float_dtype(dtype, "check_uniform_bounds")
    return _finish(
        OPS["rand"](
            _size(size_args, "rand", size),
            generator=generator,
            dtype=dtype or dt.get_default_dtype(),
            device=device,
        ),
        requires_grad,
    )


@writes_out
def randn(
    *size_args,
    size=None,
    generator=None,
    dtype=None,
    device=None,
    requires_grad=False,
    out=None,
    layout=None,
) -> Tensor:
    _require_float_dtype(dtype, "normal_kernel_cpu")
    return _finish(
        OPS["randn"](
            _size(size_args, "randn", size),
            generator=generator,
            dtype=dtype or dt.get_default_dtype(),
            device=device,
        ),
        requires_grad,
    )


@writes_out
def randint(
    *args,
    size=None,
    generator=None,
    dtype=None,
    device=None,
    requires_grad=False,
    out=None,
    layout=None,
) -> Tensor:
    args = list(args)
    if size is None:
        size = args.pop()
    if len(args) == 1:
        low, high = 0, args[0]
    elif len(args) == 2:
        low, high = args
    else:
        raise TypeError("randint() expects (high, size) or (low, high, size)")
    return _finish(
        OPS["randint"](
            int(low),
            int(high),
            _size((size,)),
            generator=generator,
            dtype=dtype or dt.int64,
            device=device,
        ),
        requires_grad,
    )


@writes_out
def randperm(
    n, *, generator=None, dtype=None, device=None, requires_grad=False, out=None
) -> Tensor:
    return _finish(
        OPS["randperm"](int(n), generator=generator, dtype=dtype or dt.int64, device=device),
        requires_grad,
    )


@writes_out
def normal(
    mean=0.0,
    std=1.0,
    size=None,
    *,
    generator=None,
    dtype=None,
    device=None,
    requires_grad=False,
    out=None,
) -> Tensor:
    """``normal(mean, std)`` with tensor or float mean/std, or ``normal(mean, std, size)``."""
    if not isinstance(std, Tensor) and std < 0:
        raise RuntimeError(f"normal expects std >= 0.0, but found std {std:g}")
    if isinstance(mean, Tensor) or isinstance(std, Tensor):
        shape = (
            OPS["add"]
            .meta(
                mean if isinstance(mean, Tensor) else make_fake((), dt.float32, meta),
                std if isinstance(std, Tensor) else make_fake((), dt.float32, meta),
            )
            ._shape
        )
        ref = mean if isinstance(mean, Tensor) else std
        noise = OPS["randn"](shape, generator=generator, dtype=ref._dtype, device=ref._device)
        return noise * std + mean
    if size is None:
        raise TypeError("normal() with float mean and std needs a size")
    noise = OPS["randn"](
        _size((size,)), generator=generator, dtype=dtype or dt.get_default_dtype(), device=device
    )
    return _finish(noise * std + mean if (std != 1.0 or mean != 0.0) else noise, requires_grad)


@writes_out
def multinomial(
    input: Tensor, num_samples: int, replacement: bool = False, *, generator=None, out=None
) -> Tensor:
    return OPS["multinomial"](input, int(num_samples), replacement, generator=generator)


@writes_out
def bernoulli(input: Tensor, p=None, *, generator=None, out=None) -> Tensor:
    """0/1 draws of ``input``'s dtype, 1 with probability ``input`` (floats only, as PyTorch's
    kernel) or ``p`` (any real dtype: the draw is made in floats, then cast)."""
    d = input._dtype
    if d.is_complex:
        kernel = "bernoulli_tensor_cpu_self_" if p is None else "bernoulli_scalar_cpu_"
        raise NotImplementedError(f"\"{kernel}\" not implemented for '{dt.torch_type_name(d)}'")
    if p is None and not d.is_floating_point:
        raise NotImplementedError(
            f"\"bernoulli_tensor_cpu_p_\" not implemented for '{dt.torch_type_name(d)}'"
        )
    draw = d if d.is_floating_point else dt.get_default_dtype()
    prob = input if p is None else full(input._shape, p, dtype=draw, device=input._device)
    u = OPS["rand"](input._shape, generator=generator, dtype=prob._dtype, device=input._device)
    return (u < prob).to(d)


# ------------------------------------------------------------------------------ type queries


def result_type(tensor1, tensor2) -> dt.dtype:
    from ..core.common import result_dtype

    return result_dtype(tensor1, tensor2)


def promote_types(type1: dt.dtype, type2: dt.dtype) -> dt.dtype:
    return dt.promote_types(type1, type2)


def is_tensor(obj) -> bool:
    return isinstance(obj, Tensor)


def is_floating_point(input: Tensor) -> bool:
    return input._dtype.is_floating_point


def is_inference(input: Tensor) -> bool:  # noqa: A002
    return input.is_inference()


def numel(input: Tensor) -> int:
    return input.numel()


# ------------------------------------------------------------------------------ devices and bits


def to_device(t: Tensor, target) -> Tensor:
    """Copy ``t`` to another device (an op, so autograd and graphs see the transfer)."""
    return OPS["to_device"](t, as_device(target))


def view_as_dtype(t: Tensor, dtype: dt.dtype) -> Tensor:
    """``x.view(kiln.int32)``: reinterpret the bits; a different element size rescales the last
    dim, which must then be dense (PyTorch's rules and messages)."""
    old_size, new_size = t._dtype.itemsize, dtype.itemsize
    if new_size != old_size:
        from ..reductions.reduce import torch_type_name

        what = (
            f"to view {torch_type_name(t._dtype)} as {torch_type_name(dtype)} "
            "(different element sizes)"
        )
        if t.ndim == 0:
            raise RuntimeError(f"self.dim() cannot be 0 {what}")
        if t.stride(-1) != 1:
            raise RuntimeError(f"self.stride(-1) must be 1 {what}, but got {t.stride(-1)}")
        if new_size > old_size:
            ratio = new_size // old_size
            if t.shape[-1] % ratio:
                raise RuntimeError(
                    f"self.size(-1) must be divisible by {ratio} {what}, but got {t.shape[-1]}"
                )
            if t.storage_offset() % ratio:
                raise RuntimeError(
                    f"self.storage_offset() must be divisible by {ratio} {what}, but got "
                    f"{t.storage_offset()}"
                )
            for d, st in enumerate(t.stride()[:-1]):
                if st % ratio:
                    raise RuntimeError(
                        f"self.stride({d}) must be divisible by {ratio} {what}, but got {st}"
                    )
    out = wrap_array(t._check_data("view")[...].view(dtype.np), dtype)
    out._storage = t._get_storage()
    return out


def legacy_from_data(data, dtype: dt.dtype) -> Tensor:
    """``kiln.Tensor(data)`` / ``kiln.FloatTensor(data)``: a numpy array of the constructor's
    dtype is shared, not copied (PyTorch's legacy constructors view it as ``from_numpy``)."""
    if isinstance(data, np.ndarray) and data.dtype == dtype.np:
        return from_numpy(data)
    return tensor(data, dtype=dtype)


def legacy_tensor_constructor(args: tuple, kwargs: dict) -> Tensor:
    """``kiln.Tensor(data)`` / ``kiln.Tensor(2, 3)``: PyTorch's legacy float constructor."""
    if len(args) == 1 and isinstance(args[0], Size):
        return empty(args[0])
    if len(args) == 1 and (
        isinstance(args[0], (list, tuple, np.ndarray)) or _is_foreign_sequence(args[0])
    ):
        return legacy_from_data(args[0], dt.get_default_dtype())
    if all(isinstance(a, int) for a in args):
        return empty(*args)
    raise TypeError(f"kiln.Tensor() got unsupported arguments {args!r}")
