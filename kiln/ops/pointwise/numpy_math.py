"""numpy versions of the elementwise functions numpy lacks (sigmoid, erf, erfinv, rsqrt,
silu, softplus, round with ``decimals``) or computes with other rules than PyTorch (remainder,
integer powers).

The eager kernels (``pointwise``, ``activations``) and the inductor's numpy backend share them;
each takes a numpy array and returns one of the same float dtype.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = [
    "np_sigmoid",
    "np_erf",
    "np_erfinv",
    "np_rsqrt",
    "np_silu",
    "np_softplus",
    "np_round",
    "np_remainder",
    "np_int_pow",
    "np_trunc_divide",
    "np_half_rounding_divide",
    "np_sign",
    "np_float_pow",
    "SCALAR_POWERS",
    "scalar_power_form",
]


def np_sigmoid(a, out=None):
    # PyTorch's formula, 1 / (1 + e^-x), rounds like it: an e^-x overflowing to inf gives 0;
    # real floats in four passes over one result (``out`` when given), no temporaries
    if a.dtype.kind != "f":
        return (1 / (1 + np.exp(-a))).astype(a.dtype, copy=False)
    # an array even for a 0-d ``a`` (numpy's ufuncs return those as scalars, which the passes
    # below cannot write into)
    o = np.negative(a, out=np.empty_like(a) if out is None else out)
    np.exp(o, out=o)
    o += 1
    return np.reciprocal(o, out=o)


def np_erf(a, out=None):
    if a.dtype == np.float64 and a.size <= 4096:
        return np.asarray(np.frompyfunc(math.erf, 1, 1)(a)).astype(np.float64)  # 0-d: a float
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
    # the series sums -0.0 into +0.0: erf is odd, so the sign is x's
    return np.copysign(np.where(z < 0.5, small, large), x).astype(a.dtype, copy=False)


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


def np_remainder(a, b):
    """PyTorch's remainder: the floored modulus, with the sign of the divisor. For floats it is
    fmod(a, b) moved into the divisor's sign when nonzero (PyTorch's formula), so a zero result
    keeps the dividend's sign where ``np.remainder`` gives the divisor's. A Python number
    divisor takes the dividend's type (as a weak scalar: ``float32 % 0.1`` computes in float32)."""
    a = np.asarray(a)
    b = a.dtype.type(b) if isinstance(b, (int, float)) else np.asarray(b)
    if a.dtype.kind != "f" and getattr(a.dtype, "name", "") != "bfloat16":
        return np.remainder(a, b)
    mod = np.fmod(a, b)
    fix = (mod != 0) & ((b < 0) != (mod < 0))
    return np.where(fix, mod + b, mod).astype(a.dtype, copy=False)


def np_sign(a):
    """PyTorch's sign, (0 < a) - (a < 0): NaN has sign 0 (numpy's is NaN), -0.0 has 0.0."""
    a = np.asarray(a)
    if a.dtype == np.bool_:
        return a.copy()
    return ((a > 0).astype(a.dtype) - (a < 0).astype(a.dtype)).astype(a.dtype, copy=False)


def np_trunc_divide(a, b):
    """Integer division rounding toward zero, as C (and PyTorch) divide: the floored quotient,
    one up where the division is inexact and the signs differ (|a| // |b| would overflow at the
    most negative integer)."""
    a, b = np.asarray(a), np.asarray(b)
    with np.errstate(all="ignore"):
        floored = np.floor_divide(a, b)
        inexact = (np.remainder(a, b) != 0) & ((a < 0) != (b < 0))
    return (floored + inexact).astype(floored.dtype, copy=False)


def np_half_rounding_divide(a, b, rounding_mode: str, half) -> np.ndarray:
    """``div(a, b, rounding_mode=...)`` of float16/bfloat16 values (``half``: their numpy dtype)
    as PyTorch's CPU kernels compute it where the divisor has more than one element: in the
    half type's arithmetic, each step rounded to it. 'trunc' truncates the rounded quotient
    (78.5 / 0.414 is 189.6, rounded to bfloat16 190, not 189); 'floor' is the fmod-based floored
    division with every intermediate rounded. Returns float32 values the half type holds."""

    def rounded(x):
        return x.astype(half).astype(np.float32)

    a = np.asarray(a).astype(np.float32, copy=False)
    b = np.asarray(b).astype(np.float32, copy=False)
    with np.errstate(all="ignore"):
        quotient = rounded(a / b)
        if rounding_mode == "trunc":
            return np.trunc(quotient)
        mod = rounded(np.fmod(a, b))
        div = rounded(rounded(a - mod) / b)
        div = np.where((mod != 0) & ((b < 0) != (mod < 0)), rounded(div - 1), div)
        floored = np.floor(div)
        floored = np.where(rounded(div - floored) > 0.5, rounded(floored + 1), floored)
        floored = np.where(div != 0, floored, np.copysign(np.float32(0), quotient))
        return np.where(b == 0, quotient, floored)


def np_int_pow(a, b):
    """Integer ``a ** b`` as PyTorch computes it: wrapping products, and negative exponents
    truncating the result to 0 except for bases 1 (1) and -1 (+-1 by the exponent's parity);
    ``np.power`` raises on negative exponents instead."""
    a, b = np.asarray(a), np.asarray(b)
    negative = b < 0
    if not np.any(negative):
        return np.power(a, b)
    odd_sign = np.where(np.remainder(b, 2) == 0, 1, -1)
    unit = np.where(a == 1, 1, np.where(a == -1, odd_sign, 0))
    power = np.power(a, np.where(negative, 0, b).astype(b.dtype))
    return np.where(negative, unit, power).astype(power.dtype, copy=False)


def np_float_pow(a, b):
    """C's pow elementwise. ``np.power`` with an exponent of 0.5 that it broadcasts (a scalar, a
    single value, a stride-0 array) takes a square root instead, whose special values differ
    (sqrt(-inf) is NaN, pow(-inf, 0.5) inf): such exponents are written out in full."""
    a, b = np.asarray(a), np.asarray(b)
    shape = np.broadcast_shapes(a.shape, b.shape)
    if (b.shape != shape or 0 in b.strides or not shape) and np.any(b == 0.5):
        full = np.array(np.broadcast_to(b, shape or (1,)))
        return np.power(np.broadcast_to(a, shape or (1,)), full).reshape(shape)
    return np.power(a, b)


# PyTorch computes pow(tensor, scalar) of floats with these exponents by their exact forms, not by
# a general pow: special values follow them (sqrt(-inf) is NaN where C's pow(-inf, 0.5) is inf;
# 1 / sqrt(-0.0) is -inf where pow(-0.0, -0.5) is inf). Its float16 kernel has only the integral
# ones: float16 ** 0.5 is C's pow there (``scalar_power_form``).
SCALAR_POWERS = {
    0.5: np.sqrt,
    -0.5: lambda a: 1 / np.sqrt(a),
    3.0: lambda a: a * a * a,
    -1.0: lambda a: 1 / a,
    -2.0: lambda a: 1 / (a * a),
}


def scalar_power_form(exponent, is_float16: bool):
    """The exact form PyTorch computes ``x ** exponent`` of floats with, or None for its pow."""
    if is_float16 and exponent in (0.5, -0.5):
        return None
    return SCALAR_POWERS.get(exponent)
