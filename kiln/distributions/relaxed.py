"""Continuous relaxations of discrete distributions (Maddison et al.'s Concrete, Jang et al.'s
Gumbel-softmax), reparameterizable so a VAE can backpropagate through a near-discrete sample:
``RelaxedBernoulli`` is the sigmoid of a ``LogitRelaxedBernoulli`` and ``RelaxedOneHotCategorical``
the exp of an ``ExpRelaxedCategorical`` (log-space samples on the simplex), as in PyTorch."""

from __future__ import annotations

import math

from ..nn import functional as F
from ..ops.public import full_like, rand
from ..runtime.tensor import Size
from . import constraints
from .discrete import OverCategorical, _one_of
from .distribution import Distribution
from .transformed import TransformedDistribution
from .transforms import ExpTransform, SigmoidTransform
from .utils import broadcast_all, clamp_probs, lazy_property, logits_to_probs, probs_to_logits

__all__ = [
    "ExpRelaxedCategorical",
    "LogitRelaxedBernoulli",
    "RelaxedBernoulli",
    "RelaxedOneHotCategorical",
]

_EMPTY = Size()


class LogitRelaxedBernoulli(Distribution):
    """The logit of a relaxed Bernoulli sample: ``(logistic noise + logits) / temperature``."""

    arg_constraints = {"probs": constraints.unit_interval, "logits": constraints.real}
    support = constraints.real
    has_rsample = True

    def __init__(self, temperature, probs=None, logits=None, validate_args=None):
        _one_of(probs, logits)
        self.temperature = temperature
        if probs is not None:
            (self.probs,) = broadcast_all(probs)
        else:
            (self.logits,) = broadcast_all(logits)
        self._param = self.probs if probs is not None else self.logits
        super().__init__(self._param.size(), validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._expand_params(
            LogitRelaxedBernoulli, batch_shape, ("probs", "logits"), _instance
        )
        new.temperature = self.temperature
        new._param = new.__dict__.get("probs", new.__dict__.get("logits"))
        return new

    @lazy_property
    def logits(self):
        return probs_to_logits(self.probs, is_binary=True)

    @lazy_property
    def probs(self):
        return logits_to_probs(self.logits, is_binary=True)

    @property
    def param_shape(self) -> Size:
        return self._param.size()

    def rsample(self, sample_shape=_EMPTY):
        shape = self._extended_shape(sample_shape)
        probs = clamp_probs(self.probs.expand(shape))
        uniforms = clamp_probs(rand(shape, dtype=probs.dtype, device=probs.device))
        noise = uniforms.log() - (-uniforms).log1p()
        return (noise + probs.log() - (-probs).log1p()) / self.temperature

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        logits, value = broadcast_all(self.logits, value)
        t = self.temperature
        diff = logits - value * t
        log_t = math.log(t) if isinstance(t, (int, float)) else t.log()
        return log_t + diff - 2 * F.softplus(diff)


class _Relaxed(TransformedDistribution):
    """A relaxation: a transformed base holding ``temperature`` and the discrete parameters."""

    has_rsample = True

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(type(self), _instance)
        return super().expand(batch_shape, _instance=new)

    @property
    def temperature(self):
        return self.base_dist.temperature

    @property
    def logits(self):
        return self.base_dist.logits

    @property
    def probs(self):
        return self.base_dist.probs


class RelaxedBernoulli(_Relaxed):
    """A sample in (0, 1) that approaches a Bernoulli draw as ``temperature`` goes to 0."""

    arg_constraints = {"probs": constraints.unit_interval, "logits": constraints.real}
    support = constraints.unit_interval

    def __init__(self, temperature, probs=None, logits=None, validate_args=None):
        base = LogitRelaxedBernoulli(temperature, probs, logits)
        super().__init__(base, SigmoidTransform(), validate_args=validate_args)


class ExpRelaxedCategorical(OverCategorical):
    """The log of a relaxed one-hot sample: log-softmax of ``(logits + Gumbel noise) /
    temperature`` over the last dim."""

    arg_constraints = {"probs": constraints.simplex, "logits": constraints.real_vector}
    support = constraints.real_vector
    has_rsample = True

    def __init__(self, temperature, probs=None, logits=None, validate_args=None):
        self.temperature = temperature
        self._over(probs, logits, validate_args)

    def rsample(self, sample_shape=_EMPTY):
        shape = self._extended_shape(sample_shape)
        logits = self.logits
        uniforms = clamp_probs(rand(shape, dtype=logits.dtype, device=logits.device))
        gumbels = -((-(uniforms.log())).log())
        scores = (logits + gumbels) / self.temperature
        return scores - scores.logsumexp(dim=-1, keepdim=True)

    def log_prob(self, value):
        k = self._categorical._num_events
        if self._validate_args:
            self._validate_sample(value)
        logits, value = broadcast_all(self.logits, value)
        temperature = self.temperature
        if isinstance(temperature, (int, float)):
            log_scale = math.lgamma(k) + (k - 1) * math.log(temperature)
        else:
            log_scale = full_like(temperature, float(k)).lgamma() + (k - 1) * temperature.log()
        score = logits - value * temperature
        score = (score - score.logsumexp(dim=-1, keepdim=True)).sum(-1)
        return score + log_scale


class RelaxedOneHotCategorical(_Relaxed):
    """A point on the simplex that approaches a one-hot draw as ``temperature`` goes to 0
    (the Gumbel-softmax distribution)."""

    arg_constraints = {"probs": constraints.simplex, "logits": constraints.real_vector}
    support = constraints.simplex

    def __init__(self, temperature, probs=None, logits=None, validate_args=None):
        base = ExpRelaxedCategorical(temperature, probs, logits, validate_args=validate_args)
        super().__init__(base, ExpTransform(), validate_args=validate_args)
