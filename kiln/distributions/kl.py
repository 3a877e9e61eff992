"""``kl_divergence(p, q)``: closed forms registered per (type of p, type of q) pair with
``register_kl``; the most specific registered pair (by method resolution order) wins."""

from __future__ import annotations

import math
from collections.abc import Callable

from ..autograd import grad
from ..nn import functional as F
from ..ops.linalg import linalg_namespace as linalg
from ..ops.public import (
    broadcast_shapes,
    digamma,
    erf,
    exp,
    lgamma,
    log,
    log1p,
    where,
)
from .continuous import (
    _EULER,
    Beta,
    Cauchy,
    Exponential,
    Gamma,
    Gumbel,
    HalfNormal,
    Laplace,
    LogNormal,
    Normal,
    Uniform,
)
from .continuous_bernoulli import ContinuousBernoulli
from .derived import Pareto
from .discrete import Bernoulli, Binomial, Categorical, Geometric, OneHotCategorical, Poisson
from .exp_family import ExponentialFamily
from .lowrank import LowRankMultivariateNormal
from .multivariate import Dirichlet, Independent, MultivariateNormal, _batch_mahalanobis
from .transformed import TransformedDistribution
from .utils import sum_rightmost

__all__ = ["kl_divergence", "register_kl"]

_KL_REGISTRY: dict[tuple[type, type], Callable] = {}
_KL_MEMO: dict[tuple[type, type], Callable | None] = {}


def register_kl(type_p: type, type_q: type):
    """Decorator: ``@register_kl(Normal, Normal) def kl(p, q): ...``."""
    if not isinstance(type_p, type) or not isinstance(type_q, type):
        raise TypeError(
            f"Expected type_p and type_q to be Distribution subclasses but got {type_p}, {type_q}"
        )

    def decorator(fn):
        _KL_REGISTRY[type_p, type_q] = fn
        _KL_MEMO.clear()
        return fn

    return decorator


def _dispatch(type_p: type, type_q: type) -> Callable | None:
    best, best_rank = None, None
    for (super_p, super_q), fn in _KL_REGISTRY.items():
        if issubclass(type_p, super_p) and issubclass(type_q, super_q):
            rank = (type_p.__mro__.index(super_p), type_q.__mro__.index(super_q))
            if best_rank is None or rank < best_rank:
                best, best_rank = fn, rank
    return best


def _kl_function(type_p: type, type_q: type) -> Callable | None:
    key = (type_p, type_q)
    if key not in _KL_MEMO:
        _KL_MEMO[key] = _dispatch(type_p, type_q)
    return _KL_MEMO[key]


# captured code calls the lookup at capture time on the two (constant) types instead of
# evaluating the registry loop (kiln.compiler.allow_in_graph's marker)
_kl_function._kiln_allow_in_graph = True


def kl_divergence(p, q):
    """KL(p || q), batched over the distributions' batch shape."""
    fn = _kl_function(type(p), type(q))
    if fn is None:
        raise NotImplementedError(
            f"No KL(p || q) is implemented for p type {type(p).__name__} and q type "
            f"{type(q).__name__}"
        )
    return fn(p, q)


def _infinite_where(mask, value):
    return where(mask, math.inf, value)


@register_kl(Normal, Normal)
def _kl_normal_normal(p, q):
    var_ratio = (p.scale / q.scale).pow(2)
    t1 = ((p.loc - q.loc) / q.scale).pow(2)
    return 0.5 * (var_ratio + t1 - 1 - var_ratio.log())


@register_kl(LogNormal, LogNormal)
def _kl_lognormal_lognormal(p, q):
    return _kl_normal_normal(p, q)  # KL is invariant under the shared exp


@register_kl(Bernoulli, Bernoulli)
def _kl_bernoulli_bernoulli(p, q):
    softplus = F.softplus
    t1 = p.probs * (softplus(-q.logits) - softplus(-p.logits))
    t1 = where(q.probs == 0, math.inf, t1)
    t1 = where(p.probs == 0, 0.0, t1)
    t2 = (1 - p.probs) * (softplus(q.logits) - softplus(p.logits))
    t2 = where(q.probs == 1, math.inf, t2)
    t2 = where(p.probs == 1, 0.0, t2)
    return t1 + t2


@register_kl(Categorical, Categorical)
def _kl_categorical_categorical(p, q):
    t = p.probs * (p.logits - q.logits)
    t = where((q.probs == 0).expand_as(t), math.inf, t)
    t = where((p.probs == 0).expand_as(t), 0.0, t)
    return t.sum(-1)


@register_kl(OneHotCategorical, OneHotCategorical)
def _kl_onehot_onehot(p, q):
    return _kl_categorical_categorical(p._categorical, q._categorical)


@register_kl(Uniform, Uniform)
def _kl_uniform_uniform(p, q):
    result = ((q.high - q.low) / (p.high - p.low)).log()
    return _infinite_where((q.low > p.low) | (q.high < p.high), result)


@register_kl(Exponential, Exponential)
def _kl_exponential_exponential(p, q):
    rate_ratio = q.rate / p.rate
    return -rate_ratio.log() + rate_ratio - 1


@register_kl(Laplace, Laplace)
def _kl_laplace_laplace(p, q):
    scale_ratio = p.scale / q.scale
    loc_abs_diff = (p.loc - q.loc).abs()
    t1 = -scale_ratio.log()
    t2 = loc_abs_diff / q.scale
    t3 = scale_ratio * exp(-loc_abs_diff / p.scale)
    return t1 + t2 + t3 - 1


@register_kl(Gumbel, Gumbel)
def _kl_gumbel_gumbel(p, q):
    ct1 = p.scale / q.scale
    ct2 = q.loc / q.scale
    ct3 = p.loc / q.scale
    t1 = -ct1.log() - ct2 + ct3
    t2 = ct1 * _EULER
    t3 = exp(ct2 + lgamma(1 + ct1) - ct3)
    return t1 + t2 + t3 - (1 + _EULER)


@register_kl(ExponentialFamily, ExponentialFamily)
def _kl_expfamily_expfamily(p, q):
    """The Bregman divergence of the log normalizer between the two natural parameters: any
    pair of one family without a closed form (Wishart's), gradients to q's parameters only."""
    if type(p) is not type(q):
        raise NotImplementedError(
            "The cross KL-divergence between different exponential families cannot be "
            "computed using Bregman divergences"
        )
    p_params = [param.detach().requires_grad_() for param in p._natural_params]
    q_params = q._natural_params
    p_normalizer = p._log_normalizer(*p_params)
    gradients = grad(p_normalizer.sum(), p_params, create_graph=True)
    result = q._log_normalizer(*q_params) - p_normalizer
    for p_param, q_param, gradient in zip(p_params, q_params, gradients):
        result = result - sum_rightmost((q_param - p_param) * gradient, len(q.event_shape))
    return result


@register_kl(Gamma, Gamma)
def _kl_gamma_gamma(p, q):
    t1 = q.concentration * log(p.rate / q.rate)
    t2 = lgamma(q.concentration) - lgamma(p.concentration)
    t3 = (p.concentration - q.concentration) * digamma(p.concentration)
    t4 = (q.rate - p.rate) * (p.concentration / p.rate)
    return t1 + t2 + t3 + t4


@register_kl(Beta, Beta)
def _kl_beta_beta(p, q):
    p1, p0, q1, q0 = p.concentration1, p.concentration0, q.concentration1, q.concentration0
    sum_p, sum_q = p1 + p0, q1 + q0
    t1 = lgamma(q1) + lgamma(q0) + lgamma(sum_p)
    t2 = lgamma(p1) + lgamma(p0) + lgamma(sum_q)
    t3 = (p1 - q1) * digamma(p1)
    t4 = (p0 - q0) * digamma(p0)
    t5 = (sum_q - sum_p) * digamma(sum_p)
    return t1 - t2 + t3 + t4 + t5


@register_kl(Dirichlet, Dirichlet)
def _kl_dirichlet_dirichlet(p, q):
    sum_p = p.concentration.sum(-1)
    sum_q = q.concentration.sum(-1)
    t1 = lgamma(sum_p) - lgamma(sum_q)
    t2 = (lgamma(p.concentration) - lgamma(q.concentration)).sum(-1)
    t3 = p.concentration - q.concentration
    t4 = digamma(p.concentration) - digamma(sum_p).unsqueeze(-1)
    return t1 - t2 + (t3 * t4).sum(-1)


@register_kl(Poisson, Poisson)
def _kl_poisson_poisson(p, q):
    return p.rate * (p.rate.log() - q.rate.log()) - (p.rate - q.rate)


@register_kl(MultivariateNormal, MultivariateNormal)
def _kl_mvn_mvn(p, q):
    if p.event_shape != q.event_shape:
        raise ValueError(
            "KL-divergence between two Multivariate Normals with different event shapes "
            "cannot be computed"
        )
    return _kl_gaussian_factors(p, q, p._unbroadcasted_scale_tril, q._unbroadcasted_scale_tril)


@register_kl(LowRankMultivariateNormal, LowRankMultivariateNormal)
@register_kl(LowRankMultivariateNormal, MultivariateNormal)
@register_kl(MultivariateNormal, LowRankMultivariateNormal)
def _kl_lowrank_gaussians(p, q):
    """Through the full Cholesky factors (O(n^3), where PyTorch keeps the low-rank
    structure; the same divergence)."""
    if p.event_shape != q.event_shape:
        raise ValueError(
            "KL-divergence between two (Low Rank) Multivariate Normals with different event "
            "shapes cannot be computed"
        )
    return _kl_gaussian_factors(p, q, p.scale_tril, q.scale_tril)


def _kl_gaussian_factors(p, q, p_factor, q_factor):
    """KL between Gaussians p and q from their covariances' lower factors."""
    half_term1 = q_factor.diagonal(dim1=-2, dim2=-1).log().sum(-1) - p_factor.diagonal(
        dim1=-2, dim2=-1
    ).log().sum(-1)
    n = p.event_shape[0]
    batch = broadcast_shapes(q_factor.shape[:-2], p_factor.shape[:-2])
    q_full = q_factor.expand(batch + (n, n))
    p_full = p_factor.expand(batch + (n, n))
    solved = linalg.solve_triangular(q_full, p_full, upper=False)
    term2 = solved.pow(2).sum((-2, -1))
    term3 = _batch_mahalanobis(q_factor, q.loc - p.loc)
    return half_term1 + 0.5 * (term2 + term3 - n)


@register_kl(HalfNormal, HalfNormal)
def _kl_halfnormal_halfnormal(p, q):
    var_ratio = (p.scale / q.scale).pow(2)
    return 0.5 * (var_ratio - 1 - var_ratio.log())


@register_kl(Cauchy, Cauchy)
def _kl_cauchy_cauchy(p, q):
    # the closed form of Chyzak and Nielsen: log of the squared summed scales and location
    # difference over four times the scales' product
    spread = (p.scale + q.scale).pow(2) + (p.loc - q.loc).pow(2)
    return spread.log() - (4 * p.scale * q.scale).log()


@register_kl(Geometric, Geometric)
def _kl_geometric_geometric(p, q):
    # E_p[log q(x)] = E_p[x] log(1 - q) + log q, with E_p[x] = (1 - p) / p
    return -p.entropy() - log1p(-q.probs) / p.probs - q.logits


@register_kl(Binomial, Binomial)
def _kl_binomial_binomial(p, q):
    if (p.total_count < q.total_count).any():
        raise NotImplementedError(
            "KL between Binomials where q.total_count > p.total_count is not implemented"
        )
    softplus = F.softplus
    n = p.total_count
    kl = n * (
        p.probs * (softplus(-q.logits) - softplus(-p.logits))
        + (1 - p.probs) * (softplus(q.logits) - softplus(p.logits))
    )
    return _infinite_where(p.total_count > q.total_count, kl)


@register_kl(Uniform, Normal)
def _kl_uniform_normal(p, q):
    # -H(U) - E_U[log N]: E_U[(x - loc)^2] = (high - low)^2 / 12 + (mid - loc)^2
    width = p.high - p.low
    second_moment = width.pow(2) / 12 + ((p.high + p.low) / 2 - q.loc).pow(2)
    return (q.scale * math.sqrt(2 * math.pi) / width).log() + second_moment / (2 * q.scale.pow(2))


@register_kl(Normal, Laplace)
def _kl_normal_laplace(p, q):
    # E_N|x - loc_q| is the folded normal's mean
    d = p.loc - q.loc
    folded = p.scale * math.sqrt(2 / math.pi) * exp(-d.pow(2) / (2 * p.scale.pow(2))) + d * erf(
        d / (p.scale * math.sqrt(2))
    )
    return -p.entropy() + (2 * q.scale).log() + folded / q.scale


@register_kl(Exponential, Normal)
def _kl_exponential_normal(p, q):
    # E[x] = 1 / rate, E[x^2] = 2 / rate^2
    second_moment = 2 / p.rate.pow(2) - 2 * q.loc / p.rate + q.loc.pow(2)
    return (
        -p.entropy()
        + (q.scale * math.sqrt(2 * math.pi)).log()
        + second_moment / (2 * q.scale.pow(2))
    )


@register_kl(Exponential, Gamma)
def _kl_exponential_gamma(p, q):
    # E_p[log x] = -euler - log(rate_p), E_p[x] = 1 / rate_p
    a, b = q.concentration, q.rate
    log_q = a * b.log() - lgamma(a) + (a - 1) * (-_EULER - p.rate.log()) - b / p.rate
    return -p.entropy() - log_q


@register_kl(Gamma, Exponential)
def _kl_gamma_exponential(p, q):
    return -p.entropy() - q.rate.log() + q.rate * p.concentration / p.rate


@register_kl(Independent, Independent)
def _kl_independent_independent(p, q):
    if p.reinterpreted_batch_ndims != q.reinterpreted_batch_ndims:
        raise NotImplementedError
    return sum_rightmost(kl_divergence(p.base_dist, q.base_dist), p.reinterpreted_batch_ndims)


@register_kl(ContinuousBernoulli, ContinuousBernoulli)
def _kl_continuous_bernoulli_continuous_bernoulli(p, q):
    t1 = p.mean * (p.logits - q.logits)
    t2 = p._cont_bern_log_norm() + log1p(-p.probs)
    t3 = -q._cont_bern_log_norm() - log1p(-q.probs)
    return t1 + t2 + t3


@register_kl(Pareto, Pareto)
def _kl_pareto_pareto(p, q):
    # infinite where p's support starts below q's
    scale_ratio = p.scale / q.scale
    alpha_ratio = q.alpha / p.alpha
    result = q.alpha * scale_ratio.log() - alpha_ratio.log() + alpha_ratio - 1
    return _infinite_where(p.scale < q.scale, result)


@register_kl(TransformedDistribution, TransformedDistribution)
def _kl_transformed_transformed(p, q):
    """The same transforms on both sides leave the divergence of the bases unchanged."""
    if p.transforms != q.transforms:
        raise NotImplementedError
    if p.event_shape != q.event_shape:
        raise NotImplementedError
    return kl_divergence(p.base_dist, q.base_dist)
