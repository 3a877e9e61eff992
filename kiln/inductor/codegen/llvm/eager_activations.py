"""Machine code for eager activations and their derivatives: gelu (erf and tanh forms), silu,
sigmoid and log_sigmoid (binary cross-entropy with logits), and pow(x, 3).

In numpy, gelu(erf) is twenty array passes with a float32 erfc fit (1.6 ms for 512x512 against
PyTorch's 0.25); the transformer MLPs that call it once forward and once backward per layer feel
that. Here each function is one vector pass over float32, written against the compiled kernels'
ops handler (``LLVMOps``): gelu(erf) and silu in their decompositions' formula order (eager is
the compiled kernels' bits), the tanh form as ``x * sigmoid(2 inner)`` like the numpy kernel (no
cancellation down its lower tail, which its decomposition has); all within float32 rounding of
PyTorch's.

``kiln.ops.nn.activations`` reaches these through ``runtime.machine_code`` (the facade registers
the loader; the first large call builds them); without them the numpy kernels run.
"""

from __future__ import annotations

import ctypes
import math
from collections.abc import Callable

import numpy as np
from llvmlite import ir

from ....runtime import dtypes as dt
from .flat_loops import flat_loop, float_ops, load, store
from .jit import compile_module, data_address
from .ops_handler import LLVMOps
from .values import F32, I64, V

__all__ = ["FORMULAS", "NativeActivations", "build"]

_F = dt.float32
_VOID = ir.VoidType()

_SQRT1_2 = 1 / math.sqrt(2.0)
_INV_SQRT_2PI = 1 / math.sqrt(2 * math.pi)
_GELU_K = math.sqrt(2.0 / math.pi)
_GELU_KAPPA = 0.044715


def _c(ops: LLVMOps, value: float) -> V:
    return ops.constant(value, _F)


def _gelu(ops, x):
    """h * erf(x * sqrt(1/2)) + h with h = 0.5 * x (a fused multiply-add where the host has one):
    PyTorch's zeros, +0.0 for -0.0 and where 1 + erf cancels."""
    h = ops.mul(_c(ops, 0.5), x)
    return ops.add(ops.mul(h, ops.erf(ops.mul(x, _c(ops, _SQRT1_2)))), h)


def _gelu_tanh_inner(ops, x):
    """K * (x + KAPPA * x * x * x)"""
    cube = ops.mul(ops.mul(ops.mul(_c(ops, _GELU_KAPPA), x), x), x)
    return ops.mul(_c(ops, _GELU_K), ops.add(x, cube))


def _gelu_tanh(ops, x):
    """x * sigmoid(2 K (x + KAPPA x^3)), which is 0.5 x (1 + tanh(K (x + KAPPA x^3))) without
    the cancellation of 1 + tanh down the lower tail (the numpy kernel's form)"""
    inner = _gelu_tanh_inner(ops, x)
    return ops.mul(x, ops.sigmoid(ops.mul(_c(ops, 2.0), inner)))


def _gelu_backward(ops, g, x):
    """g * (cdf + x * pdf): cdf = 0.5 * (1 + erf(x * sqrt(1/2))), pdf = exp(-0.5 * x * x) / sqrt(2 pi)"""
    cdf = ops.mul(_c(ops, 0.5), ops.add(_c(ops, 1.0), ops.erf(ops.mul(x, _c(ops, _SQRT1_2)))))
    pdf = ops.mul(ops.exp(ops.mul(ops.mul(_c(ops, -0.5), x), x)), _c(ops, _INV_SQRT_2PI))
    return ops.mul(g, ops.add(cdf, ops.mul(x, pdf)))


def _gelu_tanh_backward(ops, g, x):
    """g * (s + 2 x s (1 - s) K (1 + 3 KAPPA x^2)), s = sigmoid(2 inner): PyTorch's
    0.5 (1 + t) + 0.5 x (1 - t^2) K (1 + 3 KAPPA x^2) with t = tanh(inner) = 2 s - 1"""
    s = ops.sigmoid(ops.mul(_c(ops, 2.0), _gelu_tanh_inner(ops, x)))
    d = ops.mul(
        ops.add(ops.mul(ops.mul(x, x), _c(ops, 3 * _GELU_KAPPA)), _c(ops, 1.0)), _c(ops, _GELU_K)
    )
    u = ops.mul(ops.mul(ops.mul(ops.mul(ops.sub(_c(ops, 1.0), s), s), x), _c(ops, 2.0)), d)
    return ops.mul(ops.add(s, u), g)


def _silu(ops, x):
    """x * sigmoid(x)"""
    return ops.mul(x, ops.sigmoid(x))


def _silu_backward(ops, g, x):
    """g * s * (1 + x * (1 - s)), s = sigmoid(x)"""
    s = ops.sigmoid(x)
    return ops.mul(ops.mul(g, s), ops.add(_c(ops, 1.0), ops.mul(x, ops.sub(_c(ops, 1.0), s))))


def _sigmoid(ops, x):
    """PyTorch's formula, 1 / (1 + e^-x), as the numpy kernel's (an e^-x overflowing to inf
    gives 0): its rounding is PyTorch's where the two exps agree"""
    return ops.reciprocal(ops.add(_c(ops, 1.0), ops.exp(ops.neg(x))))


def _log_sigmoid(ops, x):
    """minimum(x, 0) - log1p(exp(-|x|))"""
    return ops.sub(ops.minimum(x, _c(ops, 0.0)), ops.log1p(ops.exp(ops.neg(ops.abs(x)))))


def _cube(ops, x):
    """(x * x) * x: PyTorch's pow(x, 3) (its exact form for that exponent), one pass where
    numpy's two passes and a temporary took 27 us for 256x256 (PyTorch: 10)."""
    return ops.mul(ops.mul(x, x), x)


# 16 float32 lanes (one AVX-512 register) a vector: gelu over 512x256 138-157 -> 105-107 us,
# its forward+backward 380-414 -> 305-315 us; lane-wise formulas, so the bits of any width
_LANES = 16

# name -> (number of inputs, formula over LLVMOps values)
FORMULAS: dict[str, tuple[int, Callable]] = {
    "gelu": (1, _gelu),
    "gelu_tanh": (1, _gelu_tanh),
    "gelu_backward": (2, _gelu_backward),
    "gelu_tanh_backward": (2, _gelu_tanh_backward),
    "silu": (1, _silu),
    "silu_backward": (2, _silu_backward),
    "log_sigmoid": (1, _log_sigmoid),
    "sigmoid": (1, _sigmoid),
    "cube": (1, _cube),
}


def _module() -> ir.Module:
    module = ir.Module(name="kiln_eager_activations")
    f32p = F32.as_pointer()
    for name, (arity, formula) in FORMULAS.items():
        fn = ir.Function(
            module, ir.FunctionType(_VOID, [I64] + [f32p] * (arity + 1)), f"kiln_{name}"
        )
        n, *inputs, out = fn.args
        for p in (*inputs, out):
            p.add_attribute("noalias")

        def body(b, i, lanes, inputs=inputs, out=out, formula=formula):
            ops = float_ops(b, lanes)
            values = [V(load(b, p, i, lanes), _F) for p in inputs]
            store(b, formula(ops, *values).value, out, i, lanes)

        flat_loop(fn, n, body, _LANES)
    return module


class NativeActivations:
    """``run(name, out, *inputs)`` over C-contiguous float32 arrays of one shape."""

    def __init__(self, compiled):
        self._functions = {
            name: compiled.cfunc(
                f"kiln_{name}", None, ctypes.c_int64, *[ctypes.c_void_p] * (arity + 1)
            )
            for name, (arity, _) in FORMULAS.items()
        }

    def run(self, name: str, out: np.ndarray, *inputs: np.ndarray) -> np.ndarray:
        self._functions[name](out.size, *[data_address(a) for a in inputs], data_address(out))
        return out


def build() -> NativeActivations:
    """Compile (or load from the object cache) the activation kernels."""
    return NativeActivations(compile_module(_module(), opt_level=3))
