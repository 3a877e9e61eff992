"""PyTorch dtypes over numpy dtypes, and PyTorch's type-promotion rules.

A ``dtype`` is a singleton per kind; ``to_numpy`` gives the numpy storage dtype (bfloat16 comes
from ml_dtypes, the only way to get a real numpy bfloat16 with casts and ufuncs). Promotion
follows c10's lattice and ResultTypeState: dimensioned tensors, then 0-dim tensors, then Python
scalars, each only able to raise the result's *category* (bool < integral < floating < complex).
Complex dtypes pair with a real "value type" (complex64 <-> float32): promotion across the
floating/complex boundary keeps the wider value type (float64 + complex64 -> complex128).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from .symbolic import SymInt

__all__ = [
    "dtype",
    "bool_",
    "uint8",
    "int8",
    "int16",
    "int32",
    "int64",
    "float16",
    "bfloat16",
    "float32",
    "float64",
    "complex64",
    "complex128",
    "all_dtypes",
    "promote_types",
    "get_default_dtype",
    "set_default_dtype",
    "through_float32",
    "from_numpy_dtype",
    "dtype_of_python_scalar",
    "default_complex_dtype",
]


class dtype:  # noqa: N801 - PyTorch's spelling
    """A tensor element type; compare by identity (``x.dtype is kiln.float32``)."""

    __module__ = "kiln"  # printed as ``<class 'kiln.dtype'>``, like torch's

    __slots__ = (
        "name",
        "np",
        "itemsize",
        "is_floating_point",
        "is_complex",
        "is_signed",
        "category",
        "_rank",
    )

    def __init__(self, name: str, np_dtype, category: int, rank: int, signed: bool):
        self.name = name
        self.np = np.dtype(np_dtype)
        self.itemsize = self.np.itemsize
        self.is_floating_point = category == 2
        self.is_complex = category == 3
        self.is_signed = signed
        self.category = category  # 0 bool, 1 integral, 2 floating, 3 complex
        self._rank = rank

    def __repr__(self) -> str:
        return f"kiln.{self.name}"

    def __reduce__(self):
        return (_dtype_by_name, (self.name,))

    def to_numpy(self) -> np.dtype:
        return self.np

    @property
    def is_integral(self) -> bool:
        return self.category == 1

    def to_real(self) -> dtype:
        """The value type of a complex dtype (complex64 -> float32); other dtypes are their own."""
        return _REAL_OF.get(self, self)

    def to_complex(self) -> dtype:
        """The complex dtype with this value type (float32 -> complex64), as PyTorch maps them."""
        if self.is_complex:
            return self
        out = _COMPLEX_OF.get(self)
        if out is None:
            raise RuntimeError(f"Unknown Complex ScalarType for {_TORCH_NAMES[self.name]}")
        return out

    @property
    def itemsize_bits(self) -> int:
        return self.itemsize * 8


bool_ = dtype("bool", np.bool_, 0, 0, False)
uint8 = dtype("uint8", np.uint8, 1, 1, False)
int8 = dtype("int8", np.int8, 1, 2, True)
int16 = dtype("int16", np.int16, 1, 3, True)
int32 = dtype("int32", np.int32, 1, 4, True)
int64 = dtype("int64", np.int64, 1, 5, True)
float16 = dtype("float16", np.float16, 2, 6, True)
bfloat16 = dtype("bfloat16", ml_dtypes.bfloat16, 2, 7, True)
float32 = dtype("float32", np.float32, 2, 8, True)
float64 = dtype("float64", np.float64, 2, 9, True)
complex64 = dtype("complex64", np.complex64, 3, 10, True)
complex128 = dtype("complex128", np.complex128, 3, 11, True)

all_dtypes = (
    bool_,
    uint8,
    int8,
    int16,
    int32,
    int64,
    float16,
    bfloat16,
    float32,
    float64,
    complex64,
    complex128,
)
_REAL_OF = {complex64: float32, complex128: float64}
# PyTorch's complex32 (chalf) pairs with float16; kiln has no complex32, so half types have none
_COMPLEX_OF = {float32: complex64, float64: complex128}
_TORCH_NAMES = {
    "bool": "Bool",
    "uint8": "Byte",
    "int8": "Char",
    "int16": "Short",
    "int32": "Int",
    "int64": "Long",
    "float16": "Half",
    "bfloat16": "BFloat16",
    "float32": "Float",
    "float64": "Double",
    "complex64": "ComplexFloat",
    "complex128": "ComplexDouble",
}
_BY_NAME = {d.name: d for d in all_dtypes}
_BY_NP = {d.np: d for d in all_dtypes}


_HALF_TYPES = (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16))


def through_float32(a: np.ndarray, np_dtype) -> np.ndarray:
    """``a`` ready for numpy's cast to ``np_dtype`` so that it rounds as PyTorch's does: PyTorch
    builds a float16 or bfloat16 value from a float, so a float64 (or an integer of more than
    16 bits) is rounded to float32 first and then to the 16-bit type, twice (1 + 2**-11 + 2**-40 becomes 1.0
    in PyTorch, where one rounding gives 1.001). Other casts come back unchanged."""
    if np.dtype(np_dtype) in _HALF_TYPES and (
        a.dtype.kind == "f"
        and a.dtype.itemsize > 4
        or a.dtype.kind in "iu"
        and a.dtype.itemsize > 2
    ):
        return a.astype(np.float32)
    return a


def _dtype_by_name(name: str) -> dtype:
    return _BY_NAME[name]


def from_numpy_dtype(np_dtype) -> dtype:
    """Map a numpy dtype to kiln's, with the error PyTorch gives for unsupported ones."""
    try:
        return _BY_NP[np.dtype(np_dtype)]
    except KeyError:
        if np.dtype(np_dtype).byteorder not in "=|" and np.dtype(np_dtype).newbyteorder("=") in (
            _BY_NP
        ):
            raise ValueError(
                "given numpy array has byte order different from the native byte order. "
                "Conversion between byte orders is currently not supported."
            ) from None
        raise TypeError(
            f"can't convert np.ndarray of type numpy.{np.dtype(np_dtype)}. The only supported "
            "types are: float64, float32, float16, complex64, complex128, bfloat16, int64, int32, "
            "int16, int8, uint8, and bool."
        ) from None


def _promote_pair(a: dtype, b: dtype) -> dtype:
    if a is b:
        return a
    if a.category != b.category:
        hi, lo = (a, b) if a.category > b.category else (b, a)
        if hi.is_complex and lo.is_floating_point:
            # the complex result keeps the wider value type: float64 + complex64 -> complex128
            return complex128 if hi is complex128 or lo is float64 else complex64
        return hi
    if a.category == 0:
        return a
    if a.category == 3:
        return a if a._rank > b._rank else b
    if a.category == 2:
        if {a, b} == {float16, bfloat16}:
            return float32
        return a if a._rank > b._rank else b
    # integral: uint8 mixes with signed types by widening to at least int16
    if a is uint8 or b is uint8:
        other = b if a is uint8 else a
        return int16 if other is int8 else other
    return a if a._rank > b._rank else b


_PROMOTE = {(a, b): _promote_pair(a, b) for a in all_dtypes for b in all_dtypes}


def promote_types(a: dtype, b: dtype) -> dtype:
    """The smallest dtype both ``a`` and ``b`` convert to without losing category."""
    return _PROMOTE[a, b]


_default_dtype = [float32]


def get_default_dtype() -> dtype:
    return _default_dtype[0]


def default_complex_dtype() -> dtype:
    """What a Python complex number becomes: complex128 under a float64 default, else complex64."""
    return complex128 if _default_dtype[0] is float64 else complex64


def set_default_dtype(d: dtype) -> None:
    if not isinstance(d, dtype) or not d.is_floating_point:
        raise TypeError("only floating-point types are supported as the default type")
    _default_dtype[0] = d


def dtype_of_python_scalar(value) -> dtype:
    """The dtype a bare Python number gets when it becomes a tensor (``kiln.tensor(1.5)``)."""
    if isinstance(value, bool):
        return bool_
    if isinstance(value, (int, SymInt)):
        return int64
    if isinstance(value, float):
        return _default_dtype[0]
    if isinstance(value, complex):
        return default_complex_dtype()
    if isinstance(value, np.generic):
        return from_numpy_dtype(value.dtype)
    raise TypeError(f"unsupported scalar type {type(value).__name__}")


def _combine_categories(higher: dtype | None, lower: dtype | None) -> dtype | None:
    if higher is None:
        return lower
    if lower is None:
        return higher
    if higher.is_complex:
        return higher
    if lower.is_complex:
        # a complex 0-dim tensor or scalar keeps a floating result's value type (float64 * 1j
        # is complex128, float32 * 1j complex64); over integers the complex one decides
        return higher.to_complex() if higher in _COMPLEX_OF else lower
    if higher.is_floating_point:
        return higher
    if higher is bool_ or lower.is_floating_point:
        return _PROMOTE[higher, lower]
    return higher


def result_type_of(dim_dtypes, zero_dim_dtypes, scalar_dtypes) -> dtype:
    """c10's ResultTypeState: each group can only raise the category of the one before it."""

    def fold(ds):
        out = None
        for d in ds:
            out = d if out is None else _PROMOTE[out, d]
        return out

    wrapped = fold(scalar_dtypes)
    if wrapped is not None and wrapped.is_floating_point:
        wrapped = _default_dtype[0]
    elif wrapped is not None and wrapped.is_complex:
        wrapped = default_complex_dtype()
    result = _combine_categories(
        fold(dim_dtypes), _combine_categories(fold(zero_dim_dtypes), wrapped)
    )
    if result is None:
        raise TypeError("result_type needs at least one tensor or scalar")
    return result


def can_cast(from_: dtype, to: dtype) -> bool:
    """PyTorch's same-kind rule for writing results into an existing tensor."""
    return from_.category <= to.category


# PyTorch's names of the scalar types, as its error messages spell them
_TYPE_NAMES = {
    bool_: "Bool",
    uint8: "Byte",
    int8: "Char",
    int16: "Short",
    int32: "Int",
    int64: "Long",
    float16: "Half",
    bfloat16: "BFloat16",
    float32: "Float",
    float64: "Double",
    complex64: "ComplexFloat",
    complex128: "ComplexDouble",
}


def torch_type_name(d: dtype) -> str:
    """PyTorch's scalar type name ('Long', 'Float'...), as its error messages spell it."""
    return _TYPE_NAMES[d]


_C_TYPE_NAMES = {
    bool_: "bool",
    uint8: "unsigned char",
    int8: "signed char",
    int16: "short int",
    int32: "int",
    int64: "long int",
    float16: "c10::Half",
    bfloat16: "c10::BFloat16",
    float32: "float",
    float64: "double",
    complex64: "c10::complex<float>",
    complex128: "c10::complex<double>",
}


def c_type_name(d: dtype) -> str:
    """The C++ spelling ('float', 'long int') some ATen messages use, e.g. matmul's and conv's."""
    return _C_TYPE_NAMES.get(d, d.name)
