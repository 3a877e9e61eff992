"""The regularized incomplete gamma functions P(a, x) (``igamma``, ``special.gammainc``) and
Q(a, x) = 1 - P(a, x) (``igammac``, ``special.gammaincc``).

The kernel computes in float64 whichever of P and Q it can get with full relative accuracy and
the other as its complement: the power series of P below x = a + 1, a continued fraction for Q
above, an alternating series for Q when a < 1 (there P is close to 1), and Temme's uniform
expansion about the transition point x = a when a is large. Edge values (a or x zero, infinite,
negative, nan) are those of PyTorch's kernel. PyTorch differentiates with respect to x only.
"""

from __future__ import annotations

import math

import numpy as np

from ...runtime import dtypes as dt
from ..core.common import Tensor, binary_dtype, compute_np_dtype, pointwise_meta, wrap
from ..core.registry import defop
from ..pointwise.unary_binary import as_np_operand, iterator_layout, needs_grad
from ..reductions.reduce import torch_type_name
from .functions import lgamma
from .numpy_kernels import _B2K, _erfc_f64, _lgamma_near_2, np_lgamma

__all__ = ["igamma", "igammac", "np_igamma", "np_igammac"]

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)
# a above this and |x - a| < 0.05 a: the uniform expansion to its a^-1 term (the next one is
# below 1e-11 relative there). Elsewhere the series and the fraction need at most about
# 9 sqrt(a) terms (near x = a) or 40 / |log(x / a)|.
_TEMME_FROM = 1e4
_TEMME_SPREAD = 0.05
_MAX_TERMS = 2000
_TINY = 1e-300

# Taylor coefficients in eta of Temme's c0(eta) and c1(eta) (DLMF 8.12.8), by series reversion
_C0_TAYLOR = (-1 / 3, 1 / 12, -2 / 135, 1 / 864, 1 / 2835, -139 / 777600, 1 / 25515)
_C1_TAYLOR = (-1 / 540, -1 / 288, 1 / 378, -77 / 77760, 1 / 4860)


def _polynomial(coefficients, z: np.ndarray) -> np.ndarray:
    acc = np.zeros_like(z)
    for c in reversed(coefficients):
        acc = acc * z + c
    return acc


def _log1pmx(t: np.ndarray) -> np.ndarray:
    """log(1 + t) - t without the cancellation near t = 0 (a series below |t| = 1/4)."""
    out = np.empty_like(t)
    small = np.abs(t) < 0.25
    ts = t[small]
    power = -ts * ts
    total = 0.5 * power
    for k in range(3, 32):
        power = power * -ts
        total += power / k
    out[small] = total
    with np.errstate(divide="ignore"):
        out[~small] = np.log1p(t[~small]) - t[~small]
    return out


def _stirling_correction(a: np.ndarray) -> np.ndarray:
    """lgamma(a) - ((a - 1/2) log a - a + log(2 pi)/2) for a >= 10, from Stirling's series."""
    inv2 = 1.0 / (a * a)
    series = np.zeros_like(a)
    for k in range(8, 0, -1):
        series = series * inv2 + _B2K[k - 1] / (2 * k * (2 * k - 1))
    return series / a


def _log_prefactor(a: np.ndarray, x: np.ndarray) -> np.ndarray:
    """log(x^a exp(-x) / Gamma(a)); for a >= 10 and x within a factor 2 of a through
    log1p(t) - t, t = (x - a)/a (exact there), so that the large terms a log x, x and lgamma(a)
    do not cancel in rounding."""
    out = np.empty_like(a)
    big = (a >= 10.0) & (x >= 0.5 * a) & (x <= 2.0 * a)
    ab, xb = a[big], x[big]
    out[big] = (
        ab * _log1pmx((xb - ab) / ab) + 0.5 * np.log(ab) - _HALF_LOG_2PI - _stirling_correction(ab)
    )
    small = ~big
    out[small] = a[small] * np.log(x[small]) - x[small] - np_lgamma(a[small])
    return out


def _p_series(a: np.ndarray, x: np.ndarray) -> np.ndarray:
    """P = x^a e^-x / Gamma(a + 1) * sum_n x^n / ((a+1)...(a+n)): positive terms."""
    term = np.ones_like(a)
    total = np.ones_like(a)
    active = np.arange(a.size)
    for n in range(1, _MAX_TERMS):
        term[active] *= x[active] / (a[active] + n)
        total[active] += term[active]
        active = active[term[active] > 1e-17 * total[active]]
        if not active.size:
            break
    # x^a e^-x / Gamma(a + 1), through lgamma(1 + a) below a = 1 (a may be subnormal there)
    below_one = a < 1.0
    log_head = np.empty_like(a)
    ab, xb = a[below_one], x[below_one]
    log_head[below_one] = ab * np.log(xb) - xb - _lgamma1p(ab)
    log_head[~below_one] = _log_prefactor(a[~below_one], x[~below_one]) - np.log(a[~below_one])
    with np.errstate(under="ignore"):
        return np.exp(log_head) * total


def _q_fraction(a: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Q = x^a e^-x / Gamma(a) / (x + 1 - a - 1 (1 - a) / (x + 3 - a - 2 (2 - a) / ...)), by
    the modified Lentz method (converges for x > a + 1 or so)."""
    b = x + 1.0 - a
    c = np.full_like(a, 1.0 / _TINY)
    d = 1.0 / b
    h = d.copy()
    active = np.arange(a.size)
    for n in range(1, _MAX_TERMS):
        an = -n * (n - a[active])
        b[active] += 2.0
        dn = an * d[active] + b[active]
        dn = np.where(np.abs(dn) < _TINY, _TINY, dn)
        cn = b[active] + an / c[active]
        cn = np.where(np.abs(cn) < _TINY, _TINY, cn)
        d[active] = 1.0 / dn
        c[active] = cn
        delta = cn / dn
        h[active] *= delta
        active = active[np.abs(delta - 1.0) > 1e-16]
        if not active.size:
            break
    with np.errstate(under="ignore"):
        return np.exp(_log_prefactor(a, x)) * h


def _lgamma1p(a: np.ndarray) -> np.ndarray:
    """lgamma(1 + a) for 0 < a < 1, accurate relative to its size near a = 0."""
    low = a <= 0.5
    return np.where(low, _lgamma_near_2(a) - np.log1p(a), _lgamma_near_2(a - 1.0))


def _q_small_a(a: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Q for a < 1 and x < a + 1, where P is near 1:
    Q = (1 - x^a / Gamma(a + 1)) - x^a / Gamma(a) * sum_{n>=1} (-x)^n / (n! (a + n))."""
    log_head = a * np.log(x) - _lgamma1p(a)
    term = np.ones_like(a)
    total = np.zeros_like(a)
    for n in range(1, 40):
        term = term * -x / n
        total += term / (a + n)
    return -np.expm1(log_head) - a * np.exp(log_head) * total


def _temme(a: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(P, Q) from Temme's uniform expansion (DLMF 8.12.3-8): for large a, x near a."""
    mu = (x - a) / a
    eta = np.sign(mu) * np.sqrt(-2.0 * _log1pmx(mu))
    near = np.abs(eta) < 0.05
    safe_eta = np.where(near, 1.0, eta)
    safe_mu = np.where(near, 1.0, mu)
    c0 = np.where(near, _polynomial(_C0_TAYLOR, eta), 1.0 / safe_mu - 1.0 / safe_eta)
    closed_c1 = safe_eta**-3.0 - safe_mu**-3.0 - safe_mu**-2.0 - 1.0 / (12.0 * safe_mu)
    c1 = np.where(near, _polynomial(_C1_TAYLOR, eta), closed_c1)
    with np.errstate(under="ignore"):
        rest = np.exp(-0.5 * a * eta * eta) / np.sqrt(2.0 * math.pi * a) * (c0 + c1 / a)
    scaled = eta * np.sqrt(0.5 * a)
    return 0.5 * _erfc_f64(-scaled) - rest, 0.5 * _erfc_f64(scaled) + rest


def _igamma_pair(a: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(P(a, x), Q(a, x)) in float64, broadcast; the boundary values are PyTorch's."""
    a, x = np.broadcast_arrays(np.asarray(a, np.float64), np.asarray(x, np.float64))
    p = np.full(a.shape, np.nan)
    q = np.full(a.shape, np.nan)
    # boundaries, in PyTorch's order of tests (a comparison with nan is false)
    decided = (x < 0) | (a < 0)
    zero_a = ~decided & (a == 0)
    p[zero_a & (x > 0)], q[zero_a & (x > 0)] = 1.0, 0.0
    decided |= zero_a
    zero_x = ~decided & (x == 0)
    p[zero_x], q[zero_x] = 0.0, 1.0
    decided |= zero_x
    inf_a = ~decided & np.isinf(a)
    finite_x = inf_a & ~np.isinf(x)
    p[finite_x], q[finite_x] = 0.0, 1.0
    decided |= inf_a
    inf_x = ~decided & np.isinf(x)
    p[inf_x], q[inf_x] = 1.0, 0.0
    decided |= inf_x | np.isnan(a) | np.isnan(x)

    todo = ~decided
    temme = todo & (a > _TEMME_FROM) & (np.abs(x - a) < _TEMME_SPREAD * a)
    if temme.any():
        p[temme], q[temme] = _temme(a[temme], x[temme])
    series = todo & ~temme & (x < a + 1.0)
    if series.any():
        p[series] = _p_series(a[series], x[series])
        q[series] = 1.0 - p[series]
        small_a = series & (a < 1.0)
        q[small_a] = _q_small_a(a[small_a], x[small_a])
    fraction = todo & ~temme & ~series
    if fraction.any():
        q[fraction] = _q_fraction(a[fraction], x[fraction])
        p[fraction] = 1.0 - q[fraction]
    return p, q


def np_igamma(a, x) -> np.ndarray:
    """The regularized lower incomplete gamma function P(a, x), in float64."""
    return _igamma_pair(a, x)[0]


def np_igammac(a, x) -> np.ndarray:
    """The regularized upper incomplete gamma function Q(a, x), in float64."""
    return _igamma_pair(a, x)[1]


# ------------------------------------------------------------------------------ the ops


def _result_dtype(name: str, a: Tensor, x: Tensor) -> dt.dtype:
    for position, (argument, value) in enumerate((("input", a), ("other", x)), start=1):
        if not isinstance(value, Tensor):
            raise TypeError(
                f"{name}(): argument '{argument}' (position {position}) must be Tensor, "
                f"not {type(value).__name__}"
            )
    d = binary_dtype(a, x)
    if not d.is_floating_point:
        raise NotImplementedError(f"\"{name}_cpu\" not implemented for '{torch_type_name(d)}'")
    return d


def _incomplete_gamma_op(name: str, np_fn, sign: float):
    """``name``(a, x) over ``np_fn``; the derivative in x is ``sign`` x^(a-1) e^-x / Gamma(a),
    in a it is not implemented (PyTorch's message)."""

    op = defop(_schema, name=name, kind="pointwise")

    @op.register_kernel
    def kernel(a, x):
        d = _result_dtype(name, a, x)
        cd = compute_np_dtype(d)
        out = np_fn(as_np_operand(a, cd), as_np_operand(x, cd))
        return wrap(iterator_layout(out, (a, x), d), d)

    def meta(a, x):
        d = _result_dtype(name, a, x)
        return pointwise_meta(d, a, x, common_dtype=d)  # (integers promoted to d first)

    op.register_meta(meta)

    def derivative(c, g):
        a, x = c.args
        if needs_grad(c, 0):
            raise NotImplementedError(f"the derivative for '{name}: input' is not implemented.")
        density = ((a - 1) * x.log() - x - lgamma(a)).exp()
        return None, g * density * sign

    op.register_derivative(derivative)
    return op


def _schema(self: Tensor, other: Tensor): ...


igamma = _incomplete_gamma_op("igamma", np_igamma, 1.0)
igammac = _incomplete_gamma_op("igammac", np_igammac, -1.0)
