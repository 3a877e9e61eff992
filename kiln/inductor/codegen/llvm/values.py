"""What the LLVM generator's values are: IR types per dtype, the vector width, ``V``.

The bottom of the package: the ops handler, the column emitter and the kernel emitter all build
on these, and this module imports none of them.
"""

from __future__ import annotations

import functools

from llvmlite import ir

from ....runtime import dtypes as dt

__all__ = [
    "LANES",
    "UnsupportedInLLVM",
    "V",
    "int_vector",
    "llvm_type",
    "memory_type",
    "reduction_identity",
    "splat_constant",
]


def _host_lanes() -> int:
    """Vector width of the inner loops: one 512-bit register of float32 with AVX-512, else 8
    (two 256-bit halves; both widths keep the vector units busy on AVX2 too)."""
    from .jit import host_target

    return 16 if "+avx512f" in host_target().features else 8


LANES = _host_lanes()
I1 = ir.IntType(1)
I8 = ir.IntType(8)
I32 = ir.IntType(32)
I64 = ir.IntType(64)
F32 = ir.FloatType()
F64 = ir.DoubleType()


class UnsupportedInLLVM(NotImplementedError):  # noqa: N818 - reads as a reason
    """The kernel uses something the LLVM generator does not emit; the kernel runs in numpy."""


def llvm_type(d: dt.dtype):
    """Register type of a value of dtype ``d`` (bool is i1 in registers, i8 in memory)."""
    return {
        dt.float32: F32,
        dt.float64: F64,
        dt.float16: ir.HalfType(),
        dt.bfloat16: ir.IntType(16),
        dt.int64: I64,
        dt.int32: I32,
        dt.int16: ir.IntType(16),
        dt.int8: I8,
        dt.uint8: I8,
        dt.bool_: I1,
    }[d]


def memory_type(d: dt.dtype):
    return I8 if d is dt.bool_ else llvm_type(d)


def int_vector(element: ir.IntType, values) -> ir.Constant:
    """The constant vector of ``values`` (plain ints), one object per element width and values.

    llvmlite formats a constant's text once per object, element by element: lane indices,
    shuffle masks and splatted sizes made afresh at each use were ~0.1 s of a ResNet training
    step's IR printing (every kernel has the same few). A constant is a value with no parent,
    so one object serves every instruction of every module."""
    values = tuple(values)
    if any(v.__class__ is not int for v in values):  # a bool would share an int's entry
        return ir.Constant(ir.VectorType(element, len(values)), list(values))
    return _int_vector(element.width, values)


@functools.lru_cache(maxsize=1024)
def _int_vector(width: int, values: tuple) -> ir.Constant:
    return ir.Constant(ir.VectorType(ir.IntType(width), len(values)), list(values))


def splat_constant(scalar: ir.Constant, lanes: int) -> ir.Constant:
    """``scalar`` in every lane: one element object, so its text (a float's hex digits) is
    formatted once rather than once per lane; the vector's text is the same."""
    return ir.Constant(ir.VectorType(scalar.type, lanes), [scalar] * lanes)


class V:
    """A value in a loop body: the LLVM value and its kiln dtype; ``uniform``, for a vector every
    lane of which is one scalar (read at an index the lanes share), that scalar."""

    __slots__ = ("value", "dtype", "uniform")

    def __init__(self, value, dtype, uniform=None):
        self.value = value
        self.dtype = dtype
        self.uniform = uniform


def reduction_identity(rtype: str, d: dt.dtype):
    if rtype == "sum":
        return 0
    if rtype == "prod":
        return 1
    if rtype in ("max", "argmax"):
        return (
            float("-inf")
            if d.is_floating_point
            else (-(1 << (d.itemsize * 8 - 1)) if d.is_signed else 0)
        )
    if rtype in ("min", "argmin"):
        return (
            float("inf")
            if d.is_floating_point
            else ((1 << (d.itemsize * 8 - 1)) - 1 if d.is_signed else (1 << (d.itemsize * 8)) - 1)
        )
    if rtype == "any":
        return False
    if rtype == "all":
        return True
    raise UnsupportedInLLVM(f"reduction {rtype}")
