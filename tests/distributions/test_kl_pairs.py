"""Every (p, q) pair PyTorch registers a KL divergence for, kiln registers too, and each one's
values and gradients with respect to both distributions' parameters equal PyTorch's, on
parameters that reach the infinite branches (a Uniform reaching below 0 or above 1, a Pareto
without a mean or a variance) as well as the finite ones."""

from __future__ import annotations

import pytest

import kiln
from tests.distributions.torch_comparison import assert_matches_torch
from tests.oracle import needs_torch, torch

TRIL = [[1.5, 0.0, 0.0], [0.3, 0.8, 0.0], [-0.2, 0.4, 1.1]]

# family -> (make(D, *params), p's parameters, q's parameters), batch shape (3,) or an event of 3
FAMILIES = {
    "Bernoulli": (lambda D, p: D.Bernoulli(p), [[0.2, 0.5, 0.9]], [[0.6, 0.3, 0.5]]),
    "Beta": (
        lambda D, a, b: D.Beta(a, b),
        [[0.5, 2.0, 3.0], [1.5, 1.0, 0.7]],
        [[1.2, 0.6, 2.0], [0.8, 2.5, 1.1]],
    ),
    "Binomial": (lambda D, p: D.Binomial(5, p), [[0.2, 0.5, 0.9]], [[0.6, 0.3, 0.5]]),
    "Categorical": (
        lambda D, p: D.Categorical(p),
        [[[0.2, 0.3, 0.5], [0.6, 0.1, 0.3], [0.3, 0.3, 0.4]]],
        [[[0.1, 0.6, 0.3], [0.2, 0.2, 0.6], [0.5, 0.4, 0.1]]],
    ),
    "Cauchy": (
        lambda D, m, s: D.Cauchy(m, s),
        [[0.3, -1.0, 2.0], [0.5, 1.5, 2.0]],
        [[0.0, 1.0, 2.5], [1.0, 0.5, 3.0]],
    ),
    "ContinuousBernoulli": (
        lambda D, p: D.ContinuousBernoulli(p),
        [[0.2, 0.4995, 0.9]],
        [[0.6, 0.3, 0.5002]],
    ),
    "Dirichlet": (
        lambda D, c: D.Dirichlet(c),
        [[[0.5, 1.5, 3.0], [2.0, 2.0, 1.0], [1.0, 0.7, 0.4]]],
        [[[1.0, 1.0, 2.0], [0.5, 3.0, 1.5], [2.0, 2.0, 2.0]]],
    ),
    "Exponential": (lambda D, r: D.Exponential(r), [[0.5, 1.5, 3.0]], [[1.0, 0.7, 2.0]]),
    "Gamma": (
        lambda D, c, r: D.Gamma(c, r),
        [[0.5, 1.5, 3.0], [1.0, 2.0, 0.5]],
        [[2.0, 0.8, 1.2], [0.7, 1.5, 2.5]],
    ),
    "Geometric": (lambda D, p: D.Geometric(p), [[0.2, 0.5, 0.9]], [[0.6, 0.3, 0.5]]),
    "Gumbel": (
        lambda D, m, s: D.Gumbel(m, s),
        [[0.3, -1.0, 2.0], [0.5, 1.5, 2.0]],
        [[0.0, 1.0, 2.5], [1.0, 0.5, 3.0]],
    ),
    "HalfNormal": (lambda D, s: D.HalfNormal(s), [[0.5, 1.5, 2.0]], [[1.0, 0.7, 3.0]]),
    "Independent": (
        lambda D, m, s: D.Independent(D.Normal(m, s), 1),
        [[[0.3, -1.0], [2.0, 0.1], [0.0, 0.5]], [[0.5, 1.5], [2.0, 1.0], [0.3, 0.8]]],
        [[[0.0, 1.0], [2.5, 0.0], [1.0, -1.0]], [[1.0, 0.5], [3.0, 2.0], [0.6, 0.4]]],
    ),
    "Laplace": (
        lambda D, m, s: D.Laplace(m, s),
        [[0.3, -1.0, 2.0], [0.5, 1.5, 2.0]],
        [[0.0, 1.0, 2.5], [1.0, 0.5, 3.0]],
    ),
    "LowRankMultivariateNormal": (
        lambda D, m, w, d: D.LowRankMultivariateNormal(m, w, d),
        [[0.1, -0.5, 0.3], [[1.0, 0.2], [0.3, -0.5], [0.0, 0.4]], [0.5, 1.5, 0.8]],
        [[0.4, 0.0, -0.2], [[0.5, -0.1], [0.2, 0.6], [0.7, 0.1]], [1.0, 0.6, 1.2]],
    ),
    "MultivariateNormal": (
        lambda D, m, tril: D.MultivariateNormal(m, scale_tril=tril),
        [[0.1, -0.5, 0.3], TRIL],
        [[0.4, 0.0, -0.2], [[1.0, 0.0, 0.0], [-0.4, 1.3, 0.0], [0.2, 0.1, 0.7]]],
    ),
    "Normal": (
        lambda D, m, s: D.Normal(m, s),
        [[0.3, -1.0, 2.0], [0.5, 1.5, 2.0]],
        [[0.0, 1.0, 2.5], [1.0, 0.5, 3.0]],
    ),
    "OneHotCategorical": (
        lambda D, p: D.OneHotCategorical(p),
        [[[0.2, 0.3, 0.5], [0.6, 0.1, 0.3], [0.3, 0.3, 0.4]]],
        [[[0.1, 0.6, 0.3], [0.2, 0.2, 0.6], [0.5, 0.4, 0.1]]],
    ),
    # alpha 0.8 (no mean) and 1.5 (no variance) reach the infinite branches
    "Pareto": (
        lambda D, s, a: D.Pareto(s, a),
        [[0.5, 1.0, 0.2], [0.8, 1.5, 3.0]],
        [[0.3, 1.5, 0.1], [2.0, 1.2, 2.5]],
    ),
    "Poisson": (lambda D, r: D.Poisson(r), [[0.5, 1.5, 3.0]], [[1.0, 0.7, 2.0]]),
    "TransformedDistribution": (
        lambda D, m, s: D.TransformedDistribution(D.Normal(m, s), [D.ExpTransform()]),
        [[0.3, -1.0, 2.0], [0.5, 1.5, 2.0]],
        [[0.0, 1.0, 2.5], [1.0, 0.5, 3.0]],
    ),
    # below 0, inside [0, 1], above 1
    "Uniform": (
        lambda D, lo, hi: D.Uniform(lo, hi),
        [[-0.5, 0.1, 0.2], [0.5, 0.7, 2.0]],
        [[-1.0, 0.0, 0.1], [1.0, 1.0, 2.5]],
    ),
}


def _torch_pairs():
    if torch is None:
        return []
    registry = torch.distributions.kl._KL_REGISTRY
    return sorted(
        (p.__name__, q.__name__)
        for p, q in registry
        if p.__name__ != "ExponentialFamily"  # the Bregman fallback: test_exponential_family
    )


@needs_torch
def test_every_pair_torch_registers_is_registered():
    ours = {(p.__name__, q.__name__) for p, q in kiln.distributions.kl._KL_REGISTRY}
    theirs = {(p.__name__, q.__name__) for p, q in torch.distributions.kl._KL_REGISTRY}
    assert theirs - ours == set()


@needs_torch
@pytest.mark.parametrize("pair", _torch_pairs(), ids="-".join)
def test_kl_values_and_gradients_match_torch(pair):
    make_p, p_params, _ = FAMILIES[pair[0]]
    make_q, _, q_params = FAMILIES[pair[1]]

    def pair_of(D, *params):
        cut = len(p_params)
        return make_p(D, *params[:cut]), make_q(D, *params[cut:])

    assert_matches_torch(pair_of, p_params + q_params, "kl_divergence", rtol=1e-8)
