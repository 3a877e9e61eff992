"""VonMises against PyTorch's: log_prob (its Bessel approximations included) and the circular
mean, mode and variance with their gradients; samples by shape, dtype, range and circular
moments (E cos(x - loc) = I1/I0, E sin(x - loc) = 0), tiny concentrations included; expand."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from tests.distributions.torch_comparison import assert_matches_torch
from tests.oracle import assert_raises_alike, needs_torch, to_numpy, torch

# concentrations on both sides of the Bessel approximations' switch at 3.75
PARAMS = [[0.1, 2.0, -1.0, 7.0], [0.5, 5.0, 3.7, 0.01]]


def _make(D, loc, concentration):
    return D.VonMises(loc, concentration)


@needs_torch
@pytest.mark.parametrize("quantity", ["log_prob", "mean", "mode", "variance"])
def test_values_and_gradients_match_torch(quantity):
    assert_matches_torch(_make, PARAMS, quantity, at=[1.5, 0.3, -0.5, 12.0])


@needs_torch
def test_no_entropy_cdf_or_rsample_as_in_torch():
    for lib in (kiln, torch):
        dist = lib.distributions.VonMises(lib.tensor([0.0]), lib.tensor([1.0]))
        assert not dist.has_rsample
        for method in (dist.entropy, lambda: dist.cdf(lib.tensor([0.1])), dist.rsample):
            with pytest.raises(NotImplementedError):
                method()


@pytest.mark.parametrize("dtype", [kiln.float32, kiln.float64])
def test_samples_have_the_shape_range_and_circular_moments(dtype):
    kiln.manual_seed(0)
    loc = kiln.tensor([0.5, -2.0, 3.0, 0.0], dtype=dtype)
    concentration = kiln.tensor([0.05, 1.0, 10.0, 1e-6], dtype=dtype)
    dist = kiln.distributions.VonMises(loc, concentration)
    samples = dist.sample((20000,))
    assert tuple(samples.shape) == (20000, 4) and samples.dtype is dtype
    values = to_numpy(samples).astype(np.float64)
    assert values.min() >= -np.pi and values.max() < np.pi
    offset = values - to_numpy(loc)
    n = values.shape[0]
    np.testing.assert_allclose(
        np.cos(offset).mean(0), 1 - to_numpy(dist.variance), atol=5 / np.sqrt(n)
    )
    np.testing.assert_allclose(np.sin(offset).mean(0), 0.0, atol=5 / np.sqrt(n))


def test_expand_keeps_the_law():
    dist = kiln.distributions.VonMises(kiln.tensor([0.1, 1.0]), kiln.tensor([2.0, 0.5]))
    wide = dist.expand((3, 2))
    assert tuple(wide.batch_shape) == (3, 2)
    value = kiln.tensor([0.3, -1.0])
    np.testing.assert_allclose(to_numpy(wide.log_prob(value))[1], to_numpy(dist.log_prob(value)))
    assert tuple(wide.sample((5,)).shape) == (5, 3, 2)


@needs_torch
def test_validation_matches_torch():
    assert_raises_alike(
        ValueError,
        lambda: kiln.distributions.VonMises(0.0, -1.0, validate_args=True),
        lambda: torch.distributions.VonMises(0.0, -1.0, validate_args=True),
    )
