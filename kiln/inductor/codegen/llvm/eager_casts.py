"""Machine code for eager casts to and from the 16-bit float types.

numpy converts float16 in software, one element at a time (a 512x512 float32 tensor's ``.half()``
took 1.1-2.2 ms against PyTorch's 0.04), and ml_dtypes' bfloat16 casts are no faster; every eager
float16 or bfloat16 op pays two or three such casts, since its math runs in float32 as PyTorch's
CPU kernels do. Here each cast is one vector pass: float16 by the F16C conversions LLVM emits for
``fpext``/``fptrunc``, bfloat16 by integer rounding on the float32 bits.

The results are numpy's (and ml_dtypes') to the bit for every number: round to nearest even,
overflow to infinity, subnormals kept; float64 goes to a 16-bit type through float32, rounded
twice as PyTorch does (``dtypes.through_float32``). NaNs stay NaNs of the same sign (their payload
bits may differ: float16's become quiet, bfloat16's become the canonical quiet NaN as ml_dtypes
makes them).

``runtime.casting`` reaches these through ``runtime.machine_code`` (the facade registers the
loader; the first large cast builds them); without them numpy casts, more slowly.
"""

from __future__ import annotations

import ctypes

import numpy as np
from llvmlite import ir

from ....runtime import dtypes as dt
from .flat_loops import flat_loop, load, splat, store
from .jit import compile_module, data_address
from .values import F32, F64, I64

__all__ = ["NativeCaster", "PAIRS", "build"]

_HALF = ir.HalfType()
_I16 = ir.IntType(16)
_I32 = ir.IntType(32)
_VOID = ir.VoidType()

_FLOATS = (dt.float64, dt.float32, dt.float16, dt.bfloat16)
_MEMORY = {dt.float64: F64, dt.float32: F32, dt.float16: _HALF, dt.bfloat16: _I16}

# every conversion between the float types that involves a 16-bit one
PAIRS = tuple(
    (src, dst)
    for src in _FLOATS
    for dst in _FLOATS
    if src is not dst and (src.itemsize == 2 or dst.itemsize == 2)
)


def _vec(t: ir.Type, lanes: int) -> ir.Type:
    return t if lanes == 1 else ir.VectorType(t, lanes)


def _const(b: ir.IRBuilder, t: ir.Type, value: int, lanes: int) -> ir.Value:
    return splat(b, ir.Constant(t, value), lanes)


def _to_float32(b: ir.IRBuilder, v: ir.Value, src: dt.dtype, lanes: int) -> ir.Value:
    f32 = _vec(F32, lanes)
    if src is dt.float32:
        return v
    if src is dt.float64:
        return b.fptrunc(v, f32)
    if src is dt.float16:
        return b.fpext(v, f32)
    # bfloat16: its bits are the top half of the float32 with the same value
    wide = b.shl(b.zext(v, _vec(_I32, lanes)), _const(b, _I32, 16, lanes))
    return b.bitcast(wide, f32)


def _from_float32(b: ir.IRBuilder, v: ir.Value, dst: dt.dtype, lanes: int) -> ir.Value:
    if dst is dt.float32:
        return v
    if dst is dt.float64:
        return b.fpext(v, _vec(F64, lanes))
    if dst is dt.float16:
        return b.fptrunc(v, _vec(_HALF, lanes))
    # bfloat16: round to nearest even on the low 16 bits (a carry into the exponent rounds the
    # largest finite numbers to infinity, as it should); NaN becomes the quiet NaN of its sign
    i32 = _vec(_I32, lanes)
    bits = b.bitcast(v, i32)
    high = b.lshr(bits, _const(b, _I32, 16, lanes))
    odd = b.and_(high, _const(b, _I32, 1, lanes))
    rounded = b.add(b.add(bits, _const(b, _I32, 0x7FFF, lanes)), odd)
    value = b.lshr(rounded, _const(b, _I32, 16, lanes))
    sign = b.and_(high, _const(b, _I32, 0x8000, lanes))
    nan = b.or_(sign, _const(b, _I32, 0x7FC0, lanes))
    is_nan = b.fcmp_unordered("uno", v, v)
    return b.trunc(b.select(is_nan, nan, value), _vec(_I16, lanes))


def _name(src: dt.dtype, dst: dt.dtype) -> str:
    return f"kiln_cast_{src.name}_{dst.name}"


def _module() -> ir.Module:
    module = ir.Module(name="kiln_eager_casts")
    for src, dst in PAIRS:
        src_t, dst_t = _MEMORY[src], _MEMORY[dst]
        fn = ir.Function(
            module,
            ir.FunctionType(_VOID, [I64, src_t.as_pointer(), dst_t.as_pointer()]),
            _name(src, dst),
        )
        n, inp, out = fn.args
        inp.add_attribute("noalias")
        out.add_attribute("noalias")

        def body(b, i, lanes, inp=inp, out=out, src=src, dst=dst):
            value = _to_float32(b, load(b, inp, i, lanes), src, lanes)
            store(b, _from_float32(b, value, dst, lanes), out, i, lanes)

        flat_loop(fn, n, body)
    return module


class NativeCaster:
    """The casts as numpy calls (what ``runtime.casting`` expects): ``cast(array, np_dtype)`` on
    a C-contiguous array of a pair ``casting.has_native_cast`` names, into a new C-contiguous array."""

    def __init__(self, compiled):
        self._functions = {
            (np.dtype(src.np), np.dtype(dst.np)): compiled.cfunc(
                _name(src, dst), None, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p
            )
            for src, dst in PAIRS
        }

    def cast(self, a: np.ndarray, dst_np) -> np.ndarray:
        out = np.empty(a.shape, dst_np)
        self._functions[a.dtype, np.dtype(dst_np)](a.size, data_address(a), data_address(out))
        return out


def build() -> NativeCaster:
    """Compile (or load from the object cache) the casts."""
    return NativeCaster(compile_module(_module(), opt_level=3))
