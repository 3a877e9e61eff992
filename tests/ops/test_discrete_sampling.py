"""kiln.poisson / kiln.binomial: the distributions PyTorch samples (moments against the exact
ones), reproducibility under manual_seed, gradients and errors like PyTorch's."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from tests.oracle import needs_torch, torch


@pytest.mark.parametrize("rate", [0.3, 4.0, 250.0])
def test_poisson_draws_have_the_rates_mean_and_variance(rate):
    draws = kiln.poisson(kiln.full((40000,), rate)).numpy()
    assert np.all(draws == np.floor(draws)) and draws.min() >= 0
    assert abs(draws.mean() - rate) < 5 * np.sqrt(rate / draws.size)
    assert abs(draws.var() / rate - 1) < 0.05


@pytest.mark.parametrize("count, prob", [(10.0, 0.3), (1.0, 0.9), (200.0, 0.05)])
def test_binomial_draws_have_the_exact_mean_and_variance(count, prob):
    draws = kiln.binomial(kiln.full((40000,), count), kiln.full((40000,), prob)).numpy()
    assert draws.min() >= 0 and draws.max() <= count
    mean, var = count * prob, count * prob * (1 - prob)
    assert abs(draws.mean() - mean) < 5 * np.sqrt(var / draws.size)
    assert abs(draws.var() / var - 1) < 0.05


def test_draws_repeat_under_manual_seed_and_follow_the_generator():
    kiln.manual_seed(3)
    a = kiln.poisson(kiln.full((5,), 3.0))
    kiln.manual_seed(3)
    assert kiln.poisson(kiln.full((5,), 3.0)).tolist() == a.tolist()
    gen = kiln.Generator().manual_seed(7)
    b = kiln.binomial(kiln.full((6,), 9.0), kiln.full((6,), 0.5), generator=gen)
    gen.manual_seed(7)
    assert kiln.binomial(kiln.full((6,), 9.0), kiln.full((6,), 0.5), generator=gen).equal(b)


@needs_torch
@pytest.mark.filterwarnings("ignore:An output with one or more elements was resized")
def test_shapes_dtypes_edges_and_gradients_match_torch():
    for lib in (kiln, torch):
        rates = lib.tensor([0.0, 2.0, 5.0], dtype=lib.float64, requires_grad=True)
        out = lib.poisson(rates)
        assert out.dtype == rates.dtype and out.requires_grad and out[0].item() == 0
        out.sum().backward()
        assert rates.grad.tolist() == [0.0, 0.0, 0.0]
        counts = lib.tensor([[5.0], [3.0]])
        sample = lib.binomial(counts, lib.tensor([0.0, 1.0]))
        assert list(sample.shape) == [2, 2] and sample.tolist() == [[0.0, 5.0], [0.0, 3.0]]
        assert lib.poisson(lib.ones(2, dtype=lib.bfloat16)).dtype == lib.bfloat16
        weighted = lib.binomial(lib.full((2,), 4.0), lib.full((2,), 0.5, requires_grad=True))
        with pytest.raises(RuntimeError, match="derivative for aten::binomial is not implemented"):
            weighted.sum().backward()


@needs_torch
@pytest.mark.parametrize(
    "call",
    [
        lambda lib: lib.poisson(lib.tensor([1, 2])),
        lambda lib: lib.poisson(lib.tensor([-1.0])),
        lambda lib: lib.binomial(lib.tensor([1, 2]), lib.tensor([0.5, 0.5])),
        lambda lib: lib.binomial(lib.ones(2, dtype=lib.float16), lib.ones(2, dtype=lib.float16)),
    ],
    ids=["poisson_int", "poisson_negative", "binomial_int", "binomial_half"],
)
def test_errors_match_torch(call):
    kinds = {}
    for lib in (kiln, torch):
        with pytest.raises((RuntimeError, NotImplementedError, ValueError)) as error:
            call(lib)
        kinds[lib] = (type(error.value), str(error.value).replace("torch", "kiln"))
    assert kinds[kiln] == kinds[torch]
