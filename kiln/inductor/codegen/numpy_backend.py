"""The numpy reference backend: executes a schedule's loop bodies directly with numpy.

Every loop variable becomes an index array shaped to broadcast along its own axis, so one call of
a body computes a whole loop nest. It is the living definition of the loop IR (like tinygrad's
Python emulator): tests run lowering and scheduling through it, independently of LLVM codegen,
and compiled kernels are checked against it.

In a graph compiled for every size (``symbolic_sizes``), loop ranges, strides and index
coefficients are ``SymInt`` expressions, and a step the LLVM generator leaves to numpy
(``erfinv``, bfloat16 arithmetic) runs here too. Its loop bodies are not run again per call:
running them builds index expressions, and outside ``ShapeEnv.kernel_scope`` a decision on a
symbolic size would guard on the sizes seen. ``EverySizeStep`` instead records each body once,
at compile time inside that scope (a decision the symbols' ranges leave open refuses the
symbolic route there), as the list of handler calls it makes; each call replays that list with
the call's symbol values, which ranges, index expressions and constants are evaluated at.
"""

from __future__ import annotations

import math
from functools import partial

import numpy as np

from ...runtime import casting
from ...runtime import dtypes as dt
from ...runtime import random as rng
from ...runtime.symbolic import SymInt
from .. import sym
from ..ir import ComputedBuffer, Pointwise, Reduction
from ..prims import shared_formula
from ..scheduler import ExternCall, Kernel, Schedule
from ..virtualized import set_ops_handler

__all__ = ["NumpyHandler", "run_schedule", "eval_expr", "EverySizeStep"]


def _size(value, values: dict | None):
    """A size, coefficient or divisor as a plain int: a ``SymInt`` is evaluated at the size
    symbols' ``values`` (graphs compiled for every size)."""
    return value.expr.evaluate(values) if value.__class__ is SymInt else value


def eval_expr(expr: sym.Expr, env: dict, values: dict | None = None):
    """Evaluate an index expression with arrays (or ints) bound to its atoms; ``values``: the
    size symbols' values, for coefficients, constants and divisors that are ``SymInt``s."""
    out = _size(expr.const, values)
    for atom, c in expr.terms.items():
        if isinstance(atom, (sym.Var, sym.Indirect)):
            v = env[atom]
        elif isinstance(atom, sym.FloorDiv):
            v = np.floor_divide(eval_expr(atom.expr, env, values), _size(atom.div, values))
        else:
            v = np.mod(eval_expr(atom.expr, env, values), _size(atom.mod, values))
        c = _size(c, values)
        out = out + (v * c if c != 1 else v)
    return out


def _np(d: dt.dtype):
    return d.np


class NumpyHandler:
    """Computes loop bodies on numpy arrays (see the module docstring)."""

    def __init__(self, storages: dict, env: dict, values: dict | None = None):
        self.storages = storages  # buffer name -> flat 1-D numpy array (its storage)
        self.env = env  # atom -> index array
        self.values = values  # size symbol -> int (graphs compiled for every size)
        self.indirect = 0

    # -------------------------------------------------------------- memory and indices
    def load(self, name, index):
        offsets = eval_expr(sym.as_expr(index), self.env, self.values)
        storage = self.storages[name]
        if storage.size == 0:  # an empty tensor: no element is ever observed
            return np.zeros(np.shape(offsets), storage.dtype)
        # loads in a not-taken branch of a where (padding, scatters) may point outside the
        # buffer; their values are never used, so clamp instead of faulting
        return storage[np.clip(offsets, 0, storage.size - 1)]

    def constant(self, value, dtype):
        value = _size(value, self.values)  # a size used as a number (a mean's element count)
        if isinstance(value, float) and math.isinf(value) and not dtype.is_floating_point:
            info = np.iinfo(dtype.np)
            value = info.max if value > 0 else info.min
        return np.asarray(value).astype(_np(dtype))

    def index_expr(self, expr, dtype):
        return np.asarray(eval_expr(sym.as_expr(expr), self.env, self.values)).astype(_np(dtype))

    def indirect_indexing(self, value, size, wrap_negative=True, error="RuntimeError"):
        self.indirect += 1
        atom = sym.Indirect(f"_ind{self.indirect}", size)
        v = np.asarray(value).astype(np.int64)
        if wrap_negative:
            v = np.where(v < 0, v + _size(size, self.values), v)
        # (no range check: bodies run here over broadcast values, an index of an empty
        # loop's body included; the LLVM kernels check inside their loops)
        self.env[atom] = v
        return sym.as_expr(atom)

    def to_dtype(self, x, dtype):
        x = np.asarray(x)
        if x.dtype == dt.bfloat16.np and not dtype.is_floating_point:
            x = x.astype(np.float32)  # ml_dtypes' own integer casts saturate; PyTorch's do not
        if dtype is dt.bool_:
            return x != 0
        if not dtype.is_floating_point and x.dtype.kind == "f":
            return np.trunc(x).astype(_np(dtype))
        return casting.astype(x, _np(dtype))

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


def _grid_vars(prefix, ranges, start_axis, ndim, env=None):
    """Loop variables over ``ranges`` (plain ints), each bound in ``env`` to an index array
    along its own axis of ``ndim``."""
    env = {} if env is None else env
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


def compute_buffer(
    buf: ComputedBuffer, storages: dict, values: dict | None = None, body: Recorded | None = None
) -> np.ndarray:
    """Evaluate one buffer's loops into a contiguous array of its ranges' shape. ``values``
    and ``body``: the size symbols' values of this call and the buffer's loop body recorded
    for every size (``EverySizeStep``), replayed instead of running ``inner_fn``."""
    data = buf.data
    ranges = tuple(_size(n, values) for n in data.ranges)
    if isinstance(data, Pointwise):
        index, env = _grid_vars("x", ranges, 0, len(ranges))
        v = _run_body(data.inner_fn, (index,), NumpyHandler(storages, env, values), body)
        return np.broadcast_to(np.asarray(v).astype(data.dtype.np), ranges)
    assert isinstance(data, Reduction)
    reduction_ranges = tuple(_size(n, values) for n in data.reduction_ranges)
    nd = len(ranges) + len(reduction_ranges)
    index, env = _grid_vars("x", ranges, 0, nd)
    rindex, env = _grid_vars("r", reduction_ranges, len(ranges), nd, env)
    v = _run_body(data.inner_fn, (index, rindex), NumpyHandler(storages, env, values), body)
    v = np.broadcast_to(np.asarray(v), ranges + reduction_ranges)
    axes = tuple(range(len(ranges), nd))
    acc = (
        data.dtype.np
        if data.reduction_type in ("sum", "prod", "welford_mean", "welford_m2")
        else None
    )
    out = _reduce(v, data.reduction_type, axes, acc)
    return np.asarray(out).astype(data.dtype.np).reshape(ranges)


def _run_body(fn, indices: tuple, handler: NumpyHandler, body: Recorded | None):
    if body is not None:
        return body.replay(handler)
    with set_ops_handler(handler):
        return fn(*indices)


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


def run_scatter(
    buf,
    storages: dict,
    layout=None,
    values: dict | None = None,
    recorded: tuple[Recorded, Recorded] | None = None,
) -> None:
    """Execute a ``Scatter`` buffer: initialize from its base, then write/add in index order.
    ``layout``, ``values`` and ``recorded``: this call's layout of the buffer, the size
    symbols' values and the recorded ``(base, update)`` bodies (``EverySizeStep``)."""
    from .. import wrapper_runtime

    data = buf.data
    out = wrapper_runtime.strided_view(storages[buf.name], layout or buf.layout)
    base_ranges = tuple(_size(n, values) for n in data.base_ranges)
    base_index, env = _grid_vars("b", base_ranges, 0, len(base_ranges))
    handler = NumpyHandler(storages, env, values)
    base = _run_body(data.base_fn, (base_index,), handler, recorded and recorded[0])
    np.copyto(out, np.broadcast_to(np.asarray(base), base_ranges), casting="unsafe")
    shape = tuple(_size(n, values) for n in data.ranges)
    if math.prod(shape) == 0:
        return
    index, env = _grid_vars("x", shape, 0, len(shape))
    handler = NumpyHandler(storages, env, values)
    update = partial(_scatter_update, buf)
    offset, updates = _run_body(update, (index,), handler, recorded and recorded[1])
    offsets = eval_expr(offset, handler.env, values)
    offsets = np.broadcast_to(np.asarray(offsets), shape).reshape(-1)
    updates = np.broadcast_to(np.asarray(updates), shape).reshape(-1).astype(buf.dtype.np)
    storage = storages[buf.name]
    if data.mode == "add":
        np.add.at(storage, offsets, updates)
    else:
        storage[offsets] = updates


def _scatter_update(buf, index) -> tuple:
    """A scatter's ``(storage offset expression, value)`` at ``index`` (its targets first: the
    value may read what they did)."""
    targets = buf.data.index_fn(index)
    return buf.layout.offset_expr(targets), buf.data.value_fn(index)


# ------------------------------------------------------------------ steps of graphs for every size


class _Traced:
    """A value of a loop body being recorded: the handler call that made it, and that call's
    result on one element (``sample``: its dtype is the one the replay computes)."""

    __slots__ = ("slot", "sample")

    def __init__(self, slot: int, sample):
        self.slot = slot
        self.sample = sample


def _sample(x):
    return x.sample if x.__class__ is _Traced else x


# the handler calls a recording keeps; other ops are prims' shared formulas over these
_RECORDED = frozenset(
    {"load", "constant", "index_expr", "indirect_indexing", "to_dtype", "where", "rand", "randn"}
) | frozenset(_MATH)


class _Recorder:
    """An ops handler that records a loop body's calls (see the module docstring). Each call is
    also made on a probe, a ``NumpyHandler`` over one-element buffers and the symbols' hints:
    its results give ``dtype_of``, which shared formulas read."""

    def __init__(self, probe: NumpyHandler):
        self.probe = probe
        self.program: list = []  # (op name, args, kwargs), args holding _Traced operands

    def dtype_of(self, x) -> dt.dtype:
        return self.probe.dtype_of(_sample(x))

    def __getattr__(self, name):
        if name in _RECORDED:
            return partial(self._record, name)
        formula = shared_formula(self, name)
        if formula is None:
            raise AttributeError(f"numpy ops handler has no op {name!r}")
        return formula

    def _record(self, name: str, *args, **kwargs):
        probe_args = [_sample(a) for a in args]
        result = getattr(self.probe, name)(
            *probe_args, **{k: _sample(v) for k, v in kwargs.items()}
        )
        self.program.append((name, args, kwargs))
        if name == "indirect_indexing":  # an index expression (the replay binds its atom)
            return result
        # a sample of one element, never 0-d (some numpy kernels return a Python scalar for 0-d
        # input; a load whose index a 0-long loop folded to a constant is 0-d)
        return _Traced(len(self.program) - 1, np.atleast_1d(result))


class Recorded:
    """A loop body as the handler calls it makes (``_Recorder``); ``replay`` makes them on
    another handler and returns what the body returned there."""

    def __init__(self, program: list, result):
        self.program = program
        self.result = result

    def replay(self, handler: NumpyHandler):
        slots: list = []
        for name, args, kwargs in self.program:
            operands = [slots[a.slot] if a.__class__ is _Traced else a for a in args]
            if kwargs:
                kwargs = {
                    k: slots[v.slot] if v.__class__ is _Traced else v for k, v in kwargs.items()
                }
            slots.append(getattr(handler, name)(*operands, **kwargs))
        return _resolve(self.result, slots)


def _resolve(result, slots: list):
    if result.__class__ is _Traced:
        return slots[result.slot]
    if isinstance(result, (tuple, list)):
        return type(result)(_resolve(r, slots) for r in result)
    return result


class _Hints(dict):
    """Each size symbol's hint (the value seen at capture), for the recording's probe."""

    def __missing__(self, symbol):
        return symbol.hint


class _ProbeStorages(dict):
    """One-element buffers of each buffer's dtype (ones: no division by zero in the probe)."""

    def __init__(self, dtypes: dict):
        super().__init__()
        self.dtypes = dtypes

    def __missing__(self, name):
        array = self[name] = np.ones(1, self.dtypes[name].np)
        return array


def _record(fn, prefixes: tuple, ranges: tuple, dtypes: dict) -> Recorded:
    """``fn``'s calls over loop variables of the symbolic ``ranges`` (one group per prefix)."""
    env: dict = {}
    indices = []
    for prefix, group in zip(prefixes, ranges):
        variables = [sym.Var(f"{prefix}{i}", n) for i, n in enumerate(group)]
        env.update((v, np.zeros(1, np.int64)) for v in variables)
        indices.append(variables)
    recorder = _Recorder(NumpyHandler(_ProbeStorages(dtypes), env, _Hints()))
    with set_ops_handler(recorder), np.errstate(all="ignore"):
        result = fn(*indices)
    return Recorded(recorder.program, result)


class EverySizeStep:
    """A kernel or scatter step run by numpy in a graph compiled for every size (see the module
    docstring). Made inside ``ShapeEnv.kernel_scope``; ``dtypes``: every buffer's dtype by
    name. A call takes the storages, this call's layouts of the buffers the step writes (in
    ``step.nodes`` order; the scatter's one) and the size symbols' values."""

    def __init__(self, step, dtypes: dict):
        if isinstance(step, Kernel):
            self.nodes = list(step.nodes)
            self.bodies = [_record_buffer(node, dtypes) for node in self.nodes]
            self.scatter = None
        else:
            data = step.buffer.data
            self.scatter = step.buffer
            self.bodies = (
                _record(data.base_fn, ("b",), (data.base_ranges,), dtypes),
                _record(partial(_scatter_update, step.buffer), ("x",), (data.ranges,), dtypes),
            )

    def __call__(self, storages: dict, layouts: tuple, values: dict) -> None:
        from .. import wrapper_runtime

        if self.scatter is not None:
            run_scatter(self.scatter, storages, layouts[0], values, self.bodies)
            return
        for node, body, layout in zip(self.nodes, self.bodies, layouts):
            computed = compute_buffer(node, storages, values, body)
            target = wrapper_runtime.strided_view(storages[node.name], layout)
            np.copyto(target, computed, casting="unsafe")


def _record_buffer(buf: ComputedBuffer, dtypes: dict) -> Recorded:
    data = buf.data
    if isinstance(data, Pointwise):
        return _record(data.inner_fn, ("x",), (data.ranges,), dtypes)
    return _record(data.inner_fn, ("x", "r"), (data.ranges, data.reduction_ranges), dtypes)
