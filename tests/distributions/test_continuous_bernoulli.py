"""ContinuousBernoulli against PyTorch's: densities, cdf/icdf, moments and entropy with their
gradients (inside and outside the Taylor region around probs = 1/2), validation; samples by
shape, support and moments; rsample's gradient by central differences. (Its KL divergences:
test_kl_pairs.py.)"""

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
