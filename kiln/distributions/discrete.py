"""Discrete distributions: Bernoulli, Categorical, OneHotCategorical, Binomial,
NegativeBinomial, Geometric, Poisson. Each takes ``probs`` or ``logits`` (exactly one) where
PyTorch does; the other is derived lazily (``lazy_property``), so gradients flow to whichever
the user gave."""

from __future__ import annotations

import math

from kiln.runtime.tensor import Size

from ..nn import functional as F
from ..ops.public import (
    arange,
    bernoulli,
    broadcast_tensors,
    clamp,
    exp,
    eye,
    finfo,
    full,
    int64,
    lgamma,
    log1p,
    logit,
    multinomial,
    no_grad,
    poisson,
    rand,
    where,
    zeros_like,
)
from ..runtime.compiling import is_compiling
from . import constraints
from .distribution import Distribution
from .exp_family import ExponentialFamily
from .utils import (
    broadcast_all,
    clamp_probs,
    lazy_property,
    logits_to_probs,
    numpy_sample,
    probs_to_logits,
)

_EMPTY = Size()  # the default sample/batch shape (a tuple: safe to share)

__all__ = [
    "Bernoulli",
    "Binomial",
    "Categorical",
    "Geometric",
    "Multinomial",
    "NegativeBinomial",
    "OneHotCategorical",
    "OneHotCategoricalStraightThrough",
    "OverCategorical",
    "Poisson",
]


def _one_of(probs, logits) -> None:
    if (probs is None) == (logits is None):
        raise ValueError("Either `probs` or `logits` must be specified, but not both.")


class _BinaryRate(Distribution):
    """A success rate given as ``probs`` or ``logits``: the other is derived lazily from it
    (Bernoulli, Geometric, Binomial, NegativeBinomial)."""

    @lazy_property
    def logits(self):
        return probs_to_logits(self.probs, is_binary=True)

    @lazy_property
    def probs(self):
        return logits_to_probs(self.logits, is_binary=True)


class _CountAndBinaryRate(_BinaryRate):
    """``total_count`` trials with a success rate given as ``probs`` or ``logits``, broadcast
    together, the count in the rate's dtype (Binomial, NegativeBinomial)."""

    def __init__(self, total_count, probs=None, logits=None, validate_args=None):
        _one_of(probs, logits)
        if probs is not None:
            self.total_count, self.probs = broadcast_all(total_count, probs)
            self._param = self.probs
        else:
            self.total_count, self.logits = broadcast_all(total_count, logits)
            self._param = self.logits
        self.total_count = self.total_count.type_as(self._param)
        super().__init__(self._param.size(), validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._expand_params(
            type(self), batch_shape, ("total_count", "probs", "logits"), _instance
        )
        new._param = new.__dict__.get("probs", new.__dict__.get("logits"))
        return new


class Bernoulli(_BinaryRate, ExponentialFamily):
    """1 with probability ``probs`` (or sigmoid(``logits``)), else 0."""

    _mean_carrier_measure = 0

    arg_constraints = {"probs": constraints.unit_interval, "logits": constraints.real}
    support = constraints.boolean
    has_enumerate_support = True

    def __init__(self, probs=None, logits=None, validate_args=None):
        _one_of(probs, logits)
        if probs is not None:
            (self.probs,) = broadcast_all(probs)
        else:
            (self.logits,) = broadcast_all(logits)
        self._param = self.probs if probs is not None else self.logits
        batch = self._param.size()
        super().__init__(batch, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._expand_params(Bernoulli, batch_shape, ("probs", "logits"), _instance)
        new._param = new.__dict__.get("probs", new.__dict__.get("logits"))
        return new

    @property
    def mean(self):
        return self.probs

    @property
    def mode(self):
        mode = (self.probs >= 0.5).to(self.probs.dtype)
        return where(self.probs == 0.5, math.nan, mode)

    @property
    def variance(self):
        return self.probs * (1 - self.probs)

    @property
    def param_shape(self) -> Size:
        return self._param.size()

    def sample(self, sample_shape=_EMPTY):
        shape = self._extended_shape(sample_shape)
        with no_grad():
            return bernoulli(self.probs.expand(shape))

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        logits, value = broadcast_tensors(self.logits, value)
        return -F.binary_cross_entropy_with_logits(logits, value.to(logits.dtype), reduction="none")

    def entropy(self):
        return F.binary_cross_entropy_with_logits(self.logits, self.probs, reduction="none")

    @property
    def _natural_params(self):
        return (logit(self.probs),)

    def _log_normalizer(self, x):
        return log1p(exp(x))

    def enumerate_support(self, expand: bool = True):
        values = arange(2, dtype=self._param.dtype, device=self._param.device)
        values = values.view((-1,) + (1,) * len(self._batch_shape))
        if expand:
            values = values.expand((-1,) + tuple(self._batch_shape))
        return values


class Categorical(Distribution):
    """One of K categories, with ``probs`` (normalized over the last dim) or ``logits``
    (unnormalized log probabilities)."""

    arg_constraints = {"probs": constraints.simplex, "logits": constraints.independent(constraints.real, 1)}  # fmt: skip
    has_enumerate_support = True

    def __init__(self, probs=None, logits=None, validate_args=None):
        _one_of(probs, logits)
        if probs is not None:
            if probs.dim() < 1:
                raise ValueError("`probs` parameter must be at least one-dimensional.")
            self.probs = probs / probs.sum(-1, keepdim=True)
        else:
            if logits.dim() < 1:
                raise ValueError("`logits` parameter must be at least one-dimensional.")
            self.logits = logits - logits.logsumexp(dim=-1, keepdim=True)
        self._param = self.probs if probs is not None else self.logits
        self._num_events = self._param.size()[-1]
        batch = self._param.size()[:-1] if self._param.ndim > 1 else Size()
        super().__init__(batch, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._expand_params(
            Categorical, batch_shape, ("probs", "logits"), _instance, event_dims=1
        )
        new._param = new.__dict__.get("probs", new.__dict__.get("logits"))
        new._num_events = self._num_events
        return new

    @constraints.dependent_property(is_discrete=True, event_dim=0)
    def support(self):
        return constraints.integer_interval(0, self._num_events - 1)

    @lazy_property
    def logits(self):
        return probs_to_logits(self.probs)

    @lazy_property
    def probs(self):
        return logits_to_probs(self.logits)

    @property
    def param_shape(self) -> Size:
        return self._param.size()

    @property
    def mean(self):
        return full(self._extended_shape(), math.nan, dtype=self.probs.dtype)

    @property
    def mode(self):
        return self.probs.argmax(dim=-1)

    @property
    def variance(self):
        return full(self._extended_shape(), math.nan, dtype=self.probs.dtype)

    def sample(self, sample_shape=_EMPTY):
        if not isinstance(sample_shape, Size):
            sample_shape = Size(sample_shape)
        n = 1
        for s in sample_shape:
            n *= s
        with no_grad():
            probs_2d = self.probs.reshape(-1, self._num_events)
            samples_2d = multinomial(probs_2d, n, True).T
        return samples_2d.reshape(self._extended_shape(sample_shape))

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        value = value.long().unsqueeze(-1)
        value, log_pmf = broadcast_tensors(value, self.logits)
        value = value[..., :1]
        return log_pmf.gather(-1, value).squeeze(-1)

    def entropy(self):
        min_real = finfo(self.logits.dtype).min
        logits = clamp(self.logits, min=min_real)
        p_log_p = logits * self.probs
        return -p_log_p.sum(-1)

    def enumerate_support(self, expand: bool = True):
        values = arange(self._num_events, dtype=int64, device=self._param.device)
        values = values.view((-1,) + (1,) * len(self._batch_shape))
        if expand:
            values = values.expand((-1,) + tuple(self._batch_shape))
        return values


class OverCategorical(Distribution):
    """A distribution whose events are vectors over a ``Categorical``'s K categories (one-hot
    draws, counts, relaxed one-hot points): it keeps that Categorical (``_categorical``) for its
    parameters, and expanding expands it. ``__init__`` of a subclass calls ``_over``."""

    def _over(self, probs, logits, validate_args) -> None:
        self._categorical = Categorical(probs, logits)
        param = self._categorical._param
        Distribution.__init__(
            self, param.size()[:-1], param.size()[-1:], validate_args=validate_args
        )

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(type(self), _instance)
        batch_shape = Size(batch_shape)
        new.__dict__.update(
            (k, v) for k, v in self.__dict__.items() if k not in ("_categorical", "_validate_args")
        )
        new._categorical = self._categorical.expand(batch_shape)
        Distribution.__init__(new, batch_shape, self.event_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @property
    def _param(self):
        return self._categorical._param

    @property
    def probs(self):
        return self._categorical.probs

    @property
    def logits(self):
        return self._categorical.logits

    @property
    def param_shape(self) -> Size:
        return self._categorical.param_shape


class OneHotCategorical(OverCategorical):
    """A Categorical whose samples are one-hot vectors of length K."""

    arg_constraints = {"probs": constraints.simplex, "logits": constraints.independent(constraints.real, 1)}  # fmt: skip
    support = constraints.one_hot
    has_enumerate_support = True

    def __init__(self, probs=None, logits=None, validate_args=None):
        self._over(probs, logits, validate_args)

    @property
    def mean(self):
        return self._categorical.probs

    @property
    def mode(self):
        probs = self._categorical.probs
        return F.one_hot(probs.argmax(-1), probs.shape[-1]).to(probs.dtype)

    @property
    def variance(self):
        return self._categorical.probs * (1 - self._categorical.probs)

    def sample(self, sample_shape=_EMPTY):
        probs = self._categorical.probs
        indices = self._categorical.sample(sample_shape)
        return F.one_hot(indices, probs.shape[-1]).to(probs.dtype)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        indices = value.max(-1)[1]
        return self._categorical.log_prob(indices)

    def entropy(self):
        return self._categorical.entropy()

    def enumerate_support(self, expand: bool = True):
        n = self.event_shape[0]
        values = eye(n, dtype=self._param.dtype, device=self._param.device)
        values = values.view((n,) + (1,) * len(self.batch_shape) + (n,))
        if expand:
            values = values.expand((n,) + tuple(self.batch_shape) + (n,))
        return values


class OneHotCategoricalStraightThrough(OneHotCategorical):
    """A ``OneHotCategorical`` with the straight-through gradient estimator (Bengio et al.,
    2013): ``rsample`` is the one-hot draw in the forward pass and has the gradient of
    ``probs`` in the backward pass."""

    has_rsample = True

    def rsample(self, sample_shape=_EMPTY):
        samples = self.sample(sample_shape)
        probs = self._categorical.probs
        return samples + (probs - probs.detach())


class Binomial(_CountAndBinaryRate):
    """Successes in ``total_count`` Bernoulli(``probs``) trials."""

    arg_constraints = {
        "total_count": constraints.nonnegative_integer,
        "probs": constraints.unit_interval,
        "logits": constraints.real,
    }
    has_enumerate_support = True

    def __init__(self, total_count=1, probs=None, logits=None, validate_args=None):
        super().__init__(total_count, probs, logits, validate_args)

    @constraints.dependent_property(is_discrete=True, event_dim=0)
    def support(self):
        return constraints.integer_interval(0, self.total_count)

    @property
    def mean(self):
        return self.total_count * self.probs

    @property
    def mode(self):
        return ((self.total_count + 1) * self.probs).floor().clamp(max=self.total_count)

    @property
    def variance(self):
        return self.total_count * self.probs * (1 - self.probs)

    def sample(self, sample_shape=_EMPTY):
        shape = self._extended_shape(sample_shape)
        with no_grad():
            n = self.total_count.expand(shape).cpu().double().numpy().astype("int64")
            p = self.probs.expand(shape).cpu().double().numpy()
            return numpy_sample(shape, self.probs.dtype, self.probs.device,
                                lambda rng, s: rng.binomial(n, p, size=s))  # fmt: skip

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        n = self.total_count
        log_factorial_n = lgamma(n + 1)
        log_factorial_k = lgamma(value + 1)
        log_factorial_nmk = lgamma(n - value + 1)
        logits = self.logits
        # k*log(p) + (n-k)*log(1-p) = k*logits - n*softplus(logits), written so that logits = +-inf
        # with k = n or k = 0 gives 0, not NaN
        # max(logits, 0) written so its gradient at 0 is 1/2 (the average of the one-sided
        # derivatives), which makes d/dlogits exact at logits = 0
        relu = (logits.clamp(min=0) + logits - logits.clamp(max=0)) / 2
        normalize = n * relu + n * log1p(exp(-logits.abs()))
        return (
            log_factorial_n
            - log_factorial_k
            - log_factorial_nmk
            + where((value == 0) & (logits == -math.inf), 0.0, value * logits)
            - where((n == 0) & logits.isinf(), 0.0, normalize)
        )

    def entropy(self):
        total = int(self.total_count.max())
        if not bool((self.total_count == total).all()):
            raise NotImplementedError("Inhomogeneous total count not supported by `entropy`.")
        log_prob = self.log_prob(self.enumerate_support(False))
        return -(exp(log_prob) * log_prob).sum(0)

    def enumerate_support(self, expand: bool = True):
        total = int(self.total_count.max())
        if not bool((self.total_count == total).all()):
            raise NotImplementedError(
                "Inhomogeneous total count not supported by `enumerate_support`."
            )
        values = arange(1 + total, dtype=self._param.dtype, device=self._param.device)
        values = values.view((-1,) + (1,) * len(self._batch_shape))
        if expand:
            values = values.expand((-1,) + tuple(self._batch_shape))
        return values


class NegativeBinomial(_CountAndBinaryRate):
    """Successes before ``total_count`` failures of Bernoulli(``probs``) trials (a real
    ``total_count`` too): a Gamma-Poisson mixture, the usual likelihood for overdispersed
    counts."""

    arg_constraints = {
        "total_count": constraints.greater_than_eq(0),
        "probs": constraints.half_open_interval(0.0, 1.0),
        "logits": constraints.real,
    }
    support = constraints.nonnegative_integer

    @property
    def mean(self):
        return self.total_count * exp(self.logits)

    @property
    def mode(self):
        return ((self.total_count - 1) * self.logits.exp()).floor().clamp(min=0.0)

    @property
    def variance(self):
        return self.mean / F.sigmoid(-self.logits)

    @property
    def param_shape(self) -> Size:
        return self._param.size()

    def sample(self, sample_shape=_EMPTY):
        from .continuous import Gamma

        with no_grad():
            rate = Gamma(self.total_count, exp(-self.logits), validate_args=False).sample(
                sample_shape
            )
            return poisson(rate)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        n, logits = self.total_count, self.logits
        unnormalized = n * F.logsigmoid(-logits) + value * F.logsigmoid(logits)
        normalization = -lgamma(n + value) + lgamma(1.0 + value) + lgamma(n)
        # n = 0 with value 0 has probability 1, but lgamma(0) is infinite
        normalization = normalization.masked_fill(n + value == 0.0, 0.0)
        return unnormalized - normalization


class Geometric(_BinaryRate):
    """Failures before the first success of Bernoulli(``probs``) trials (support 0, 1, ...)."""

    arg_constraints = {"probs": constraints.unit_interval, "logits": constraints.real}
    support = constraints.nonnegative_integer

    def __init__(self, probs=None, logits=None, validate_args=None):
        _one_of(probs, logits)
        if probs is not None:
            (self.probs,) = broadcast_all(probs)
        else:
            (self.logits,) = broadcast_all(logits)
        self._param = self.probs if probs is not None else self.logits
        batch = self._param.size()
        super().__init__(batch, validate_args=validate_args)
        if self._validate_args and probs is not None and not is_compiling():
            if not bool((self.probs > 0).all()):
                raise ValueError(
                    f"Expected parameter probs ({type(self.probs).__name__} of shape "
                    f"{tuple(self.probs.shape)}) of distribution {self!r} to satisfy the "
                    f"constraint Interval(lower_bound=0.0, upper_bound=1.0), but found invalid "
                    f"values:\n{self.probs}"
                )

    def expand(self, batch_shape, _instance=None):
        new = self._expand_params(Geometric, batch_shape, ("probs", "logits"), _instance)
        new._param = new.__dict__.get("probs", new.__dict__.get("logits"))
        return new

    @property
    def mean(self):
        return 1.0 / self.probs - 1.0

    @property
    def mode(self):
        return zeros_like(self.probs)

    @property
    def variance(self):
        return (1.0 / self.probs - 1.0) / self.probs

    def sample(self, sample_shape=_EMPTY):
        shape = self._extended_shape(sample_shape)
        tiny = finfo(self.probs.dtype).tiny
        with no_grad():
            u = rand(shape, dtype=self.probs.dtype, device=self.probs.device).clamp(min=tiny)
            return (u.log() / (-self.probs).log1p()).floor()

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        value, probs = broadcast_tensors(value, self.probs)
        probs = probs.clone()
        probs = where((probs == 1) & (value == 0), 0.0, probs)
        return value * (-probs).log1p() + clamp_probs(self.probs).log()

    def entropy(self):
        return (
            F.binary_cross_entropy_with_logits(self.logits, self.probs, reduction="none")
            / self.probs
        )


class Poisson(ExponentialFamily):
    """Counts with mean ``rate``."""

    arg_constraints = {"rate": constraints.nonnegative}
    support = constraints.nonnegative_integer

    def __init__(self, rate, validate_args=None):
        (self.rate,) = broadcast_all(rate)
        batch = self.rate.size()
        super().__init__(batch, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        return self._expand_params(Poisson, batch_shape, ("rate",), _instance)

    @property
    def mean(self):
        return self.rate

    @property
    def mode(self):
        return self.rate.floor()

    @property
    def variance(self):
        return self.rate

    def sample(self, sample_shape=_EMPTY):
        shape = self._extended_shape(sample_shape)
        with no_grad():
            lam = self.rate.expand(shape).cpu().double().numpy()
            return numpy_sample(shape, self.rate.dtype, self.rate.device,
                                lambda rng, s: rng.poisson(lam, size=s))  # fmt: skip

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        rate, value = broadcast_tensors(self.rate, value)
        if rate.dtype.is_floating_point and not value.dtype.is_floating_point:
            value = value.to(rate.dtype)
        return value.xlogy(rate) - rate - lgamma(value + 1)

    @property
    def _natural_params(self):
        return (self.rate.log(),)

    def _log_normalizer(self, x):
        return exp(x)


class Multinomial(OverCategorical):
    """Counts of ``total_count`` draws from a Categorical(``probs`` or ``logits``): events are
    vectors over the categories summing to ``total_count``."""

    arg_constraints = {"probs": constraints.simplex, "logits": constraints.real_vector}

    def __init__(self, total_count=1, probs=None, logits=None, validate_args=None):
        if not isinstance(total_count, int):
            raise NotImplementedError("inhomogeneous total_count is not supported")
        self.total_count = total_count
        self._over(probs, logits, validate_args)

    @property
    def _binomial(self):  # each category's marginal, for the entropy
        return Binomial(total_count=self.total_count, probs=self.probs)

    @constraints.dependent_property(is_discrete=True, event_dim=1)
    def support(self):
        return constraints.multinomial(self.total_count)

    @property
    def mean(self):
        return self.probs * self.total_count

    @property
    def variance(self):
        return self.total_count * self.probs * (1 - self.probs)

    def sample(self, sample_shape=_EMPTY):
        sample_shape = Size(sample_shape)
        # total_count categorical draws, counted per category
        draws = self._categorical.sample(Size((self.total_count,)) + sample_shape)
        draws = draws.permute(*range(1, draws.dim()), 0)
        shape = tuple(draws.shape[:-1]) + (self._categorical._num_events,)
        counts = full(shape, 0.0, dtype=self.probs.dtype, device=self.probs.device)
        ones = counts.new_ones(()).expand(tuple(draws.shape))
        return counts.scatter_add_(-1, draws, ones)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        logits, value = broadcast_tensors(self.logits, value)
        # a category of probability 0 contributes nothing when it is never drawn
        logits = where((value == 0) & (logits == -math.inf), 0.0, logits)
        log_factorial_n = lgamma(value.sum(-1) + 1)
        log_factorial_xs = lgamma(value + 1).sum(-1)
        log_powers = (logits * value).sum(-1)
        return log_factorial_n - log_factorial_xs + log_powers

    def entropy(self):
        # n H(Categorical) - log n! + E[sum_i log x_i!], the expectation over each category's
        # Binomial(n, p_i) marginal, enumerated
        n = self.total_count
        term1 = n * self._categorical.entropy() - math.lgamma(n + 1)
        support = self._binomial.enumerate_support(expand=False)[1:]
        binomial_probs = exp(self._binomial.log_prob(support))
        weights = lgamma(support + 1)
        return term1 + (binomial_probs * weights).sum((0, -1))
