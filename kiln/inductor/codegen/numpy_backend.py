"""The numpy reference backend: executes a schedule's loop bodies directly with numpy.

Every loop variable becomes an index array shaped to broadcast along its own axis, so one call of
a body computes a whole loop nest. It is the living definition of the loop IR (like tinygrad's
Python emulator): tests run lowering and scheduling through it, independently of LLVM codegen,
and compiled kernels are checked against it.
"""

from __future__ import annotations

import math

import numpy as np

from ...runtime import dtypes as dt
from ...runtime import random as rng
from .. import sym
from ..ir import ComputedBuffer, Pointwise, Reduction
from ..prims import shared_formula
from ..scheduler import ExternCall, Kernel, Schedule
from ..virtualized import set_ops_handler

__all__ = ["NumpyHandler", "run_schedule", "eval_expr"]


def eval_expr(expr: sym.Expr, env: dict):
    """Evaluate an index expression with arrays (or ints) bound to its atoms."""
    out = expr.const
    for atom, c in expr.terms.items():
        if isinstance(atom, (sym.Var, sym.Indirect)):
            v = env[atom]
        elif isinstance(atom, sym.FloorDiv):
            v = np.floor_divide(eval_expr(atom.expr, env), atom.div)
        else:
            v = np.mod(eval_expr(atom.expr, env), atom.mod)
        out = out + (v * c if c != 1 else v)
    return out


def _np(d: dt.dtype):
    return d.np


class NumpyHandler:
    """Computes loop bodies on numpy arrays (see the module docstring)."""

    def __init__(self, storages: dict, env: dict):
        self.storages = storages  # buffer name -> flat 1-D numpy array (its storage)
        self.env = env  # atom -> index array
        self.indirect = 0

    # -------------------------------------------------------------- memory and indices
    def load(self, name, index):
        offsets = eval_expr(sym.as_expr(index), self.env)
        storage = self.storages[name]
        if storage.size == 0:  # an empty tensor: no element is ever observed
            return np.zeros(np.shape(offsets), storage.dtype)
        # loads in a not-taken branch of a where (padding, scatters) may point outside the
        # buffer; their values are never used, so clamp instead of faulting
        return storage[np.clip(offsets, 0, storage.size - 1)]

    def constant(self, value, dtype):
        if isinstance(value, float) and math.isinf(value) and not dtype.is_floating_point:
            info = np.iinfo(dtype.np)
            value = info.max if value > 0 else info.min
        return np.asarray(value).astype(_np(dtype))

    def index_expr(self, expr, dtype):
        return np.asarray(eval_expr(sym.as_expr(expr), self.env)).astype(_np(dtype))

    def indirect_indexing(self, value, size):
        self.indirect += 1
        atom = sym.Indirect(f"_ind{self.indirect}", size)
        v = np.asarray(value).astype(np.int64)
        self.env[atom] = np.where(v < 0, v + size, v)
        return sym.as_expr(atom)

    def to_dtype(self, x, dtype):
        x = np.asarray(x)
        if x.dtype == dt.bfloat16.np and not dtype.is_floating_point:
            x = x.astype(np.float32)  # ml_dtypes' own integer casts saturate; PyTorch's do not
        if dtype is dt.bool_:
            return x != 0
        if not dtype.is_floating_point and x.dtype.kind == "f":
            return np.trunc(x).astype(_np(dtype))
        return x.astype(_np(dtype))

    def where(self, c, a, b):
        return np.where(c, a, b)

    def dtype_of(self, x) -> dt.dtype:
        return dt.from_numpy_dtype(np.asarray(x).dtype)

    # -------------------------------------------------------------- random
    def rand(self, seed, offset):
        off = np.asarray(offset).astype(np.uint64)
        lo = (off & np.uint64(0xFFFFFFFF)).astype(np.uint32)
        hi = (off >> np.uint64(32)).astype(np.uint32)
        words = rng.philox4x32(lo, hi, int(np.asarray(seed).reshape(-1)[0]))
        return rng.uniform_from_bits(words[0])

    def randn(self, seed, offset):
        off = np.asarray(offset).astype(np.uint64)
        lo = (off & np.uint64(0xFFFFFFFF)).astype(np.uint32)
        hi = (off >> np.uint64(32)).astype(np.uint32)
        w0, w1, _, _ = rng.philox4x32(lo, hi, int(np.asarray(seed).reshape(-1)[0]))
        u1 = rng.uniform_from_bits(w0).astype(np.float64)
        u2 = rng.uniform_from_bits(w1).astype(np.float64)
        return (np.sqrt(-2.0 * np.log(1.0 - u1)) * np.cos(2.0 * np.pi * u2)).astype(np.float32)

    # -------------------------------------------------------------- math
    def __getattr__(self, name):
        fn = _MATH.get(name) or shared_formula(self, name)
        if fn is None:
            raise AttributeError(f"numpy ops handler has no op {name!r}")
        return fn


def _sigmoid(x):
    return (1.0 / (1.0 + np.exp(-x))).astype(x.dtype)


def _erf(x):
    from ...ops.pointwise.unary_binary import np_erf

    return np_erf(np.asarray(x))


def _erfinv(x):
    from ...ops.pointwise.unary_binary import np_erfinv

    return np_erfinv(np.asarray(x))


def _erfc(x):
    from ...ops.special.numpy_kernels import np_erfc

    return np_erfc(np.asarray(x))


def _floordiv(a, b):
    # numpy's floor division of floats is PyTorch's (through the exact remainder: 1.0 // 0.1
    # is 9, inf // 2 NaN); integer divisors are never 0 here (the lowering runs those eagerly)
    with np.errstate(all="ignore"):
        return np.floor_divide(a, b)


def _remainder(a, b):
    from ...ops.pointwise.numpy_math import np_remainder

    with np.errstate(all="ignore"):
        return np_remainder(a, b)


def _pow(a, b):
    from ...ops.pointwise.numpy_math import np_float_pow, np_int_pow

    if np.asarray(a).dtype.kind in "iu":
        return np_int_pow(a, b)
    return np_float_pow(a, b)  # C's pow (the lowering picks PyTorch's exact forms itself)


def _truncdiv(a, b):
    from ...ops.pointwise.numpy_math import np_trunc_divide

    if np.asarray(a).dtype.kind == "f":
        return np.trunc(a / b)
    return np_trunc_divide(a, b)


def _sign(x):
    from ...ops.pointwise.numpy_math import np_sign

    return np_sign(x)


def _round(x):
    return np.round(x)


_MATH = {
    "neg": np.negative,
    "abs": np.abs,
    "exp": np.exp,
    "exp2": np.exp2,
    "expm1": np.expm1,
    "log": np.log,
    "log2": np.log2,
    "log10": np.log10,
    "log1p": np.log1p,
    "sqrt": np.sqrt,
    "rsqrt": lambda x: 1.0 / np.sqrt(x),
    "sin": np.sin,
    "cos": np.cos,
    "tan": np.tan,
    "asin": np.arcsin,
    "acos": np.arccos,
    "atan": np.arctan,
    "sinh": np.sinh,
    "cosh": np.cosh,
    "tanh": np.tanh,
    "asinh": np.arcsinh,
    "acosh": np.arccosh,
    "atanh": np.arctanh,
    "sigmoid": _sigmoid,
    "erf": _erf,
    "erfc": _erfc,
    "reciprocal": np.reciprocal,
    "erfinv": lambda x: _erfinv(x),
    "floor": np.floor,
    "ceil": np.ceil,
    "trunc": np.trunc,
    "round": _round,
    "sign": _sign,
    "bitwise_not": lambda x: np.logical_not(x) if np.asarray(x).dtype == np.bool_ else np.invert(x),
    "isnan": np.isnan,
    "isinf": np.isinf,
    "isfinite": np.isfinite,
    "isposinf": np.isposinf,
    "isneginf": np.isneginf,
    "signbit": np.signbit,
    "logical_not": np.logical_not,
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "truediv": np.true_divide,
    "floordiv": _floordiv,
    "truncdiv": _truncdiv,
    "remainder": _remainder,
    "fmod": np.fmod,
    "pow": _pow,
    "maximum": np.maximum,
    "minimum": np.minimum,
    "atan2": np.arctan2,
    "hypot": np.hypot,
    "copysign": np.copysign,
    "bitwise_and": lambda a, b: (
        np.logical_and(a, b) if np.asarray(a).dtype == np.bool_ else np.bitwise_and(a, b)
    ),
    "bitwise_or": lambda a, b: (
        np.logical_or(a, b) if np.asarray(a).dtype == np.bool_ else np.bitwise_or(a, b)
    ),
    "bitwise_xor": lambda a, b: (
        np.logical_xor(a, b) if np.asarray(a).dtype == np.bool_ else np.bitwise_xor(a, b)
    ),
    "bitwise_left_shift": np.left_shift,
    "bitwise_right_shift": np.right_shift,
    "eq": np.equal,
    "ne": np.not_equal,
    "lt": np.less,
    "le": np.less_equal,
    "gt": np.greater,
    "ge": np.greater_equal,
    "logical_and": np.logical_and,
    "logical_or": np.logical_or,
    "logical_xor": np.logical_xor,
}


def _grid_vars(prefix, ranges, start_axis, ndim):
    env = {}
    vars_ = []
    for i, size in enumerate(ranges):
        v = sym.Var(f"{prefix}{i}", size)
        shape = [1] * ndim
        shape[start_axis + i] = size
        env[v] = np.arange(size, dtype=np.int64).reshape(shape)
        vars_.append(v)
    return vars_, env


def _reduce(values: np.ndarray, rtype: str, axes: tuple, out_dtype):
    if not axes:
        return values
    if values.size == 0 and rtype in ("max", "min", "argmax", "argmin"):
        # only reached when the output is empty too (eager rejects an empty max over a non-empty
        # output), and numpy refuses identity-less reductions of empty arrays
        kept = tuple(n for i, n in enumerate(values.shape) if i not in set(axes))
        return np.zeros(kept, dtype=np.int64 if rtype.startswith("arg") else values.dtype)
    if rtype == "sum":
        return values.sum(axis=axes, dtype=out_dtype)
    if rtype == "prod":
        return values.prod(axis=axes, dtype=out_dtype)
    if rtype in ("welford_mean", "welford_m2"):
        mean = values.mean(axis=axes, dtype=out_dtype, keepdims=True)
        if rtype == "welford_mean":
            return mean.reshape(mean.shape[: values.ndim - len(axes)])
        centred = values - mean
        return (centred * centred).sum(axis=axes, dtype=out_dtype)
    if rtype == "max":
        return values.max(axis=axes)
    if rtype == "min":
        return values.min(axis=axes)
    if rtype == "any":
        return values.any(axis=axes)
    if rtype == "all":
        return values.all(axis=axes)
    if rtype in ("argmax", "argmin"):
        lead = values.shape[: values.ndim - len(axes)]
        flat = values.reshape(lead + (-1,))
        if values.dtype.kind == "f":
            # NaN wins, like PyTorch
            nan = np.isnan(flat)
            idx = (np.argmax if rtype == "argmax" else np.argmin)(np.where(nan, 0, flat), axis=-1)
            first_nan = np.argmax(nan, axis=-1)
            return np.where(nan.any(axis=-1), first_nan, idx)
        return (np.argmax if rtype == "argmax" else np.argmin)(flat, axis=-1)
    raise NotImplementedError(f"reduction type {rtype}")


def compute_buffer(buf: ComputedBuffer, storages: dict) -> np.ndarray:
    """Evaluate one buffer's loops into a contiguous array of its ranges' shape."""
    data = buf.data
    if isinstance(data, Pointwise):
        nd = len(data.ranges)
        index, env = _grid_vars("x", data.ranges, 0, nd)
        with set_ops_handler(NumpyHandler(storages, env)):
            v = data.inner_fn(index)
        return np.broadcast_to(np.asarray(v).astype(data.dtype.np), tuple(data.ranges))
    assert isinstance(data, Reduction)
    nd = len(data.ranges) + len(data.reduction_ranges)
    index, env = _grid_vars("x", data.ranges, 0, nd)
    rindex, renv = _grid_vars("r", data.reduction_ranges, len(data.ranges), nd)
    env.update(renv)
    with set_ops_handler(NumpyHandler(storages, env)):
        v = data.inner_fn(index, rindex)
    full = tuple(data.ranges) + tuple(data.reduction_ranges)
    v = np.broadcast_to(np.asarray(v), full)
    axes = tuple(range(len(data.ranges), nd))
    acc = (
        data.dtype.np
        if data.reduction_type in ("sum", "prod", "welford_mean", "welford_m2")
        else None
    )
    out = _reduce(v, data.reduction_type, axes, acc)
    return np.asarray(out).astype(data.dtype.np).reshape(tuple(data.ranges))


def run_schedule(sched: Schedule, storages: dict) -> None:
    """Execute every step, writing computed buffers into ``storages`` (flat arrays by name)."""
    from .. import wrapper_runtime

    for step in sched.steps:
        if isinstance(step, ExternCall):
            wrapper_runtime.run_extern(step.buffer, storages)
            continue
        assert isinstance(step, Kernel)
        for node in step.nodes:
            values = compute_buffer(node, storages)
            target = wrapper_runtime.strided_view(storages[node.name], node.layout)
            np.copyto(target, values, casting="unsafe")


def run_scatter(buf, storages: dict) -> None:
    """Execute a ``Scatter`` buffer: initialize from its base, then write/add in index order."""
    from .. import wrapper_runtime

    data = buf.data
    out = wrapper_runtime.strided_view(storages[buf.name], buf.layout)
    nd = len(data.base_ranges)
    base_index, env = _grid_vars("b", data.base_ranges, 0, nd)
    with set_ops_handler(NumpyHandler(storages, env)):
        base = data.base_fn(base_index)
    np.copyto(out, np.broadcast_to(np.asarray(base), tuple(data.base_ranges)), casting="unsafe")
    if data.numel() == 0:
        return
    nd = len(data.ranges)
    index, env = _grid_vars("x", data.ranges, 0, nd)
    handler = NumpyHandler(storages, env)
    with set_ops_handler(handler):
        targets = data.index_fn(index)
        values = np.asarray(data.value_fn(index))
    offsets = eval_expr(buf.layout.offset_expr(targets), handler.env)
    shape = tuple(data.ranges)
    offsets = np.broadcast_to(np.asarray(offsets), shape).reshape(-1)
    values = np.broadcast_to(values, shape).reshape(-1).astype(buf.dtype.np)
    storage = storages[buf.name]
    if data.mode == "add":
        np.add.at(storage, offsets, values)
    else:
        storage[offsets] = values
