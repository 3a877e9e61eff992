"""numpy versions of the elementwise functions numpy lacks: sigmoid, erf, erfinv, rsqrt, gelu,
silu, softplus, and round with ``decimals``.

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
    "np_gelu",
    "np_silu",
    "np_softplus",
    "np_round",
]


def np_sigmoid(a, out=None):
    # PyTorch's formula, 1 / (1 + e^-x), rounds like it: an e^-x overflowing to inf gives 0
    return (1 / (1 + np.exp(-a))).astype(a.dtype, copy=False)


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
