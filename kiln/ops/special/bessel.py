"""Bessel functions of the second kind Y0, Y1, the modified Bessel functions K0, K1 (plain and
exponentially scaled), PyTorch's second spelling of I0, I1 (``modified_bessel_i0/i1``) and the
Airy function Ai (power series, K_1/3 for x > 2.1, its asymptotic form for x < -7).

Kernels compute in float64: below x = 2 the logarithmic power series (DLMF 10.8.2, 10.31.1);
above it K by the trapezoidal rule on K_nu(x) = int_0^inf exp(-x cosh t) cosh(nu t) dt (its
integrand is analytic in a strip, so the rule converges geometrically), Y by Neumann's series
in J_0, J_1, J_2 ... from Miller's backward recurrence up to x = 25 and by Hankel's expansion
beyond. PyTorch gives none of them a derivative, refuses float16/bfloat16 on CPU, and returns
nan for Y at +inf and for I at +-inf; kiln does the same.
"""

from __future__ import annotations

import math

import numpy as np

from .functions import _input_schema, _special_unary
from .numpy_kernels import (
    _BESSEL_J_HANKEL_FROM,
    _BESSEL_J_MILLER_START,
    _EULER_GAMMA,
    _alternating_halves,
    _bessel_j_hankel,
    _shrinking_terms,
    np_bessel_i0,
    np_bessel_i1,
    np_bessel_j0,
    np_bessel_j1,
)

__all__: list[str] = []

_SERIES_BELOW = 2.0
_SERIES_TERMS = 24  # (x^2/4)^k / (k! (k+1)!) < 1e-40 for k = 24, x <= 2
_QUADRATURE_NODES = 30
_K_ASYMPTOTIC_FROM = 25.0


def _log_series(nu: int, quarter_square: np.ndarray) -> np.ndarray:
    """sum_k (psi(k+1) + psi(k+nu+1)) z^k / (k! (k+nu)!), z = +-x^2/4: the part of Y_nu and
    K_nu beside the logarithm (DLMF 10.8.2, 10.31.1)."""
    psi_k = -_EULER_GAMMA  # psi(k + 1)
    psi_k_nu = psi_k + (1.0 if nu else 0.0)  # psi(k + nu + 1)
    term = np.full_like(quarter_square, 1.0)  # z^k / (k! (k+nu)!)
    total = (psi_k + psi_k_nu) * term
    for k in range(1, _SERIES_TERMS):
        term = term * quarter_square / (k * (k + nu))
        psi_k += 1.0 / k
        psi_k_nu += 1.0 / (k + nu)
        total += (psi_k + psi_k_nu) * term
    return total


def _k_series(nu: int, x: np.ndarray) -> np.ndarray:
    """K0 = -log(x/2) I0 + S0 / 2, K1 = 1/x + log(x/2) I1 - (x/4) S1, for 0 < x <= 2."""
    log_half = np.log(0.5 * x)
    series = _log_series(nu, 0.25 * x * x)
    if nu == 0:
        return -log_half * np_bessel_i0(x) + 0.5 * series
    return 1.0 / x + log_half * np_bessel_i1(x) - 0.25 * x * series


def _k_scaled_quadrature(nu: float, x: np.ndarray) -> np.ndarray:
    """exp(x) K_nu(x) = int_0^inf exp(-x (cosh t - 1)) cosh(nu t) dt for x >= 2, by the
    trapezoidal rule. The integrand is about exp(-x t^2 / 2): a step of half its width 1/sqrt(x)
    (at most 0.2) keeps the error below 1e-17, and 30 steps reach x (cosh t - 1) > 45."""
    step = np.minimum(0.2, 0.5 / np.sqrt(x))
    total = 0.5 * np.ones_like(x)  # the node t = 0, weighted 1/2
    for j in range(1, _QUADRATURE_NODES):
        t = j * step
        # cosh t - 1 as 2 sinh(t/2)^2: no cancellation at the small t of a large x
        with np.errstate(under="ignore"):
            value = np.exp(-2.0 * x * np.sinh(0.5 * t) ** 2)
        total += value * np.cosh(nu * t) if nu else value
    return total * step


def _k_scaled_asymptotic(nu: float, x: np.ndarray) -> np.ndarray:
    """exp(x) K_nu(x) = sqrt(pi / (2x)) sum_k a_k(nu) / x^k (DLMF 10.40.2) for x >= 25, summed
    until the terms stop shrinking (the smallest is about exp(-2x))."""
    mu = 4.0 * nu * nu
    total = np.ones_like(x)
    for _, term in _shrinking_terms(x, lambda k: (mu - (2 * k - 1) ** 2) / (8.0 * k * x)):
        total += term
    return np.sqrt(0.5 * math.pi / x) * total


def _k_scaled(nu: float, x: np.ndarray) -> np.ndarray:
    """exp(x) K_nu(x) for x >= 2."""
    out = np.empty_like(x)
    near = x < _K_ASYMPTOTIC_FROM
    out[near] = _k_scaled_quadrature(nu, x[near])
    out[~near] = _k_scaled_asymptotic(nu, x[~near])
    return out


def _bessel_k_f64(nu: int, x: np.ndarray, scaled: bool) -> np.ndarray:
    res = np.full(x.shape, np.nan)
    res[x == 0] = np.inf
    res[x == np.inf] = 0.0
    small = (x > 0) & (x <= _SERIES_BELOW)
    xs = x[small]
    res[small] = _k_series(nu, xs) * (np.exp(xs) if scaled else 1.0)
    big = (x > _SERIES_BELOW) & (x < np.inf)
    if big.any():
        xb = x[big]
        value = _k_scaled(nu, xb)
        if not scaled:
            with np.errstate(under="ignore"):
                value = value * np.exp(-xb)
        res[big] = value
    return res


def _y_series(nu: int, x: np.ndarray) -> np.ndarray:
    """Y0 = (2/pi) log(x/2) J0 - S0/pi, Y1 = -2/(pi x) + (2/pi) log(x/2) J1 - (x/(2 pi)) S1."""
    log_half = np.log(0.5 * x)
    series = _log_series(nu, -0.25 * x * x)
    if nu == 0:
        return (2.0 * log_half * np_bessel_j0(x) - series) / math.pi
    return (-2.0 / x + 2.0 * log_half * np_bessel_j1(x) - 0.5 * x * series) / math.pi


def _y_neumann(nu: int, x: np.ndarray) -> np.ndarray:
    """Neumann's series with the J_k of Miller's recurrence (normalised by J0 + 2 sum J_2k = 1):
    Y0 = (2/pi) ((log(x/2) + gamma) J0 - 2 sum_k (-1)^k J_2k / k) and its negated derivative
    Y1 = (2/pi) ((log(x/2) + gamma) J1 - J0/x + sum_k (-1)^k (J_2k-1 - J_2k+1) / k)."""
    upper = np.zeros_like(x)
    current = np.ones_like(x)
    even_sum = np.zeros_like(x)  # J2 + J4 + ...
    neumann_even = np.zeros_like(x)  # sum_k (-1)^k J_2k / k
    neumann_odd = np.zeros_like(x)  # sum_m c_m J_2m+1, c_0 = -1, c_m = (-1)^(m+1) (1/m + 1/(m+1))
    j1 = np.zeros_like(x)
    two_over_x = 2.0 / x
    for k in range(_BESSEL_J_MILLER_START, 0, -1):
        upper, current = current, k * two_over_x * current - upper  # current is J_{k-1}
        order = k - 1
        if order > 0 and order % 2 == 0:
            half = order // 2
            even_sum += current
            neumann_even += (-1.0) ** half / half * current
        elif order % 2 == 1:
            m = order // 2
            weight = -1.0 if m == 0 else (-1.0) ** (m + 1) * (1.0 / m + 1.0 / (m + 1))
            neumann_odd += weight * current
            if order == 1:
                j1 = current
    scale = current + 2.0 * even_sum
    j0 = current / scale
    log_term = np.log(0.5 * x) + _EULER_GAMMA
    if nu == 0:
        return 2.0 / math.pi * (log_term * j0 - 2.0 * neumann_even / scale)
    return 2.0 / math.pi * (log_term * j1 / scale - j0 / x + neumann_odd / scale)


def _bessel_y_f64(nu: int, x: np.ndarray) -> np.ndarray:
    res = np.full(x.shape, np.nan)
    res[x == 0] = -np.inf
    small = (x > 0) & (x < _SERIES_BELOW)
    res[small] = _y_series(nu, x[small])
    mid = (x >= _SERIES_BELOW) & (x < _BESSEL_J_HANKEL_FROM)
    if mid.any():
        res[mid] = _y_neumann(nu, x[mid])
    big = (x >= _BESSEL_J_HANKEL_FROM) & (x < np.inf)
    if big.any():
        res[big] = _bessel_j_hankel(nu, x[big], second_kind=True)
    return res


# Ai(0) and -Ai'(0): the coefficients of Ai's two power series (DLMF 9.4.1)
_AIRY_F = 1.0 / (3.0 ** (2.0 / 3.0) * math.gamma(2.0 / 3.0))
_AIRY_G = 1.0 / (3.0 ** (1.0 / 3.0) * math.gamma(1.0 / 3.0))
_AIRY_SERIES_FROM = -7.0  # below: the asymptotic form (both err by about 1e-11 there)
_AIRY_SERIES_TO = 2.1  # above: through K_1/3 (its quadrature wants 2/3 x^(3/2) >= 2)


def _airy_series(x: np.ndarray) -> np.ndarray:
    """Ai(x) = Ai(0) f(x) + Ai'(0) g(x), f = 1 + x^3/(2 3) + x^6/(2 3 5 6) + ...,
    g = x + x^4/(3 4) + x^7/(3 4 6 7) + ..."""
    cube = x * x * x
    f_term, g_term = np.ones_like(x), x.copy()
    f_total, g_total = f_term.copy(), g_term.copy()
    for k in range(1, 60):
        f_term = f_term * cube / ((3 * k - 1) * (3 * k))
        g_term = g_term * cube / ((3 * k) * (3 * k + 1))
        f_total += f_term
        g_total += g_term
    return _AIRY_F * f_total - _AIRY_G * g_total


def _airy_positive(x: np.ndarray) -> np.ndarray:
    """Ai(x) = sqrt(x / 3) / pi K_1/3(zeta), zeta = 2/3 x^(3/2) (DLMF 9.6.1)."""
    zeta = 2.0 / 3.0 * x * np.sqrt(x)
    with np.errstate(under="ignore"):
        return np.sqrt(x / 3.0) / math.pi * np.exp(-zeta) * _k_scaled(1.0 / 3.0, zeta)


def _airy_negative(z: np.ndarray) -> np.ndarray:
    """Ai(-z) for large z > 0 from its asymptotic form (DLMF 9.7.9): z^(-1/4) / sqrt(pi)
    (cos(zeta - pi/4) sum (-1)^k u_2k zeta^-2k + sin(zeta - pi/4) sum (-1)^k u_2k+1 zeta^-2k-1),
    summed until the terms stop shrinking; cos and sin of zeta - pi/4 from those of zeta."""
    zeta = 2.0 / 3.0 * z * np.sqrt(z)
    # u_k / u_(k-1), u_k = (2k+1)(2k+3)...(6k-1) / (216^k k!) (DLMF 9.7.2)
    even, odd = _alternating_halves(
        z, lambda k: (6 * k - 5) * (6 * k - 3) * (6 * k - 1) / ((2 * k - 1) * 216.0 * k * zeta)
    )
    c, s = np.cos(zeta), np.sin(zeta)
    cos_shifted, sin_shifted = (c + s) * math.sqrt(0.5), (s - c) * math.sqrt(0.5)
    return (cos_shifted * even + sin_shifted * odd) / (math.sqrt(math.pi) * z**0.25)


def _airy_ai_f64(x: np.ndarray) -> np.ndarray:
    res = np.full(x.shape, np.nan)
    middle = (x >= _AIRY_SERIES_FROM) & (x <= _AIRY_SERIES_TO)
    res[middle] = _airy_series(x[middle])
    right = (x > _AIRY_SERIES_TO) & (x < np.inf)
    res[right] = _airy_positive(x[right])
    left = (x < _AIRY_SERIES_FROM) & (x > -np.inf)
    res[left] = _airy_negative(-x[left])
    return res


def _float64_kernel(compute):
    """A numpy kernel over ``compute`` (float64 in, float64 out) that keeps the input's dtype."""

    def kernel(a, out=None):
        x = np.asarray(a)
        result = compute(x.astype(np.float64))
        if out is not None:
            out[...] = result
            return out
        return result.astype(x.dtype, copy=False)

    return kernel


def _i_nan_at_infinity(np_fn):
    return lambda x: np.where(np.isinf(x), np.nan, np_fn(x))


_KERNELS = {
    "modified_bessel_i0": _i_nan_at_infinity(np_bessel_i0),
    "modified_bessel_i1": _i_nan_at_infinity(np_bessel_i1),
    "modified_bessel_k0": lambda x: _bessel_k_f64(0, x, False),
    "modified_bessel_k1": lambda x: _bessel_k_f64(1, x, False),
    "scaled_modified_bessel_k0": lambda x: _bessel_k_f64(0, x, True),
    "scaled_modified_bessel_k1": lambda x: _bessel_k_f64(1, x, True),
    "bessel_y0": lambda x: _bessel_y_f64(0, x),
    "bessel_y1": lambda x: _bessel_y_f64(1, x),
    "airy_ai": _airy_ai_f64,
}

for _name, _compute in _KERNELS.items():
    _special_unary(f"special_{_name}", _float64_kernel(_compute), schema=_input_schema, half=False)
