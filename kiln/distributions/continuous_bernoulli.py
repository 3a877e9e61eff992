"""``ContinuousBernoulli``: the normalized density p^x (1 - p)^(1 - x) on [0, 1] (Loaiza-Ganem
and Cunningham's fix for [0, 1]-valued data under a Bernoulli likelihood in VAEs).

Its normalizer C(p) = 2 atanh(1 - 2p) / (1 - 2p) and the moments divide 0 by 0 at p = 1/2, so
within ``lims`` of 1/2 they switch to Taylor expansions, as PyTorch's do (the same ``lims``,
the same expansions, so values and gradients match there too)."""

from __future__ import annotations

import math

from ..nn import functional as F
from ..ops.public import expm1, log, log1p, no_grad, ones_like, rand, where, zeros_like
from ..runtime.tensor import Size
from . import constraints
from .exp_family import ExponentialFamily
from .utils import broadcast_all, clamp_probs, lazy_property, logits_to_probs, probs_to_logits

__all__ = ["ContinuousBernoulli"]

_EMPTY = Size()


class ContinuousBernoulli(ExponentialFamily):
    """Parameterized by ``probs`` in (0, 1) or real ``logits`` (exactly one); neither is a
    probability or log-odds of the result, the names are the Bernoulli's."""

    arg_constraints = {"probs": constraints.unit_interval, "logits": constraints.real}
    support = constraints.unit_interval
    _mean_carrier_measure = 0
    has_rsample = True

    def __init__(self, probs=None, logits=None, lims=(0.499, 0.501), validate_args=None):
        if (probs is None) == (logits is None):
            raise ValueError("Either `probs` or `logits` must be specified, but not both.")
        if probs is not None:
            (self.probs,) = broadcast_all(probs)
            # checked before the clamp below, after which every value would pass
            if validate_args is not None:
                if not bool(self.arg_constraints["probs"].check(self.probs).all()):
                    raise ValueError("The parameter probs has invalid values")
            self.probs = clamp_probs(self.probs)
        else:
            (self.logits,) = broadcast_all(logits)
        self._param = self.probs if probs is not None else self.logits
        self._lims = lims
        super().__init__(self._param.size(), validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._expand_params(ContinuousBernoulli, batch_shape, ("probs", "logits"), _instance)
        new._lims = self._lims
        new._param = new.__dict__.get("probs", new.__dict__.get("logits"))
        return new

    @lazy_property
    def logits(self):
        return probs_to_logits(self.probs, is_binary=True)

    @lazy_property
    def probs(self):
        return clamp_probs(logits_to_probs(self.logits, is_binary=True))

    @property
    def param_shape(self) -> Size:
        return self._param.size()

    def _outside_unstable_region(self):
        return self.probs.le(self._lims[0]) | self.probs.gt(self._lims[1])

    def _cut_probs(self):
        """probs, with those near 1/2 moved to the edge of ``lims`` (the closed forms are
        evaluated there, then discarded for the Taylor branch, so no NaN reaches a gradient)."""
        return where(
            self._outside_unstable_region(), self.probs, self._lims[0] * ones_like(self.probs)
        )

    def _cont_bern_log_norm(self):
        """log C(probs)."""
        cut = self._cut_probs()
        below_half = where(cut.le(0.5), cut, zeros_like(cut))
        above_half = where(cut.ge(0.5), cut, ones_like(cut))
        log_norm = log((log1p(-cut) - log(cut)).abs()) - where(
            cut.le(0.5), log1p(-2.0 * below_half), log(2.0 * above_half - 1.0)
        )
        x = (self.probs - 0.5).pow(2)
        taylor = math.log(2.0) + (4.0 / 3.0 + 104.0 / 45.0 * x) * x
        return where(self._outside_unstable_region(), log_norm, taylor)

    @property
    def mean(self):
        cut = self._cut_probs()
        mus = cut / (2.0 * cut - 1.0) + 1.0 / (log1p(-cut) - log(cut))
        x = self.probs - 0.5
        taylor = 0.5 + (1.0 / 3.0 + 16.0 / 45.0 * x.pow(2)) * x
        return where(self._outside_unstable_region(), mus, taylor)

    @property
    def stddev(self):
        return self.variance.sqrt()

    @property
    def variance(self):
        cut = self._cut_probs()
        variances = cut * (cut - 1.0) / (1.0 - 2.0 * cut).pow(2) + 1.0 / (
            log1p(-cut) - log(cut)
        ).pow(2)
        x = (self.probs - 0.5).pow(2)
        taylor = 1.0 / 12.0 - (1.0 / 15.0 - 128.0 / 945.0 * x) * x
        return where(self._outside_unstable_region(), variances, taylor)

    def sample(self, sample_shape=_EMPTY):
        u = rand(
            self._extended_shape(sample_shape), dtype=self.probs.dtype, device=self.probs.device
        )
        with no_grad():
            return self.icdf(u)

    def rsample(self, sample_shape=_EMPTY):
        u = rand(
            self._extended_shape(sample_shape), dtype=self.probs.dtype, device=self.probs.device
        )
        return self.icdf(u)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        logits, value = broadcast_all(self.logits, value)
        bce = F.binary_cross_entropy_with_logits(logits, value, reduction="none")
        return -bce + self._cont_bern_log_norm()

    def cdf(self, value):
        if self._validate_args:
            self._validate_sample(value)
        cut = self._cut_probs()
        cdfs = (cut.pow(value) * (1.0 - cut).pow(1.0 - value) + cut - 1.0) / (2.0 * cut - 1.0)
        unbounded = where(self._outside_unstable_region(), cdfs, value)
        return where(
            value.le(0.0), zeros_like(value), where(value.ge(1.0), ones_like(value), unbounded)
        )

    def icdf(self, value):
        cut = self._cut_probs()
        inverse = (log1p(-cut + value * (2.0 * cut - 1.0)) - log1p(-cut)) / (log(cut) - log1p(-cut))
        return where(self._outside_unstable_region(), inverse, value)

    def entropy(self):
        log_probs0 = log1p(-self.probs)
        log_probs1 = log(self.probs)
        return self.mean * (log_probs0 - log_probs1) - self._cont_bern_log_norm() - log_probs0

    @property
    def _natural_params(self):
        return (self.logits,)

    def _log_normalizer(self, x):
        """log C as a function of the natural parameter (the logits), Taylor-expanded near 0."""
        outside = x.le(self._lims[0] - 0.5) | x.gt(self._lims[1] - 0.5)
        cut = where(outside, x, (self._lims[0] - 0.5) * ones_like(x))
        log_norm = log(expm1(cut).abs()) - log(cut.abs())
        taylor = 0.5 * x + x.pow(2) / 24.0 - x.pow(4) / 2880.0
        return where(outside, log_norm, taylor)
