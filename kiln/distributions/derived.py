"""Distributions defined as a transformed base distribution: ``Pareto`` (an exponential's exp,
scaled), ``Weibull`` (a unit exponential to a power, scaled), ``InverseGamma`` (a gamma's
reciprocal) and ``HalfCauchy`` (a Cauchy's absolute value). Sampling, ``log_prob``, ``cdf`` and
``icdf`` come from ``TransformedDistribution``; the moments, mode and entropy are their closed
forms (PyTorch's conventions: an undefined mean or variance is inf)."""

from __future__ import annotations

import math

from ..ops.public import digamma, exp, full_like, lgamma, ones_like, where
from ..runtime.tensor import Size
from . import constraints
from .continuous import _EULER, Cauchy, Exponential, Gamma
from .transformed import TransformedDistribution
from .transforms import AbsTransform, AffineTransform, ExpTransform, PowerTransform
from .utils import broadcast_all

__all__ = ["HalfCauchy", "InverseGamma", "Pareto", "Weibull"]


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
