"""Compiled ``randint`` draws at the graph's run-time random offset, as ``rand`` does: a new
sample each call, the numbers eager draws after the same seed, and the generator left where
eager leaves it. Before (probe round 19), its decomposition drew at trace time, so the graph
held one fixed sample: a compiled diffusion step's ``randint(0, T, (B,))`` timesteps were the
same every step, and the draws after it in the graph shifted."""

from __future__ import annotations

import numpy as np
import pytest

import kiln

BACKENDS = ("aot_eager", "inductor")


def _draws(x):
    steps = kiln.randint(0, 1000, (x.shape[0],))
    noise = kiln.randn(x.shape)
    labels = kiln.randint_like(x, 3, 9, dtype=kiln.int32)
    return steps, noise, labels, kiln.randint(7, (2, 3), dtype=kiln.uint8)


def _arrays(values) -> list:
    return [(v.dtype, v.numpy()) for v in values]


@pytest.mark.parametrize("dynamic", [False, True])
@pytest.mark.parametrize("backend", BACKENDS)
def test_compiled_randint_draws_eagers_numbers_and_new_ones_each_call(backend, dynamic):
    inputs = [kiln.zeros(n, 2) for n in (5, 5, 7)]
    kiln.manual_seed(11)
    expected = [_arrays(_draws(x)) for x in inputs] + [kiln.rand(3).numpy()]
    compiled = kiln.compile(_draws, backend=backend, dynamic=dynamic)
    kiln.manual_seed(11)
    got = [_arrays(compiled(x)) for x in inputs] + [kiln.rand(3).numpy()]
    for ours, theirs in zip(got[:-1], expected[:-1]):
        for (our_dtype, our_values), (dtype, values) in zip(ours, theirs):
            assert our_dtype == dtype
            np.testing.assert_array_equal(our_values, values)
    np.testing.assert_array_equal(got[-1], expected[-1])  # the generator after the calls
    assert not np.array_equal(got[0][0][1], got[1][0][1])  # a new sample on the second call


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_compiled_diffusion_step_samples_new_timesteps_as_eager(backend):
    """DDPM's training step: random timesteps index the noise schedule."""
    kiln.manual_seed(0)
    net = kiln.nn.Sequential(kiln.nn.Linear(5, 16), kiln.nn.SiLU(), kiln.nn.Linear(16, 4))
    alphas = kiln.linspace(0.99, 0.5, 50).cumprod(0)

    def step(model, x0):
        t = kiln.randint(0, 50, (x0.shape[0],))
        noise = kiln.randn_like(x0)
        a = alphas[t].unsqueeze(1)
        xt = a.sqrt() * x0 + (1 - a).sqrt() * noise
        pred = model(kiln.cat([xt, t.unsqueeze(1).float() / 50], 1))
        return kiln.nn.functional.mse_loss(pred, noise), t

    x0 = kiln.randn(6, 4)
    compiled = kiln.compile(step, backend=backend)
    for seed in (1, 2, 3):
        kiln.manual_seed(seed)
        loss, t = step(net, x0)
        kiln.manual_seed(seed)
        compiled_loss, compiled_t = compiled(net, x0)
        np.testing.assert_array_equal(compiled_t.numpy(), t.numpy())
        np.testing.assert_allclose(compiled_loss.item(), loss.item(), rtol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_compiled_complex_samples_have_eagers_imaginary_parts(backend):
    """A complex rand/randn draws its real and imaginary parts as eager does (compiled ones
    were real numbers: the graph's draw took the complex dtype for a real one)."""

    def draws(x):
        return kiln.randn(3, dtype=kiln.complex64), kiln.rand_like(x), kiln.randn(4) + x.real

    x = kiln.zeros(4, dtype=kiln.complex128)
    kiln.manual_seed(4)
    expected = [draws(x) for _ in range(2)]
    compiled = kiln.compile(draws, backend=backend)
    kiln.manual_seed(4)
    got = [compiled(x) for _ in range(2)]
    for ours, theirs in zip(got, expected):
        for our_value, value in zip(ours, theirs):
            assert our_value.dtype == value.dtype
            np.testing.assert_allclose(our_value.numpy(), value.numpy(), rtol=1e-6)
    assert np.all(got[0][0].numpy().imag != 0)
