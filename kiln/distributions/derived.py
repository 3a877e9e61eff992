"""Distributions defined as a transformed base distribution: ``Pareto`` (an exponential's exp,
scaled), ``Weibull`` (a unit exponential to a power, scaled), ``InverseGamma`` (a gamma's
reciprocal) and ``HalfCauchy`` (a Cauchy's absolute value). Sampling, ``log_prob``, ``cdf`` and
``icdf`` come from ``TransformedDistribution``; the moments, mode and entropy are their closed
forms (PyTorch's conventions: an undefined mean or variance is inf). ``Kumaraswamy`` (a uniform
through powers) and ``FisherSnedecor`` (a ratio of gammas, a plain ``Distribution``) too."""

from __future__ import annotations

import math

from ..ops.public import (
    digamma,
    exp,
    finfo,
    full_like,
    lgamma,
    log,
    log1p,
    ones_like,
    where,
    zeros_like,
)
from ..runtime.tensor import Size
from . import constraints
from .continuous import _EMPTY, _EULER, Cauchy, Exponential, Gamma, Uniform
from .distribution import Distribution
from .transformed import TransformedDistribution
from .transforms import AbsTransform, AffineTransform, ExpTransform, PowerTransform
from .utils import broadcast_all

__all__ = ["FisherSnedecor", "HalfCauchy", "InverseGamma", "Kumaraswamy", "Pareto", "Weibull"]


class Pareto(TransformedDistribution):
    """Density ``alpha * scale**alpha / x**(alpha + 1)`` for ``x >= scale``: ``scale * exp(E)``
    with ``E ~ Exponential(alpha)``."""

    arg_constraints = {"alpha": constraints.positive, "scale": constraints.positive}

    def __init__(self, scale, alpha, validate_args=None):
        self.scale, self.alpha = broadcast_all(scale, alpha)
        base = Exponential(self.alpha, validate_args=validate_args)
        transforms = [ExpTransform(), AffineTransform(loc=0, scale=self.scale)]
        super().__init__(base, transforms, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(Pareto, _instance)
        new.scale = self.scale.expand(Size(batch_shape))
        new.alpha = self.alpha.expand(Size(batch_shape))
        return super().expand(batch_shape, _instance=new)

    @property
    def mean(self):
        a = self.alpha.clamp(min=1)  # alpha <= 1: 1 / 0 = inf, as PyTorch's
        return a * self.scale / (a - 1)

    @property
    def mode(self):
        return self.scale

    @property
    def variance(self):
        a = self.alpha.clamp(min=2)
        return self.scale.pow(2) * a / ((a - 1).pow(2) * (a - 2))

    @constraints.dependent_property(is_discrete=False, event_dim=0)
    def support(self):
        return constraints.greater_than_eq(self.scale)

    def entropy(self):
        return (self.scale / self.alpha).log() + (1 + self.alpha.reciprocal())


class Weibull(TransformedDistribution):
    """``scale * E**(1 / concentration)`` with ``E ~ Exponential(1)``."""

    arg_constraints = {"scale": constraints.positive, "concentration": constraints.positive}
    support = constraints.positive

    def __init__(self, scale, concentration, validate_args=None):
        self.scale, self.concentration = broadcast_all(scale, concentration)
        self.concentration_reciprocal = self.concentration.reciprocal()
        base = Exponential(ones_like(self.scale), validate_args=validate_args)
        transforms = [
            PowerTransform(exponent=self.concentration_reciprocal),
            AffineTransform(loc=0, scale=self.scale),
        ]
        super().__init__(base, transforms, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(Weibull, _instance)
        batch_shape = Size(batch_shape)
        scale, concentration = (
            self.scale.expand(batch_shape),
            self.concentration.expand(batch_shape),
        )
        Weibull.__init__(new, scale, concentration, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @property
    def mean(self):
        return self.scale * exp(lgamma(1 + self.concentration_reciprocal))

    @property
    def mode(self):
        k = self.concentration  # NaN for k < 1 (a negative base), as PyTorch's
        return self.scale * ((k - 1) / k).pow(k.reciprocal())

    @property
    def variance(self):
        first = exp(2 * lgamma(1 + self.concentration_reciprocal))
        second = exp(lgamma(1 + 2 * self.concentration_reciprocal))
        return self.scale.pow(2) * (second - first)

    def entropy(self):
        return (
            _EULER * (1 - self.concentration_reciprocal)
            + (self.scale * self.concentration_reciprocal).log()
            + 1
        )


class InverseGamma(TransformedDistribution):
    """``1 / Y`` with ``Y ~ Gamma(concentration, rate)``."""

    arg_constraints = {"concentration": constraints.positive, "rate": constraints.positive}
    support = constraints.positive
    has_rsample = True

    def __init__(self, concentration, rate, validate_args=None):
        base = Gamma(concentration, rate, validate_args=validate_args)
        neg_one = -ones_like(base.rate)
        super().__init__(base, PowerTransform(neg_one), validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(InverseGamma, _instance)
        return super().expand(batch_shape, _instance=new)

    @property
    def concentration(self):
        return self.base_dist.concentration

    @property
    def rate(self):
        return self.base_dist.rate

    @property
    def mean(self):
        result = self.rate / (self.concentration - 1)
        return where(self.concentration > 1, result, math.inf)

    @property
    def mode(self):
        return self.rate / (self.concentration + 1)

    @property
    def variance(self):
        c = self.concentration
        result = self.rate.pow(2) / ((c - 1).pow(2) * (c - 2))
        return where(c > 2, result, math.inf)

    def entropy(self):
        c = self.concentration
        return c + self.rate.log() + lgamma(c) - (1 + c) * digamma(c)


class HalfCauchy(TransformedDistribution):
    """``|X|`` with ``X ~ Cauchy(0, scale)``."""

    arg_constraints = {"scale": constraints.positive}
    support = constraints.nonnegative
    has_rsample = True

    def __init__(self, scale, validate_args=None):
        base = Cauchy(0, scale, validate_args=False)
        super().__init__(base, AbsTransform(), validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(HalfCauchy, _instance)
        return super().expand(batch_shape, _instance=new)

    @property
    def scale(self):
        return self.base_dist.scale

    @property
    def mean(self):
        return full_like(self.scale, math.inf)

    @property
    def mode(self):
        return 0 * self.scale

    @property
    def variance(self):
        return full_like(self.scale, math.inf)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        value = value.to(self.scale.dtype) if hasattr(value, "to") else value
        log_prob = self.base_dist.log_prob(value) + math.log(2)
        return where(value >= 0, log_prob, -math.inf)

    def cdf(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return 2 * self.base_dist.cdf(value) - 1

    def icdf(self, prob):
        return self.base_dist.icdf((prob + 1) / 2)

    def entropy(self):
        return self.base_dist.entropy() - math.log(2)


class Kumaraswamy(TransformedDistribution):
    """Density ``a b x**(a-1) (1 - x**a)**(b-1)`` on [0, 1] (a = concentration1,
    b = concentration0): ``(1 - U**(1/b))**(1/a)`` with ``U ~ Uniform(0, 1)``."""

    arg_constraints = {
        "concentration1": constraints.positive,
        "concentration0": constraints.positive,
    }
    support = constraints.unit_interval
    has_rsample = True

    def __init__(self, concentration1, concentration0, validate_args=None):
        self.concentration1, self.concentration0 = broadcast_all(concentration1, concentration0)
        base = Uniform(
            zeros_like(self.concentration0), ones_like(self.concentration0), validate_args
        )
        transforms = [
            PowerTransform(exponent=self.concentration0.reciprocal()),
            AffineTransform(loc=1.0, scale=-1.0),
            PowerTransform(exponent=self.concentration1.reciprocal()),
        ]
        super().__init__(base, transforms, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(Kumaraswamy, _instance)
        new.concentration1 = self.concentration1.expand(Size(batch_shape))
        new.concentration0 = self.concentration0.expand(Size(batch_shape))
        return super().expand(batch_shape, _instance=new)

    def _moment(self, n):
        """``E[X**n] = b B(1 + n/a, b)``."""
        a, b = self.concentration1, self.concentration0
        k = 1 + n / a
        return b * exp(lgamma(k) + lgamma(b) - lgamma(k + b))

    @property
    def mean(self):
        return self._moment(1)

    @property
    def mode(self):
        a, b = self.concentration1, self.concentration0
        mode = ((a - 1) / (a * b - 1)).pow(a.reciprocal())
        return where((a < 1) | (b < 1), float("nan"), mode)

    @property
    def variance(self):
        return self._moment(2) - self._moment(1).pow(2)

    def entropy(self):
        a, b = self.concentration1, self.concentration0
        harmonic_b = digamma(b + 1) + _EULER
        return (1 - b.reciprocal()) + (1 - a.reciprocal()) * harmonic_b - log(a * b)


class FisherSnedecor(Distribution):
    """The F distribution: ``(X1 / df1) / (X2 / df2)`` for chi-square ``X1``, ``X2``."""

    arg_constraints = {"df1": constraints.positive, "df2": constraints.positive}
    support = constraints.positive
    has_rsample = True

    def __init__(self, df1, df2, validate_args=None):
        self.df1, self.df2 = broadcast_all(df1, df2)
        self._gamma1 = Gamma(self.df1 * 0.5, self.df1)
        self._gamma2 = Gamma(self.df2 * 0.5, self.df2)
        super().__init__(self.df1.size(), validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(FisherSnedecor, _instance)
        batch_shape = Size(batch_shape)
        FisherSnedecor.__init__(
            new, self.df1.expand(batch_shape), self.df2.expand(batch_shape), validate_args=False
        )
        new._validate_args = self._validate_args
        return new

    @property
    def mean(self):
        df2 = self.df2
        return where(df2 > 2, df2 / (df2 - 2), float("nan"))

    @property
    def mode(self):
        df1, df2 = self.df1, self.df2
        return where(df1 > 2, (df1 - 2) / df1 * df2 / (df2 + 2), float("nan"))

    @property
    def variance(self):
        df1, df2 = self.df1, self.df2
        value = 2 * df2.pow(2) * (df1 + df2 - 2) / (df1 * (df2 - 2).pow(2) * (df2 - 4))
        return where(df2 > 4, value, float("nan"))

    def rsample(self, sample_shape=_EMPTY):
        shape = self._extended_shape(sample_shape)
        # Gamma(df/2, df) is chi-square(df) / (2 df): the 2s cancel in the ratio
        x1 = self._gamma1.rsample(sample_shape).view(shape)
        x2 = self._gamma2.rsample(sample_shape).view(shape)
        tiny = finfo(x2.dtype).tiny
        x2 = x2.clamp(min=tiny)
        return (x1 / x2).clamp(min=tiny)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        half1, half2 = self.df1 * 0.5, self.df2 * 0.5
        ratio = self.df1 / self.df2
        norm = lgamma(half1 + half2) - lgamma(half1) - lgamma(half2)
        return (
            norm
            + half1 * log(ratio)
            + (half1 - 1) * log(value)
            - (half1 + half2) * log1p(ratio * value)
        )
