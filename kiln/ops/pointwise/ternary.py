"""Pointwise ops beyond the unary and binary tables.

clamp, lerp, masked_fill, nan_to_num and addcmul/addcdiv, the small composites square, xlogy
and logit, and logaddexp / logaddexp2. clamp and lerp promote over every operand
(``result_dtype``); derivatives send no gradient to bounds or values given as Python numbers.
``where`` itself is in ``pointwise``, whose binary derivatives use it.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np

from ...runtime import dtypes as dt
from ...runtime.storage import empty_array
from ..core.common import (
    Scalar,
    Tensor,
    TensorOrScalar,
    broadcast_shapes,
    c_contiguous,
    cast_array,
    checked_scalar,
    clip_ufunc,
    compute_np_dtype,
    fake,
    in_iterator_layout,
    pointwise_meta,
    result_dtype,
    to_float_dtype,
    wrap,
)
from ..core.complex_support import complex_not_implemented
from ..core.grad_fn_naming import is_tensor_arg
from ..core.registry import defop
from ..reductions.reduce import torch_type_name
from .unary_binary import as_np_operand, iterator_layout, maximum, needs_grad, where

__all__: list[str] = []

_bool = dt.bool_


def _clamp_grad_fn_name(args) -> str:
    tensor_bound = is_tensor_arg(args[1]) or is_tensor_arg(args[2])
    return "ClampBackward0" if tensor_bound else "ClampBackward1"


@defop(
    kind="pointwise",
    complex_refused=(NotImplementedError, "clamp is not supported for complex types"),
    grad_fn_name=_clamp_grad_fn_name,
    aliases=("clip",),
)
def clamp(self: Tensor, min: TensorOrScalar | None = None, max: TensorOrScalar | None = None): ...  # noqa: A002


_FLOATS = (np.float16, np.float32, np.float64, ml_dtypes.bfloat16)
# keyed by numpy dtype objects, as ``dtype.np`` gives them
_NEG_INF = {np.dtype(t): t(-np.inf) for t in _FLOATS}
_POS_INF = {np.dtype(t): t(np.inf) for t in _FLOATS}


def _check_clamp_bounds(x, lo, hi) -> None:
    if lo is None and hi is None:
        raise RuntimeError("clamp: At least one of 'min' or 'max' must not be None")


@clamp.register_kernel
def _clamp_kernel(x, lo, hi):
    _check_clamp_bounds(x, lo, hi)
    d = result_dtype(x, lo, hi)
    a = x._data if x._dtype is d else x._data.astype(d.np)
    if d.is_floating_point:
        # np.clip is PyTorch's clamp on every float (NaN values and bounds, lo > hi, signed
        # zeros: tests/ops compare) and 2.5-5x faster than np.maximum and np.minimum
        lo_np = _NEG_INF.get(d.np) if lo is None else as_np_operand(lo, d.np)
        hi_np = _POS_INF.get(d.np) if hi is None else as_np_operand(hi, d.np)
        if lo_np is not None and hi_np is not None:
            out = clip_ufunc(a, lo_np, hi_np)
            if isinstance(lo, Tensor) or isinstance(hi, Tensor):
                # with array bounds numpy may give the bound's zero where it equals ``x``
                out = np.where(out == a, a, out)
            return wrap(_clamp_layout(out, x, lo, hi, d), d)
    if d.category == 1:  # out-of-range number bounds raise, as PyTorch's conversion does
        lo, hi = (checked_scalar(b, d) if isinstance(b, (int, float)) else b for b in (lo, hi))
    out = a
    if lo is not None:
        out = np.maximum(out, as_np_operand(lo, d.np))
    if hi is not None:
        out = np.minimum(out, as_np_operand(hi, d.np))
    if isinstance(lo, float) and isinstance(hi, float) and lo > hi:
        out = np.where(np.isnan(out), out, hi)  # NaN stays NaN
    elif d.is_floating_point and any(
        isinstance(b, (int, float)) and b == 0 for b in (lo, hi)
    ):  # fmt: skip
        # a number bound keeps ``x`` where they are equal (PyTorch's clamp_min/clamp_max), so
        # -0.0 clamped at 0.0 stays -0.0; numpy's maximum/minimum pick the bound's zero
        out = np.where(out == a, a, out)
    return wrap(_clamp_layout(out, x, lo, hi, d), d)


def _clamp_layout(out: np.ndarray, x: Tensor, lo, hi, d: dt.dtype) -> np.ndarray:
    """numpy's clamp result in TensorIterator's layout over (x, lo, hi); a contiguous ``x``
    with number bounds (the common call) is contiguous either way."""
    if x._data.flags.c_contiguous and lo.__class__ is not Tensor and hi.__class__ is not Tensor:
        return out
    return iterator_layout(out, (x, lo, hi), d)


@clamp.register_meta
def _clamp_meta(x, lo=None, hi=None):
    _check_clamp_bounds(x, lo, hi)
    d = result_dtype(x, lo, hi)
    if d.category == 1:  # as the kernel: a compiled graph must refuse what eager refuses
        for b in (lo, hi):
            if isinstance(b, (int, float)):
                checked_scalar(b, d)
    return pointwise_meta(d, x, *(t for t in (lo, hi) if isinstance(t, Tensor)), common_dtype=d)


def _clamp_grad(c, g):
    """PyTorch's rule: ``x`` gets the gradient where lo <= x <= hi (not at NaN); a tensor bound
    gets it where it was the value chosen, and when lo > hi only ``hi`` counts as chosen. The
    gradient is selected, never multiplied by a mask, so an inf or NaN ``g`` stays where it
    belongs."""
    x, lo, hi = c.args
    mask = None
    if lo is not None:
        mask = x >= lo
    if hi is not None:
        m = x <= hi
        mask = m if mask is None else mask & m
    gx = where(mask, g, 0) if needs_grad(c, 0) else None
    glo = ghi = None
    if isinstance(lo, Tensor) and needs_grad(c, 1):
        lo_chosen = x < lo if hi is None else (x < lo) & (lo < hi)
        glo = where(lo_chosen, g, 0)
    if isinstance(hi, Tensor) and needs_grad(c, 2):
        hi_chosen = x > hi if lo is None else (x > hi) | (hi < lo)
        ghi = where(hi_chosen, g, 0)
    return gx, glo, ghi


clamp.register_derivative(_clamp_grad)


def _takes_bound(beyond, bound):
    """Where the clamp takes ``bound``: beyond it, or everywhere the bound is NaN (a NaN bound
    makes the result NaN, as in PyTorch; no comparison with NaN is ever true)."""
    if isinstance(bound, Tensor):
        return beyond | (bound != bound) if bound.dtype.is_floating_point else beyond
    if isinstance(bound, float) and math.isnan(bound):
        return beyond | True
    return beyond


@clamp.register_decomposition
def _clamp_decomp(x, lo=None, hi=None):
    out = x
    if lo is not None:
        out = where(_takes_bound(out < lo, lo), lo, out)
    if hi is not None:
        out = where(_takes_bound(out > hi, hi), hi, out)
    return in_iterator_layout(out, (x, lo, hi), result_dtype(x, lo, hi))


@defop(kind="pointwise", holomorphic=True)
def lerp(self: Tensor, end: Tensor, weight: TensorOrScalar): ...


def _check_lerp_operands(x: Tensor, end: Tensor, w) -> None:
    """PyTorch does not promote in lerp: ``end`` and a weight tensor with dims must have
    ``x``'s dtype (a 0-d weight binds as a number), and integer inputs have no kernel."""
    from ..reductions.reduce import c_type_name, torch_type_name

    weights = (("weight", w),) if isinstance(w, Tensor) and w.ndim else ()
    for name, t in (("end", end),) + weights:
        if t.dtype is not x.dtype:
            raise RuntimeError(
                f"expected dtype {c_type_name(x.dtype)} for `{name}` but got dtype "
                f"{c_type_name(t.dtype)}"
            )
    if not (x.dtype.is_floating_point or x.dtype.is_complex):
        kernel = "lerp_kernel_tensor" if weights else "lerp_kernel_scalar"
        raise NotImplementedError(f"\"{kernel}\" not implemented for '{torch_type_name(x.dtype)}'")


@lerp.register_kernel
def _lerp_kernel(x, end, w):
    _check_lerp_operands(x, end, w)
    d = result_dtype(x, end, w)
    cd = compute_np_dtype(d)
    a, b, ww = as_np_operand(x, cd), as_np_operand(end, cd), as_np_operand(w, cd)
    # PyTorch's two-sided formula keeps lerp exact at both ends
    small = np.abs(ww) < 0.5
    if cd == np.float32:
        # PyTorch's CPU kernel is one fused multiply-add, coeff * (end - self) + base with
        # (coeff, base) = (w, self) or (w - 1, end); float64 holds the product exactly, so this
        # rounds as the FMA does (optimizers' moment updates then match it bit for bit)
        if np.ndim(ww) == 0:  # a scalar weight (Adam's moments): one branch, no selects
            coeff, base = (ww, a) if small else (ww - np.float32(1), b)
        else:
            coeff, base = np.where(small, ww, ww - np.float32(1)), np.where(small, a, b)
        out = np.multiply(np.subtract(b, a), coeff, dtype=np.float64)
        out += base
        out = out.astype(np.float32)
    else:
        out = np.where(small, a + ww * (b - a), b - (b - a) * (1 - ww))
    return wrap(iterator_layout(out, (x, end, w), d), d)


@lerp.register_meta
def _lerp_meta(x, e, w):
    _check_lerp_operands(x, e, w)
    return pointwise_meta(result_dtype(x, e, w), x, e, *((w,) if isinstance(w, Tensor) else ()))


def _lerp_grad(c, g):
    x, end, w = c.args
    return (
        g * (1 - w) if needs_grad(c, 0) else None,
        g * w if needs_grad(c, 1) else None,
        g * (end - x) if isinstance(w, Tensor) and needs_grad(c, 2) else None,
    )


# the weight for the two ends' gradients, the ends only for the weight's (PyTorch saves no more)
lerp.register_derivative(
    _lerp_grad, save_inputs=lambda args, needs: (2,) + ((0, 1) if needs[2] else ())
)


@lerp.register_decomposition
def _lerp_decomp(x, e, w):
    """PyTorch's two-sided formula, as the kernel's: from the nearer end, so lerp is exact at
    both ends and an infinite end gives the infinity (x + w * (e - x) gave NaN for x = -inf,
    w >= 0.5: -inf + inf)."""
    if not isinstance(w, Tensor):
        out = x + w * (e - x) if abs(w) < 0.5 else e - (e - x) * (1 - w)
    else:  # (the select's condition, read from ``w``, would order the dims first)
        out = where(w.abs() < 0.5, x + w * (e - x), e - (e - x) * (1 - w))
    return in_iterator_layout(out, (x, e, w))


@defop(kind="pointwise")
def masked_fill(self: Tensor, mask: Tensor, value: TensorOrScalar): ...


def _check_masked_fill(x, mask, value) -> None:
    if mask._dtype is not _bool:
        raise RuntimeError(
            "masked_fill_ only supports boolean masks, but got mask with dtype "
            + dt.c_type_name(mask._dtype)
        )
    if isinstance(value, Tensor) and value._shape:
        raise RuntimeError(
            f"masked_fill_ only supports a 0-dimensional value tensor, but got tensor with {len(value._shape)} dimension(s)."
        )


@masked_fill.register_kernel
def _masked_fill_kernel(x, mask, value):
    _check_masked_fill(x, mask, value)
    v = value.item() if isinstance(value, Tensor) else value
    v = checked_scalar(v, x._dtype)
    shape = x._shape if mask._shape == x._shape else broadcast_shapes(x._shape, mask._shape)
    # PyTorch's result is contiguous whatever the inputs' layouts
    out = empty_array(shape, x._dtype.np)
    np.copyto(out, x._data)
    np.copyto(out, np.asarray(v).astype(x._dtype.np), where=mask._data)
    return wrap(out, x._dtype)


masked_fill.register_meta(lambda x, m, v: fake(broadcast_shapes(x._shape, m._shape), x._dtype, x))
masked_fill.check_in_meta(_check_masked_fill)
masked_fill.result_layout = "contiguous"  # as PyTorch's


def _masked_fill_grad(c, g):
    x, mask, value = c.args
    return (
        where(mask, 0, g) if needs_grad(c, 0) else None,
        None,
        where(mask, g, 0).sum() if isinstance(value, Tensor) and needs_grad(c, 2) else None,
    )


# the mask and a tensor value only: keeping ``x`` would hold a tensor the gradient never reads
# (attention scores before their causal mask, one per layer)
masked_fill.register_derivative(_masked_fill_grad, save_inputs=(1, 2))


@masked_fill.register_decomposition
def _masked_fill_decomp(x, m, v):
    """``where`` promotes (a float scalar into an int tensor gives float): masked_fill keeps
    ``x``'s dtype, so the value is cast first (a complex ``x`` takes a real value as it is)."""
    if not isinstance(v, Tensor):
        if x.dtype is dt.bool_:
            v = bool(v)
        elif x.dtype.category == 1:
            v = int(v)
        return where(m, v, x).to(x.dtype)
    return where(m, v.to(x.dtype), x)


@defop(kind="pointwise", out_exact_dtype=True)
def nan_to_num(
    self: Tensor, nan: float | None = 0.0, posinf: float | None = None, neginf: float | None = None
): ...


@nan_to_num.register_kernel
def _nan_to_num_kernel(x, nan, posinf, neginf):
    a = x._data
    if x._dtype.is_complex:  # each part on its own, as PyTorch's
        out = np.empty(a.shape, a.dtype)
        real = x._dtype.to_real()
        for part, target in ((a.real, out.real), (a.imag, out.imag)):
            fixed = _nan_to_num_kernel(wrap(c_contiguous(part), real), nan, posinf, neginf)
            target[...] = fixed._data
        return wrap(out if a.flags.c_contiguous else iterator_layout(out, (x,)), x._dtype)
    if not x._dtype.is_floating_point:  # a copy laid out as PyTorch's clone
        return wrap(iterator_layout(a.copy(), (x,)), x._dtype)
    # a copy laid out as PyTorch's, the few non-finite elements replaced where there are any:
    # three np.where passes over every element took 140 us at 256 x 256 (PyTorch: 8 us); a
    # copy and one isfinite test is what finite data costs
    if a.flags.c_contiguous:
        out = empty_array(a.shape, a.dtype)  # (pooled: a fresh large copy faults its pages in)
        np.copyto(out, a)
    else:
        out = iterator_layout(a.copy(), (x,))
    flat = out.ravel(order="K")  # a view: ``out`` is dense in that order
    bad = np.flatnonzero(~np.isfinite(flat))
    if bad.size:
        info = ml_dtypes.finfo(a.dtype)  # numpy's finfo does not know bfloat16
        values = flat[bad]
        flat[bad[values != values]] = 0.0 if nan is None else nan
        flat[bad[values == np.inf]] = info.max if posinf is None else posinf
        flat[bad[values == -np.inf]] = info.min if neginf is None else neginf
    return wrap(out, x._dtype)


nan_to_num.register_meta(lambda x, *a: pointwise_meta(x._dtype, x))
# PyTorch multiplies by the mask here (grad * isfinite(x)): an inf gradient at a non-finite x
# gives NaN there, and so does kiln
nan_to_num.register_derivative(lambda c, g: (g * c.args[0].isfinite(),))


def _addc_schema(self: Tensor, tensor1: Tensor, tensor2: Tensor, *, value: Scalar = 1): ...


def _addc_op(name: str, grad_fn_name: str, decomposition):
    """addcmul or addcdiv: one schema and traits, each its own decomposition (the operation
    order of ``value * a * b`` and ``value * a / b`` is PyTorch's rounding, kept as written)."""
    op = defop(
        _addc_schema,
        name=name,
        kind="pointwise",
        autocast={"cuda": "promote"},
        grad_fn_name=grad_fn_name,
    )
    op.register_decomposition(decomposition)
    return op


def _in_compute_dtype(formula):
    """``formula`` over operands cast to the result dtype first (a bfloat16 ``a`` beside float32
    ones is not multiplied in bfloat16), 16-bit floats computed in float32 and rounded once, as
    PyTorch's CPU kernels do (``value * a`` rounded to float16 first overflows where theirs
    does not, and rounds differently)."""

    def decomposition(x, a, b, value=1):
        d = result_dtype(x, a, b)
        compute = dt.float32 if d is dt.float16 or d is dt.bfloat16 else d
        out = formula(x.to(compute), a.to(compute), b.to(compute), value).to(d)
        return in_iterator_layout(out, (x, a, b), d)  # (a cast copy of ``x`` is dense)

    return decomposition


_addcmul_formula = _in_compute_dtype(lambda x, a, b, value: x + value * a * b)


def _addcmul_decomp(x, a, b, value=1):
    """An integer result takes ``value`` as an integer of its dtype (0.5 multiplies by 0, 300
    does not fit int8), as PyTorch converts the scalar to the kernel's type; bools have none."""
    d = result_dtype(x, a, b)
    if d is dt.bool_:
        raise NotImplementedError("\"addcmul_cpu_out\" not implemented for 'Bool'")
    if d.category == 1 and isinstance(value, (bool, int, float)):
        value = int(checked_scalar(value, d))
    return _addcmul_formula(x, a, b, value)


addcmul = _addc_op("addcmul", "AddcmulBackward0", _addcmul_decomp)


_addcdiv_formula = _in_compute_dtype(lambda x, a, b, value: x + value * a / b)


def _addcdiv_decomp(x, a, b, value=1):
    if a.dtype.category < 2 and b.dtype.category < 2:
        raise RuntimeError(_ADDCDIV_INTEGERS)
    return _addcdiv_formula(x, a, b, value)


_ADDCDIV_INTEGERS = (
    "Integer division with addcdiv is no longer supported, and in a future  release addcdiv will "
    "perform a true division of tensor1 and tensor2. The historic addcdiv behavior can be "
    "implemented as (input + value * torch.trunc(tensor1 / tensor2)).to(input.dtype) for integer "
    "inputs and as (input + value * tensor1 / tensor2) for float inputs. The future addcdiv "
    "behavior is just the latter implementation: (input + value * tensor1 / tensor2), for all "
    "dtypes."
)
addcdiv = _addc_op("addcdiv", "AddcdivBackward0", _addcdiv_decomp)


@defop(kind="pointwise", grad_fn_name="PowBackward0")
def square(self: Tensor): ...


# x * x, except that a bool tensor squares as pow(x, 2) does: into int64
square.register_decomposition(lambda x: x.long() * x.long() if x.dtype is _bool else x * x)


@defop(
    kind="pointwise",
    grad_fn_name="XlogyBackward0",
    complex_refused=complex_not_implemented("xlogy_cpu"),
)
def xlogy(self: Tensor, other: TensorOrScalar): ...


def _xlogy_dtype(x, y) -> dt.dtype:
    return to_float_dtype(result_dtype(x, y))


@xlogy.register_kernel
def _xlogy_kernel(x, y):
    d = _xlogy_dtype(x, y)
    cd = compute_np_dtype(d)  # half types in float32, as PyTorch's CPU kernels do
    a, b = as_np_operand(x, cd), as_np_operand(y, cd)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where((a == 0) & (b == b), cd.type(0), a * np.log(b))
    return wrap(iterator_layout(np.asarray(out, cd), (x, y), d), d)


xlogy.register_meta(lambda x, y: pointwise_meta(_xlogy_dtype(x, y), x, y))


def _xlogy_grad(c, g):
    """PyTorch's formulas: d/dx is xlogy(g, y), 0 where x == 0 and y <= 0 (so log(y) at x == 0
    otherwise: inf at y = inf, which a mask on the product's log(y) would lose); d/dy is
    g * x / y (its zeros keep x's sign, NaN at x = y = 0)."""
    x, y = c.args
    gx = gy = None
    if needs_grad(c, 0):
        gx = where((x == 0) & (y <= 0), 0.0, xlogy(g, y))
    if needs_grad(c, 1):
        gy = g * x / y
    return gx, gy


xlogy.register_derivative(_xlogy_grad)


@xlogy.register_decomposition
def _xlogy_decomp(x, y):
    """x * log(y), 0 where x == 0 (unless y is NaN); compiled forward passes (gradients come
    from ``_xlogy_grad``). The mask sits on log(y) too, so that 0 * log(inf) is not NaN."""
    if not isinstance(y, Tensor):
        if y > 0 and y != math.inf:
            return _zero_where_x_is(x, x * math.log(y))
        log_y = math.inf if y == math.inf else -math.inf if y == 0 else math.nan
        return where((x == 0) & (y == y), 0.0, x * log_y)
    d = to_float_dtype(result_dtype(x, y))
    a, b = _as_float_operands(x, y)
    log_b = where((a == 0) & ((b <= 0) | (b == math.inf)), 0.0, b.log())
    return in_iterator_layout(_zero_where_x_is(a, a * log_b), (x, y), d)  # one iterator


def _zero_where_x_is(x, product):
    """PyTorch's xlogy is 0 (not -0.0, as 0 * log(0.5) is) where x == 0, and keeps the sign of
    other products (-1 * log(1) is -0.0)."""
    return where(x == 0, product + 0.0, product)


def _as_float_operands(x, y):
    """Both operands in the (floating) result dtype of the pair, as PyTorch computes a binary
    float op: ``xlogy(half, int8)`` stays half, a 0-d float64 does not widen a float32."""
    d = to_float_dtype(result_dtype(x, y))
    return tuple(v.to(d) if isinstance(v, Tensor) and v.dtype is not d else v for v in (x, y))


@defop(
    kind="pointwise",
    grad_fn_name="LogitBackward0",
    complex_refused=complex_not_implemented("logit_cpu"),
)
def logit(self: Tensor, eps: float | None = None): ...


@logit.register_kernel
def _logit_kernel(x, eps):
    od = to_float_dtype(x._dtype)
    a = cast_array(x._data, compute_np_dtype(od))
    if eps is not None:
        a = np.clip(a, eps, 1 - eps)
    with np.errstate(divide="ignore", invalid="ignore"):
        return wrap(np.log(a / (1 - a)), od)


logit.register_meta(lambda x, eps=None: pointwise_meta(to_float_dtype(x._dtype), x))


def _logit_grad(c, g):
    """PyTorch's: g / (x (1 - x)), NaN outside [0, 1] without ``eps`` (inf at 0 and 1), 0 outside
    [eps, 1 - eps] with it."""
    x, eps = c.args
    if not x.dtype.is_floating_point:
        x = x.to(g.dtype)
    slope = g / (x * (1 - x))
    if eps is None:
        return (where((x < 0) | (x > 1), math.nan, slope),)
    return (where((x < eps) | (x > 1 - eps), 0.0, slope),)


logit.register_derivative(_logit_grad)


@logit.register_decomposition
def _logit_decomp(x, eps=None):
    if not x.dtype.is_floating_point:  # integers and bools compute in the default float
        x = x.to(dt.get_default_dtype())
    if eps is not None:
        x = x.clamp(eps, 1 - eps)
    return (x / (1 - x)).log()


def _log_add_exp_schema(self: Tensor, other: Tensor):
    """log(exp(self) + exp(other)) without overflow (base 2 for ``logaddexp2``)."""


logaddexp = defop(_log_add_exp_schema, name="logaddexp", kind="pointwise")
logaddexp2 = defop(_log_add_exp_schema, name="logaddexp2", kind="pointwise")


def complex_logaddexp(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """PyTorch's log(exp(a) + exp(b)) of complex arrays: ``max + log1p(exp(min - max))`` with
    the operands ordered by real part (``b`` the larger only where its real part is greater),
    NaN + NaNj where either holds a NaN, the smaller itself where both real parts are
    -inf, and the direct formula where both are +inf."""
    swap = b.real > a.real
    larger, smaller = np.where(swap, b, a), np.where(swap, a, b)
    with np.errstate(all="ignore"):
        out = np.log1p(np.exp(smaller - larger)) + larger
        both_infinite = np.isinf(smaller.real) & (smaller.real == larger.real)
        direct = np.log(np.exp(smaller) + np.exp(larger))
    out = np.where(both_infinite, np.where(smaller.real < 0, smaller, direct), out)
    nan = np.isnan(a) | np.isnan(b)  # (either part of either operand)
    return np.where(nan, complex(math.nan, math.nan), out).astype(out.dtype)


def _register_log_add_exp(op, np_fn, exp, log_scale: float) -> None:
    """Kernel, meta, derivative and decomposition of log(base^a + base^b): ``exp`` raises the
    base, ``log_scale`` turns a natural log into the base's. ``logaddexp`` takes complex
    operands too (``complex_logaddexp``), ``logaddexp2`` does not, as in PyTorch."""

    def out_dtype(a, b) -> dt.dtype:
        d = result_dtype(a, b)
        if d.is_complex and op is logaddexp:
            return d
        if not d.is_floating_point:  # PyTorch has no integer or complex kernel either
            raise NotImplementedError(
                f"\"{op.name}_cpu\" not implemented for '{torch_type_name(d)}'"
            )
        return d

    def kernel(a, b):
        d = out_dtype(a, b)
        cd = compute_np_dtype(d)  # half types in float32, as PyTorch's CPU kernels do
        fn = complex_logaddexp if d.is_complex else np_fn
        out = fn(as_np_operand(a, cd), as_np_operand(b, cd))
        return wrap(iterator_layout(out, (a, b), d), d)

    def meta(a, b):
        return pointwise_meta(out_dtype(a, b), a, b)

    def derivative(c, g):
        a, b = c.args  # PyTorch's formulas: a == b == inf gives NaN gradients, as there

        def slope(x, y):  # conjugated for complex operands, as PyTorch's
            s = 1 + exp(y - x)
            return s.conj() if s.dtype.is_complex else s

        return (
            g / slope(a, b) if needs_grad(c, 0) else None,
            g / slope(b, a) if needs_grad(c, 1) else None,
        )

    def decomposition(a, b):
        x, y = _as_float_operands(a, b)
        if x.dtype.is_complex if isinstance(x, Tensor) else y.dtype.is_complex:
            return in_iterator_layout(_complex_log_add_exp(x, y), (a, b))
        m = maximum(x, y)
        out = m + exp(-(x - y).abs()).log1p() * log_scale
        out = where((x == y) & x.isinf(), x, out)  # inf, inf -> inf (not inf - inf)
        return in_iterator_layout(out, (a, b))

    op.register_kernel(kernel)
    op.register_meta(meta)
    op.register_derivative(derivative)
    op.register_decomposition(decomposition)


def _complex_log_add_exp(x, y):
    """``complex_logaddexp`` in ops, for compiled code."""
    swap = y.real > x.real
    larger, smaller = where(swap, y, x), where(swap, x, y)
    out = (smaller - larger).exp().log1p() + larger
    both_infinite = smaller.real.isinf() & (smaller.real == larger.real)
    direct = (smaller.exp() + larger.exp()).log()
    out = where(both_infinite, where(smaller.real < 0, smaller, direct), out)
    nan = x.isnan() | y.isnan()
    return where(nan, complex(math.nan, math.nan), out)


_register_log_add_exp(logaddexp, np.logaddexp, lambda t: t.exp(), 1.0)
_register_log_add_exp(logaddexp2, np.logaddexp2, lambda t: t.exp2(), 1 / math.log(2))
