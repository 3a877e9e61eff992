"""KL divergences between different families (PyTorch's registrations): closed forms of
-H(p) - E_p[log q(x)] where q's density has expectations under p in closed form, and
infinity where p puts mass outside q's support (a Normal against a Beta, a Uniform reaching
below a Pareto's scale). Registered on import; ``kiln.distributions`` imports this module."""

from __future__ import annotations

import math

from ..ops.public import digamma, exp, full_like, lgamma, log, log1p, xlogy
from .continuous import (
    _EULER,
    Beta,
    Exponential,
    Gamma,
    Gumbel,
    Laplace,
    Normal,
    Uniform,
)
from .continuous_bernoulli import ContinuousBernoulli
from .derived import Pareto
from .discrete import Bernoulli, Binomial, Poisson
from .kl import _infinite_where, register_kl

__all__: list[str] = []


def _register_infinite(parameter: str, p_type: type, *q_types: type) -> None:
    """KL(p || q) = inf, shaped like p's ``parameter``, for each q type."""

    def infinite(p, q):
        return full_like(getattr(p, parameter), math.inf)

    for q_type in q_types:
        register_kl(p_type, q_type)(infinite)


_register_infinite("concentration1", Beta, Pareto)
_register_infinite("probs", ContinuousBernoulli, Pareto)
_register_infinite("rate", Exponential, Beta, ContinuousBernoulli, Pareto, Uniform)
_register_infinite("concentration", Gamma, Beta, ContinuousBernoulli, Pareto, Uniform)
_unbounded = (Beta, ContinuousBernoulli, Exponential, Gamma, Pareto, Uniform)
_register_infinite("loc", Gumbel, *_unbounded)
_register_infinite("loc", Laplace, *_unbounded)
_register_infinite("loc", Normal, *_unbounded)
_register_infinite("scale", Pareto, Beta, ContinuousBernoulli, Uniform)
_register_infinite("rate", Poisson, Bernoulli, Binomial)


def _beta_mean(p):
    return p.concentration1 / (p.concentration1 + p.concentration0)


def _x_log_x(x):
    return xlogy(x, x)  # 0 at x = 0


# ---------------------------------------------------------------- p discrete or on [0, 1]


@register_kl(Bernoulli, Poisson)
def _kl_bernoulli_poisson(p, q):
    return -p.entropy() - (p.probs * q.rate.log() - q.rate)


@register_kl(Beta, Exponential)
def _kl_beta_exponential(p, q):
    return -p.entropy() - q.rate.log() + q.rate * _beta_mean(p)


@register_kl(Beta, Gamma)
def _kl_beta_gamma(p, q):
    # E_p[log x] = digamma(a) - digamma(a + b)
    expected_log = digamma(p.concentration1) - digamma(p.concentration1 + p.concentration0)
    log_normalizer = lgamma(q.concentration) - q.concentration * q.rate.log()
    return (
        -p.entropy()
        + log_normalizer
        - (q.concentration - 1) * expected_log
        + q.rate * _beta_mean(p)
    )


@register_kl(Beta, Normal)
def _kl_beta_normal(p, q):
    mean = _beta_mean(p)
    second_moment = mean * (1 - mean) / (p.concentration1 + p.concentration0 + 1) + mean.pow(2)
    variance_q = q.scale.pow(2)
    squared_error = 0.5 * second_moment - q.loc * mean + 0.5 * q.loc.pow(2)
    return -p.entropy() + 0.5 * (variance_q * 2 * math.pi).log() + squared_error / variance_q


@register_kl(Beta, Uniform)
def _kl_beta_uniform(p, q):
    result = -p.entropy() + (q.high - q.low).log()
    return _infinite_where((q.low > 0.0) | (q.high < 1.0), result)


def _minus_entropy_plus_cross_with_continuous_bernoulli(p, q):
    """-H(p) - E_p[log q(x)] for a continuous-Bernoulli q: only E_p[x] enters."""
    return -p.entropy() - p.mean * q.logits - log1p(-q.probs) - q._cont_bern_log_norm()


@register_kl(Beta, ContinuousBernoulli)
def _kl_beta_continuous_bernoulli(p, q):
    return _minus_entropy_plus_cross_with_continuous_bernoulli(p, q)


@register_kl(Uniform, ContinuousBernoulli)
def _kl_uniform_continuous_bernoulli(p, q):
    result = _minus_entropy_plus_cross_with_continuous_bernoulli(p, q)
    outside = p.high.ge(q.support.upper_bound) | p.low.le(q.support.lower_bound)
    return _infinite_where(outside, result)


@register_kl(ContinuousBernoulli, Exponential)
def _kl_continuous_bernoulli_exponential(p, q):
    return -p.entropy() - log(q.rate) + q.rate * p.mean


@register_kl(ContinuousBernoulli, Normal)
def _kl_continuous_bernoulli_normal(p, q):
    t1 = -p.entropy()
    t2 = 0.5 * (math.log(2.0 * math.pi) + (q.loc / q.scale).square()) + log(q.scale)
    t3 = (p.variance + p.mean.square() - 2.0 * q.loc * p.mean) / (2.0 * q.scale.square())
    return t1 + t2 + t3


@register_kl(ContinuousBernoulli, Uniform)
def _kl_continuous_bernoulli_uniform(p, q):
    # PyTorch's condition, kept as it is: infinite unless q starts below 0 and ends above 1
    result = -p.entropy() + (q.high - q.low).log()
    outside = q.low.ge(p.support.lower_bound) | q.high.le(p.support.upper_bound)
    return _infinite_where(outside, result)


# ---------------------------------------------------------------- p on the half line


@register_kl(Exponential, Gumbel)
def _kl_exponential_gumbel(p, q):
    rate_scale = p.rate * q.scale
    loc_over_scale = q.loc / q.scale
    # E_p[exp(-x / scale)] = rate scale / (rate scale + 1)
    moment = exp(loc_over_scale) * rate_scale / (rate_scale + 1)
    return rate_scale.log() - 1 - loc_over_scale + moment + rate_scale.reciprocal()


@register_kl(Gamma, Gumbel)
def _kl_gamma_gumbel(p, q):
    rate_scale = p.rate * q.scale
    loc_over_scale = q.loc / q.scale
    c = p.concentration
    minus_entropy_part = (c - 1) * digamma(c) - lgamma(c) - c
    # E_p[exp(-x / scale)] = (1 + 1 / (rate scale))^-c
    moment = exp(loc_over_scale) * (1 + rate_scale.reciprocal()).pow(-c)
    return minus_entropy_part + rate_scale.log() + c / rate_scale + moment - loc_over_scale


@register_kl(Gamma, Normal)
def _kl_gamma_normal(p, q):
    c, rate = p.concentration, p.rate
    variance_q = q.scale.pow(2)
    constant = 0.5 * (rate.pow(2) * variance_q * 2 * math.pi).log() - c - lgamma(c)
    # E_p[x] = c / rate, E_p[x^2] = c (c + 1) / rate^2
    squared_error = 0.5 * (c.pow(2) + c) / rate.pow(2) - q.loc * c / rate + 0.5 * q.loc.pow(2)
    return constant + (c - 1) * digamma(c) + squared_error / variance_q


@register_kl(Pareto, Exponential)
def _kl_pareto_exponential(p, q):
    scale_rate = p.scale * q.rate
    result = (
        (p.alpha / scale_rate).log()
        - p.alpha.reciprocal()
        + p.alpha * scale_rate / (p.alpha - 1)
        - 1
    )
    return _infinite_where(p.alpha <= 1, result)  # p has no mean


@register_kl(Pareto, Gamma)
def _kl_pareto_gamma(p, q):
    expected_log = p.scale.log() + p.alpha.reciprocal()  # E_p[log x]
    log_normalizer = lgamma(q.concentration) - q.concentration * q.rate.log()
    result = (
        p.alpha.log()
        - expected_log
        + log_normalizer
        + (1 - q.concentration) * expected_log
        + q.rate * p.alpha * p.scale / (p.alpha - 1)
        - 1
    )
    return _infinite_where(p.alpha <= 1, result)


@register_kl(Pareto, Normal)
def _kl_pareto_normal(p, q):
    twice_variance_q = 2 * q.scale.pow(2)
    shifted_scale = p.scale / (p.alpha - 1)
    log_ratio = (math.sqrt(2 * math.pi) * q.scale * p.alpha / p.scale).log()
    variance = p.alpha * shifted_scale.pow(2) / (p.alpha - 2)
    squared_bias = (p.alpha * shifted_scale - q.loc).pow(2)
    result = log_ratio - p.alpha.reciprocal() + (variance + squared_bias) / twice_variance_q - 1
    return _infinite_where(p.alpha <= 2, result)  # p has no variance


# ---------------------------------------------------------------- p on the whole line


@register_kl(Gumbel, Normal)
def _kl_gumbel_normal(p, q):
    scale_ratio = p.scale / q.scale
    log_ratio = (scale_ratio / math.sqrt(2 * math.pi)).log()
    variance_term = (math.pi * scale_ratio * 0.5).pow(2) / 3
    bias_term = ((p.loc + p.scale * _EULER - q.loc) / q.scale).pow(2) * 0.5
    return -log_ratio + variance_term + bias_term - (_EULER + 1)


@register_kl(Laplace, Normal)
def _kl_laplace_normal(p, q):
    variance_q = q.scale.pow(2)
    scale_ratio_sq = p.scale.pow(2) / variance_q
    log_term = 0.5 * (2 * scale_ratio_sq / math.pi).log()
    squared_difference = 0.5 * (p.loc - q.loc).pow(2)
    return -log_term + scale_ratio_sq + squared_difference / variance_q - 1


@register_kl(Normal, Gumbel)
def _kl_normal_gumbel(p, q):
    mean_over_scale = p.loc / q.scale
    variance_ratio = (p.scale / q.scale).pow(2)
    loc_over_scale = q.loc / q.scale
    moment = exp(-mean_over_scale + 0.5 * variance_ratio + loc_over_scale)
    return (
        -0.5 * variance_ratio.log()
        + mean_over_scale
        - loc_over_scale
        + moment
        - 0.5 * (1 + math.log(2 * math.pi))
    )


# ---------------------------------------------------------------- p uniform


def _uniform_expected_log(p):
    """E_p[log x] for p uniform on [low, high], low >= 0: the mean of x log x - x."""
    width = p.high - p.low
    return (_x_log_x(p.high) - _x_log_x(p.low) - width) / width


@register_kl(Uniform, Beta)
def _kl_uniform_beta(p, q):
    width = p.high - p.low
    expected_log = _uniform_expected_log(p)
    expected_log_complement = (_x_log_x(1 - p.high) - _x_log_x(1 - p.low) + width) / width
    lbeta = (
        lgamma(q.concentration1)
        + lgamma(q.concentration0)
        - lgamma(q.concentration1 + q.concentration0)
    )
    result = (
        (q.concentration0 - 1) * expected_log_complement
        + lbeta
        - width.log()
        - (q.concentration1 - 1) * expected_log
    )
    return _infinite_where((p.high > 1.0) | (p.low < 0.0), result)


@register_kl(Uniform, Exponential)
def _kl_uniform_exponential(p, q):
    result = q.rate * (p.high + p.low) / 2 - ((p.high - p.low) * q.rate).log()
    return _infinite_where(p.low < 0.0, result)


@register_kl(Uniform, Gamma)
def _kl_uniform_gamma(p, q):
    log_normalizer = lgamma(q.concentration) - q.concentration * q.rate.log()
    result = (
        -(p.high - p.low).log()
        + log_normalizer
        + (1 - q.concentration) * _uniform_expected_log(p)
        + q.rate * (p.high + p.low) / 2
    )
    return _infinite_where(p.low < 0.0, result)


@register_kl(Uniform, Gumbel)
def _kl_uniform_gumbel(p, q):
    scale_over_width = q.scale / (p.high - p.low)
    high = (p.high - q.loc) / q.scale
    low = (p.low - q.loc) / q.scale
    return scale_over_width.log() + 0.5 * (high + low) - scale_over_width * (exp(-high) - exp(-low))


@register_kl(Uniform, Pareto)
def _kl_uniform_pareto(p, q):
    width = p.high - p.low
    result = (
        _uniform_expected_log(p) * (q.alpha + 1) - (q.alpha * q.scale.pow(q.alpha) * width).log()
    )
    return _infinite_where(p.low < q.scale, result)
