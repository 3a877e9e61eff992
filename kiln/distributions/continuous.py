"""Scalar continuous distributions: location-scale families (Normal, Laplace, Cauchy, Gumbel,
LogNormal, HalfNormal, StudentT), Uniform, Exponential and the gamma family (Gamma, Chi2, Beta).

Location-scale samples are ``loc + scale * noise``, so ``rsample`` is differentiable in both
parameters. Gamma-family samples come from numpy's samplers (keyed by the default generator);
their ``rsample`` is differentiable in the rate/scale directly and in the concentration by
implicit reparameterization (``_standard_gamma``), as PyTorch's are.
"""

from __future__ import annotations

import math

from kiln.runtime.tensor import Size

from ..ops import public
from ..ops.public import (
    as_tensor,
    atan,
    digamma,
    erf,
    erfinv,
    exp,
    expm1,
    finfo,
    full,
    igamma,
    igammac,
    is_grad_enabled,
    lgamma,
    log,
    log1p,
    lt,
    no_grad,
    normal,
    randn,
    rsqrt,
    tan,
    where,
    xlogy,
    zeros_like,
)
from ..runtime.compiling import is_compiling
from . import constraints
from .distribution import Distribution
from .exp_family import ExponentialFamily
from .utils import broadcast_all, numpy_sample

_EMPTY = Size()  # the default sample/batch shape (a tuple: safe to share)

__all__ = [
    "Beta",
    "Cauchy",
    "Chi2",
    "Exponential",
    "Gamma",
    "Gumbel",
    "HalfNormal",
    "Laplace",
    "LogNormal",
    "Normal",
    "StudentT",
    "Uniform",
]

_LOG_SQRT_2PI = math.log(math.sqrt(2 * math.pi))
_EULER = 0.57721566490153286060


class _LocScale(Distribution):
    """A family ``loc + scale * standard`` with ``loc`` real and ``scale`` positive."""

    arg_constraints = {"loc": constraints.real, "scale": constraints.positive}
    support = constraints.real
    has_rsample = True

    def __init__(self, loc, scale, validate_args=None):
        self.loc, self.scale = broadcast_all(loc, scale)
        batch_shape = self.loc.size()
        super().__init__(batch_shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        return self._expand_params(type(self), batch_shape, ("loc", "scale"), _instance)

    def _noise(self, shape):
        raise NotImplementedError

    def rsample(self, sample_shape=_EMPTY):
        shape = self._extended_shape(sample_shape)
        return self.loc + self._noise(shape) * self.scale


class Normal(_LocScale, ExponentialFamily):
    """The Gaussian N(loc, scale^2)."""

    _mean_carrier_measure = 0

    @property
    def mean(self):
        return self.loc

    @property
    def mode(self):
        return self.loc

    @property
    def stddev(self):
        return self.scale

    @property
    def variance(self):
        return self.stddev.pow(2)

    def _noise(self, shape):
        return randn(shape, dtype=self.loc.dtype, device=self.loc.device)

    def sample(self, sample_shape=_EMPTY):
        shape = self._extended_shape(sample_shape)
        with no_grad():
            return normal(self.loc.expand(shape), self.scale.expand(shape))

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        var = self.scale**2
        return -((value - self.loc) ** 2) / (2 * var) - self.scale.log() - _LOG_SQRT_2PI

    def cdf(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return 0.5 * (1 + erf((value - self.loc) * self.scale.reciprocal() / math.sqrt(2)))

    def icdf(self, value):
        return self.loc + self.scale * erfinv(2 * value - 1) * math.sqrt(2)

    def entropy(self):
        return 0.5 + 0.5 * math.log(2 * math.pi) + log(self.scale)

    @property
    def _natural_params(self):
        return (self.loc / self.scale.pow(2), -0.5 * self.scale.pow(2).reciprocal())

    def _log_normalizer(self, x, y):
        return -0.25 * x.pow(2) / y + 0.5 * log(-math.pi / y)


class Laplace(_LocScale):
    """The double exponential: density exp(-|x - loc| / scale) / (2 scale)."""

    @property
    def mean(self):
        return self.loc

    @property
    def mode(self):
        return self.loc

    @property
    def variance(self):
        return 2 * self.scale.pow(2)

    @property
    def stddev(self):
        return math.sqrt(2) * self.scale

    def _noise(self, shape):
        eps = finfo(self.loc.dtype).eps
        u = public.rand(shape, dtype=self.loc.dtype, device=self.loc.device) * (2 - eps) - (1 - eps)
        return -u.sign() * log1p(-u.abs())

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return -log(2 * self.scale) - public.abs(value - self.loc) / self.scale

    def cdf(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return 0.5 - 0.5 * (value - self.loc).sign() * expm1(-(value - self.loc).abs() / self.scale)

    def icdf(self, value):
        term = value - 0.5
        return self.loc - self.scale * term.sign() * log1p(-2 * term.abs())

    def entropy(self):
        return 1 + log(2 * self.scale)


class Cauchy(_LocScale):
    """The Lorentz distribution; mean and variance are undefined (NaN and inf, as PyTorch)."""

    @property
    def mean(self):
        return full(self._extended_shape(), math.nan, dtype=self.loc.dtype)

    @property
    def mode(self):
        return self.loc

    @property
    def variance(self):
        return full(self._extended_shape(), math.inf, dtype=self.loc.dtype)

    def _noise(self, shape):
        u = public.rand(shape, dtype=self.loc.dtype, device=self.loc.device)
        return tan(math.pi * (u - 0.5))

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return (
            -math.log(math.pi) - self.scale.log() - (((value - self.loc) / self.scale) ** 2).log1p()
        )

    def cdf(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return atan((value - self.loc) / self.scale) / math.pi + 0.5

    def icdf(self, value):
        return tan(math.pi * (value - 0.5)) * self.scale + self.loc

    def entropy(self):
        return math.log(4 * math.pi) + self.scale.log()


class Gumbel(_LocScale):
    """The type-I extreme value distribution."""

    @property
    def mean(self):
        return self.loc + self.scale * _EULER

    @property
    def mode(self):
        return self.loc

    @property
    def stddev(self):
        return (math.pi / math.sqrt(6)) * self.scale

    @property
    def variance(self):
        return self.stddev.pow(2)

    def _noise(self, shape):
        tiny = finfo(self.loc.dtype).tiny
        u = public.rand(shape, dtype=self.loc.dtype, device=self.loc.device).clamp(min=tiny)
        return -log(-log(u).clamp(max=-tiny))

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        z = (value - self.loc) / self.scale
        return -(z + exp(-z)) - self.scale.log()

    def cdf(self, value):
        return exp(-exp(-(value - self.loc) / self.scale))

    def icdf(self, value):
        return self.loc - self.scale * log(-log(value))

    def entropy(self):
        return self.scale.log() + (1 + _EULER)


class LogNormal(_LocScale):
    """exp of a Normal(loc, scale) variable (not a ``Normal`` subclass, so KL and isinstance
    dispatch treat it as its own family, as PyTorch does)."""

    arg_constraints = {"loc": constraints.real, "scale": constraints.positive}
    support = constraints.positive

    @property
    def mean(self):
        return (self.loc + self.scale.pow(2) / 2).exp()

    @property
    def mode(self):
        return (self.loc - self.scale.square()).exp()

    @property
    def stddev(self):
        return self.variance.sqrt()

    @property
    def variance(self):
        scale_sq = self.scale.pow(2)
        return scale_sq.expm1() * (2 * self.loc + scale_sq).exp()

    def _noise(self, shape):
        return randn(shape, dtype=self.loc.dtype, device=self.loc.device)

    def rsample(self, sample_shape=_EMPTY):
        return super().rsample(sample_shape).exp()

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        y = value.log()
        return -((y - self.loc) ** 2) / (2 * self.scale**2) - self.scale.log() - _LOG_SQRT_2PI - y

    def cdf(self, value):
        if self._validate_args:
            self._validate_sample(value)
        z = (value.log() - self.loc) * self.scale.reciprocal() / math.sqrt(2)
        return 0.5 * (1 + erf(z))

    def icdf(self, value):
        return (self.loc + self.scale * erfinv(2 * value - 1) * math.sqrt(2)).exp()

    def entropy(self):
        return 0.5 + 0.5 * math.log(2 * math.pi) + log(self.scale) + self.loc


class HalfNormal(Distribution):
    """|X| for X ~ Normal(0, scale)."""

    arg_constraints = {"scale": constraints.positive}
    support = constraints.nonnegative
    has_rsample = True

    def __init__(self, scale, validate_args=None):
        (self.scale,) = broadcast_all(scale)
        batch = self.scale.size()
        super().__init__(batch, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        return self._expand_params(HalfNormal, batch_shape, ("scale",), _instance)

    @property
    def mean(self):
        return self.scale * math.sqrt(2 / math.pi)

    @property
    def mode(self):
        return zeros_like(self.scale)

    @property
    def variance(self):
        return self.scale.pow(2) * (1 - 2 / math.pi)

    def rsample(self, sample_shape=_EMPTY):
        shape = self._extended_shape(sample_shape)
        noise = randn(shape, dtype=self.scale.dtype, device=self.scale.device)
        return (noise * self.scale).abs()

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        lp = -(value**2) / (2 * self.scale**2) - self.scale.log() - _LOG_SQRT_2PI + math.log(2)
        return where(value >= 0, lp, -math.inf)

    def cdf(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return 2 * (0.5 * (1 + erf(value / (self.scale * math.sqrt(2))))) - 1

    def icdf(self, value):
        return self.scale * erfinv(value) * math.sqrt(2)

    def entropy(self):
        return 0.5 * math.log(math.pi / 2) + self.scale.log() + 0.5


class Uniform(Distribution):
    """Uniform on the half-open interval [low, high)."""

    arg_constraints = {
        "low": constraints.dependent(is_discrete=False, event_dim=0),
        "high": constraints.dependent(is_discrete=False, event_dim=0),
    }
    has_rsample = True

    def __init__(self, low, high, validate_args=None):
        self.low, self.high = broadcast_all(low, high)
        batch = self.low.size()
        super().__init__(batch, validate_args=validate_args)
        if self._validate_args and not is_compiling():
            if not bool(lt(self.low, self.high).all()):
                raise ValueError("Uniform is not defined when low>= high")

    def expand(self, batch_shape, _instance=None):
        return self._expand_params(Uniform, batch_shape, ("low", "high"), _instance)

    @constraints.dependent_property(is_discrete=False, event_dim=0)
    def support(self):
        return constraints.interval(self.low, self.high)

    @property
    def mean(self):
        return (self.high + self.low) / 2

    @property
    def mode(self):
        return math.nan * self.high

    @property
    def stddev(self):
        return (self.high - self.low) / 12**0.5

    @property
    def variance(self):
        return (self.high - self.low).pow(2) / 12

    def rsample(self, sample_shape=_EMPTY):
        shape = self._extended_shape(sample_shape)
        rand = public.rand(shape, dtype=self.low.dtype, device=self.low.device)
        return self.low + rand * (self.high - self.low)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        lb = self.low.le(value).type_as(self.low)
        ub = self.high.gt(value).type_as(self.low)
        return log(lb.mul(ub)) - log(self.high - self.low)

    def cdf(self, value):
        if self._validate_args:
            self._validate_sample(value)
        result = (value - self.low) / (self.high - self.low)
        return result.clamp(min=0, max=1)

    def icdf(self, value):
        return value * (self.high - self.low) + self.low

    def entropy(self):
        return log(self.high - self.low)


class Exponential(ExponentialFamily):
    """Density rate * exp(-rate * x) on x >= 0."""

    _mean_carrier_measure = 0

    arg_constraints = {"rate": constraints.positive}
    support = constraints.nonnegative
    has_rsample = True

    def __init__(self, rate, validate_args=None):
        (self.rate,) = broadcast_all(rate)
        batch = self.rate.size()
        super().__init__(batch, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        return self._expand_params(Exponential, batch_shape, ("rate",), _instance)

    @property
    def mean(self):
        return self.rate.reciprocal()

    @property
    def mode(self):
        return zeros_like(self.rate)

    @property
    def stddev(self):
        return self.rate.reciprocal()

    @property
    def variance(self):
        return self.rate.pow(-2)

    def rsample(self, sample_shape=_EMPTY):
        shape = self._extended_shape(sample_shape)
        u = public.rand(shape, dtype=self.rate.dtype, device=self.rate.device)
        return -log1p(-u) / self.rate

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return self.rate.log() - self.rate * value

    def cdf(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return 1 - exp(-self.rate * value)

    def icdf(self, value):
        return -log1p(-value) / self.rate

    def entropy(self):
        return 1.0 - log(self.rate)

    @property
    def _natural_params(self):
        return (-self.rate,)

    def _log_normalizer(self, x):
        return -log(-x)


def _standard_gamma(concentration, shape):
    """Gamma(concentration, 1) samples of ``shape``, differentiable in the concentration by
    implicit reparameterization (Figurnov et al., 2018): a sample moves with alpha so that its
    quantile u = P(alpha, x) stays put, dx/dalpha = -(dP/dalpha) / p(x; alpha)."""
    with no_grad():
        alpha = concentration.expand(shape).detach().cpu().double().numpy()
        draw = numpy_sample(shape, concentration.dtype, concentration.device,
                            lambda rng, s: rng.standard_gamma(alpha, size=s))  # fmt: skip
        draw = draw.clamp(min=finfo(concentration.dtype).tiny)
    if not (concentration.requires_grad and is_grad_enabled()):
        return draw
    alpha = concentration.expand(shape)
    with no_grad():
        slope = _gamma_sample_slope(alpha.detach().double(), draw.double()).to(draw.dtype)
    # the value is the draw; the gradient in alpha is the slope
    return draw + (alpha - alpha.detach()) * slope


def _gamma_sample_slope(alpha, x):
    """dx/dalpha at a fixed quantile, in float64. dP/dalpha is a central difference (relative
    step 1e-5) of the regularized incomplete gamma function, taken on the lower tail P where
    P < 1/2 and on the upper tail Q = 1 - P elsewhere, so a tail sample keeps its digits. Where
    the tail underflows, its leading term stands in: P ~ x^a e^-x / Gamma(a + 1) far below
    the mode (with its first correction, 1 + x / (a + 1)) gives the slope from P / density =
    (x / a)(1 + x / (a + 1)) and dlog P / da = log x - digamma(a + 1) - x / (a + 1)^2;
    Q ~ x^(a-1) e^-x / Gamma(a) (1 + (a - 1) / x) far above it gives
    (1 + (a - 1) / x)(log x - digamma(a)) + 1 / x."""
    step = alpha * 1e-5
    lower_cdf = igamma(alpha, x)
    lower = lower_cdf < 0.5
    upper_cdf = igammac(alpha, x)
    d_lower = (igamma(alpha + step, x) - igamma(alpha - step, x)) / (2 * step)
    d_upper = (igammac(alpha + step, x) - igammac(alpha - step, x)) / (2 * step)
    log_density = xlogy(alpha - 1, x) - x - lgamma(alpha)
    slope = -where(lower, d_lower, -d_upper) / log_density.exp()
    ratio = x / (alpha + 1)
    far_below = -(x / alpha) * (1 + ratio) * (x.log() - digamma(alpha + 1) - ratio / (alpha + 1))
    far_above = (1 + (alpha - 1) / x) * (x.log() - digamma(alpha)) + x.reciprocal()
    slope = where(lower & (lower_cdf == 0), far_below, slope)
    return where(~lower & (upper_cdf == 0), far_above, slope)


class Gamma(ExponentialFamily):
    """Density rate^a x^(a-1) exp(-rate x) / Gamma(a), shape ``concentration`` = a."""

    _mean_carrier_measure = 0

    arg_constraints = {"concentration": constraints.positive, "rate": constraints.positive}
    support = constraints.nonnegative
    has_rsample = True

    def __init__(self, concentration, rate, validate_args=None):
        self.concentration, self.rate = broadcast_all(concentration, rate)
        batch = self.concentration.size()
        super().__init__(batch, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        return self._expand_params(Gamma, batch_shape, ("concentration", "rate"), _instance)

    @property
    def mean(self):
        return self.concentration / self.rate

    @property
    def mode(self):
        return ((self.concentration - 1) / self.rate).clamp(min=0)

    @property
    def variance(self):
        return self.concentration / self.rate.pow(2)

    def rsample(self, sample_shape=_EMPTY):
        shape = self._extended_shape(sample_shape)
        return _standard_gamma(self.concentration, shape) / self.rate.expand(shape)

    def log_prob(self, value):
        value = as_tensor(value, dtype=self.rate.dtype, device=self.rate.device)
        if self._validate_args:
            self._validate_sample(value)
        return (
            xlogy(self.concentration, self.rate)
            + xlogy(self.concentration - 1, value)
            - self.rate * value
            - lgamma(self.concentration)
        )

    def cdf(self, value):
        """P(concentration, rate x): PyTorch differentiates it in the rate and x only."""
        value = as_tensor(value, dtype=self.rate.dtype, device=self.rate.device)
        if self._validate_args:
            self._validate_sample(value)
        return igamma(self.concentration, self.rate * value)

    def entropy(self):
        c = self.concentration
        return c - log(self.rate) + lgamma(c) + (1.0 - c) * digamma(c)

    @property
    def _natural_params(self):
        return (self.concentration - 1, -self.rate)

    def _log_normalizer(self, x, y):
        return lgamma(x + 1) + (x + 1) * log(-y.reciprocal())


class Chi2(Gamma):
    """Gamma(df / 2, 1 / 2)."""

    arg_constraints = {"df": constraints.positive}

    def __init__(self, df, validate_args=None):
        (df,) = broadcast_all(df)
        super().__init__(0.5 * df, 0.5, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(Chi2, _instance)
        return super().expand(batch_shape, new)

    @property
    def df(self):
        return self.concentration * 2


class StudentT(Distribution):
    """Student's t with ``df`` degrees of freedom, shifted by ``loc`` and scaled by ``scale``."""

    arg_constraints = {
        "df": constraints.positive,
        "loc": constraints.real,
        "scale": constraints.positive,
    }
    support = constraints.real
    has_rsample = True

    def __init__(self, df, loc=0.0, scale=1.0, validate_args=None):
        self.df, self.loc, self.scale = broadcast_all(df, loc, scale)
        super().__init__(self.df.size(), validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        return self._expand_params(StudentT, batch_shape, ("df", "loc", "scale"), _instance)

    @property
    def mean(self):
        m = self.loc.clone()
        return where(self.df <= 1, math.nan, m)

    @property
    def mode(self):
        return self.loc

    @property
    def variance(self):
        m = self.scale.pow(2) * self.df / (self.df - 2)
        m = where(self.df <= 2, math.inf, m)
        return where(self.df <= 1, math.nan, m)

    def rsample(self, sample_shape=_EMPTY):
        shape = self._extended_shape(sample_shape)
        x = randn(shape, dtype=self.df.dtype, device=self.df.device)
        z = _standard_gamma(0.5 * self.df, shape) * 2  # chi-square(df)
        y = x * rsqrt(z / self.df)
        return self.loc + self.scale * y

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        y = (value - self.loc) / self.scale
        z = (
            self.scale.log()
            + 0.5 * self.df.log()
            + 0.5 * math.log(math.pi)
            + lgamma(0.5 * self.df)
            - lgamma(0.5 * (self.df + 1.0))
        )
        return -0.5 * (self.df + 1.0) * log1p(y**2.0 / self.df) - z

    def entropy(self):
        df = self.df
        lbeta = lgamma(0.5 * df) + math.lgamma(0.5) - lgamma(0.5 * (df + 1))
        return (
            self.scale.log()
            + 0.5 * (df + 1) * (digamma(0.5 * (df + 1)) - digamma(0.5 * df))
            + 0.5 * df.log()
            + lbeta
        )


class Beta(ExponentialFamily):
    """Density x^(a-1) (1-x)^(b-1) / B(a, b) on [0, 1]; a = concentration1, b = concentration0."""

    arg_constraints = {
        "concentration1": constraints.positive,
        "concentration0": constraints.positive,
    }
    support = constraints.unit_interval
    has_rsample = True

    def __init__(self, concentration1, concentration0, validate_args=None):
        self.concentration1, self.concentration0 = broadcast_all(concentration1, concentration0)
        batch = self.concentration1.size()
        super().__init__(batch, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        return self._expand_params(
            Beta, batch_shape, ("concentration1", "concentration0"), _instance
        )

    @property
    def mean(self):
        return self.concentration1 / (self.concentration1 + self.concentration0)

    @property
    def mode(self):
        # the Dirichlet mode of (a, b), first coordinate: (a-1)+ / ((a-1)+ + (b-1)+); when both
        # are below 1 PyTorch picks the first corner (1)
        a1 = (self.concentration1 - 1).clamp(min=0)
        b1 = (self.concentration0 - 1).clamp(min=0)
        mode = a1 / (a1 + b1)
        both_small = (self.concentration1 < 1) & (self.concentration0 < 1)
        return where(both_small, 1.0, mode)

    @property
    def variance(self):
        total = self.concentration1 + self.concentration0
        return self.concentration1 * self.concentration0 / (total.pow(2) * (total + 1))

    def rsample(self, sample_shape=_EMPTY):
        shape = self._extended_shape(sample_shape)
        x = _standard_gamma(self.concentration1, shape)
        y = _standard_gamma(self.concentration0, shape)
        return x / (x + y)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        a, b = self.concentration1, self.concentration0
        return xlogy(a - 1, value) + xlogy(b - 1, 1 - value) + lgamma(a + b) - lgamma(a) - lgamma(b)

    def entropy(self):
        a, b = self.concentration1, self.concentration0
        total = a + b
        lbeta = lgamma(a) + lgamma(b) - lgamma(total)
        return lbeta - (a - 1) * digamma(a) - (b - 1) * digamma(b) + (total - 2) * digamma(total)

    @property
    def _natural_params(self):
        return (self.concentration1, self.concentration0)

    def _log_normalizer(self, x, y):
        return lgamma(x) + lgamma(y) - lgamma(x + y)
