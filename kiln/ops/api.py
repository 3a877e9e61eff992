"""The ``kiln.*`` creation functions with PyTorch's argument conventions.

``kiln.zeros(2, 3)``, ``kiln.zeros((2, 3))``, ``kiln.tensor([[1, 2]])``... parse their arguments
here and call the creation ops; ``requires_grad`` is applied afterwards (creation ops are leaves).
"""

from __future__ import annotations

import numbers

import numpy as np

from ..runtime import dtypes as dt
from ..runtime.device import as_device, cpu, meta
from ..runtime.tensor import Tensor, make_fake, wrap_array
from .registry import OPS, torch_function

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
    "is_floating_point",
    "numel",
]


def _size(args) -> tuple:
    if len(args) == 1 and isinstance(args[0], (tuple, list)):
        args = tuple(args[0])
    out = []
    for s in args:
        if isinstance(s, Tensor):
            s = s.item()
        if not isinstance(s, (numbers.Integral,)):
            raise TypeError(
                f"size must be a sequence of ints, got {s!r} of type {type(s).__name__}"
            )
        out.append(int(s))
    return tuple(out)


def _finish(t: Tensor, requires_grad: bool) -> Tensor:
    if requires_grad:
        if not t._dtype.is_floating_point:
            raise RuntimeError(
                "Only Tensors of floating point and complex dtype can require gradients"
            )
        t.requires_grad_(True)
    return t


# ------------------------------------------------------------------------------ from data


def _is_sequence(x) -> bool:
    return isinstance(x, (list, tuple, range, np.ndarray))


_PLAIN_NUMBERS = frozenset((bool, int, float))


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
    if isinstance(data, (list, tuple, range)):
        out = None
        for item in data:
            d = _infer_leaf_dtype(item)
            out = d if out is None else dt.promote_types(out, d)
        return dt.get_default_dtype() if out is None else out
    if isinstance(data, complex):
        raise TypeError("kiln does not support complex tensors")
    if isinstance(data, (str, bytes)):
        raise TypeError(f"new(): invalid data type '{type(data).__name__}'")
    raise RuntimeError(f"Could not infer dtype of {type(data).__name__}")


def _scalars_for_tensors(data):
    """Tensors inside a sequence are scalars to PyTorch: one-element ones give their value."""
    if isinstance(data, Tensor):
        if data.numel() != 1:
            raise ValueError("only one element tensors can be converted to Python scalars")
        return data.item()
    if isinstance(data, (list, tuple)):
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


def _to_nested_numpy(data) -> np.ndarray:
    if isinstance(data, Tensor):
        return data.detach()._read_numpy("convert")
    if isinstance(data, range):
        return np.arange(data.start, data.stop, data.step, dtype=np.int64)
    if isinstance(data, (list, tuple)):
        if _plain_leaf_types(data) is None:
            data = _scalars_for_tensors(data)
        try:
            arr = np.array(data)
        except ValueError:
            arr = None
        if arr is None or arr.dtype == object:
            _check_nested(data, _sequence_sizes(data))
            raise ValueError("Overflow when unpacking long long")
        return arr
    return np.asarray(data)


def tensor(
    data, *, dtype=None, device=None, requires_grad: bool = False, pin_memory: bool = False
) -> Tensor:
    """A new leaf tensor copying ``data`` (nested lists, numbers, numpy arrays or tensors)."""
    if isinstance(data, np.ndarray) and dtype is None:
        d = dt.from_numpy_dtype(data.dtype)
        arr = np.array(data, copy=True)
    else:
        d = dtype if dtype is not None else _infer_dtype(data)
        if isinstance(data, (list, tuple)) and not data:
            arr = np.zeros((0,), d.np)
        else:
            raw = _to_nested_numpy(data)
            if d.is_floating_point or d is dt.bool_ or raw.dtype.kind != "f":
                arr = np.array(raw, dtype=d.np, copy=True)
            else:
                arr = np.trunc(raw).astype(d.np)
    arr = np.require(arr, requirements="C")
    out = wrap_array(arr, d)
    dev = as_device(device)
    if dev is not cpu:
        out = to_device(out, dev)
    return _finish(out, requires_grad)


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


asarray = as_tensor


def from_numpy(array: np.ndarray) -> Tensor:
    """A tensor sharing ``array``'s memory (writes through either are seen by both)."""
    if not isinstance(array, np.ndarray):
        raise TypeError(f"expected np.ndarray (got {type(array).__name__})")
    d = dt.from_numpy_dtype(array.dtype)
    if any(s < 0 for s in array.strides):
        raise ValueError(
            "At least one stride in the given numpy array is negative, and tensors with negative "
            "strides are not currently supported. (You can probably work around this by making a "
            "copy of your array  with array.copy().) "
        )
    if any(s % array.itemsize for s in array.strides):
        array = array.copy()
    if not array.flags.writeable:
        array = array.view()
    return wrap_array(array, d)


def scalar_tensor(value, *, dtype=None, device=None, requires_grad=False) -> Tensor:
    return full(
        (), value, dtype=dtype or dt.get_default_dtype(), device=device, requires_grad=requires_grad
    )


# ------------------------------------------------------------------------------ filled


def zeros(
    *size, dtype=None, device=None, requires_grad=False, out=None, layout=None, pin_memory=False
) -> Tensor:
    return _finish(
        OPS["full"](_size(size), 0, dtype=dtype or dt.get_default_dtype(), device=device),
        requires_grad,
    )


def ones(
    *size, dtype=None, device=None, requires_grad=False, out=None, layout=None, pin_memory=False
) -> Tensor:
    return _finish(
        OPS["full"](_size(size), 1, dtype=dtype or dt.get_default_dtype(), device=device),
        requires_grad,
    )


def empty(
    *size,
    dtype=None,
    device=None,
    requires_grad=False,
    out=None,
    layout=None,
    pin_memory=False,
    memory_format=None,
) -> Tensor:
    return _finish(
        OPS["empty"](_size(size), dtype=dtype or dt.get_default_dtype(), device=device),
        requires_grad,
    )


def full(
    size, fill_value, *, dtype=None, device=None, requires_grad=False, out=None, layout=None
) -> Tensor:
    size = _size((size,)) if isinstance(size, (tuple, list)) else _size((size,))
    if dtype is None and isinstance(fill_value, float):
        dtype = dt.get_default_dtype()
    return _finish(OPS["full"](size, fill_value, dtype=dtype, device=device), requires_grad)


def empty_strided(size, stride, *, dtype=None, device=None, requires_grad=False) -> Tensor:
    return _finish(
        OPS["empty_strided"](
            tuple(size), tuple(stride), dtype=dtype or dt.get_default_dtype(), device=device
        ),
        requires_grad,
    )


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
            return full(
                input._shape,
                args[0] if args else kwargs.pop("fill_value"),
                dtype=d,
                device=dev,
                requires_grad=requires_grad,
            )
        if fn_name == "randint":
            if len(args) == 1:
                low, high = 0, args[0]
            else:
                low, high = args[0], args[1]
            return randint(
                low, high, input._shape, dtype=d, device=dev, requires_grad=requires_grad
            )
        return globals()[fn_name](
            input._shape, dtype=d, device=dev, requires_grad=requires_grad, **kwargs
        )

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
def _range_inclusive(
    start=0, end=None, step=1, *, dtype=None, device=None, requires_grad=False, out=None
) -> Tensor:
    """Deprecated ``torch.range``: like ``arange`` but including ``end``, default float dtype."""
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


def linspace(
    start, end, steps, *, dtype=None, device=None, requires_grad=False, out=None
) -> Tensor:
    start = start.item() if isinstance(start, Tensor) else start
    end = end.item() if isinstance(end, Tensor) else end
    return _finish(
        OPS["linspace"](start, end, int(steps), dtype=dtype, device=device), requires_grad
    )


def logspace(
    start, end, steps, base=10.0, *, dtype=None, device=None, requires_grad=False
) -> Tensor:
    exps = linspace(start, end, steps, dtype=dt.float64, device=device)
    return _finish((base**exps).to(dtype or dt.get_default_dtype()), requires_grad)


def eye(n, m=None, *, dtype=None, device=None, requires_grad=False, out=None) -> Tensor:
    m = n if m is None else m
    r = arange(n, device=device).unsqueeze(1)
    c = arange(m, device=device).unsqueeze(0)
    return _finish((r == c).to(dtype or dt.get_default_dtype()), requires_grad)


# ------------------------------------------------------------------------------ random


def rand(
    *size, generator=None, dtype=None, device=None, requires_grad=False, out=None, layout=None
) -> Tensor:
    return _finish(
        OPS["rand"](
            _size(size), generator=generator, dtype=dtype or dt.get_default_dtype(), device=device
        ),
        requires_grad,
    )


def randn(
    *size, generator=None, dtype=None, device=None, requires_grad=False, out=None, layout=None
) -> Tensor:
    return _finish(
        OPS["randn"](
            _size(size), generator=generator, dtype=dtype or dt.get_default_dtype(), device=device
        ),
        requires_grad,
    )


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


def randperm(
    n, *, generator=None, dtype=None, device=None, requires_grad=False, out=None
) -> Tensor:
    return _finish(
        OPS["randperm"](int(n), generator=generator, dtype=dtype or dt.int64, device=device),
        requires_grad,
    )


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


def multinomial(
    input: Tensor, num_samples: int, replacement: bool = False, *, generator=None, out=None
) -> Tensor:
    return OPS["multinomial"](input, int(num_samples), replacement, generator=generator)


def bernoulli(input: Tensor, p=None, *, generator=None, out=None) -> Tensor:
    prob = input if p is None else full(input._shape, p, dtype=input._dtype, device=input._device)
    u = OPS["rand"](input._shape, generator=generator, dtype=prob._dtype, device=input._device)
    return (u < prob).to(input._dtype)


# ------------------------------------------------------------------------------ type queries


def result_type(tensor1, tensor2) -> dt.dtype:
    from .common import result_dtype

    return result_dtype(tensor1, tensor2)


def promote_types(type1: dt.dtype, type2: dt.dtype) -> dt.dtype:
    return dt.promote_types(type1, type2)


def is_tensor(obj) -> bool:
    return isinstance(obj, Tensor)


def is_floating_point(input: Tensor) -> bool:
    return input._dtype.is_floating_point


def numel(input: Tensor) -> int:
    return input.numel()


# ------------------------------------------------------------------------------ devices and bits


def to_device(t: Tensor, target) -> Tensor:
    """Copy ``t`` to another device (an op, so autograd and graphs see the transfer)."""
    return OPS["to_device"](t, as_device(target))


def view_as_dtype(t: Tensor, dtype: dt.dtype) -> Tensor:
    """``x.view(kiln.int32)``: reinterpret the bits (same itemsize only, like PyTorch's common case)."""
    if dtype.itemsize != t._dtype.itemsize:
        raise RuntimeError(
            f"view(dtype): itemsize {dtype.itemsize} differs from the tensor's {t._dtype.itemsize}; "
            "only same-size reinterpretation is supported"
        )
    out = wrap_array(t._check_data("view")[...].view(dtype.np), dtype)
    out._storage = t._get_storage()
    return out
