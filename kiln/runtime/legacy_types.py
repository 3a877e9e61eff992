"""The legacy typed constructors (``kiln.FloatTensor``, ``kiln.LongTensor``, ...).

Old PyTorch code still builds tensors with ``torch.FloatTensor([1, 2])`` or
``torch.LongTensor(3, 4)``, checks ``isinstance(x, torch.FloatTensor)`` and converts with
``x.type(torch.DoubleTensor)``. Each name here is a class whose metaclass makes all three work
on ordinary ``Tensor`` objects: calling it builds a CPU tensor of its dtype, and the instance
check compares the dtype (there is no subclass per dtype at run time).
"""

from __future__ import annotations

from . import dtypes as dt

__all__ = [
    "FloatTensor",
    "DoubleTensor",
    "HalfTensor",
    "BFloat16Tensor",
    "LongTensor",
    "IntTensor",
    "ShortTensor",
    "CharTensor",
    "ByteTensor",
    "BoolTensor",
    "legacy_type_name",
    "dtype_of_type_spec",
    "set_default_tensor_type",
]


class _LegacyTensorType(type):
    """Metaclass: construction and ``isinstance`` for one dtype."""

    _dtype: dt.dtype

    def __instancecheck__(cls, obj) -> bool:
        from .tensor import Tensor

        return isinstance(obj, Tensor) and obj.dtype is cls._dtype and obj.device.type == "cpu"

    def __call__(cls, *args, device=None):
        from ..ops.creation import api
        from .tensor import Size, Tensor

        if device is not None and str(device) != "cpu":
            raise RuntimeError(
                f"legacy constructor {cls.__name__} expects device type: cpu but device type: "
                f"{device} was passed"
            )
        if not args:
            return api.empty(0, dtype=cls._dtype)
        if all(isinstance(a, int) and not isinstance(a, bool) for a in args):
            return api.empty(*args, dtype=cls._dtype)
        if len(args) == 1:
            (arg,) = args
            if isinstance(arg, Size):
                return api.empty(arg, dtype=cls._dtype)
            if isinstance(arg, Tensor):
                if arg.dtype is not cls._dtype:
                    raise TypeError(f"expected {cls._dtype} (got {arg.dtype})")
                return arg
            return api.legacy_from_data(arg, cls._dtype)
        raise TypeError(
            f"{cls.__name__}() received an invalid combination of arguments: "
            f"{tuple(type(a).__name__ for a in args)}"
        )

    def __repr__(cls) -> str:
        return f"<class 'kiln.{cls.__name__}'>"


def _make(name: str, d: dt.dtype) -> type:
    return _LegacyTensorType(name, (), {"_dtype": d, "dtype": d, "__module__": "kiln"})


FloatTensor = _make("FloatTensor", dt.float32)
DoubleTensor = _make("DoubleTensor", dt.float64)
HalfTensor = _make("HalfTensor", dt.float16)
BFloat16Tensor = _make("BFloat16Tensor", dt.bfloat16)
LongTensor = _make("LongTensor", dt.int64)
IntTensor = _make("IntTensor", dt.int32)
ShortTensor = _make("ShortTensor", dt.int16)
CharTensor = _make("CharTensor", dt.int8)
ByteTensor = _make("ByteTensor", dt.uint8)
BoolTensor = _make("BoolTensor", dt.bool_)

_BY_DTYPE = {
    c._dtype: c
    for c in (
        FloatTensor,
        DoubleTensor,
        HalfTensor,
        BFloat16Tensor,
        LongTensor,
        IntTensor,
        ShortTensor,
        CharTensor,
        ByteTensor,
        BoolTensor,
    )
}
_BY_NAME = {c.__name__: c for c in _BY_DTYPE.values()}


def legacy_type_name(d: dt.dtype, device_type: str = "cpu") -> str:
    """``x.type()``'s answer: ``kiln.FloatTensor``, ``kiln.cuda.FloatTensor``."""
    prefix = "kiln." if device_type == "cpu" else f"kiln.{device_type}."
    if d.is_complex:  # PyTorch names them but has no legacy classes for them
        return prefix + ("ComplexFloatTensor" if d is dt.complex64 else "ComplexDoubleTensor")
    return prefix + _BY_DTYPE[d].__name__


def dtype_of_type_spec(spec) -> dt.dtype:
    """The dtype named by ``x.type(spec)``: a dtype, a legacy class or its dotted name
    (``'torch.FloatTensor'`` is accepted too, so PyTorch code runs unchanged)."""
    if isinstance(spec, dt.dtype):
        return spec
    if isinstance(spec, _LegacyTensorType):
        return spec._dtype
    if isinstance(spec, str):
        cls = _BY_NAME.get(spec.rsplit(".", 1)[-1])
        if cls is not None:
            return cls._dtype
        raise ValueError(f"invalid type: '{spec}'")
    raise TypeError(f"type() expects a dtype, a tensor type or its name, got {type(spec).__name__}")


def set_default_tensor_type(t) -> None:
    """Deprecated in PyTorch (use ``set_default_dtype``): make a legacy tensor type's dtype the
    default for new float tensors (``kiln.DoubleTensor`` or ``"torch.DoubleTensor"``)."""
    import warnings

    warnings.warn(
        "kiln.set_default_tensor_type() is deprecated as of PyTorch 2.1, please use "
        "kiln.set_default_dtype() and kiln.set_default_device() as alternatives.",
        UserWarning,
        stacklevel=2,
    )
    d = dtype_of_type_spec(t)
    if not d.is_floating_point:
        raise TypeError("only floating-point types are supported as the default type")
    dt.set_default_dtype(d)
