"""``kiln.finfo`` / ``kiln.iinfo`` (numeric limits of a dtype) and ``kiln.can_cast``.

The limits come from numpy (``ml_dtypes`` for bfloat16) and are exposed as Python numbers with
PyTorch's attribute names, ``dtype`` given as the dtype's name string as PyTorch does.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np

from . import dtypes as dt

__all__ = ["finfo", "iinfo", "can_cast"]


def _check_dtype(fn_name: str, value, arg_name: str = "type") -> dt.dtype:
    if not isinstance(value, dt.dtype):
        raise TypeError(
            f"{fn_name}(): argument '{arg_name}' (position 1) must be kiln.dtype, not "
            f"{type(value).__name__}"
        )
    return value


def _limits_repr(name: str, fields: dict) -> str:
    inner = ", ".join(
        f"{k}={v:g}" if isinstance(v, (int, float)) else f"{k}={v}" for k, v in fields.items()
    )
    return f"{name}({inner})"


class finfo:
    """Machine limits of a floating-point dtype (the default dtype when none is given)."""

    __slots__ = ("bits", "eps", "max", "min", "tiny", "smallest_normal", "resolution", "dtype")
    _kiln_fold_constructor = True  # captured code computes it at capture time (a constant)

    def __init__(self, type: dt.dtype | None = None):  # noqa: A002 - PyTorch's keyword
        d = dt.get_default_dtype() if type is None else _check_dtype("finfo", type)
        d = d.to_real()  # a complex dtype's limits are its value type's, as in PyTorch
        if not d.is_floating_point:
            raise TypeError(
                "kiln.finfo() requires a floating point input type. Use kiln.iinfo to handle "
                "'kiln.finfo'"
            )
        info = ml_dtypes.finfo(d.np) if d is dt.bfloat16 else np.finfo(d.np)
        self.bits = d.itemsize * 8
        self.eps = float(info.eps)
        self.max = float(info.max)
        self.min = float(info.min)
        self.smallest_normal = float(info.smallest_normal)
        self.tiny = self.smallest_normal
        self.resolution = 10.0 ** -math.floor(-math.log10(self.eps))
        self.dtype = d.name

    def __eq__(self, other) -> bool:
        return isinstance(other, finfo) and other.dtype == self.dtype

    __hash__ = None  # PyTorch's finfo objects compare by value and are unhashable

    def __repr__(self) -> str:
        return _limits_repr(
            "finfo",
            {
                "resolution": self.resolution,
                "min": self.min,
                "max": self.max,
                "eps": self.eps,
                "smallest_normal": self.smallest_normal,
                "tiny": self.tiny,
                "dtype": self.dtype,
            },
        )


class iinfo:
    """Machine limits of an integer dtype."""

    __slots__ = ("bits", "max", "min", "dtype")
    _kiln_fold_constructor = True

    def __init__(self, type: dt.dtype):  # noqa: A002 - PyTorch's keyword
        d = _check_dtype("iinfo", type)
        if d is dt.bool_:
            raise TypeError("kiln.bool is not supported by kiln.iinfo")
        if not d.is_integral:
            raise TypeError(
                "kiln.iinfo() requires an integer input type. Use kiln.finfo to handle 'kiln.iinfo'"
            )
        info = np.iinfo(d.np)
        self.bits = d.itemsize * 8
        self.max = int(info.max)
        self.min = int(info.min)
        self.dtype = d.name

    def __eq__(self, other) -> bool:
        return isinstance(other, iinfo) and other.dtype == self.dtype

    __hash__ = None

    def __repr__(self) -> str:
        return _limits_repr("iinfo", {"min": self.min, "max": self.max, "dtype": self.dtype})


def can_cast(from_: dt.dtype, to: dt.dtype) -> bool:
    """Whether PyTorch's casting rule allows ``from_`` -> ``to``: never down a category
    (float -> integer, integer -> bool); any size within a category is allowed."""
    _check_dtype("can_cast", from_, "from_")
    if not isinstance(to, dt.dtype):
        raise TypeError(
            f"can_cast(): argument 'to' (position 2) must be kiln.dtype, not {type(to).__name__}"
        )
    return dt.can_cast(from_, to)
