"""Multinomial against PyTorch's: log_prob (a zero-probability category never drawn), entropy
(enumerated over each category's binomial marginal) and their gradients, moments, samples that
sum to total_count, expand and the per-distribution module path."""

from __future__ import annotations

import numpy as np

import kiln
from tests.oracle import needs_torch, torch


def _run(lib, use_logits: bool):
    if use_logits:
        param = lib.tensor([[0.0, 1.0, -1.0], [2.0, -0.5, 0.3]], dtype=lib.float64)
    else:
        param = lib.tensor([[0.2, 0.3, 0.5], [0.6, 0.4, 0.0]], dtype=lib.float64)
    param.requires_grad_(True)
    dist = lib.distributions.Multinomial(5, **{"logits" if use_logits else "probs": param})
    value = lib.tensor([[1.0, 2.0, 2.0], [3.0, 2.0, 0.0]], dtype=lib.float64)
    log_prob, entropy = dist.log_prob(value), dist.entropy()
    (grad,) = lib.autograd.grad(log_prob.sum() + entropy.sum(), [param])
    return [t.detach().numpy() for t in (log_prob, entropy, grad, dist.mean, dist.variance)]


@needs_torch
def test_values_and_gradients_match_torch():
    for use_logits in (False, True):
        for got, want in zip(_run(kiln, use_logits), _run(torch, use_logits)):
            np.testing.assert_allclose(got, want, rtol=1e-7, atol=1e-12)


def test_samples_count_total_count_draws():
    kiln.manual_seed(0)
    probs = kiln.tensor([[0.2, 0.3, 0.5], [0.6, 0.4, 0.0]])
    dist = kiln.distributions.multinomial.Multinomial(7, probs=probs)
    samples = dist.sample((2000,))
    assert tuple(samples.shape) == (2000, 2, 3)
    assert bool((samples.sum(-1) == 7).all()) and bool(dist.support.check(samples).all())
    assert bool((samples[:, 1, 2] == 0).all())  # never a category of probability 0
    np.testing.assert_allclose(samples.mean(0).numpy(), dist.mean.numpy(), atol=0.15)
    assert tuple(dist.expand((4, 2)).batch_shape) == (4, 2)
