"""LKJCholesky against PyTorch's: log_prob and its gradient in the concentration, validation;
onion-method samples by shape, support (unit rows, positive diagonal) and the correlations'
moments (each off-diagonal correlation of L L^T has mean 0 and variance 1 / (2 eta + D - 1),
which PyTorch 2.13's sampler misses from the third row on); expand."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from tests.distributions.torch_comparison import assert_matches_torch
from tests.oracle import assert_raises_alike, needs_torch, raised_by_both, to_numpy, torch


def _factors(dim: int) -> np.ndarray:
    """Valid float64 correlation Cholesky factors (through the transform onto them)."""
    x = np.random.default_rng(dim).normal(size=(2, dim * (dim - 1) // 2))
    return to_numpy(kiln.distributions.CorrCholeskyTransform()(kiln.tensor(x)))


@needs_torch
@pytest.mark.parametrize("dim", [2, 3, 5])
def test_log_prob_and_its_gradient_match_torch(dim):
    assert_matches_torch(
        lambda D, eta: D.LKJCholesky(dim, eta), [[0.5, 2.0]], "log_prob", at=_factors(dim)
    )


@pytest.mark.parametrize("dim", [2, 4])
def test_samples_have_the_shape_support_and_correlation_moments(dim):
    kiln.manual_seed(0)
    eta = kiln.tensor([0.5, 1.0, 3.0])
    dist = kiln.distributions.LKJCholesky(dim, eta)
    samples = dist.sample((20000,))
    assert tuple(samples.shape) == (20000, 3, dim, dim) and samples.dtype is kiln.float32
    assert bool(dist.support.check(samples).all())
    rows, cols = np.tril_indices(dim, -1)
    correlations = to_numpy(samples @ samples.mT)[:, :, rows, cols]
    expected = 1 / (2 * to_numpy(eta) + dim - 1)  # the LKJ marginal, the same for every entry
    np.testing.assert_allclose(correlations.mean(0), 0.0, atol=5 * np.sqrt(expected.max() / 20000))
    np.testing.assert_allclose(
        correlations.var(0), np.broadcast_to(expected[:, None], correlations.shape[1:]), rtol=0.05
    )


def test_expand_keeps_the_law():
    dist = kiln.distributions.LKJCholesky(3, kiln.tensor([0.5, 2.0], dtype=kiln.float64))
    wide = dist.expand((4, 2))
    assert tuple(wide.batch_shape) == (4, 2) and tuple(wide.event_shape) == (3, 3)
    value = kiln.tensor(_factors(3))
    np.testing.assert_allclose(to_numpy(wide.log_prob(value))[3], to_numpy(dist.log_prob(value)))
    assert tuple(wide.sample((5,)).shape) == (5, 4, 2, 3, 3)


@needs_torch
def test_validation_matches_torch():
    assert_raises_alike(
        ValueError,
        lambda: kiln.distributions.LKJCholesky(1, 1.0),
        lambda: torch.distributions.LKJCholesky(1, 1.0),
    )
    # (the Beta of the squared row lengths refuses it first; PyTorch's Beta is a Dirichlet,
    # so the messages name different distributions)
    raised_by_both(
        ValueError,
        lambda: kiln.distributions.LKJCholesky(3, -1.0, validate_args=True),
        lambda: torch.distributions.LKJCholesky(3, -1.0, validate_args=True),
    )
