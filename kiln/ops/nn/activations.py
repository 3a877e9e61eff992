"""Activation ops with kernels: relu, gelu, silu, softplus, leaky_relu, elu, hardtanh, mish,
hardsigmoid, hardswish, and relu6 (a composite over hardtanh).

Each has a numpy kernel (half types compute in float32; all but relu promote integer inputs to
the default float dtype), a derivative in kiln ops and a decomposition into pointwise prims. The
composite activations (log_sigmoid, glu, selu...) are in ``nn_ops``.

gelu and silu are hot in transformer MLPs: their kernels, and their derivatives in a plain
backward (``nn_ops.numpy_derivative_ok``), are fused chains of ``out=`` ufuncs run over
cache-sized blocks (``nn_ops.blockwise``), so a large input is read from memory once rather than
once per elementary step. float32 gelu(erf) uses an erfc fit accurate to float32 instead of the
float64 ``np_erf``, which costs ~50x more.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np

from ...runtime import dtypes as dt
from ...runtime.tensor import wrap_array
from ..core.common import (
    Tensor,
    cast_array,
    clip_ufunc,
    compute_np_dtype,
    numpy_derivative_ok,
    pointwise_meta,
    to_float_dtype,
    widened,
    wrap,
)
from ..core.complex_support import complex_not_implemented
from ..core.registry import defop
from ..pointwise.numpy_math import np_erf, np_silu, np_softplus
from ..pointwise.unary_binary import iterator_layout, refuse_integers, where
from ..reductions.reduce import torch_type_name
from .softmax_linear import blockwise, machine_code_activation, new_like

__all__: list[str] = []

_bool = dt.bool_


@defop(
    kind="pointwise",
    complex_refused=(NotImplementedError, "clamp is not supported for complex types"),
)
def relu(self: Tensor): ...


# relu's bounds per numpy dtype of the array clipped: (zero, inf) as 0-d arrays (None for inf
# where the type has none: integers take np.maximum). 0-d arrays, not numpy scalars: a ufunc
# converts a scalar operand to an array on every call, 0.4 us of a 16-float relu's ~1 us kernel;
# making the zero per call (``a.dtype.type(0)``) cost a third of it before that
_RELU_BOUNDS: dict = {}


def _relu_bounds(np_dtype: np.dtype) -> tuple:
    zero = np.zeros((), np_dtype)
    top = np.full((), np.inf, np_dtype) if np_dtype.kind == "f" or np_dtype == _BF16 else None
    for bound in (zero, top):
        if bound is not None:
            bound.flags.writeable = False  # shared by every call
    return zero, top


_BF16 = np.dtype(ml_dtypes.bfloat16)


@relu.register_kernel
def _relu_kernel(x):
    d = x._dtype
    if d is _bool:
        raise RuntimeError("relu is not implemented for bool tensors")
    a = widened(x._data)
    bounds = _RELU_BOUNDS.get(a.dtype)
    if bounds is None:
        bounds = _RELU_BOUNDS[a.dtype] = _relu_bounds(a.dtype)
    zero, top = bounds
    # floats: np.clip to [0, inf] is relu to the bit (NaN stays, -0.0 stays, as PyTorch's) and
    # 2.5x faster than np.maximum
    out = np.maximum(a, zero) if top is None else clip_ufunc(a, zero, top)
    if x._shape and out.dtype == d.np:  # an array of its dtype (a 0-d one gives a numpy scalar)
        return wrap_array(out, d)
    return wrap(out, d)  # (16-bit floats were widened to float32: back to their dtype)


relu.register_meta(lambda x: pointwise_meta(x._dtype, x))
# The backward formulas select between the gradient and zero rather than multiply the gradient by
# a 0/1 mask: a NaN or inf gradient must not leak into the inactive side (inf * 0 is NaN), and
# their conditions are PyTorch's, so a NaN input sends the gradient where PyTorch sends it.


_SAME_WIDTH_INT = {4: np.int32, 8: np.int64}


def select_bits(mask: np.ndarray, a: np.ndarray, b: np.ndarray | None) -> np.ndarray:
    """``where(mask, a, b)`` (``b`` None: zero) for float32/float64 ``a`` and ``b`` of one dtype,
    done on the bits: ``mask`` is int8, -1 (all ones) where ``a`` is taken and 0 elsewhere.

    np.where branches on each element, several times slower on a random mask than these
    ufuncs (``b ^ ((a ^ b) & mask)``), and every bit pattern (NaN, inf, -0.0) moves unchanged."""
    if not a.ndim:  # 0-d in, a numpy scalar out of the first ufunc: no ``out=`` to write into
        return np.where(mask.astype(bool), a, a.dtype.type(0) if b is None else b)
    ints = _SAME_WIDTH_INT[a.itemsize]
    if b is None:
        return np.bitwise_and(a.view(ints), mask).view(a.dtype)
    bi = b.view(ints)
    out = np.bitwise_xor(a.view(ints), bi)
    np.bitwise_and(out, mask, out=out)
    np.bitwise_xor(out, bi, out=out)
    return out.view(a.dtype)


def _relu_grad(c, g):
    """``where(out <= 0, 0, g)``; in a plain backward, the same selection done on the bits
    (``select_bits``), keeping ``g`` where ``out > 0`` or NaN (the ReLUs of a CNN step spent
    more in np.where's selection than in their forward)."""
    out = c.out
    if numpy_derivative_ok(out, g) and g._data.dtype == out._data.dtype:
        keep = np.less_equal(out._data, 0).view(np.int8) - np.int8(1)  # 0 where out <= 0, else -1
        return (wrap(select_bits(keep, g._data, None), g._dtype),)
    return (where(out <= 0, 0, g),)


relu.register_derivative(_relu_grad, save_output=True, save_inputs=())
relu.register_decomposition(lambda x: where(x < 0, 0, x))  # NaN and -0.0 stay, as eagerly


@defop(kind="pointwise", complex_refused=complex_not_implemented("GeluKernelImpl"))
def gelu(self: Tensor, approximate: str = "none"): ...


def _float_compute(x):
    od = to_float_dtype(x._dtype)
    return cast_array(x._data, compute_np_dtype(od)), od


_GELU_K = math.sqrt(2.0 / math.pi)  # tanh form: 0.5 x (1 + tanh(K (x + KAPPA x^3)))
_GELU_KAPPA = 0.044715
_SQRT1_2 = 1 / math.sqrt(2.0)  # erf form: 0.5 x (1 + erf(x / sqrt 2))
_INV_SQRT_2PI = 1 / math.sqrt(2 * math.pi)

# The fused numpy bodies below write one block of the result with ``out=`` ufuncs, in
# PyTorch's CPU formula order (the tanh form's through ``exp``: see ``_gelu_tanh_gate``);
# ``blockwise`` runs them over cache-sized blocks.


def _gelu_tanh_gate(o, x):
    """o = sigmoid(2 inner) = 1 / (1 + exp(-2 K (x + KAPPA x^3))), which is 0.5 (1 + tanh(inner)).

    numpy's float32 ``tanh`` costs about twice its ``exp`` (~2.6 against ~1.3 ns an element
    here, the largest part of both gelu kernels), so the tanh form runs through one ``exp``. It
    also keeps the lower tail's relative accuracy, where ``1 + tanh`` cancels (PyTorch's value
    there is off by up to ~1e-7 absolute). ``exp`` overflows to inf for a very negative x: the
    gate is then 0, as it is."""
    np.multiply(x, x, out=o)
    o *= x
    o *= _GELU_KAPPA
    o += x
    o *= -2 * _GELU_K
    with np.errstate(over="ignore"):
        np.exp(o, out=o)
    o += 1
    np.reciprocal(o, out=o)


def _gelu_tanh_body(o, x):
    """x * sigmoid(2 inner): PyTorch's 0.5 x (1 + tanh(inner))"""
    _gelu_tanh_gate(o, x)
    o *= x


# erfc by the Chebyshev fit of Numerical Recipes' ``erfcc`` (relative error < 1.2e-7 for every
# argument): erfc(z) = t exp(-z^2 + P(t)), t = 1 / (1 + z / 2), P's coefficients below from t^0 up.
_ERFCC = (
    -1.26551223,
    1.00002368,
    0.37409196,
    0.09678418,
    -0.18628806,
    0.27886807,
    -1.13520398,
    1.48851587,
    -0.82215223,
    0.17087277,
)


def _gelu_erfc_parts(p, t, ax):
    """For ``ax`` = |x|: ``t`` = 1 / (1 + z / 2) and ``p`` = P(t) - z^2, z = |x| / sqrt 2, so
    erfc(z) = t exp(p). ``ax`` is left holding z^2."""
    np.multiply(ax, 0.5 * _SQRT1_2, out=t)
    t += 1
    np.reciprocal(t, out=t)
    np.multiply(t, _ERFCC[9], out=p)
    p += _ERFCC[8]
    for c in _ERFCC[7::-1]:
        p *= t
        p += c
    np.multiply(ax, ax, out=ax)
    ax *= 0.5
    p -= ax


def _gelu_cdf(o, x, t, ax, m):
    """o = Phi(x) = 0.5 erfc(-x / sqrt 2): h = 0.5 erfc(|z|) below zero, 1 - h above, selected
    without a branch as h + [x >= 0] (1 - 2h) (numpy's masked loops are ten times slower). The
    lower tail keeps its relative accuracy (no 1 + erf(x) cancellation). ``t``, ``ax``, ``m``
    are scratch; ``ax`` is left holding x^2 / 2."""
    np.abs(x, out=ax)
    _gelu_erfc_parts(o, t, ax)
    np.exp(o, out=o)
    o *= t
    o *= 0.5
    np.greater_equal(x, 0, out=m)
    np.multiply(o, -2, out=t)
    t += 1
    t *= m
    o += t


def _gelu_cdf_exact(o, x, t, ax, m):
    """o = 0.5 (1 + erf(x / sqrt 2)) through ``np_erf`` (float64: erfcc's 1.2e-7 is too coarse);
    ``ax`` is left holding x^2 / 2 like ``_gelu_cdf``."""
    np.multiply(x, _SQRT1_2, out=o)
    o[...] = np_erf(o)
    o += 1
    o *= 0.5
    np.multiply(x, x, out=ax)
    ax *= 0.5


def _gelu_erf_body(o, x, t, ax, m):
    """x Phi(x) (the zero of a negative x, where Phi underflows, keeps its sign, as in PyTorch)"""
    (_gelu_cdf if o.dtype == np.float32 else _gelu_cdf_exact)(o, x, t, ax, m)
    o *= x


def _gelu_tanh_grad_body(o, g, x, d, u, _):
    """g * (s + 2 x s (1 - s) K (1 + 3 KAPPA x^2)), s = sigmoid(2 inner): PyTorch's
    0.5 (1 + t) + 0.5 x (1 - t^2) K (1 + 3 KAPPA x^2) with t = tanh(inner) = 2 s - 1."""
    _gelu_tanh_gate(o, x)
    np.multiply(x, x, out=d)
    d *= 3 * _GELU_KAPPA
    d += 1
    d *= _GELU_K
    np.subtract(1, o, out=u)
    u *= o
    u *= x
    u *= 2
    u *= d
    o += u
    o *= g


def _gelu_erf_grad_body(o, g, x, t, ax, m):
    """g * (Phi(x) + x phi(x)), phi(x) = exp(-x^2 / 2) / sqrt(2 pi)."""
    (_gelu_cdf if o.dtype == np.float32 else _gelu_cdf_exact)(o, x, t, ax, m)
    np.negative(ax, out=ax)
    np.exp(ax, out=ax)
    ax *= _INV_SQRT_2PI
    ax *= x
    o += ax
    o *= g


@gelu.register_kernel
def _gelu_kernel(x, approximate):
    if approximate not in ("none", "tanh"):
        raise ValueError(f"approximate argument must be either none or tanh, got {approximate!r}")
    refuse_integers(x, "GeluKernelImpl")
    a, od = _float_compute(x)
    out = machine_code_activation("gelu_tanh" if approximate == "tanh" else "gelu", a, a)
    if out is not None:
        return wrap(out, od)
    if approximate == "tanh":
        return wrap(iterator_layout(blockwise(_gelu_tanh_body, new_like(a), a), (x,)), od)
    return wrap(iterator_layout(blockwise(_gelu_erf_body, new_like(a), a, temps=3), (x,)), od)


@gelu.register_meta
def _gelu_meta(x, approximate="none"):
    refuse_integers(x, "GeluKernelImpl")
    return pointwise_meta(x._dtype, x)


def _gelu_grad(c, g):
    x, approximate = c.args
    if numpy_derivative_ok(x, g, halves=True) and x._dtype is g._dtype:
        a, _ = _float_compute(x)  # half types in float32, rounded once at the end
        ga = cast_array(g._data, a.dtype)
        out = machine_code_activation(
            "gelu_tanh_backward" if approximate == "tanh" else "gelu_backward", a, ga, a
        )
        if out is not None:
            return (wrap(out, x._dtype),)
        if ga.shape != a.shape:
            ga = np.broadcast_to(ga, a.shape)
        body = _gelu_tanh_grad_body if approximate == "tanh" else _gelu_erf_grad_body
        return (wrap(blockwise(body, new_like(a), ga, a, temps=3), x._dtype),)
    if approximate == "tanh":  # the kernels' sigmoid form (``_gelu_tanh_grad_body``)
        s = (2 * _GELU_K * (x + _GELU_KAPPA * x * x * x)).sigmoid()
        dinner = _GELU_K * (1 + 3 * _GELU_KAPPA * x * x)
        return (g * (s + 2 * x * s * (1 - s) * dinner),)
    cdf = 0.5 * (1 + (x * _SQRT1_2).erf())
    pdf = (-0.5 * x * x).exp() * _INV_SQRT_2PI
    return (g * (cdf + x * pdf),)


gelu.register_derivative(_gelu_grad)


@gelu.register_decomposition
def _gelu_decomp(x, approximate="none"):
    if approximate == "tanh":
        # x sigmoid(2 inner), as the eager kernels compute 0.5 x (1 + tanh(inner)): compiled
        # code then gives their values down the lower tail, where 1 + tanh cancels
        return x * (2 * _GELU_K * (x + _GELU_KAPPA * x * x * x)).sigmoid()
    half = 0.5 * x  # PyTorch's zeros: +0.0 for -0.0 and where 1 + erf cancels
    return half * (x * _SQRT1_2).erf() + half


@defop(kind="pointwise")
def silu(self: Tensor): ...


def _sigmoid_into(o, x):
    """o = 1 / (1 + exp(-x)), ``np_sigmoid``'s formula (an overflowing exp(-x) gives 0)."""
    np.negative(x, out=o)
    np.exp(o, out=o)
    o += 1
    np.reciprocal(o, out=o)


def _silu_body(o, x):
    _sigmoid_into(o, x)
    o *= x


def _silu_grad_body(o, g, x, u):
    """g * s * (1 + x * (1 - s)), s = sigmoid(x)"""
    _sigmoid_into(o, x)
    np.subtract(1, o, out=u)
    u *= x
    u += 1
    o *= g
    o *= u


@silu.register_kernel
def _silu_kernel(x):
    refuse_integers(x, "silu_cpu")
    a, od = _float_compute(x)
    out = machine_code_activation("silu", a, a)
    if out is not None:
        return wrap(out, od)
    if a.dtype == np.float32 or a.dtype == np.float64:
        return wrap(iterator_layout(blockwise(_silu_body, new_like(a), a), (x,)), od)
    return wrap(iterator_layout(np_silu(a), (x,)), od)


@silu.register_meta
def _silu_meta(x):
    refuse_integers(x, "silu_cpu")
    return pointwise_meta(x._dtype, x)


def _silu_grad(c, g):
    x = c.args[0]
    if numpy_derivative_ok(x, g, halves=True) and x._dtype is g._dtype:
        a, _ = _float_compute(x)  # half types in float32, rounded once at the end
        ga = cast_array(g._data, a.dtype)
        out = machine_code_activation("silu_backward", a, ga, a)
        if out is not None:
            return (wrap(out, x._dtype),)
        if ga.shape != a.shape:
            ga = np.broadcast_to(ga, a.shape)
        return (wrap(blockwise(_silu_grad_body, new_like(a), ga, a, temps=1), x._dtype),)
    s = x.sigmoid()
    return (g * s * (1 + x * (1 - s)),)


silu.register_derivative(_silu_grad)
silu.register_decomposition(lambda x: x * x.sigmoid())


@defop(
    kind="pointwise",
    autocast={"cuda": "fp32"},
    complex_refused=complex_not_implemented("softplus_cpu"),
)
def softplus(self: Tensor, beta: float = 1.0, threshold: float = 20.0): ...


@softplus.register_kernel
def _softplus_kernel(x, beta, threshold):
    refuse_integers(x, "softplus_cpu")
    a, od = _float_compute(x)
    return wrap(np_softplus(a, beta, threshold), od)


@softplus.register_meta
def _softplus_meta(x, beta=1.0, threshold=20.0):
    refuse_integers(x, "softplus_cpu")
    return pointwise_meta(x._dtype, x)


def _softplus_grad(c, g):
    x, beta, threshold = c.args
    bx = x * beta
    return (where(bx > threshold, g, g * bx.sigmoid()),)


softplus.register_derivative(_softplus_grad)


@softplus.register_decomposition
def _softplus_decomp(x, beta=1.0, threshold=20.0):
    bx = x * beta
    soft = ((-bx.abs()).exp()).log1p() + bx.clamp(min=0)
    return where(bx > threshold, x, soft / beta)


def _float_unary_decomp_op(name, schema, np_fn, grad, decomp, **record):
    """A float-only activation: integers, bools and complex inputs have no ``<name>_cpu``
    kernel in PyTorch."""
    kernel_name = f"{name}_cpu"
    record.setdefault("complex_refused", complex_not_implemented(kernel_name))
    op = defop(schema, name=name, kind="pointwise", **record)

    def kernel(x, *params):
        refuse_integers(x, kernel_name)
        a, od = _float_compute(x)
        return wrap(np_fn(a, *params), od)

    def meta(x, *params):
        refuse_integers(x, kernel_name)
        return pointwise_meta(x._dtype, x)

    op.register_kernel(kernel)
    op.register_meta(meta)
    op.register_derivative(grad)
    op.register_decomposition(decomp)
    return op


def _leaky_relu_schema(self: Tensor, negative_slope: float = 0.01): ...


leaky_relu = _float_unary_decomp_op(
    "leaky_relu",
    _leaky_relu_schema,
    lambda a, s: _leaky_relu_np(a, s),
    lambda c, g: _leaky_relu_grad(c, g),
    lambda x, s=0.01: where(x > 0, x, x * s),
)


def _leaky_relu_np(a: np.ndarray, s) -> np.ndarray:
    """PyTorch's ``x > 0 ? x : x * s``. For 0 < s <= 1, ``x * s`` lies between 0 and ``x``
    (rounding is monotone), so the larger of ``x`` and ``x * s`` is the selected one, and for
    a finite s > 1 the smaller: one ufunc instead of np.where's per-element branch (~6x
    faster on a DCGAN discriminator's activations). NaN propagates through both, ±inf and
    signed zeros come out as ``x`` or ``x * s`` do; s = 0 (inf * 0 is NaN, but x > 0 keeps
    inf), a negative or NaN slope keep the selection."""
    scaled = np.multiply(a, s)
    if not a.ndim:  # numpy scalars in, a numpy scalar out: no ``out=`` to write into
        return np.where(a > 0, a, scaled)
    if 0 < s <= 1:
        return np.maximum(a, scaled, out=scaled)
    if 1 < s < math.inf:
        return np.minimum(a, scaled, out=scaled)
    return np.where(a > 0, a, scaled)


def _leaky_relu_grad(c, g):
    """``where(x > 0, g, g * s)``; in a plain backward, the selection on the bits
    (``select_bits``)."""
    x, s = c.args
    if numpy_derivative_ok(x, g) and g._data.dtype == x._data.dtype:
        ga = g._data
        take = np.negative(np.greater(x._data, 0).view(np.int8))  # -1 where x > 0, NaN: 0
        return (wrap(select_bits(take, ga, np.multiply(ga, s)), g._dtype),)
    return (where(x > 0, g, g * s),)


def _elu_schema(self: Tensor, alpha: float = 1.0): ...


elu = _float_unary_decomp_op(
    "elu",
    _elu_schema,
    lambda a, al: np.where(a > 0, a, al * np.expm1(np.where(a > 0, 0, a))),  # keeps -0.0
    # NaN takes the negative branch, as PyTorch's vectorized kernel: its gradient is NaN
    lambda c, g: (where(c.args[0] > 0, g, g * c.args[1] * c.args[0].exp()),),
    # keeps -0.0 (min(x, 0) may not, and LLVM folds where(x > 0, x, f(where(x > 0, 0, x))) of
    # float16 values into a max that drops it)
    lambda x, al=1.0: where(x <= 0, al * where(x <= 0, x, 0).expm1(), x),
)


def _hardtanh_schema(self: Tensor, min_val: float = -1.0, max_val: float = 1.0): ...


hardtanh = defop(
    _hardtanh_schema,
    name="hardtanh",
    kind="pointwise",
    complex_refused=(NotImplementedError, "clamp is not supported for complex types"),
)


def _hardtanh_bounds(x, lo, hi):
    """The limits in ``x``'s type: an integer tensor keeps its dtype and takes its limits
    truncated (-0.5 -> 0), as PyTorch converts them; an unsigned one refuses negative limits."""
    if x._dtype.is_floating_point:
        return lo, hi
    if x._dtype is _bool:
        raise RuntimeError("\"hardtanh_cpu\" not implemented for 'Bool'")
    if x._dtype is dt.uint8 and (lo < 0 or hi < 0):
        raise RuntimeError("cannot do hardtanh on an unsigned type with negative limits")
    return int(lo), int(hi)


@hardtanh.register_kernel
def _hardtanh_kernel(x, lo=-1.0, hi=1.0):
    lo, hi = _hardtanh_bounds(x, lo, hi)
    a = x._data
    return wrap(clip_ufunc(a, a.dtype.type(lo), a.dtype.type(hi)), x._dtype)


hardtanh.register_meta(lambda x, lo=-1.0, hi=1.0: pointwise_meta(x._dtype, x))
# zero at NaN, as PyTorch's vectorized kernel (its scalar tail passes the gradient)
hardtanh.register_derivative(
    lambda c, g: (where((c.args[0] > c.args[1]) & (c.args[0] < c.args[2]), g, 0),)
)
hardtanh.register_decomposition(lambda x, lo=-1.0, hi=1.0: x.clamp(*_hardtanh_bounds(x, lo, hi)))


def _mish_schema(self: Tensor): ...


mish = _float_unary_decomp_op(
    "mish",
    _mish_schema,
    lambda a: a * np.tanh(np_softplus(a)),
    lambda c, g: _mish_grad(c.args[0], g),
    lambda x: x * softplus(x).tanh(),
)


def _mish_grad(x, g):
    t = softplus(x).tanh()
    return (g * (t + x * (1 - t * t) * x.sigmoid()),)


def _hardsigmoid_schema(self: Tensor): ...


_FLOAT32_SIXTH = float(np.float32(1.0 / 6.0))


hardsigmoid = _float_unary_decomp_op(
    "hardsigmoid",
    _hardsigmoid_schema,
    # PyTorch's min(max(x + 3, 0), 6) / 6, rounded as it rounds
    lambda a: np.clip(a + a.dtype.type(3), 0.0, 6.0) / a.dtype.type(6),
    # PyTorch's slope is the float32 1/6, in double precision too
    lambda c, g: (where((c.args[0] > -3) & (c.args[0] < 3), g * _FLOAT32_SIXTH, 0),),
    lambda x: (x + 3.0).clamp(0.0, 6.0) / 6.0,
)


def _hardswish_schema(self: Tensor): ...


hardswish = _float_unary_decomp_op(
    "hardswish",
    _hardswish_schema,
    lambda a: a * np.clip(a + 3.0, 0.0, 6.0) / 6.0,
    # NaN takes the middle branch (a NaN gradient), as PyTorch's vectorized kernel
    lambda c, g: (
        where(c.args[0] <= -3, 0, where(c.args[0] >= 3, g, g * (c.args[0] / 3.0 + 0.5))),
    ),
    lambda x: x * (x + 3.0).clamp(0.0, 6.0) / 6.0,
)


def _shrink_schema(self: Tensor, lambd: float = 0.5): ...


def _check_shrink_dtype(x: Tensor, kernel_name: str) -> None:
    """Float inputs only (the kernel's check, made by the metas too, so compiled code refuses
    what eager does)."""
    if not x._dtype.is_floating_point:
        raise NotImplementedError(
            f"\"{kernel_name}\" not implemented for '{torch_type_name(x._dtype)}'"
        )


def _shrink_input(x: Tensor, kernel_name: str) -> np.ndarray:
    _check_shrink_dtype(x, kernel_name)
    return cast_array(x._data, compute_np_dtype(x._dtype))


def _check_softshrink_lambda(x: Tensor, lambd: float) -> None:
    if not 0 <= lambd <= float(ml_dtypes.finfo(x._dtype.np).max):
        largest = float(ml_dtypes.finfo(x._dtype.np).max)
        raise RuntimeError(
            f"lambda must be in range [0, {largest:g}] for input dtype "
            f"{torch_type_name(x._dtype)}, but found {lambd:g}"
        )


def _shrink_grad(c, g):
    """The gradient outside [-lambd, lambd], zero inside it and at NaN (PyTorch's vectorized
    kernel's rule: ``((x < -lambd) | (x > lambd)) & g``; its scalar tail, for the last few
    elements, passes the gradient at NaN)."""
    x, lambd = c.args
    return (where((x < -lambd) | (x > lambd), g, 0),)


# hardshrink and softshrink have kernels and derivatives of their own, not just decompositions:
# autograd through a decomposition's ``where`` would turn an infinite gradient into NaN inside
# the band (through ``x * 0``) and record ``WhereBackward0`` instead of PyTorch's node names.
hardshrink = defop(_shrink_schema, name="hardshrink", kind="pointwise")


@hardshrink.register_kernel
def _hardshrink_kernel(x, lambd):
    a = _shrink_input(x, "hardshrink_cpu")
    return wrap(np.where((a >= -lambd) & (a <= lambd), a.dtype.type(0), a), x._dtype)


@hardshrink.register_meta
def _hardshrink_meta(x, lambd=0.5):
    _check_shrink_dtype(x, "hardshrink_cpu")
    return pointwise_meta(x._dtype, x)


hardshrink.register_derivative(_shrink_grad)
hardshrink.register_decomposition(
    lambda x, lambd=0.5: where((x >= -lambd) & (x <= lambd), 0.0, x)  # NaN passes through
)

softshrink = defop(_shrink_schema, name="softshrink", kind="pointwise")


@softshrink.register_kernel
def _softshrink_kernel(x, lambd):
    a = _shrink_input(x, "softshrink_check")
    _check_softshrink_lambda(x, lambd)
    inside = np.where(a < -lambd, a + lambd, np.abs(a) * 0)  # +0.0 in the band; NaN stays NaN
    return wrap(np.where(a > lambd, a - lambd, inside), x._dtype)


@softshrink.register_meta
def _softshrink_meta(x, lambd=0.5):
    _check_shrink_dtype(x, "softshrink_check")
    _check_softshrink_lambda(x, lambd)
    return pointwise_meta(x._dtype, x)


softshrink.register_derivative(_shrink_grad)
softshrink.register_decomposition(
    lambda x, lambd=0.5: where(x > lambd, x - lambd, where(x < -lambd, x + lambd, x.abs() * 0))
)


@defop(kind="pointwise")
def relu6(self: Tensor): ...


relu6.register_decomposition(lambda x: hardtanh(x, 0.0, 6.0))
