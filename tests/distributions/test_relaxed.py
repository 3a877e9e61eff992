"""RelaxedBernoulli and RelaxedOneHotCategorical (Concrete / Gumbel-softmax) against PyTorch's:
log_prob and its gradient, reparameterized samples (in the support, gradients reaching the
logits), expand and the module paths."""

from __future__ import annotations

import numpy as np

import kiln
from tests.oracle import needs_torch, torch


def _log_probs(lib):
    distributions = lib.distributions
    temperature = lib.tensor([0.7], dtype=lib.float64)
    logits = lib.tensor([[0.3, -1.0, 2.0], [0.0, 0.5, -0.5]], dtype=lib.float64)
    logits.requires_grad_(True)
    binary = distributions.RelaxedBernoulli(temperature, logits=logits[:, 0])
    onehot = distributions.RelaxedOneHotCategorical(temperature, logits=logits)
    a = binary.log_prob(lib.tensor([0.2, 0.9], dtype=lib.float64))
    b = onehot.log_prob(lib.tensor([[0.2, 0.3, 0.5], [0.1, 0.8, 0.1]], dtype=lib.float64))
    (grad,) = lib.autograd.grad(a.sum() + b.sum(), [logits])
    return [t.detach().numpy() for t in (a, b, grad)]


@needs_torch
def test_log_prob_and_its_gradient_match_torch():
    for got, want in zip(_log_probs(kiln), _log_probs(torch)):
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)


def test_samples_are_reparameterized_and_in_the_support():
    kiln.manual_seed(0)
    logits = kiln.tensor([[0.3, -1.0, 2.0], [0.0, 0.5, -0.5]], requires_grad=True)
    temperature = kiln.tensor([0.5])
    binary = kiln.distributions.relaxed_bernoulli.RelaxedBernoulli(temperature, logits=logits)
    onehot = kiln.distributions.relaxed_categorical.RelaxedOneHotCategorical(
        temperature, logits=logits
    )
    b, o = binary.rsample((500,)), onehot.rsample((500,))
    assert tuple(b.shape) == (500, 2, 3) and tuple(o.shape) == (500, 2, 3)
    assert bool(binary.support.check(b).all())
    np.testing.assert_allclose(o.detach().sum(-1).numpy(), 1.0, rtol=1e-5)
    (grad,) = kiln.autograd.grad((b * o).sum(), [logits])
    assert bool(kiln.isfinite(grad).all()) and bool((grad != 0).any())
    assert tuple(onehot.expand((4, 2)).batch_shape) == (4, 2)
    # near zero temperature the one-hot relaxation picks the argmax of logits + Gumbel noise:
    # category 2 of row 0 (logit 2.0) most often
    cold = kiln.distributions.RelaxedOneHotCategorical(kiln.tensor([0.05]), logits=logits)
    picks = cold.sample((2000,))[:, 0].argmax(-1)
    counts = np.bincount(picks.numpy(), minlength=3) / 2000
    expected = np.exp([0.3, -1.0, 2.0]) / np.exp([0.3, -1.0, 2.0]).sum()
    np.testing.assert_allclose(counts, expected, atol=0.05)
