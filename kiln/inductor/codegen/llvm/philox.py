"""Philox4x32-10 in LLVM IR: the one emitter of kiln's random words for CPU machine code.

Compiled kernels (``ops.rand``/``ops.randn`` in the ops handler) and the eager samplers
(``eager_random``) both build their words here, so the two draw the very numbers
``kiln.runtime.random`` defines: counter ``offset + i`` split into (lo, hi) words, key ``seed``.
"""

from __future__ import annotations

from llvmlite import ir

from ....runtime.random import PHILOX_M0, PHILOX_M1, PHILOX_W0, PHILOX_W1
from .values import F32, I32, I64

__all__ = ["philox_words", "uniform_from_word"]


def _typed(scalar: ir.Type, lanes: int) -> ir.Type:
    return scalar if lanes == 1 else ir.VectorType(scalar, lanes)


def _splat(ty: ir.Type, value, lanes: int) -> ir.Constant:
    return ir.Constant(ty, value) if lanes == 1 else ir.Constant(ty, [value] * lanes)


def philox_words(b: ir.IRBuilder, seed: ir.Value, counter: ir.Value, lanes: int):
    """Words 0 and 1 of Philox4x32-10 for the i64 ``counter`` (``lanes`` of them as a vector)
    under the i64 key ``seed``."""
    i32, i64 = _typed(I32, lanes), _typed(I64, lanes)
    c0 = b.trunc(counter, i32)
    c1 = b.trunc(b.lshr(counter, _splat(i64, 32, lanes)), i32)
    c2 = c3 = _splat(i32, 0, lanes)
    k0 = b.trunc(seed, i32)
    k1 = b.trunc(b.lshr(seed, _splat(i64, 32, lanes)), i32)
    shift = _splat(i64, 32, lanes)
    for _ in range(10):
        p0 = b.mul(b.zext(c0, i64), _splat(i64, PHILOX_M0, lanes))
        p1 = b.mul(b.zext(c2, i64), _splat(i64, PHILOX_M1, lanes))
        hi0, lo0 = b.trunc(b.lshr(p0, shift), i32), b.trunc(p0, i32)
        hi1, lo1 = b.trunc(b.lshr(p1, shift), i32), b.trunc(p1, i32)
        c0, c1, c2, c3 = b.xor(b.xor(hi1, c1), k0), lo1, b.xor(b.xor(hi0, c3), k1), lo0
        k0 = b.add(k0, _splat(i32, PHILOX_W0, lanes))
        k1 = b.add(k1, _splat(i32, PHILOX_W1, lanes))
    return c0, c1


def uniform_from_word(b: ir.IRBuilder, word: ir.Value, lanes: int) -> ir.Value:
    """float32 in [0, 1) from the word's top 24 bits (``runtime.random.uniform_from_bits``)."""
    top = b.lshr(word, _splat(_typed(I32, lanes), 8, lanes))
    f32 = _typed(F32, lanes)
    return b.fmul(b.uitofp(top, f32), _splat(f32, 2.0**-24, lanes))
