"""``GeneralizedPareto``: the law of exceedances over a high threshold (peaks-over-threshold
tail models). ``concentration`` xi sets the tail: xi = 0 is an exponential, xi > 0 a Pareto
tail, xi < 0 a bounded support ending at loc - scale / xi. The closed forms divide by xi, so
each has an xi = 0 branch, chosen with ``isclose`` as PyTorch's (and TensorFlow
Probability's)."""

from __future__ import annotations

import math

from ..ops.public import (
    broadcast_to,
    expm1,
    isclose,
    log,
    log1p,
    ones_like,
    rand,
    where,
    zeros_like,
)
from ..runtime.tensor import Size
from . import constraints
from .distribution import Distribution
from .utils import broadcast_all

__all__ = ["GeneralizedPareto"]

_EMPTY = Size()


class GeneralizedPareto(Distribution):
    """Location ``loc``, scale ``scale`` > 0 and shape ``concentration``; samples are the icdf
    of uniforms, so ``rsample`` is differentiable in all three."""

    arg_constraints = {
        "loc": constraints.real,
        "scale": constraints.positive,
        "concentration": constraints.real,
    }
    has_rsample = True

    def __init__(self, loc, scale, concentration, validate_args=None):
        self.loc, self.scale, self.concentration = broadcast_all(loc, scale, concentration)
        super().__init__(self.loc.size(), validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        names = ("loc", "scale", "concentration")
        return self._expand_params(GeneralizedPareto, batch_shape, names, _instance)

    def rsample(self, sample_shape=_EMPTY):
        shape = self._extended_shape(sample_shape)
        return self.icdf(rand(shape, dtype=self.loc.dtype, device=self.loc.device))

    def _zero_and_safe_concentration(self):
        """Where xi is (close to) zero, and xi with those entries replaced by 1 so the
        nonzero branch stays finite there (``where`` would otherwise pass NaN gradients).
        Compared with a zero of xi's dtype: PyTorch's log_prob and cdf compare with a float32
        zero and so refuse float64 parameters, which kiln accepts."""
        is_zero = isclose(self.concentration, zeros_like(self.concentration))
        return is_zero, where(is_zero, ones_like(self.concentration), self.concentration)

    def _z(self, x):
        return (x - self.loc) / self.scale

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        z = self._z(value)
        is_zero, safe = self._zero_and_safe_concentration()
        y = 1 / safe + ones_like(z)
        nonzero = where(y == 0, y, y * log1p(safe * z))
        return -self.scale.log() - where(is_zero, z, nonzero)

    def log_survival_function(self, value):
        if self._validate_args:
            self._validate_sample(value)
        z = self._z(value)
        is_zero, safe = self._zero_and_safe_concentration()
        return where(is_zero, -z, -log1p(safe * z) / safe)

    def log_cdf(self, value):
        return log1p(-self.log_survival_function(value).exp())

    def cdf(self, value):
        return self.log_cdf(value).exp()

    def icdf(self, value):
        is_zero, safe = self._zero_and_safe_concentration()
        log_u = log1p(-value)
        nonzero = self.loc + self.scale / safe * expm1(-safe * log_u)
        return where(is_zero, self.loc - self.scale * log_u, nonzero)

    @property
    def mean(self):
        valid = self.concentration < 1
        safe = where(valid, self.concentration, 0.5)
        return where(valid, self.loc + self.scale / (1 - safe), math.nan)

    @property
    def variance(self):
        valid = self.concentration < 0.5
        safe = where(valid, self.concentration, 0.25)
        result = self.scale**2 / ((1 - safe) ** 2 * (1 - 2 * safe))
        return where(valid, result, math.nan)

    @property
    def mode(self):
        return self.loc

    def entropy(self):
        return broadcast_to(log(self.scale) + self.concentration + 1, self._batch_shape)

    @constraints.dependent_property(is_discrete=False, event_dim=0)
    def support(self):
        upper = where(self.concentration < 0, self.loc - self.scale / self.concentration, math.inf)
        return constraints.interval(self.loc, upper)
