"""Machine code for eager random numbers: the samplers ``kiln.runtime.random`` hands its draws to.

In numpy, Philox4x32-10 costs a hundred array passes over 64-bit words whatever the size: 0.13 ms
for 16 numbers and 0.15 s for a million (``dropout`` of a 1024x1024 activation, a 4096x256
weight's ``kaiming_uniform_``), against PyTorch's 7 ms. Here each counter's rounds run in vector
registers, one pass over the output (``philox.py`` emits the rounds compiled kernels use too).
Normals take Box-Muller on the first two words in float64 as the compiled kernels do (their ops
handler's ``randn``, vector ``log`` and ``cos`` included): eager and compiled draws are the same
bits, and numpy's definition differs from both by an ulp of float64 at most, below the float32
result's half ulp (``tests/runtime/test_random.py`` compares).

The runtime sits below the compiler: it reaches these functions through
``random.set_native_sampler`` (the facade installs a loader, run on the first draw); a module that
fails to build leaves numpy in charge.
"""

from __future__ import annotations

import ctypes

import numpy as np
from llvmlite import ir

from ....runtime import dtypes as dt
from .flat_loops import flat_loop, splat, store
from .jit import compile_module, data_address
from .ops_handler import LLVMOps
from .philox import philox_words, uniform_from_word
from .values import F32, I32, I64, V

__all__ = ["NativeSampler", "build"]

_VOID = ir.VoidType()


def _counters(b: ir.IRBuilder, offset: ir.Value, i: ir.Value, lanes: int) -> ir.Value:
    """Counters offset + i, offset + i + 1, ... for the lanes of one iteration."""
    first = splat(b, b.add(offset, i), lanes)
    if lanes == 1:
        return first
    return b.add(first, ir.Constant(ir.VectorType(I64, lanes), list(range(lanes))))


def _words(b: ir.IRBuilder, seed: ir.Value, offset: ir.Value, i: ir.Value, lanes: int):
    return philox_words(b, splat(b, seed, lanes), _counters(b, offset, i, lanes), lanes)


class _Emitter:
    """What ``LLVMOps`` asks of a kernel emitter for random numbers and math: its builder and
    the Philox words."""

    def __init__(self, builder: ir.IRBuilder):
        self.builder = builder

    def philox(self, handler, seed: V, offset: V):
        return philox_words(self.builder, seed.value, offset.value, handler.lanes)

    def uniform(self, handler, word):
        return uniform_from_word(self.builder, word, handler.lanes)


def _module() -> ir.Module:
    module = ir.Module(name="kiln_eager_random")
    i32p, f32p = I32.as_pointer(), F32.as_pointer()

    words = ir.Function(
        module, ir.FunctionType(_VOID, [I64, I64, I64, i32p, i32p]), "kiln_philox_words"
    )
    seed, offset, n, out0, out1 = words.args
    for p in (out0, out1):
        p.add_attribute("noalias")

    def words_body(b, i, lanes):
        w0, w1 = _words(b, seed, offset, i, lanes)
        store(b, w0, out0, i, lanes)
        store(b, w1, out1, i, lanes)

    flat_loop(words, n, words_body)

    uniform = ir.Function(
        module, ir.FunctionType(_VOID, [I64, I64, I64, f32p]), "kiln_philox_uniform"
    )
    u_seed, u_offset, u_n, u_out = uniform.args

    def uniform_body(b, i, lanes):
        w0, _ = _words(b, u_seed, u_offset, i, lanes)
        store(b, uniform_from_word(b, w0, lanes), u_out, i, lanes)

    flat_loop(uniform, u_n, uniform_body)

    normal = ir.Function(
        module, ir.FunctionType(_VOID, [I64, I64, I64, f32p]), "kiln_philox_normal"
    )
    n_seed, n_offset, n_n, n_out = normal.args

    def normal_body(b, i, lanes):
        # the compiled kernels' own ``ops.randn``: their Box-Muller, their vector log and cos
        ops = LLVMOps(_Emitter(b), lanes, {})
        seed = V(splat(b, n_seed, lanes), dt.int64)
        value = ops.randn(seed, V(_counters(b, n_offset, i, lanes), dt.int64))
        store(b, value.value, n_out, i, lanes)

    flat_loop(normal, n_n, normal_body)
    return module


_U64 = ctypes.c_uint64
_PTR = ctypes.c_void_p


class NativeSampler:
    """The three samplers as numpy-returning calls (what ``runtime.random`` expects)."""

    def __init__(self, compiled):
        self._words = compiled.cfunc("kiln_philox_words", None, _U64, _U64, _U64, _PTR, _PTR)
        self._uniform = compiled.cfunc("kiln_philox_uniform", None, _U64, _U64, _U64, _PTR)
        self._normal = compiled.cfunc("kiln_philox_normal", None, _U64, _U64, _U64, _PTR)

    def words(self, seed: int, offset: int, n: int) -> tuple[np.ndarray, np.ndarray]:
        w0 = np.empty(n, np.uint32)
        w1 = np.empty(n, np.uint32)
        self._words(seed, offset, n, data_address(w0), data_address(w1))
        return w0, w1

    def uniform(self, seed: int, offset: int, n: int) -> np.ndarray:
        out = np.empty(n, np.float32)
        self._uniform(seed, offset, n, data_address(out))
        return out

    def normal(self, seed: int, offset: int, n: int) -> np.ndarray:
        out = np.empty(n, np.float32)
        self._normal(seed, offset, n, data_address(out))
        return out


def build() -> NativeSampler:
    """Compile (or load from the object cache) the samplers."""
    return NativeSampler(compile_module(_module(), opt_level=3))
