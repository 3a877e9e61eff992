"""GeneralizedPareto against PyTorch's: log_prob, cdf, icdf, the log survival function,
moments and entropy with their gradients in all three parameters (concentration zero,
positive and negative); samples by shape, support and moments; rsample's gradient by central
differences; the bounded support of a negative concentration."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from tests.distributions.torch_comparison import (
    assert_matches_torch,
    assert_moments,
    assert_rsample_gradient_is_the_derivative,
)
from tests.oracle import assert_raises_alike, needs_torch, to_numpy, torch

# concentration 0 (the exponential branch), positive (Pareto tail), negative (bounded)
PARAMS = [[0.1, 0.0, -1.0, 0.5], [2.0, 1.0, 0.5, 1.5], [0.4, 0.0, -0.2, 1.2]]
VALUES = [1.5, 0.3, -0.5, 0.9]


def _make(D, loc, scale, concentration):
    return D.GeneralizedPareto(loc, scale, concentration)


@needs_torch
@pytest.mark.parametrize(
    "quantity",
    ["icdf", "mean", "variance", "mode", "entropy"],
)
def test_float64_values_and_gradients_match_torch(quantity):
    at = [0.2, 0.5, 0.7, 0.99] if quantity == "icdf" else VALUES
    assert_matches_torch(_make, PARAMS, quantity, at=at)


@needs_torch
@pytest.mark.parametrize("quantity", ["log_prob", "cdf", "log_cdf", "log_survival_function"])
def test_float32_densities_and_gradients_match_torch(quantity):
    """PyTorch compares the concentration with a float32 zero here, so it only runs these in
    float32 (kiln also runs them in float64: the next test)."""
    results = []
    for lib in (kiln, torch):
        params = [lib.tensor(p, dtype=lib.float32, requires_grad=True) for p in PARAMS]
        out = getattr(_make(lib.distributions, *params), quantity)(lib.tensor(VALUES))
        grads = lib.autograd.grad(out.sum(), params)
        results.append([to_numpy(out)] + [to_numpy(g) for g in grads])
    for ours, theirs in zip(*results):
        np.testing.assert_allclose(ours, theirs, rtol=2e-6, atol=1e-6)


@needs_torch
def test_float64_densities_agree_with_torchs_float32_ones():
    def log_prob_and_cdf(lib, dtype):
        params = [lib.tensor(p, dtype=dtype) for p in PARAMS]
        dist = _make(lib.distributions, *params)
        value = lib.tensor(VALUES, dtype=dtype)
        return [to_numpy(dist.log_prob(value)), to_numpy(dist.cdf(value))]

    for ours, theirs in zip(
        log_prob_and_cdf(kiln, kiln.float64), log_prob_and_cdf(torch, torch.float32)
    ):
        assert ours.dtype == np.float64
        np.testing.assert_allclose(ours, theirs, rtol=1e-6)


def test_samples_have_the_shape_support_and_moments():
    kiln.manual_seed(0)
    # variances are finite below concentration 1/2 (and sample ones settle below 1/4)
    dist = kiln.distributions.GeneralizedPareto(
        kiln.tensor([0.1, 0.0, -1.0]), kiln.tensor([2.0, 1.0, 0.5]), kiln.tensor([0.1, 0.0, -0.3])
    )
    samples = dist.sample((40000,))
    assert tuple(samples.shape) == (40000, 3) and samples.dtype is kiln.float32
    assert bool(dist.support.check(samples).all())
    assert_moments(samples, dist.mean, dist.variance)


def test_negative_concentration_bounds_the_support():
    dist = kiln.distributions.GeneralizedPareto(1.0, 2.0, -0.5)
    support = dist.support
    assert float(support.lower_bound) == 1.0 and float(support.upper_bound) == 5.0
    assert float(kiln.distributions.GeneralizedPareto(1.0, 2.0, 0.5).support.upper_bound) == (
        float("inf")
    )


def test_rsample_gradient_is_the_derivative_of_the_sample():
    assert_rsample_gradient_is_the_derivative(_make, [[0.1, -0.4], [2.0, 0.5], [0.3, -0.2]])


def test_expand_and_scalar_parameters():
    dist = kiln.distributions.GeneralizedPareto(0.0, 1.0, 0.2)
    assert tuple(dist.batch_shape) == () and tuple(dist.sample((3,)).shape) == (3,)
    wide = dist.expand((2, 3))
    assert tuple(wide.batch_shape) == (2, 3) and tuple(wide.entropy().shape) == (2, 3)


@needs_torch
def test_validation_matches_torch():
    assert_raises_alike(
        ValueError,
        lambda: kiln.distributions.GeneralizedPareto(0.0, -1.0, 0.2, validate_args=True),
        lambda: torch.distributions.GeneralizedPareto(0.0, -1.0, 0.2, validate_args=True),
    )
