"""Elementwise ops: tables of (name, numpy kernel, derivative), plus their shared machinery.

Unary float math promotes integer inputs to the default dtype and computes half types in float32
(PyTorch's CPU kernels do the same). Binary ops follow PyTorch's type promotion, including 0-dim
tensors and Python scalars. Derivatives return gradients of the broadcast shape; the autograd
engine reduces them to each input's shape.
"""

from __future__ import annotations

import math

import numpy as np

from ..runtime import dtypes as dt
from ..runtime.storage import _POOL_MIN_BYTES
from ..runtime.tensor import wrap_array
from .common import (
    Scalar,
    Tensor,
    TensorOrScalar,
    binary_dtype,
    broadcast_shapes,
    compute_np_dtype,
    empty_like_layout,
    output_layout_source,
    pointwise_meta,
    result_dtype,
    to_float_dtype,
    wrap,
)
from .registry import defop

__all__: list[str] = []

_bool = dt.bool_


# ------------------------------------------------------------------------------ numpy math


def np_sigmoid(a, out=None):
    # split by sign so exp never overflows: 1/(1+e^-x) for x>=0, e^x/(1+e^x) otherwise
    e = np.exp(-np.abs(a))
    pos = 1.0 / (1.0 + e)
    return np.where(a >= 0, pos, e * pos).astype(a.dtype, copy=False)


def np_erf(a, out=None):
    if a.dtype == np.float64 and a.size <= 4096:
        return np.frompyfunc(math.erf, 1, 1)(a).astype(np.float64)
    x = a.astype(np.float64)
    z = np.abs(x)
    # small |x|: Maclaurin series (exact to float64 rounding for |x| < 0.5)
    x2 = x * x
    term = x.copy()
    series = x.copy()
    for n in range(1, 14):
        term = term * (-x2) / n
        series = series + term / (2 * n + 1)
    small = series * (2.0 / math.sqrt(math.pi))
    # larger |x|: erfc by the Chebyshev fit of Numerical Recipes' erfcc (relative error < 1.2e-7)
    t = 1.0 / (1.0 + 0.5 * z)
    poly = -1.26551223 + t * (
        1.00002368
        + t
        * (
            0.37409196
            + t
            * (
                0.09678418
                + t
                * (
                    -0.18628806
                    + t
                    * (
                        0.27886807
                        + t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277)))
                    )
                )
            )
        )
    )
    erfc = t * np.exp(-z * z + poly)
    large = np.sign(x) * (1.0 - erfc)
    return np.where(z < 0.5, small, large).astype(a.dtype, copy=False)


def np_erfinv(a, out=None):
    # Newton iterations on erf from Giles' single-precision starting point
    x = a.astype(np.float64)
    w = -np.log((1.0 - x) * (1.0 + x))
    y = np.where(
        w < 5.0,
        x * (1.50140941 + 0.246640727 * (w - 2.5)),
        x * (2.83297682 + 1.00167406 * (np.sqrt(w) - 3.0)),
    )
    for _ in range(4):
        err = np_erf(y) - x
        y = y - err / (2.0 / math.sqrt(math.pi) * np.exp(-y * y))
    y = np.where(x == 1.0, np.inf, np.where(x == -1.0, -np.inf, y))
    return y.astype(a.dtype, copy=False)


def np_rsqrt(a, out=None):
    return np.reciprocal(np.sqrt(a))


def np_gelu(a, approximate="none"):
    if approximate == "tanh":
        k = math.sqrt(2.0 / math.pi)
        return (0.5 * a * (1.0 + np.tanh(k * (a + 0.044715 * a * a * a)))).astype(
            a.dtype, copy=False
        )
    return (0.5 * a * (1.0 + np_erf(a * (1.0 / math.sqrt(2.0))))).astype(a.dtype, copy=False)


def np_silu(a, out=None):
    return a * np_sigmoid(a)


def np_softplus(a, beta=1.0, threshold=20.0):
    bx = a * beta
    soft = np.log1p(np.exp(-np.abs(bx))) + np.maximum(bx, 0)
    return np.where(bx > threshold, a, soft / beta).astype(a.dtype, copy=False)


def np_round(a, decimals=0):
    if decimals == 0:
        return np.round(a)
    return np.round(a, decimals)


# ------------------------------------------------------------------------------ unary family


def _unary_schema(self: Tensor): ...


def _make_unary_kernel(fn, float_math: bool, out_bool: bool):
    def kernel(x):
        a = x._data
        d = x._dtype
        if out_bool:
            return wrap(fn(a), _bool)
        if float_math:
            od = to_float_dtype(d)
            cd = compute_np_dtype(od)
            if a.dtype != cd:
                a = a.astype(cd)
            if a.nbytes >= _POOL_MIN_BYTES and cd == od.np:
                out = empty_like_layout(a.shape, od, output_layout_source(a.shape, (x,)))
                return wrap(fn(a, out=out), od)
            return wrap(fn(a), od)
        return wrap(fn(a), d)

    return kernel


def _make_unary_meta(float_math: bool, out_bool: bool):
    def meta(x):
        if out_bool:
            return pointwise_meta(_bool, x)
        return pointwise_meta(to_float_dtype(x._dtype) if float_math else x._dtype, x)

    return meta


def unary(
    name, fn, derivative=None, *, float_math=True, out_bool=False, save_output=False, prim=True
):
    """Define a one-input elementwise op from a numpy function and a derivative formula."""
    op = defop(
        _unary_schema, name=name, kind="pointwise", prim=prim, differentiable=derivative is not None
    )
    op.register_kernel(_make_unary_kernel(fn, float_math, out_bool))
    op.register_meta(_make_unary_meta(float_math, out_bool))
    if derivative is not None:
        op.register_derivative(
            derivative, save_output=save_output, save_inputs=() if save_output else None
        )
    return op


_LN2 = math.log(2.0)
_LN10 = math.log(10.0)
_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)

neg = unary("neg", np.negative, lambda c, g: (-g,), float_math=False)
abs_ = unary("abs", np.abs, lambda c, g: (g * c.args[0].sign(),), float_math=False)
exp = unary("exp", np.exp, lambda c, g: (g * c.out,), save_output=True)
exp2 = unary("exp2", np.exp2, lambda c, g: (g * c.out * _LN2,), save_output=True)
expm1 = unary("expm1", np.expm1, lambda c, g: (g * (c.out + 1),), save_output=True)
log = unary("log", np.log, lambda c, g: (g / c.args[0],))
log2 = unary("log2", np.log2, lambda c, g: (g / (c.args[0] * _LN2),))
log10 = unary("log10", np.log10, lambda c, g: (g / (c.args[0] * _LN10),))
log1p = unary("log1p", np.log1p, lambda c, g: (g / (c.args[0] + 1),))
sqrt = unary("sqrt", np.sqrt, lambda c, g: (g / (2 * c.out),), save_output=True)
rsqrt = unary("rsqrt", np_rsqrt, lambda c, g: (g * -0.5 * c.out * c.out * c.out,), save_output=True)
sin = unary("sin", np.sin, lambda c, g: (g * c.args[0].cos(),))
cos = unary("cos", np.cos, lambda c, g: (g * -c.args[0].sin(),))
tan = unary("tan", np.tan, lambda c, g: (g * (1 + c.out * c.out),), save_output=True)
asin = unary("asin", np.arcsin, lambda c, g: (g * (1 - c.args[0] * c.args[0]).rsqrt(),))
acos = unary("acos", np.arccos, lambda c, g: (-g * (1 - c.args[0] * c.args[0]).rsqrt(),))
atan = unary("atan", np.arctan, lambda c, g: (g / (1 + c.args[0] * c.args[0]),))
sinh = unary("sinh", np.sinh, lambda c, g: (g * c.args[0].cosh(),))
cosh = unary("cosh", np.cosh, lambda c, g: (g * c.args[0].sinh(),))
tanh = unary("tanh", np.tanh, lambda c, g: (g * (1 - c.out * c.out),), save_output=True)
asinh = unary("asinh", np.arcsinh, lambda c, g: (g * (c.args[0] * c.args[0] + 1).rsqrt(),))
acosh = unary("acosh", np.arccosh, lambda c, g: (g * (c.args[0] * c.args[0] - 1).rsqrt(),))
atanh = unary("atanh", np.arctanh, lambda c, g: (g / (1 - c.args[0] * c.args[0]),))
sigmoid = unary("sigmoid", np_sigmoid, lambda c, g: (g * c.out * (1 - c.out),), save_output=True)
erf = unary("erf", np_erf, lambda c, g: (g * _TWO_OVER_SQRT_PI * (-(c.args[0] * c.args[0])).exp(),))
erfc = unary(
    "erfc",
    lambda a, out=None: 1.0 - np_erf(a),
    lambda c, g: (-g * _TWO_OVER_SQRT_PI * (-(c.args[0] * c.args[0])).exp(),),
)
erfinv = unary(
    "erfinv",
    np_erfinv,
    lambda c, g: (g * (math.sqrt(math.pi) / 2) * (c.out * c.out).exp(),),
    save_output=True,
)
reciprocal = unary(
    "reciprocal", np.reciprocal, lambda c, g: (-g * c.out * c.out,), save_output=True
)
floor = unary("floor", np.floor, None, float_math=False)
ceil = unary("ceil", np.ceil, None, float_math=False)
trunc = unary("trunc", np.trunc, None, float_math=False)
frac = unary("frac", lambda a: a - np.trunc(a), lambda c, g: (g,), float_math=False)
sign = unary("sign", np.sign, None, float_math=False)
sgn = sign
isnan = unary("isnan", np.isnan, None, out_bool=True)
isinf = unary("isinf", np.isinf, None, out_bool=True)
isfinite = unary("isfinite", np.isfinite, None, out_bool=True)
isposinf = unary("isposinf", np.isposinf, None, out_bool=True)
isneginf = unary("isneginf", np.isneginf, None, out_bool=True)
signbit = unary("signbit", np.signbit, None, out_bool=True)
logical_not = unary("logical_not", np.logical_not, None, out_bool=True)
bitwise_not = unary(
    "bitwise_not",
    lambda a: np.logical_not(a) if a.dtype == np.bool_ else np.invert(a),
    None,
    float_math=False,
)

for _op in (
    floor,
    ceil,
    trunc,
    sign,
    isnan,
    isinf,
    isfinite,
    isposinf,
    isneginf,
    signbit,
    logical_not,
    bitwise_not,
):
    _op.differentiable = False
    # rounding ops have zero gradient almost everywhere: PyTorch returns zeros, so do we
for _op in (floor, ceil, trunc, sign):
    _op.differentiable = True
    _op.register_derivative(lambda c, g: (g * 0,), save_inputs=())


@defop(kind="pointwise", prim=True)
def round(self: Tensor, *, decimals: int = 0): ...  # noqa: A001


@round.register_kernel
def _round_kernel(x, decimals):
    return wrap(np_round(x._data, decimals), x._dtype)


round.register_meta(lambda x, decimals: pointwise_meta(x._dtype, x))
round.register_derivative(lambda c, g: (g * 0,), save_inputs=())


# --------------------------------------------------------------------- activation composites


@defop(kind="pointwise")
def relu(self: Tensor): ...


@relu.register_kernel
def _relu_kernel(x):
    a = x._data
    if x._dtype is _bool:
        raise RuntimeError("relu is not implemented for bool tensors")
    return wrap(np.maximum(a, a.dtype.type(0)), x._dtype)


relu.register_meta(lambda x: pointwise_meta(x._dtype, x))
relu.register_derivative(lambda c, g: (g * (c.out > 0),), save_output=True, save_inputs=())
relu.register_decomposition(lambda x: where(x > 0, x, 0))


@defop(kind="pointwise")
def gelu(self: Tensor, approximate: str = "none"): ...


def _float_compute(x):
    od = to_float_dtype(x._dtype)
    return x._data.astype(compute_np_dtype(od), copy=False), od


@gelu.register_kernel
def _gelu_kernel(x, approximate):
    if approximate not in ("none", "tanh"):
        raise ValueError(f"approximate argument must be either none or tanh, got {approximate!r}")
    a, od = _float_compute(x)
    return wrap(np_gelu(a, approximate), od)


gelu.register_meta(lambda x, approximate="none": pointwise_meta(to_float_dtype(x._dtype), x))


def _gelu_grad(c, g):
    x, approximate = c.args
    if approximate == "tanh":
        k = math.sqrt(2.0 / math.pi)
        inner = k * (x + 0.044715 * x * x * x)
        t = inner.tanh()
        dinner = k * (1 + 3 * 0.044715 * x * x)
        return (g * (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * dinner),)
    cdf = 0.5 * (1 + (x * (1 / math.sqrt(2.0))).erf())
    pdf = (-0.5 * x * x).exp() * (1 / math.sqrt(2 * math.pi))
    return (g * (cdf + x * pdf),)


gelu.register_derivative(_gelu_grad)


@gelu.register_decomposition
def _gelu_decomp(x, approximate="none"):
    if approximate == "tanh":
        k = math.sqrt(2.0 / math.pi)
        return 0.5 * x * (1 + (k * (x + 0.044715 * x * x * x)).tanh())
    return 0.5 * x * (1 + (x * (1 / math.sqrt(2.0))).erf())


@defop(kind="pointwise")
def silu(self: Tensor): ...


@silu.register_kernel
def _silu_kernel(x):
    a, od = _float_compute(x)
    return wrap(np_silu(a), od)


silu.register_meta(lambda x: pointwise_meta(to_float_dtype(x._dtype), x))


def _silu_grad(c, g):
    x = c.args[0]
    s = x.sigmoid()
    return (g * s * (1 + x * (1 - s)),)


silu.register_derivative(_silu_grad)
silu.register_decomposition(lambda x: x * x.sigmoid())


@defop(kind="pointwise")
def softplus(self: Tensor, beta: float = 1.0, threshold: float = 20.0): ...


@softplus.register_kernel
def _softplus_kernel(x, beta, threshold):
    a, od = _float_compute(x)
    return wrap(np_softplus(a, beta, threshold), od)


softplus.register_meta(
    lambda x, beta=1.0, threshold=20.0: pointwise_meta(to_float_dtype(x._dtype), x)
)


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


def _float_unary_decomp_op(name, schema, np_fn, grad, decomp):
    op = defop(schema, name=name, kind="pointwise")

    def kernel(x, *params):
        a, od = _float_compute(x)
        return wrap(np_fn(a, *params), od)

    op.register_kernel(kernel)
    op.register_meta(lambda x, *params: pointwise_meta(to_float_dtype(x._dtype), x))
    op.register_derivative(grad)
    op.register_decomposition(decomp)
    return op


def _leaky_relu_schema(self: Tensor, negative_slope: float = 0.01): ...


leaky_relu = _float_unary_decomp_op(
    "leaky_relu",
    _leaky_relu_schema,
    lambda a, s: np.where(a > 0, a, a * s),
    lambda c, g: (where(c.args[0] > 0, g, g * c.args[1]),),
    lambda x, s=0.01: where(x > 0, x, x * s),
)


def _elu_schema(self: Tensor, alpha: float = 1.0): ...


elu = _float_unary_decomp_op(
    "elu",
    _elu_schema,
    lambda a, al: np.where(a > 0, a, al * np.expm1(np.minimum(a, 0))),
    lambda c, g: (where(c.args[0] > 0, g, g * c.args[1] * c.args[0].exp()),),
    lambda x, al=1.0: where(x > 0, x, al * x.clamp(max=0).expm1()),
)


def _hardtanh_schema(self: Tensor, min_val: float = -1.0, max_val: float = 1.0): ...


hardtanh = _float_unary_decomp_op(
    "hardtanh",
    _hardtanh_schema,
    lambda a, lo, hi: np.clip(a, lo, hi),
    lambda c, g: (g * ((c.args[0] > c.args[1]) & (c.args[0] < c.args[2])),),
    lambda x, lo=-1.0, hi=1.0: x.clamp(lo, hi),
)


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


hardsigmoid = _float_unary_decomp_op(
    "hardsigmoid",
    _hardsigmoid_schema,
    lambda a: np.clip(a / 6.0 + 0.5, 0.0, 1.0),
    lambda c, g: (g * ((c.args[0] > -3) & (c.args[0] < 3)) / 6.0,),
    lambda x: (x / 6.0 + 0.5).clamp(0.0, 1.0),
)


def _hardswish_schema(self: Tensor): ...


hardswish = _float_unary_decomp_op(
    "hardswish",
    _hardswish_schema,
    lambda a: a * np.clip(a + 3.0, 0.0, 6.0) / 6.0,
    lambda c, g: (
        where(c.args[0] < -3, g * 0, where(c.args[0] > 3, g, g * (2 * c.args[0] + 3) / 6.0)),
    ),
    lambda x: x * (x + 3.0).clamp(0.0, 6.0) / 6.0,
)


# ------------------------------------------------------------------------------ binary family


def _binary_schema(self: TensorOrScalar, other: TensorOrScalar): ...


def _arr(x, np_dtype):
    """numpy operand of dtype ``np_dtype`` from a tensor or a Python scalar."""
    if isinstance(x, Tensor):
        a = x._data
        return a if a.dtype == np_dtype else a.astype(np_dtype)
    return np.asarray(x).astype(np_dtype)


def _binary_out(a, b, d: dt.dtype, x, y):
    """A pooled output buffer for large results (fresh large buffers cost page faults).

    Also where mismatched shapes are caught, with PyTorch's message (before numpy's).
    """
    sa = a.shape
    sb = np.shape(b)
    shape = sa if sa == sb else broadcast_shapes(sa, sb)
    n = 1
    for s in shape:
        n *= s
    if n * d.itemsize < _POOL_MIN_BYTES:
        return None
    return empty_like_layout(shape, d, output_layout_source(shape, (x, y)))


_NUMPY_NATIVE_FLOATS = (dt.float16, dt.float32, dt.float64)


def _make_binary_kernel(fn, kind: str):
    """kind: 'same' (result dtype), 'float' (true division style), 'bool' (comparisons)."""

    def kernel(x, y):
        # hot path: a float tensor and a Python number (numpy treats the number as weak, so
        # the result keeps the tensor's dtype exactly as PyTorch's promotion does)
        if (
            kind == "same"
            and x.__class__ is Tensor
            and (y.__class__ is float or y.__class__ is int)
            and x._dtype in _NUMPY_NATIVE_FLOATS
            and x._data.nbytes < _POOL_MIN_BYTES
        ):
            return wrap(fn(x._data, y), x._dtype)
        # hot path: two same-dtype tensors with dims (no promotion, no casts)
        if (
            x.__class__ is Tensor
            and y.__class__ is Tensor
            and x._dtype is y._dtype
            and x._shape
            and y._shape
            and kind != "float"
        ):
            d = x._dtype
            a = x._data
            b = y._data
            if kind == "bool":
                return wrap_array(fn(a, b), _bool)
            if a.nbytes < _POOL_MIN_BYTES and b.nbytes < _POOL_MIN_BYTES and x._shape == y._shape:
                return wrap_array(fn(a, b), d)
        else:
            d = binary_dtype(x, y)
            if kind == "float":
                d = to_float_dtype(d)
            cd = compute_np_dtype(d) if kind == "float" else d.np
            a = _arr(x, cd)
            b = _arr(y, cd)
            if kind == "bool":
                return wrap(fn(a, b), _bool)
            if cd != d.np:
                return wrap(fn(a, b), d)
        out = _binary_out(a, b, d, x, y)
        if out is not None:
            return wrap(fn(a, b, out=out), d)
        return wrap(fn(a, b), d)

    return kernel


def _make_binary_meta(kind: str):
    def meta(x, y, *rest):
        d = binary_dtype(x, y)
        if kind == "float":
            d = to_float_dtype(d)
        elif kind == "bool":
            d = _bool
        return pointwise_meta(d, x, y)

    return meta


def binary(name, fn, derivative=None, *, kind="same", prim=True, schema=_binary_schema):
    op = defop(
        schema, name=name, kind="pointwise", prim=prim, differentiable=derivative is not None
    )
    op.register_kernel(_make_binary_kernel(fn, kind))
    op.register_meta(_make_binary_meta(kind))
    if derivative is not None:
        op.register_derivative(derivative)
    return op


def _needs(c, i):
    return c.needs_input_grad[i]


def _save_cross(args, needs):
    """Save each operand only if the *other* one needs a gradient (PyTorch's mul rule)."""
    return tuple(p for p, q in ((0, 1), (1, 0)) if needs[q])


mul = binary(
    "mul",
    np.multiply,
    lambda c, g: (
        g * c.args[1] if _needs(c, 0) else None,
        g * c.args[0] if _needs(c, 1) else None,
    ),
)
mul.saves_inputs = _save_cross


def _maxmin_grad(c, g):
    a, b = c.args
    # ties split the gradient evenly, as PyTorch does
    out = maximum(a, b) if c.op is maximum else minimum(a, b)
    eq_a = a == out
    eq_b = b == out
    share = where(eq_a & eq_b, g * 0.5, g)
    ga = where(eq_a, share, g * 0) if _needs(c, 0) else None
    gb = where(eq_b, share, g * 0) if _needs(c, 1) else None
    return ga, gb


maximum = binary("maximum", np.maximum, _maxmin_grad)
minimum = binary("minimum", np.minimum, _maxmin_grad)
fmax = binary("fmax", np.fmax, None)
fmin = binary("fmin", np.fmin, None)


def _atan2_grad(c, g):
    a, b = c.args
    denom = a * a + b * b
    return (g * b / denom if _needs(c, 0) else None, -g * a / denom if _needs(c, 1) else None)


atan2 = binary("atan2", np.arctan2, _atan2_grad, kind="float")
hypot = binary(
    "hypot",
    np.hypot,
    lambda c, g: (g * c.args[0] / hypot(*c.args), g * c.args[1] / hypot(*c.args)),
)
copysign = binary("copysign", np.copysign, None, kind="float")


def _remainder_np(a, b, out=None):
    if a.dtype.kind in "iu" and np.any(b == 0):
        raise RuntimeError("ZeroDivisionError")
    return np.remainder(a, b, out=out) if out is not None else np.remainder(a, b)


def _fmod_np(a, b, out=None):
    if a.dtype.kind in "iu" and np.any(b == 0):
        raise RuntimeError("ZeroDivisionError")
    return np.fmod(a, b, out=out) if out is not None else np.fmod(a, b)


remainder = binary(
    "remainder",
    _remainder_np,
    lambda c, g: (g, -g * (c.args[0] / c.args[1]).floor() if _needs(c, 1) else None),
)
fmod = binary(
    "fmod",
    _fmod_np,
    lambda c, g: (g, -g * (c.args[0] / c.args[1]).trunc() if _needs(c, 1) else None),
)

eq = binary("eq", np.equal, kind="bool")
ne = binary("ne", np.not_equal, kind="bool")
lt = binary("lt", np.less, kind="bool")
le = binary("le", np.less_equal, kind="bool")
gt = binary("gt", np.greater, kind="bool")
ge = binary("ge", np.greater_equal, kind="bool")
logical_and = binary("logical_and", np.logical_and, kind="bool")
logical_or = binary("logical_or", np.logical_or, kind="bool")
logical_xor = binary("logical_xor", np.logical_xor, kind="bool")


def _bitwise(np_fn, np_bool_fn):
    def fn(a, b, out=None):
        if a.dtype.kind == "f":
            raise RuntimeError(
                f"bitwise ops are not implemented for floating-point dtype {a.dtype}"
            )
        f = np_bool_fn if a.dtype == np.bool_ else np_fn
        return f(a, b) if out is None else f(a, b, out=out)

    return fn


bitwise_and = binary("bitwise_and", _bitwise(np.bitwise_and, np.logical_and))
bitwise_or = binary("bitwise_or", _bitwise(np.bitwise_or, np.logical_or))
bitwise_xor = binary("bitwise_xor", _bitwise(np.bitwise_xor, np.logical_xor))
bitwise_left_shift = binary("bitwise_left_shift", _bitwise(np.left_shift, np.left_shift))
bitwise_right_shift = binary("bitwise_right_shift", _bitwise(np.right_shift, np.right_shift))

for _op in (eq, ne, lt, le, gt, ge, logical_and, logical_or, logical_xor, fmax, fmin, copysign):
    _op.differentiable = False
for _op in (bitwise_and, bitwise_or, bitwise_xor, bitwise_left_shift, bitwise_right_shift):
    _op.differentiable = False


# add/sub carry alpha; div carries a rounding mode; pow has its own promotion


def _alpha_schema(self: TensorOrScalar, other: TensorOrScalar, *, alpha: Scalar = 1): ...


def _make_alpha_kernel(np_fn):
    plain = _make_binary_kernel(np_fn, "same")

    def kernel(x, y, alpha):
        if alpha != 1 and alpha is not True:
            d = binary_dtype(x, y)
            if isinstance(alpha, float) and not d.is_floating_point:
                raise RuntimeError(
                    "For integral input tensors, argument alpha must not be a floating point number."
                )
            if isinstance(y, Tensor):
                y = (
                    wrap(y._data * np.asarray(alpha).astype(compute_np_dtype(d)), d)
                    if y._dtype is d
                    else mul(y, alpha)
                )
            else:
                y = y * alpha
        return plain(x, y)

    return kernel


add = defop(_alpha_schema, name="add", kind="pointwise", prim=True)
add.register_kernel(_make_alpha_kernel(np.add))
add.register_meta(lambda x, y, alpha=1: pointwise_meta(binary_dtype(x, y), x, y))
add.register_derivative(
    lambda c, g: (
        g if _needs(c, 0) else None,
        (g * c.args[2] if c.args[2] != 1 else g) if _needs(c, 1) else None,
    ),
    save_inputs=(),
)

sub = defop(_alpha_schema, name="sub", kind="pointwise", prim=True)
sub.register_kernel(_make_alpha_kernel(np.subtract))
sub.register_meta(lambda x, y, alpha=1: pointwise_meta(binary_dtype(x, y), x, y))
sub.register_derivative(
    lambda c, g: (
        g if _needs(c, 0) else None,
        (-g * c.args[2] if c.args[2] != 1 else -g) if _needs(c, 1) else None,
    ),
    save_inputs=(),
)


@defop(kind="pointwise", prim=True)
def div(self: TensorOrScalar, other: TensorOrScalar, *, rounding_mode: str | None = None): ...


_true_div = _make_binary_kernel(np.true_divide, "float")


@div.register_kernel
def _div_kernel(x, y, rounding_mode):
    if rounding_mode is None:
        return _true_div(x, y)
    if rounding_mode not in ("trunc", "floor"):
        raise ValueError(
            f"div expected rounding_mode to be one of None, 'trunc', or 'floor' but found '{rounding_mode}'"
        )
    d = binary_dtype(x, y)
    a = _arr(x, d.np)
    b = _arr(y, d.np)
    if d.is_floating_point:
        cd = compute_np_dtype(d)
        q = np.true_divide(a.astype(cd, copy=False), b.astype(cd, copy=False))
        r = (
            np.trunc(q)
            if rounding_mode == "trunc"
            else np.floor_divide(a.astype(cd, copy=False), b.astype(cd, copy=False))
        )
        return wrap(r, d)
    if np.any(b == 0):
        raise RuntimeError("ZeroDivisionError")
    if rounding_mode == "floor":
        return wrap(np.floor_divide(a, b), d)
    q = np.abs(a) // np.abs(b)
    return wrap(np.where((a < 0) != (b < 0), -q, q).astype(d.np), d)


@div.register_meta
def _div_meta(x, y, rounding_mode=None):
    d = binary_dtype(x, y)
    return pointwise_meta(to_float_dtype(d) if rounding_mode is None else d, x, y)


def _div_grad(c, g):
    a, b, mode = c.args
    if mode is not None:
        return (g * 0 if _needs(c, 0) else None, g * 0 if _needs(c, 1) else None)
    ga = g / b if _needs(c, 0) else None
    gb = -g * a / (b * b) if _needs(c, 1) else None
    return ga, gb


div.register_derivative(
    _div_grad, save_inputs=lambda args, needs: (1,) + ((0,) if needs[1] else ())
)


@defop(kind="pointwise", prim=True)
def pow(self: TensorOrScalar, exponent: TensorOrScalar): ...  # noqa: A001


@pow.register_kernel
def _pow_kernel(x, y):
    d = binary_dtype(x, y)
    if not d.is_floating_point and isinstance(y, Tensor) is False and y < 0:
        raise RuntimeError("Integers to negative integer powers are not allowed.")
    cd = compute_np_dtype(d)
    a = _arr(x, cd)
    if not isinstance(y, Tensor) and y == 2:
        return wrap(np.square(a), d)
    b = _arr(y, cd)
    if d.is_floating_point:
        return wrap(np.power(a, b), d)
    if np.any(b < 0):
        raise RuntimeError("Integers to negative integer powers are not allowed.")
    return wrap(np.power(a, b), d)


pow.register_meta(lambda x, y: pointwise_meta(binary_dtype(x, y), x, y))


def _pow_grad(c, g):
    a, b = c.args
    ga = gb = None
    if _needs(c, 0):
        if isinstance(b, Tensor):
            ga = where(b == 0, g * 0, g * b * a ** (b - 1))
        elif b == 0:
            ga = g * 0
        else:
            ga = g * b * a ** (b - 1)
    if _needs(c, 1):
        out = a**b
        la = a.log() if isinstance(a, Tensor) else math.log(a) if a > 0 else float("nan")
        gb = (
            where((a == 0) & (b >= 0), g * 0, g * out * la)
            if isinstance(a, Tensor)
            else g * out * la
        )
    return ga, gb


pow.register_derivative(_pow_grad)


# ------------------------------------------------------------------------------ ternary family


@defop(kind="pointwise", prim=True)
def where(condition: Tensor, self: TensorOrScalar, other: TensorOrScalar): ...


@where.register_kernel
def _where_kernel(cond, x, y):
    if cond._dtype is not _bool and cond._dtype is not dt.uint8:
        raise RuntimeError(
            f"where expected condition to be a boolean tensor, but got a tensor with dtype {cond._dtype.name}"
        )
    d = binary_dtype(x, y)
    return wrap(np.where(cond._data, _arr(x, d.np), _arr(y, d.np)), d)


@where.register_meta
def _where_meta(cond, x, y):
    d = binary_dtype(x, y)
    out = pointwise_meta(d, cond, *(t for t in (x, y) if isinstance(t, Tensor)))
    return out


def _where_grad(c, g):
    cond = c.args[0]
    zero = g * 0
    return (
        None,
        where(cond, g, zero) if _needs(c, 1) else None,
        where(cond, zero, g) if _needs(c, 2) else None,
    )


where.register_derivative(_where_grad)


@defop(kind="pointwise")
def clamp(self: Tensor, min: TensorOrScalar | None = None, max: TensorOrScalar | None = None): ...  # noqa: A002


@clamp.register_kernel
def _clamp_kernel(x, lo, hi):
    if lo is None and hi is None:
        raise RuntimeError("torch.clamp: At least one of 'min' or 'max' must not be None")
    d = result_dtype(x, lo, hi)
    a = x._data if x._dtype is d else x._data.astype(d.np)
    if lo is not None:
        a = np.maximum(a, _arr(lo, d.np))
    if hi is not None:
        a = np.minimum(a, _arr(hi, d.np))
    if isinstance(lo, float) and isinstance(hi, float) and lo > hi:
        a = np.full_like(a, hi)
    return wrap(a, d)


@clamp.register_meta
def _clamp_meta(x, lo=None, hi=None):
    return pointwise_meta(
        result_dtype(x, lo, hi), x, *(t for t in (lo, hi) if isinstance(t, Tensor))
    )


def _clamp_grad(c, g):
    x, lo, hi = c.args
    mask = None
    if lo is not None:
        mask = x >= lo
    if hi is not None:
        m = x <= hi
        mask = m if mask is None else mask & m
    gx = where(mask, g, g * 0) if _needs(c, 0) else None
    glo = where(x < lo, g, g * 0) if isinstance(lo, Tensor) and _needs(c, 1) else None
    ghi = where(x > hi, g, g * 0) if isinstance(hi, Tensor) and _needs(c, 2) else None
    return gx, glo, ghi


clamp.register_derivative(_clamp_grad)


@clamp.register_decomposition
def _clamp_decomp(x, lo=None, hi=None):
    out = x
    if lo is not None:
        out = where(out < lo, lo, out)
    if hi is not None:
        out = where(out > hi, hi, out)
    return out


@defop(kind="pointwise")
def lerp(self: Tensor, end: Tensor, weight: TensorOrScalar): ...


@lerp.register_kernel
def _lerp_kernel(x, end, w):
    d = result_dtype(x, end, w)
    cd = compute_np_dtype(d)
    a, b, ww = _arr(x, cd), _arr(end, cd), _arr(w, cd)
    # PyTorch's two-sided formula keeps lerp exact at both ends
    out = np.where(np.abs(ww) < 0.5, a + ww * (b - a), b - (b - a) * (1 - ww))
    return wrap(out, d)


lerp.register_meta(
    lambda x, e, w: pointwise_meta(
        result_dtype(x, e, w), x, e, *((w,) if isinstance(w, Tensor) else ())
    )
)


def _lerp_grad(c, g):
    x, end, w = c.args
    return (
        g * (1 - w) if _needs(c, 0) else None,
        g * w if _needs(c, 1) else None,
        g * (end - x) if isinstance(w, Tensor) and _needs(c, 2) else None,
    )


lerp.register_derivative(_lerp_grad)
lerp.register_decomposition(lambda x, e, w: x + w * (e - x))


@defop(kind="pointwise")
def masked_fill(self: Tensor, mask: Tensor, value: TensorOrScalar): ...


@masked_fill.register_kernel
def _masked_fill_kernel(x, mask, value):
    if mask._dtype is not _bool:
        raise RuntimeError(
            f"masked_fill_ only supports boolean masks, but got mask with dtype {mask._dtype.name}"
        )
    if isinstance(value, Tensor) and value._shape:
        raise RuntimeError(
            f"masked_fill_ only supports a 0-dimensional value tensor, but got tensor with {len(value._shape)} dimension(s)."
        )
    v = value.item() if isinstance(value, Tensor) else value
    out = np.where(mask._data, np.asarray(v).astype(x._dtype.np), x._data)
    shape = broadcast_shapes(x._shape, mask._shape)
    if out.shape != shape:
        out = np.broadcast_to(out, shape).copy()
    return wrap(out, x._dtype)


masked_fill.register_meta(lambda x, m, v: pointwise_meta(x._dtype, x, m))


def _masked_fill_grad(c, g):
    x, mask, value = c.args
    return (
        where(mask, g * 0, g) if _needs(c, 0) else None,
        None,
        where(mask, g, g * 0).sum() if isinstance(value, Tensor) and _needs(c, 2) else None,
    )


masked_fill.register_derivative(_masked_fill_grad)
masked_fill.register_decomposition(
    lambda x, m, v: where(m, v.to(x.dtype) if isinstance(v, Tensor) else v, x)
)


@defop(kind="pointwise")
def nan_to_num(
    self: Tensor, nan: float | None = 0.0, posinf: float | None = None, neginf: float | None = None
): ...


@nan_to_num.register_kernel
def _nan_to_num_kernel(x, nan, posinf, neginf):
    a = x._data
    if not x._dtype.is_floating_point:
        return wrap(a.copy(), x._dtype)
    info = np.finfo(a.dtype)
    out = np.nan_to_num(
        a,
        nan=0.0 if nan is None else nan,
        posinf=info.max if posinf is None else posinf,
        neginf=info.min if neginf is None else neginf,
    )
    return wrap(out, x._dtype)


nan_to_num.register_meta(lambda x, *a: pointwise_meta(x._dtype, x))
nan_to_num.register_derivative(lambda c, g: (where(c.args[0].isfinite(), g, g * 0),))


def _addc_schema(self: Tensor, tensor1: Tensor, tensor2: Tensor, *, value: Scalar = 1): ...


addcmul = defop(_addc_schema, name="addcmul", kind="pointwise")
addcmul.register_decomposition(lambda x, a, b, value=1: x + value * a * b)
addcdiv = defop(_addc_schema, name="addcdiv", kind="pointwise")
addcdiv.register_decomposition(lambda x, a, b, value=1: x + value * a / b)


@defop(kind="pointwise")
def square(self: Tensor): ...


square.register_decomposition(lambda x: x * x)


@defop(kind="pointwise")
def xlogy(self: Tensor, other: TensorOrScalar): ...


xlogy.register_decomposition(
    lambda x, y: where(x == 0, x * 0, x * (y.log() if isinstance(y, Tensor) else math.log(y)))
)


@defop(kind="pointwise")
def logit(self: Tensor, eps: float | None = None): ...


@logit.register_decomposition
def _logit_decomp(x, eps=None):
    if eps is not None:
        x = x.clamp(eps, 1 - eps)
    return (x / (1 - x)).log()


@defop(kind="pointwise")
def relu6(self: Tensor): ...


relu6.register_decomposition(lambda x: hardtanh(x, 0.0, 6.0))


@defop(kind="pointwise")
def logaddexp(self: Tensor, other: Tensor): ...


@logaddexp.register_decomposition
def _logaddexp_decomp(a, b):
    m = maximum(a, b)
    return m + ((a - m).exp() + (b - m).exp()).log()
