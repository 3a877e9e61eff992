"""Wishart against PyTorch's: log_prob, entropy, mean, mode, variance with their gradients for
each of the three ways to give the scale, the Bregman KL divergence, validation; Bartlett
samples by shape, support and moments; rsample's gradient in the scale factor by central
differences; expand."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import kiln
from tests.distributions.torch_comparison import (
    assert_matches_torch,
    assert_moments,
    assert_rsample_gradient_is_the_derivative,
)
from tests.oracle import assert_raises_alike, needs_torch, to_numpy, torch

FACTOR = np.array([[1.5, 0.0, 0.0], [0.3, 0.8, 0.0], [-0.2, 0.4, 1.1]])
COVARIANCE = FACTOR @ FACTOR.T
VALUE = 2 * COVARIANCE + np.eye(3)
DF = [4.0, 6.5]

GIVEN = {
    "covariance_matrix": (lambda D, df, m: D.Wishart(df, covariance_matrix=m), COVARIANCE),
    "precision_matrix": (lambda D, df, m: D.Wishart(df, precision_matrix=m), COVARIANCE),
    "scale_tril": (lambda D, df, m: D.Wishart(df, scale_tril=m), FACTOR),
}


@needs_torch
@pytest.mark.parametrize("given", list(GIVEN))
@pytest.mark.parametrize("quantity", ["log_prob", "entropy", "mean", "mode", "variance"])
def test_values_and_gradients_match_torch(given, quantity):
    make, matrix = GIVEN[given]
    # kiln's cholesky_solve gives a factor the gradient on the lower triangle it reads;
    # PyTorch's also fills the upper one: compare log_prob's gradients on lower triangles
    project = {1: np.tril} if (given, quantity) == ("scale_tril", "log_prob") else None
    assert_matches_torch(make, [DF, matrix], quantity, at=VALUE, rtol=1e-8, project_grads=project)


@needs_torch
def test_kl_divergence_is_torchs_bregman_divergence():
    def pair(D, df_p, df_q, factor_q):
        p = D.Wishart(df_p, covariance_matrix=D.Wishart(4.0, scale_tril=factor_q).mean / 3)
        return p, D.Wishart(df_q, scale_tril=factor_q)

    assert_matches_torch(
        pair,
        [[4.0, 7.0], [5.0, 3.5], FACTOR],
        "kl_divergence",
        rtol=1e-8,
        project_grads={2: np.tril},
    )


def test_samples_have_the_shape_support_and_moments():
    kiln.manual_seed(0)
    dist = kiln.distributions.Wishart(
        kiln.tensor([4.0, 7.5]), scale_tril=kiln.tensor(FACTOR, dtype=kiln.float32)
    )
    samples = dist.sample((8000,))
    assert tuple(samples.shape) == (8000, 2, 3, 3) and samples.dtype is kiln.float32
    assert bool(dist.support.check(samples).all())
    assert_moments(samples, dist.mean, dist.variance, variance_rtol=0.15)


def test_rsample_gradient_in_the_scale_factor_is_the_derivative():
    assert_rsample_gradient_is_the_derivative(
        lambda D, factor: D.Wishart(
            kiln.tensor(5.0, dtype=kiln.float64), scale_tril=factor, validate_args=False
        ),
        [FACTOR],
        shape=(2,),
    )


def test_expand_and_the_derived_matrices():
    dist = kiln.distributions.Wishart(
        kiln.tensor(5.0, dtype=kiln.float64), covariance_matrix=kiln.tensor(COVARIANCE)
    )
    wide = dist.expand((2, 3))
    assert tuple(wide.batch_shape) == (2, 3) and tuple(wide.event_shape) == (3, 3)
    value = kiln.tensor(VALUE)
    np.testing.assert_allclose(to_numpy(wide.log_prob(value)), to_numpy(dist.log_prob(value)))
    assert tuple(wide.rsample((4,)).shape) == (4, 2, 3, 3, 3)
    np.testing.assert_allclose(to_numpy(dist.scale_tril), FACTOR, atol=1e-12)
    np.testing.assert_allclose(
        to_numpy(dist.precision_matrix), np.linalg.inv(COVARIANCE), rtol=1e-10
    )


@needs_torch
@pytest.mark.parametrize(
    "make",
    [
        lambda lib: lib.distributions.Wishart(1.5, covariance_matrix=lib.eye(3)),
        lambda lib: lib.distributions.Wishart(lib.tensor([5.0, 1.0]), scale_tril=lib.eye(3)),
        lambda lib: lib.distributions.Wishart(5.0, scale_tril=lib.ones(3)),
    ],
    ids=["number-df", "tensor-df", "vector-scale"],
)
def test_invalid_arguments_raise_torchs_value_errors(make):
    assert_raises_alike(ValueError, lambda: make(kiln), lambda: make(torch))


@needs_torch
def test_scale_given_twice_or_not_at_all_raises_like_torch():
    for kwargs in ({}, {"covariance_matrix": "eye", "scale_tril": "eye"}):

        def make(lib, kwargs=kwargs):
            lib.distributions.Wishart(5.0, **{k: lib.eye(2) for k in kwargs})

        assert_raises_alike(AssertionError, lambda: make(kiln), lambda: make(torch))


def test_low_df_warns():
    with pytest.warns(UserWarning, match="Low df values detected"):
        kiln.distributions.Wishart(kiln.tensor(2.2), covariance_matrix=kiln.eye(3))


def test_singular_draws_are_redrawn_with_a_warning(monkeypatch):
    dist = kiln.distributions.Wishart(kiln.tensor([4.0, 5.0]), covariance_matrix=kiln.eye(2))
    bartlett = dist._bartlett_sampling
    calls = []

    def first_draw_singular(sample_shape):
        sample = bartlett(sample_shape)
        calls.append(tuple(sample_shape))
        if len(calls) == 1:
            sample = sample.clone()
            sample[2, 1] = 0.0  # one matrix of sample 2's batch
        return sample

    monkeypatch.setattr(dist, "_bartlett_sampling", first_draw_singular)
    kiln.manual_seed(0)
    with pytest.warns(UserWarning, match="Singular sample detected"):
        samples = dist.rsample((4,))
    assert calls == [(4,), (1,)]  # sample 2, its whole batch, redrawn once
    assert bool(dist.support.check(samples).all())


def test_nonsingular_draws_are_kept_without_a_warning():
    dist = kiln.distributions.Wishart(kiln.tensor(6.0), covariance_matrix=kiln.eye(2))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert tuple(dist.rsample((3,)).shape) == (3, 2, 2)
