"""ExponentialFamily: which distributions are exponential families (PyTorch's set), the Bregman
entropy of the log normalizer against each closed form and PyTorch's, and the Bregman KL
divergence against the closed-form same-family ones."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.distributions import ExponentialFamily
from tests.distributions.torch_comparison import assert_matches_torch
from tests.oracle import needs_torch, to_numpy, torch

T = lambda *values: kiln.tensor(np.asarray(values, dtype=np.float64))  # noqa: E731

# families with the carrier measure the Bregman entropy needs: name -> (make, parameters)
WITH_ENTROPY = {
    "Normal": (lambda D, m, s: D.Normal(m, s), [[0.3, -1.0], [0.5, 2.0]]),
    "Exponential": (lambda D, r: D.Exponential(r), [[0.5, 3.0]]),
    "Gamma": (lambda D, c, r: D.Gamma(c, r), [[0.5, 3.0], [1.5, 0.7]]),
    "Bernoulli": (lambda D, p: D.Bernoulli(p), [[0.2, 0.7]]),
    "ContinuousBernoulli": (lambda D, p: D.ContinuousBernoulli(p), [[0.2, 0.7]]),
    "Wishart": (
        lambda D, df, c: D.Wishart(df, covariance_matrix=c),
        [[3.5, 6.0], [[2.0, 0.3], [0.3, 1.0]]],
    ),
}


@needs_torch
def test_the_exponential_families_are_pytorchs():
    def families(lib):
        space = lib.distributions
        return {
            name
            for name in dir(space)
            if isinstance(getattr(space, name), type)
            and issubclass(getattr(space, name), space.ExponentialFamily)
        }

    assert families(kiln) == families(torch)


@pytest.mark.parametrize("name", list(WITH_ENTROPY))
def test_bregman_entropy_equals_the_closed_form(name):
    make, params = WITH_ENTROPY[name]
    dist = make(kiln.distributions, *[T(*p) if np.ndim(p) == 1 else kiln.tensor(p) for p in params])
    np.testing.assert_allclose(
        to_numpy(ExponentialFamily.entropy(dist)), to_numpy(dist.entropy()), rtol=1e-9
    )


@needs_torch
@pytest.mark.parametrize("name", list(WITH_ENTROPY))
def test_bregman_entropy_matches_torchs(name):
    make, params = WITH_ENTROPY[name]
    assert_matches_torch(make, params, _bregman, rtol=1e-9)


def _bregman(dist):
    """The base class's entropy in either library (kiln's or torch's ExponentialFamily)."""
    base = next(c for c in type(dist).__mro__ if c.__name__ == "ExponentialFamily")
    return base.entropy(dist)


@needs_torch
@pytest.mark.parametrize("name", ["Beta", "Dirichlet", "Poisson"])
def test_families_without_a_carrier_measure_refuse_the_bregman_entropy_like_torch(name):
    for lib in (kiln, torch):
        D = lib.distributions
        dist = {
            "Beta": lambda: D.Beta(lib.tensor([0.5]), lib.tensor([2.0])),
            "Dirichlet": lambda: D.Dirichlet(lib.tensor([0.5, 2.0])),
            "Poisson": lambda: D.Poisson(lib.tensor([2.0])),
        }[name]()
        with pytest.raises(NotImplementedError):
            _bregman(dist)
        if name == "Poisson":  # nor a closed form, in either library
            with pytest.raises(NotImplementedError):
                dist.entropy()
        else:
            assert bool(dist.entropy().isfinite().all())


SAME_FAMILY = {
    "Normal": (lambda D, m, s: D.Normal(m, s), [0.3, -1.0], [0.5, 2.0]),
    "Exponential": (lambda D, r, _: D.Exponential(r), [0.5, 3.0], [1.0, 1.0]),
    "Gamma": (lambda D, c, r: D.Gamma(c, r), [0.5, 3.0], [1.5, 0.7]),
    "Beta": (lambda D, a, b: D.Beta(a, b), [0.5, 3.0], [1.5, 0.7]),
    "Bernoulli": (lambda D, p, _: D.Bernoulli(p), [0.2, 0.7], [1.0, 1.0]),
    "Poisson": (lambda D, r, _: D.Poisson(r), [0.5, 3.0], [1.0, 1.0]),
    "Dirichlet": (lambda D, a, b: D.Dirichlet(kiln.stack([a, b], -1)), [0.5, 3.0], [1.5, 0.7]),
    "ContinuousBernoulli": (lambda D, p, _: D.ContinuousBernoulli(p), [0.2, 0.7], [1.0, 1.0]),
}


@pytest.mark.parametrize("name", list(SAME_FAMILY))
def test_bregman_kl_equals_the_closed_form(name):
    make, first, second = SAME_FAMILY[name]
    p = make(kiln.distributions, T(*first), T(*second))
    q = make(kiln.distributions, T(*first[::-1]) * 1.3, T(*second[::-1]))
    bregman = kiln.distributions.kl._kl_expfamily_expfamily(p, q)
    np.testing.assert_allclose(
        to_numpy(bregman), to_numpy(kiln.distributions.kl_divergence(p, q)), rtol=1e-8
    )
