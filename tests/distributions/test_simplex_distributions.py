"""LogisticNormal and OneHotCategoricalStraightThrough against PyTorch's: LogisticNormal's
log_prob and its gradients, shapes (a scalar base included), support and expand, its samples'
stick-breaking logits Gaussian with the base's moments, rsample's gradient by central
differences; the straight-through one-hot sample, one-hot forward and the gradient of probs
backward."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from tests.distributions.torch_comparison import (
    assert_matches_torch,
    assert_moments,
    assert_rsample_gradient_is_the_derivative,
)
from tests.oracle import needs_torch, to_numpy, torch

POINTS = [[0.1, 0.2, 0.3, 0.4], [0.7, 0.1, 0.15, 0.05]]


@needs_torch
def test_logistic_normal_log_prob_and_gradients_match_torch():
    assert_matches_torch(
        lambda D, loc, scale: D.LogisticNormal(loc, scale),
        [[0.1, 2.0, -1.0], [0.5, 1.5, 0.7]],
        "log_prob",
        at=POINTS,
    )


@needs_torch
@pytest.mark.parametrize(
    ("loc", "batch", "event"), [(0.3, (), (2,)), ([[0.1, 0.2]] * 3, (3,), (3,))]
)
def test_logistic_normal_shapes_match_torch(loc, batch, event):
    for lib in (kiln, torch):
        dist = lib.distributions.LogisticNormal(lib.tensor(loc), 1.0)
        assert (tuple(dist.batch_shape), tuple(dist.event_shape)) == (batch, event)
        assert tuple(dist.sample((5,)).shape) == (5,) + batch + event
        assert tuple(dist.expand((2,) + batch).sample().shape) == (2,) + batch + event
        assert tuple(dist.loc.shape) == tuple(dist.base_dist.base_dist.loc.shape)


def test_logistic_normal_samples_lie_on_the_simplex_with_gaussian_logits():
    kiln.manual_seed(0)
    loc, scale = kiln.tensor([0.1, 2.0, -1.0]), kiln.tensor([0.5, 1.0, 0.7])
    dist = kiln.distributions.LogisticNormal(loc, scale)
    samples = dist.rsample((20000,))
    assert tuple(samples.shape) == (20000, 4) and samples.dtype is kiln.float32
    assert bool(dist.support.check(samples).all())
    logits = kiln.distributions.StickBreakingTransform().inv(samples.double())
    assert_moments(logits, loc, scale**2)


def test_logistic_normal_rsample_gradient_is_the_derivative():
    assert_rsample_gradient_is_the_derivative(
        lambda D, loc, scale: D.LogisticNormal(loc, scale), [[0.1, -1.0], [0.5, 1.5]], shape=(3,)
    )


@needs_torch
def test_straight_through_sample_is_one_hot_with_the_gradient_of_probs():
    logits = np.array([[0.2, -1.3, 0.5], [2.0, 0.1, 0.3]])
    weights = np.array([[1.0, -2.0, 0.5], [0.3, 0.7, -1.1]])
    grads = []
    for lib in (kiln, torch):
        param = lib.tensor(logits, requires_grad=True)
        dist = lib.distributions.OneHotCategoricalStraightThrough(logits=param)
        assert dist.has_rsample
        sample = dist.rsample((4,))
        assert tuple(sample.shape) == (4, 2, 3)
        values = to_numpy(sample)
        np.testing.assert_allclose(values.sum(-1), 1.0)
        assert set(np.unique(np.round(values, 12))) <= {0.0, 1.0}
        (grad,) = lib.autograd.grad((sample * lib.tensor(weights)).sum(), [param])
        grads.append(to_numpy(grad))
    np.testing.assert_allclose(grads[0], grads[1], rtol=1e-9, atol=1e-12)
    # 4 samples, each with d(sum(probs * weights)) / d(logits)
    probs = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    expected = 4 * probs * (weights - (probs * weights).sum(-1, keepdims=True))
    np.testing.assert_allclose(grads[0], expected, rtol=1e-9)


def test_straight_through_log_prob_and_entropy_are_the_one_hot_categoricals():
    probs = kiln.tensor([[0.2, 0.3, 0.5], [0.6, 0.1, 0.3]])
    straight = kiln.distributions.OneHotCategoricalStraightThrough(probs)
    plain = kiln.distributions.OneHotCategorical(probs)
    value = kiln.tensor([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    np.testing.assert_array_equal(
        to_numpy(straight.log_prob(value)), to_numpy(plain.log_prob(value))
    )
    np.testing.assert_array_equal(to_numpy(straight.entropy()), to_numpy(plain.entropy()))
    assert isinstance(straight.expand((4, 2)), kiln.distributions.OneHotCategoricalStraightThrough)
    from kiln.distributions.one_hot_categorical import OneHotCategoricalStraightThrough

    assert OneHotCategoricalStraightThrough is kiln.distributions.OneHotCategoricalStraightThrough
