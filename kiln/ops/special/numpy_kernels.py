"""Vectorised numpy kernels for the special functions numpy lacks.

The gamma family (lgamma, digamma, polygamma through the Hurwitz zeta function), the error
function's tails (erfc, erfcx, the normal CDF, its log and its inverse), the modified Bessel
functions I0/I1 (plain and exponentially scaled), the Bessel functions J0/J1 and the spherical
Bessel function j0. Each takes a
float array, computes in float64 to about 1e-15 relative accuracy (absolute accuracy near the
zeros of J0/J1, a few ulp more where a function has a root or a pole) and returns the input's
dtype. Edge values (poles, infinities, domain errors) follow the Cephes
conventions PyTorch's CPU kernels use.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

__all__ = [
    "np_lgamma",
    "np_digamma",
    "np_polygamma",
    "np_zeta",
    "np_erfc",
    "np_erfcx",
    "np_ndtr",
    "np_log_ndtr",
    "np_ndtri",
    "np_bessel_i0",
    "np_bessel_i1",
    "np_bessel_i0e",
    "np_bessel_i1e",
    "np_bessel_j0",
    "np_bessel_j1",
    "np_spherical_bessel_j0",
]

_f64 = np.float64
_EULER_GAMMA = 0.5772156649015329
_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)
_SQRT_PI = math.sqrt(math.pi)
_SQRT_2PI = math.sqrt(2.0 * math.pi)
_SQRT1_2 = math.sqrt(0.5)


def _bernoulli_even(count: int) -> list[float]:
    """B_2, B_4, ..., B_{2*count} (Akiyama-Tanigawa, in exact fractions)."""
    row = []
    out = []
    for m in range(2 * count + 1):
        row.append(Fraction(1, m + 1))
        for j in range(m, 0, -1):
            row[j - 1] = j * (row[j - 1] - row[j])
        if m >= 2 and m % 2 == 0:
            out.append(float(row[0]))
    return out


_B2K = _bernoulli_even(14)


def _finish(result: np.ndarray, like: np.ndarray, out=None):
    """Cast a float64 result back to the input's dtype (into ``out`` when one is given)."""
    if out is not None:
        out[...] = result
        return out
    return result.astype(like.dtype, copy=False)


# ------------------------------------------------------------------------------ Hurwitz zeta


def _zeta_f64(s: np.ndarray, q: np.ndarray) -> np.ndarray:
    """zeta(s, q) = sum_k (q + k)^-s by direct terms up to q + k >= 9, then Euler-Maclaurin."""
    s, q = np.broadcast_arrays(np.asarray(s, _f64), np.asarray(q, _f64))
    out = np.full(s.shape, np.nan)
    out[s == 1] = np.inf
    nonpos = q <= 0
    q_int = q == np.floor(q)
    out[(s > 1) & nonpos & q_int] = np.inf
    ok = (
        (s > 1)
        & np.isfinite(s)
        & np.isfinite(q)
        & ~(nonpos & q_int)
        & ~(nonpos & (s != np.floor(s)))
    )
    if not ok.any():
        return out
    ss = s[ok]
    a = q[ok].copy()
    total = np.zeros_like(a)
    # direct terms: at least nine of them, and until every shifted argument reaches 9
    for _ in range(9):
        total += a**-ss
        a += 1.0
    todo = np.nonzero(a < 9.0)[0]
    while todo.size:
        # up to ``width`` terms per argument at a time: a far-negative q needs millions of them
        width = max(1, min(4096, (1 << 20) // todo.size))
        shifted = a[todo, None] + np.arange(width)
        with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
            terms = np.where(shifted < 9.0, shifted ** -ss[todo, None], 0.0)
        total[todo] += terms.sum(1)
        a[todo] += np.minimum(width, np.ceil(9.0 - a[todo]))
        todo = todo[a[todo] < 9.0]
    # Euler-Maclaurin tail: integral, half the first term, then the Bernoulli corrections
    power = a**-ss
    total += a * power / (ss - 1.0) + 0.5 * power
    factor = ss * power / a  # s (s+1) ... (s+2j-2) a^(-s-2j+1), updated per term
    fact = 2.0  # (2j)!
    inv_a2 = 1.0 / (a * a)
    for j, b2j in enumerate(_B2K, start=1):
        total += b2j / fact * factor
        factor = factor * (ss + 2 * j - 1) * (ss + 2 * j) * inv_a2
        fact *= (2 * j + 1) * (2 * j + 2)
    out[ok] = total
    # s = inf keeps only the (q+0)^-s term: 1 at q = 1, 0 beyond, inf below
    s_inf = (s == np.inf) & (q > 0)
    out[s_inf] = np.where(q[s_inf] == 1, 1.0, np.where(q[s_inf] > 1, 0.0, np.inf))
    return out


def np_zeta(s, q, out=None):
    """The Hurwitz zeta function (``s`` = 1 is a pole; ``s`` < 1 and bad ``q`` give nan)."""
    s = np.asarray(s)
    q = np.asarray(q)
    like = s if s.dtype.kind == "f" else q
    return _finish(_zeta_f64(s, q), like, out)


# ------------------------------------------------------------------------------ gamma family

# zeta(k) - 1 for k = 2..31: the Taylor coefficients of lgamma about 2
_ZETA_MINUS_1 = _zeta_f64(np.arange(2.0, 32.0), np.full(30, 2.0))
# lgamma(2 + z) = (1 - gamma) z + sum_{k>=2} (-1)^k (zeta(k) - 1) z^k / k,  |z| <= 1/2
_LGAMMA2_COEFFS = [1.0 - _EULER_GAMMA] + [
    (-1.0) ** k * c / k for k, c in zip(range(2, 32), _ZETA_MINUS_1)
]


def _lgamma_near_2(z: np.ndarray) -> np.ndarray:
    acc = np.zeros_like(z)
    for c in reversed(_LGAMMA2_COEFFS):
        acc = acc * z + c
    return acc * z


def _lgamma_stirling(x: np.ndarray) -> np.ndarray:
    """lgamma for x >= 10: Stirling's series, truncated well below float64 rounding."""
    inv = 1.0 / x
    inv2 = inv * inv
    series = np.zeros_like(x)
    for k in range(8, 0, -1):
        series = series * inv2 + _B2K[k - 1] / (2 * k * (2 * k - 1))
    return (x - 0.5) * np.log(x) - x + _HALF_LOG_2PI + series * inv


def _lgamma_positive(x: np.ndarray) -> np.ndarray:
    out = np.empty_like(x)
    big = x >= 10.0
    out[big] = _lgamma_stirling(x[big])
    mid = (x > 2.5) & ~big
    if mid.any():
        # walk down to [1.5, 2.5]: lgamma(x) = lgamma(x - m) + log((x-1)(x-2)...(x-m))
        y = x[mid].copy()
        prod = np.ones_like(y)
        for _ in range(8):
            step = y > 2.5
            y = np.where(step, y - 1.0, y)
            prod = np.where(step, prod * y, prod)
        out[mid] = _lgamma_near_2(y - 2.0) + np.log(prod)
    low = (x >= 1.5) & (x <= 2.5)
    out[low] = _lgamma_near_2(x[low] - 2.0)
    # below 1.5: up by one or two, so that the series (and the zeros at 1 and 2) stay exact
    one = (x >= 0.5) & (x < 1.5)
    out[one] = _lgamma_near_2(x[one] - 1.0) - np.log(x[one])
    tiny = x < 0.5
    out[tiny] = _lgamma_near_2(x[tiny]) - np.log(x[tiny]) - np.log1p(x[tiny])
    return out


def _sin_pi_abs(x: np.ndarray) -> np.ndarray:
    """|sin(pi x)| with the argument reduced exactly to [-1/2, 1/2] first (x minus its nearest
    integer: exact, and a tiny x stays itself, where x - floor(x) would round to 1)."""
    return np.abs(np.sin(math.pi * (x - np.round(x))))


def np_lgamma(a, out=None):
    """log|Gamma(x)|; poles (0 and negative integers) and +-inf give inf."""
    x = np.asarray(a, _f64)
    res = np.full(x.shape, np.inf)
    res[np.isnan(x)] = np.nan
    pos = (x > 0) & np.isfinite(x)
    res[pos] = _lgamma_positive(x[pos])
    neg = (x < 0) & (x != np.floor(x))
    if neg.any():
        xn = x[neg]
        # reflection: Gamma(x) Gamma(1 - x) = pi / sin(pi x)
        res[neg] = math.log(math.pi) - np.log(_sin_pi_abs(xn)) - _lgamma_positive(1.0 - xn)
    return _finish(res, np.asarray(a), out)


# digamma's positive root, split in two floats, and its Taylor coefficients there:
# psi(x0 + h) = sum_{k>=1} (-1)^(k+1) zeta(k+1, x0) h^k  (converges for |h| < x0)
_DIGAMMA_ROOT_HI = 1.4616321449683622
_DIGAMMA_ROOT_LO = 9.549995429965697e-17
_DIGAMMA_ROOT_COEFFS = (-1.0) ** np.arange(2, 42) * _zeta_f64(
    np.arange(2.0, 42.0), np.full(40, _DIGAMMA_ROOT_HI)
)


def _digamma_near_root(x: np.ndarray) -> np.ndarray:
    h = (x - _DIGAMMA_ROOT_HI) - _DIGAMMA_ROOT_LO
    acc = np.zeros_like(h)
    for c in reversed(_DIGAMMA_ROOT_COEFFS):
        acc = acc * h + c
    return acc * h


def _digamma_positive(x: np.ndarray) -> np.ndarray:
    root = np.abs(x - _DIGAMMA_ROOT_HI) < 0.5
    if root.any():
        out = np.empty_like(x)
        out[root] = _digamma_near_root(x[root])
        out[~root] = _digamma_positive(x[~root])
        return out
    shift = np.zeros_like(x)
    y = x.copy()
    for _ in range(10):
        step = y < 10.0
        shift = np.where(step, shift - 1.0 / y, shift)
        y = np.where(step, y + 1.0, y)
    inv2 = 1.0 / (y * y)
    series = np.zeros_like(y)
    for k in range(8, 0, -1):
        series = series * inv2 + _B2K[k - 1] / (2 * k)
    return shift + np.log(y) - 0.5 / y - series * inv2


def np_digamma(a, out=None):
    """psi(x) = Gamma'(x)/Gamma(x); -inf at +0, +inf at -0, nan at negative integers and -inf."""
    x = np.asarray(a, _f64)
    res = np.full(x.shape, np.nan)
    zero = x == 0
    res[zero] = np.copysign(np.inf, -x[zero])
    res[x == np.inf] = np.inf
    pos = (x > 0) & np.isfinite(x)
    res[pos] = _digamma_positive(x[pos])
    neg = (x < 0) & (x != np.floor(x))
    if neg.any():
        xn = x[neg]
        # tan has period pi: reduce x exactly to its distance from the nearest integer
        tan_pi_x = np.tan(math.pi * (xn - np.round(xn)))
        res[neg] = _digamma_positive(1.0 - xn) - math.pi / tan_pi_x
    return _finish(res, np.asarray(a), out)


def np_polygamma(n: int, a, out=None):
    """The n-th derivative of digamma: (-1)^(n+1) n! zeta(n+1, x) for n >= 1."""
    if n == 0:
        return np_digamma(a, out)
    x = np.asarray(a, _f64)
    res = _zeta_f64(np.full(x.shape, n + 1.0), x)
    if n == 1:
        # trigamma decays to 0 at +inf and is undefined at -inf
        res = np.where(x == np.inf, 0.0, np.where(x == -np.inf, np.nan, res))
    scale = float(math.factorial(n)) if n <= 170 else math.inf
    res = res * (scale if n % 2 else -scale)
    return _finish(res, np.asarray(a), out)


# ------------------------------------------------------------------------------ error functions


def _exp_square(x: np.ndarray, scale: float) -> np.ndarray:
    """exp(scale * x^2) without the rounding error of x*x: x = hi + lo with hi*hi exact."""
    hi = x.astype(np.float32).astype(_f64)
    with np.errstate(over="ignore", invalid="ignore"):
        lo = np.where(np.isinf(x), 0.0, (x - hi) * (x + hi))
        main = np.exp(scale * (hi * hi))
        # past exp's range the correction cannot bring it back (and for a huge x its own
        # exponent overflows: 0 * inf); a float32-overflowing x has hi = inf, main 0 or inf
        return np.where((main == 0) | np.isinf(main), main, main * np.exp(scale * lo))


def _exp_minus_square(x: np.ndarray) -> np.ndarray:
    return _exp_square(x, -1.0)


_ERFCX_FRACTION_FROM = 1.0


def _erf_series(x: np.ndarray) -> np.ndarray:
    """erf(x) = 2/sqrt(pi) exp(-x^2) sum_n (2x^2)^n x / (2n+1)!!: positive terms, |x| < 3."""
    x2 = 2.0 * x * x
    term = x.copy()
    total = x.copy()
    for n in range(1, 40):
        term = term * x2 / (2 * n + 1)
        total += term
    return (2.0 / _SQRT_PI) * _exp_minus_square(x) * total


# terms of the continued fraction needed for full float64 accuracy from each x upwards
_ERFCX_FRACTION_TERMS = ((1.0, 200), (2.0, 80), (4.0, 30))


def _erfcx_fraction(x: np.ndarray) -> np.ndarray:
    """exp(x^2) erfc(x) for x >= 1 from Laplace's continued fraction, evaluated bottom-up;
    it converges slowly near 1, so each band of x gets only the terms it needs."""
    out = np.empty_like(x)
    starts = [start for start, _ in _ERFCX_FRACTION_TERMS]
    band_of = np.maximum(np.searchsorted(starts, x, side="right") - 1, 0)
    for band, (_, terms) in enumerate(_ERFCX_FRACTION_TERMS):
        chosen = band_of == band
        xb = x[chosen]
        tail = np.zeros_like(xb)
        for k in range(terms, 0, -1):
            tail = (0.5 * k) / (xb + tail)
        out[chosen] = 1.0 / (_SQRT_PI * (xb + tail))
    return out


def _erfc_f64(x: np.ndarray) -> np.ndarray:
    res = np.empty_like(x)
    ax = np.abs(x)
    small = ax < _ERFCX_FRACTION_FROM
    res[small] = 1.0 - _erf_series(x[small])
    big = ~small & ~np.isnan(x)
    if big.any():
        xb = x[big]
        tail = _exp_minus_square(np.abs(xb)) * _erfcx_fraction(np.abs(xb))
        res[big] = np.where(xb > 0, tail, 2.0 - tail)
    res[np.isnan(x)] = np.nan
    return res


def np_erfc(a, out=None):
    """1 - erf(x) with full relative accuracy in the right tail (down to underflow)."""
    return _finish(_erfc_f64(np.asarray(a, _f64)), np.asarray(a), out)


def _erfcx_f64(x: np.ndarray) -> np.ndarray:
    res = np.empty_like(x)
    big = x >= _ERFCX_FRACTION_FROM
    res[big] = _erfcx_fraction(x[big])
    rest = ~big
    xr = x[rest]
    with np.errstate(over="ignore", invalid="ignore"):
        res[rest] = _exp_square(xr, 1.0) * _erfc_f64(xr)
    res[x == -np.inf] = np.inf
    return res


def np_erfcx(a, out=None):
    """The scaled complementary error function exp(x^2) erfc(x)."""
    return _finish(_erfcx_f64(np.asarray(a, _f64)), np.asarray(a), out)


def _ndtr_f64(x: np.ndarray) -> np.ndarray:
    """0.5 erfc(-x/sqrt 2); in the tails exp(-x^2/2) is formed from x itself, not x/sqrt 2."""
    res = np.empty_like(x)
    tail = np.abs(x) * _SQRT1_2 >= _ERFCX_FRACTION_FROM
    xt = x[tail]
    lower = 0.5 * _exp_square(xt, -0.5) * _erfcx_fraction(np.abs(xt) * _SQRT1_2)
    res[tail] = np.where(xt < 0, lower, 1.0 - lower)
    mid = ~tail
    res[mid] = 0.5 * _erfc_f64(-x[mid] * _SQRT1_2)
    return res


def np_ndtr(a, out=None):
    """The standard normal CDF, 0.5 erfc(-x / sqrt(2))."""
    return _finish(_ndtr_f64(np.asarray(a, _f64)), np.asarray(a), out)


def _log_ndtr_f64(x: np.ndarray) -> np.ndarray:
    res = np.empty_like(x)
    left = x < -1.0
    xl = x[left]
    # left tail: ndtr(x) = exp(-x^2/2) erfcx(-x/sqrt 2) / 2, logged without underflow
    res[left] = np.log(0.5 * _erfcx_f64(-xl * _SQRT1_2)) - 0.5 * xl * xl
    right = ~left
    res[right] = np.log1p(-_ndtr_f64(-x[right]))
    return res


def np_log_ndtr(a, out=None):
    """log of the standard normal CDF, accurate far into both tails."""
    return _finish(_log_ndtr_f64(np.asarray(a, _f64)), np.asarray(a), out)


def np_ndtri(a, out=None):
    """The inverse of the normal CDF: ndtri(0) = -inf, ndtri(1) = inf, nan outside [0, 1]."""
    p = np.asarray(a, _f64)
    res = np.full(p.shape, np.nan)
    res[p == 0] = -np.inf
    res[p == 1] = np.inf
    inside = (p > 0) & (p < 1)
    pi = p[inside]
    upper = pi > 0.5
    q = np.where(upper, 1.0 - pi, pi)  # exact for p >= 1/2 (Sterbenz)
    # start: Abramowitz & Stegun 26.2.23 (|error| < 4.5e-4), for the lower tail
    t = np.sqrt(-2.0 * np.log(q))
    num = 2.515517 + t * (0.802853 + t * 0.010328)
    den = 1.0 + t * (1.432788 + t * (0.189269 + t * 0.001308))
    x = -(t - num / den)
    log_q = np.log(q)
    # Newton on log(ndtr(x)) = log(q): the step is (log_ndtr - log q) * ndtr / pdf
    for _ in range(3):
        ratio = np.where(
            x <= 0,
            0.5 * _SQRT_2PI * _erfcx_f64(-x * _SQRT1_2),
            _SQRT_2PI * np.exp(0.5 * x * x) * _ndtr_f64(x),
        )
        x = x - (_log_ndtr_f64(x) - log_q) * ratio
    # centre: polish with Newton on erf(z) = 2q - 1 (exact), whose series is relatively exact
    centre = q > 0.25
    if centre.any():
        y = 2.0 * q[centre] - 1.0
        z = x[centre] * _SQRT1_2
        for _ in range(2):
            z = z - (_erf_series(z) - y) / ((2.0 / _SQRT_PI) * _exp_minus_square(z))
        x[centre] = z / _SQRT1_2
    res[inside] = np.where(upper, -x, x)
    return _finish(res, np.asarray(a), out)


# ------------------------------------------------------------------------------ Bessel I0, I1

_BESSEL_SERIES_LIMIT = 30.0


def _bessel_i_f64(nu: int, x: np.ndarray, scaled: bool) -> np.ndarray:
    """I_nu(x) for nu in {0, 1}; ``scaled`` multiplies by exp(-|x|)."""
    ax = np.abs(x)
    res = np.empty_like(x)
    small = ax <= _BESSEL_SERIES_LIMIT
    xs = ax[small]
    # power series sum_k (x^2/4)^k (x/2)^nu / (k! (k+nu)!): positive terms, no cancellation
    quarter_x2 = 0.25 * xs * xs
    term = 0.5 * xs if nu else np.ones_like(xs)
    total = term.copy()
    for k in range(1, 90):
        term = term * quarter_x2 / (k * (k + nu))
        total += term
    res[small] = total * np.exp(-xs) if scaled else total
    big = ~small & ~np.isnan(x)
    if big.any():
        xb = ax[big]
        # Hankel's asymptotic series, summed until its terms stop shrinking
        mu = 4.0 * nu * nu
        term = np.ones_like(xb)
        total = term.copy()
        for k in range(1, 60):
            term = term * -(mu - (2 * k - 1) ** 2) / (8.0 * k * xb)
            total += term
        if scaled:
            res[big] = total / np.sqrt(2.0 * math.pi * xb)
        else:
            with np.errstate(over="ignore", invalid="ignore"):
                res[big] = np.where(
                    np.isinf(xb), np.inf, total * np.exp(xb - 0.5 * np.log(2.0 * math.pi * xb))
                )
    res[np.isnan(x)] = np.nan
    # I1 is odd; like Cephes (and PyTorch) the sign comes from x < 0, so I1(-0) is +0
    return np.where(x < 0, -res, res) if nu else res


def np_bessel_i0(a, out=None):
    """The modified Bessel function of the first kind, order 0."""
    return _finish(_bessel_i_f64(0, np.asarray(a, _f64), False), np.asarray(a), out)


def np_bessel_i1(a, out=None):
    """The modified Bessel function of the first kind, order 1 (odd in x)."""
    return _finish(_bessel_i_f64(1, np.asarray(a, _f64), False), np.asarray(a), out)


def np_bessel_i0e(a, out=None):
    """exp(-|x|) I0(x): finite for every x."""
    return _finish(_bessel_i_f64(0, np.asarray(a, _f64), True), np.asarray(a), out)


def np_bessel_i1e(a, out=None):
    """exp(-|x|) I1(x): finite for every x."""
    return _finish(_bessel_i_f64(1, np.asarray(a, _f64), True), np.asarray(a), out)


# ------------------------------------------------------------------------------ Bessel J0, J1

_BESSEL_J_SERIES_BELOW = 2.0
_BESSEL_J_HANKEL_FROM = 25.0
_BESSEL_J_MILLER_START = 90  # J_90(x) < 1e-30 for x < 25: the recurrence starts far enough out


def _bessel_j_series(nu: int, x: np.ndarray) -> np.ndarray:
    """sum_k (-x^2/4)^k (x/2)^nu / (k! (k+nu)!): for |x| < 2 no term exceeds the sum by much."""
    minus_quarter_x2 = -0.25 * x * x
    term = 0.5 * x if nu else np.ones_like(x)
    total = term.copy()
    for k in range(1, 25):
        term = term * minus_quarter_x2 / (k * (k + nu))
        total += term
    return total


def _bessel_j_miller(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """J0 and J1 by Miller's backward recurrence J_{k-1} = (2k/x) J_k - J_{k+1}, started from
    (J_{N+1}, J_N) = (0, 1) and normalised by J0 + 2 (J2 + J4 + ...) = 1. Recurring downwards
    the wanted solution grows, so the rounding errors (and the wrong start) die out."""
    upper = np.zeros_like(x)
    current = np.ones_like(x)
    even_sum = np.zeros_like(x)
    j1 = np.zeros_like(x)
    two_over_x = 2.0 / x
    for k in range(_BESSEL_J_MILLER_START, 0, -1):
        upper, current = current, k * two_over_x * current - upper  # current is J_{k-1}
        if k - 1 == 1:
            j1 = current
        elif k - 1 > 0 and (k - 1) % 2 == 0:
            even_sum += current
    scale = current + 2.0 * even_sum
    return current / scale, j1 / scale


def _shrinking_terms(x: np.ndarray, ratio):
    """The terms t_k = t_(k-1) ratio(k), t_0 = 1, of an asymptotic series, as (k, t_k) for
    k = 1, 2, ...; each element's terms are 0 from its first that does not shrink (where such a
    series is best cut), and the sequence ends once no element's terms shrink."""
    term = np.ones_like(x)
    shrinking = np.ones(x.shape, dtype=bool)
    for k in range(1, 60):
        following = term * ratio(k)
        shrinking &= np.abs(following) < np.abs(term)
        if not shrinking.any():
            return
        term = np.where(shrinking, following, 0.0)
        yield k, term


def _alternating_halves(x: np.ndarray, ratio) -> tuple[np.ndarray, np.ndarray]:
    """(1 + sum over even k, sum over odd k) of (-1)^(k//2) t_k for ``_shrinking_terms``: the
    two series (P and Q) of Hankel-type asymptotic forms."""
    even, odd = np.ones_like(x), np.zeros_like(x)
    for k, term in _shrinking_terms(x, ratio):
        signed = -term if (k // 2) % 2 else term
        if k % 2:
            odd += signed
        else:
            even += signed
    return even, odd


def _bessel_j_hankel(nu: int, x: np.ndarray, second_kind: bool = False) -> np.ndarray:
    """Hankel's asymptotic form sqrt(2/(pi x)) (P cos chi - Q sin chi), chi = x - (2 nu + 1) pi/4,
    summed until its terms stop shrinking; cos and sin of chi are formed from cos x and sin x, so
    no rounding of x - pi/4 enters. ``second_kind``: Y_nu = sqrt(2/(pi x)) (P sin chi + Q cos chi).
    """
    mu = 4.0 * nu * nu
    p, q = _alternating_halves(x, lambda k: (mu - (2 * k - 1) ** 2) / (8.0 * k * x))
    c, s = np.cos(x), np.sin(x)
    if nu == 0:
        cos_chi, sin_chi = c + s, s - c
    else:
        cos_chi, sin_chi = s - c, -(s + c)
    if second_kind:
        return np.sqrt(1.0 / (math.pi * x)) * (p * sin_chi + q * cos_chi)
    return np.sqrt(1.0 / (math.pi * x)) * (p * cos_chi - q * sin_chi)


def _bessel_j_f64(nu: int, x: np.ndarray) -> np.ndarray:
    """J_nu(x) for nu in {0, 1}: even (J0) or odd (J1) in x, 0 at +-inf."""
    ax = np.abs(x)
    res = np.full(x.shape, np.nan)
    small = ax < _BESSEL_J_SERIES_BELOW
    res[small] = _bessel_j_series(nu, ax[small])
    mid = (ax >= _BESSEL_J_SERIES_BELOW) & (ax < _BESSEL_J_HANKEL_FROM)
    if mid.any():
        res[mid] = _bessel_j_miller(ax[mid])[nu]
    big = (ax >= _BESSEL_J_HANKEL_FROM) & np.isfinite(ax)
    if big.any():
        res[big] = _bessel_j_hankel(nu, ax[big])
    res[np.isinf(x)] = 0.0
    # J1 is odd; its sign follows x's sign bit, so J1(-0) = -0 as in PyTorch
    return np.where(np.signbit(x), -res, res) if nu else res


def np_bessel_j0(a, out=None):
    """The Bessel function of the first kind, order 0 (absolute accuracy near its zeros)."""
    return _finish(_bessel_j_f64(0, np.asarray(a, _f64)), np.asarray(a), out)


def np_bessel_j1(a, out=None):
    """The Bessel function of the first kind, order 1 (odd in x)."""
    return _finish(_bessel_j_f64(1, np.asarray(a, _f64)), np.asarray(a), out)


# the Taylor series of sin(x) / x to x**12, highest power first
_SINC_SERIES = tuple((-1.0) ** k / math.factorial(2 * k + 1) for k in range(6, -1, -1))


def np_spherical_bessel_j0(a, out=None):
    """sin(x) / x: its Taylor series below |x| = 1/2 (where the quotient loses digits and is 0/0
    at 0), 0 at +-inf, as PyTorch's kernel computes it."""
    x = np.asarray(a, _f64)
    square = x * x
    series = np.zeros_like(x)
    for coefficient in _SINC_SERIES:
        series = series * square + coefficient
    with np.errstate(invalid="ignore", divide="ignore"):
        quotient = np.sin(x) / x
    res = np.where(np.abs(x) < 0.5, series, np.where(np.isinf(x), 0.0, quotient))
    return _finish(res, np.asarray(a), out)
