"""Array casts between dtypes as PyTorch rounds them, in machine code where numpy is slow.

numpy converts to and from float16 (and ml_dtypes to and from bfloat16) one element at a time in
software: 4-8 ns an element, 25x PyTorch's vector conversions, paid two or three times by every
eager op on a 16-bit float tensor. The compiler builds vector casts for those pairs
(``inductor/codegen/llvm/eager_casts.py``, reached through ``machine_code``), built on the first
large cast. Small arrays, other pairs, and a process whose casts failed to build keep numpy's
cast, which gives the same bits.
"""

from __future__ import annotations

import numpy as np

from . import dtypes as dt
from . import machine_code

__all__ = ["astype", "has_native_cast"]

# below this many elements numpy's cast costs less than the call into machine code
_NATIVE_MIN = 256

_FLOATS = frozenset(np.dtype(d.np) for d in (dt.float64, dt.float32, dt.float16, dt.bfloat16))
_SIXTEEN_BIT = frozenset(np.dtype(d.np) for d in (dt.float16, dt.bfloat16))


def has_native_cast(src_np, dst_np) -> bool:
    """Whether casts from ``src_np`` to ``dst_np`` have machine code: between the float types,
    a 16-bit one on either side."""
    src_np, dst_np = np.dtype(src_np), np.dtype(dst_np)
    return (
        src_np != dst_np
        and src_np in _FLOATS
        and dst_np in _FLOATS
        and (src_np in _SIXTEEN_BIT or dst_np in _SIXTEEN_BIT)
    )


def astype(a: np.ndarray, np_dtype) -> np.ndarray:
    """A new array of ``a``'s values as ``np_dtype``, in ``a``'s memory order (numpy's order
    'K'), rounded as PyTorch rounds (a 16-bit float from float64 goes through float32)."""
    if a.size >= _NATIVE_MIN and has_native_cast(a.dtype, np_dtype):
        caster = machine_code.get("casts")
        if caster is not None:
            if a.flags.c_contiguous:
                return caster.cast(a, np_dtype)
            # a dense array in another dim order: cast it as laid out in memory
            order = sorted(range(a.ndim), key=lambda i: -a.strides[i])
            ordered = a.transpose(order)
            if ordered.flags.c_contiguous:
                return caster.cast(ordered, np_dtype).transpose(np.argsort(order))
    return dt.through_float32(a, np_dtype).astype(np_dtype)
