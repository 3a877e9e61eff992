"""ContinuousBernoulli against PyTorch's: densities, cdf/icdf, moments and entropy with their
gradients (inside and outside the Taylor region around probs = 1/2), KL divergences, validation;
samples by shape, support and moments; rsample's gradient by central differences."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from tests.distributions.torch_comparison import (
    assert_matches_torch,
    assert_moments,
    assert_rsample_gradient_is_the_derivative,
)
from tests.oracle import needs_torch, raised_by_both, to_numpy, torch

# 0.4995 and a logit of 1e-3 fall in the Taylor region (lims = (0.499, 0.501))
BY_PROBS = (lambda D, p: D.ContinuousBernoulli(probs=p), [[0.2, 0.4995, 0.9, 0.03]])
BY_LOGITS = (lambda D, p: D.ContinuousBernoulli(logits=p), [[-1.0, 1e-3, 2.0, 6.0]])
VALUES = [0.3, 0.5, 0.95, 0.0]


@needs_torch
@pytest.mark.parametrize("make_params", [BY_PROBS, BY_LOGITS], ids=["probs", "logits"])
@pytest.mark.parametrize(
    "quantity", ["log_prob", "cdf", "icdf", "mean", "variance", "stddev", "entropy"]
)
def test_values_and_gradients_match_torch(make_params, quantity):
    make, params = make_params
    at = [0.2, 0.5, 0.7, 0.99] if quantity == "icdf" else VALUES
    assert_matches_torch(make, params, quantity, at=at)


@needs_torch
def test_cdf_is_zero_below_and_one_above_the_support():
    for lib in (kiln, torch):
        dist = lib.distributions.ContinuousBernoulli(lib.tensor([0.3, 0.3]), validate_args=False)
        np.testing.assert_array_equal(to_numpy(dist.cdf(lib.tensor([-0.5, 1.5]))), [0.0, 1.0])


def test_samples_have_the_shape_support_and_moments():
    kiln.manual_seed(0)
    dist = kiln.distributions.ContinuousBernoulli(kiln.tensor([0.2, 0.4995, 0.9]))
    samples = dist.sample((20000,))
    assert tuple(samples.shape) == (20000, 3) and samples.dtype is kiln.float32
    assert not samples.requires_grad
    assert bool(dist.support.check(samples).all())
    assert_moments(samples, dist.mean, dist.variance)


def test_rsample_gradient_is_the_derivative_of_the_sample():
    assert_rsample_gradient_is_the_derivative(
        lambda D, p: D.ContinuousBernoulli(probs=p), [[0.2, 0.7, 0.9]]
    )
    assert_rsample_gradient_is_the_derivative(
        lambda D, logits: D.ContinuousBernoulli(logits=logits), [[-1.5, 0.8]]
    )


def test_expand_keeps_the_parameters_and_lims():
    dist = kiln.distributions.ContinuousBernoulli(kiln.tensor([0.2, 0.7]), lims=(0.4, 0.6))
    wide = dist.expand((3, 2))
    assert tuple(wide.batch_shape) == (3, 2) and wide._lims == (0.4, 0.6)
    value = kiln.tensor([0.3, 0.8])
    np.testing.assert_allclose(to_numpy(wide.log_prob(value))[2], to_numpy(dist.log_prob(value)))
    assert tuple(wide.sample((4,)).shape) == (4, 3, 2)


CB = lambda D, probs: D.ContinuousBernoulli(probs=probs)  # noqa: E731
KL_PAIRS = {
    "CB-CB": (CB, [[0.2, 0.4995, 0.9]], CB, [[0.6, 0.3, 0.5002]]),
    "Beta-CB": (lambda D, a, b: D.Beta(a, b), [[0.5, 2.0], [1.5, 0.7]], CB, [[0.3, 0.8]]),
    "Uniform-CB": (
        lambda D, lo, hi: D.Uniform(lo, hi),
        [[0.1, -0.5], [0.7, 0.5]],
        CB,
        [[0.3, 0.8]],
    ),
    "CB-Exponential": (CB, [[0.2, 0.9]], lambda D, r: D.Exponential(r), [[0.5, 3.0]]),
    "CB-Normal": (CB, [[0.2, 0.9]], lambda D, m, s: D.Normal(m, s), [[0.5, -2.0], [1.0, 0.5]]),
    "CB-Uniform": (
        CB,
        [[0.2, 0.9]],
        lambda D, lo, hi: D.Uniform(lo, hi),
        [[-1.0, 0.0], [2.0, 1.0]],
    ),
    "CB-Pareto": (CB, [[0.2, 0.9]], lambda D, s, a: D.Pareto(s, a), [[0.5, 1.0], [2.0, 3.0]]),
    "Exponential-CB": (lambda D, r: D.Exponential(r), [[0.5, 2.0]], CB, [[0.3, 0.8]]),
    "Gamma-CB": (lambda D, c, r: D.Gamma(c, r), [[0.5, 2.0], [1.0, 3.0]], CB, [[0.3, 0.8]]),
    "Gumbel-CB": (lambda D, m, s: D.Gumbel(m, s), [[0.5, 2.0], [1.0, 3.0]], CB, [[0.3, 0.8]]),
    "Laplace-CB": (lambda D, m, s: D.Laplace(m, s), [[0.5, 2.0], [1.0, 3.0]], CB, [[0.3, 0.8]]),
    "Normal-CB": (lambda D, m, s: D.Normal(m, s), [[0.5, 2.0], [1.0, 3.0]], CB, [[0.3, 0.8]]),
    "Pareto-CB": (lambda D, s, a: D.Pareto(s, a), [[0.5, 2.0], [1.0, 3.0]], CB, [[0.3, 0.8]]),
}


@needs_torch
@pytest.mark.parametrize("pair", list(KL_PAIRS))
def test_kl_divergences_match_torch(pair):
    make_p, p_params, make_q, q_params = KL_PAIRS[pair]

    def pair_of(D, *params):
        cut = len(p_params)
        return make_p(D, *params[:cut]), make_q(D, *params[cut:])

    assert_matches_torch(pair_of, p_params + q_params, "kl_divergence", rtol=1e-8)


@needs_torch
def test_validation_matches_torch():
    # probs are checked before they are clamped whenever validate_args is given, even False
    def bad_probs(lib):
        lib.distributions.ContinuousBernoulli(lib.tensor([0.3, 1.5]), validate_args=False)

    got, expected = raised_by_both(ValueError, lambda: bad_probs(kiln), lambda: bad_probs(torch))
    assert str(got) == str(expected) == "The parameter probs has invalid values"
    raised_by_both(
        ValueError,
        lambda: kiln.distributions.ContinuousBernoulli(),
        lambda: torch.distributions.ContinuousBernoulli(),
    )

    def outside(lib):
        dist = lib.distributions.ContinuousBernoulli(lib.tensor([0.3]), validate_args=True)
        dist.log_prob(lib.tensor([1.5]))

    got, expected = raised_by_both(ValueError, lambda: outside(kiln), lambda: outside(torch))
    assert "within the support (Interval(lower_bound=0.0, upper_bound=1.0))" in str(got)
