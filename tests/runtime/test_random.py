"""The counter-based generator: Philox known answers, reproducibility, distributions."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.runtime.random import philox4x32


@pytest.mark.parametrize(
    "counter, key, expected",
    [
        ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
        (
            (0xFFFFFFFF,) * 4,
            (0xFFFFFFFF, 0xFFFFFFFF),
            (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD),
        ),
        (
            (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344),
            (0xA4093822, 0x299F31D0),
            (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1),
        ),
    ],
)
def test_philox4x32_10_known_answers(counter, key, expected):
    """Random123's published known-answer vectors for philox4x32-10."""
    seed = key[0] | (key[1] << 32)
    words = philox4x32(
        np.array([counter[0]]),
        np.array([counter[1]]),
        seed,
        counter_2=np.array([counter[2]]),
        counter_3=np.array([counter[3]]),
    )
    assert tuple(int(w[0]) for w in words) == expected


def test_manual_seed_reproduces_streams():
    kiln.manual_seed(123)
    a = kiln.rand(5)
    b = kiln.randn(3, 3)
    kiln.manual_seed(123)
    np.testing.assert_array_equal(a.numpy(), kiln.rand(5).numpy())
    np.testing.assert_array_equal(b.numpy(), kiln.randn(3, 3).numpy())


def test_consecutive_calls_differ_and_generators_are_independent():
    g1 = kiln.Generator().manual_seed(7)
    g2 = kiln.Generator().manual_seed(7)
    x1 = kiln.rand(4, generator=g1)
    x2 = kiln.rand(4, generator=g1)
    assert not np.array_equal(x1.numpy(), x2.numpy())
    np.testing.assert_array_equal(x1.numpy(), kiln.rand(4, generator=g2).numpy())


def test_state_round_trip():
    kiln.manual_seed(5)
    kiln.rand(3)
    state = kiln.get_rng_state()
    a = kiln.randn(4)
    kiln.set_rng_state(state)
    np.testing.assert_array_equal(a.numpy(), kiln.randn(4).numpy())


def test_rand_is_uniform_in_unit_interval():
    x = kiln.rand(200_000).numpy()
    assert x.min() >= 0.0 and x.max() < 1.0
    assert abs(x.mean() - 0.5) < 0.005
    assert abs(x.var() - 1 / 12) < 0.002


def test_randn_moments():
    x = kiln.randn(200_000).numpy().astype(np.float64)
    assert abs(x.mean()) < 0.01
    assert abs(x.std() - 1.0) < 0.01
    assert abs(((x - x.mean()) ** 3).mean()) < 0.03


def test_randint_randperm_normal_multinomial():
    r = kiln.randint(3, 9, (1000,))
    assert r.dtype is kiln.int64 and r.numpy().min() >= 3 and r.numpy().max() <= 8
    p = kiln.randperm(50)
    assert sorted(p.tolist()) == list(range(50))
    n = kiln.normal(2.0, 0.5, (50_000,)).numpy()
    assert abs(n.mean() - 2.0) < 0.01 and abs(n.std() - 0.5) < 0.01
    probs = kiln.tensor([0.1, 0.0, 0.9])
    draws = kiln.multinomial(probs, 2000, replacement=True)
    counts = np.bincount(draws.numpy(), minlength=3)
    assert counts[1] == 0 and abs(counts[2] / 2000 - 0.9) < 0.03
    no_repl = kiln.multinomial(kiln.tensor([1.0, 1.0, 1.0, 1.0]), 4)
    assert sorted(no_repl.tolist()) == [0, 1, 2, 3]


def test_random_dtypes_and_devices():
    assert kiln.rand(2, dtype=kiln.float64).dtype is kiln.float64
    assert kiln.randn(2, 2, device="meta").is_meta
    with pytest.raises(RuntimeError, match="CUDA is not available"):
        kiln.randn(2, device="cuda")


# counters and keys that cross the 32-bit word boundaries, the 64-bit wrap and the vector tail
_DRAWS = [(0, 0, 1), (67280421310721, 5, 17), (2**64 - 1, 2**64 - 3, 40), (123, 2**32 - 5, 1003)]


@pytest.mark.parametrize("seed,offset,n", _DRAWS)
def test_machine_code_sampler_draws_the_numpy_definition(seed, offset, n):
    # the samplers eager ops use are compiled code; numpy's passes are the definition (and what
    # runs should the compile fail): every word, uniform and normal must agree
    from kiln.runtime import random as R

    sampler = R._sampler()
    assert sampler is not None, "import kiln installs the machine-code sampler"
    lo, hi = R._counters(offset, n)
    w0, w1 = philox4x32(lo, hi, seed)[:2]
    got0, got1 = sampler.words(seed, offset, n)
    np.testing.assert_array_equal(got0, w0)
    np.testing.assert_array_equal(got1, w1)
    np.testing.assert_array_equal(R.philox_bits(seed, offset, n), w0)
    np.testing.assert_array_equal(R.philox_uniform(seed, offset, n), R.uniform_from_bits(w0))
    np.testing.assert_allclose(
        R.philox_normal(seed, offset, n), R.numpy_normal(w0, w1), rtol=2e-7, atol=1e-7
    )


def test_numpy_sampler_when_the_machine_code_is_missing(monkeypatch, capsys):
    from kiln.runtime import random as R

    def broken():
        raise OSError("no JIT here")

    kiln.manual_seed(3)
    expected = (kiln.rand(37), kiln.randn(37))
    monkeypatch.setattr(R, "_native", [broken, None])
    kiln.manual_seed(3)
    got = (kiln.rand(37), kiln.randn(37))
    warned = capsys.readouterr().err
    assert "numpy draws the numbers" in warned and "no JIT here" in warned
    np.testing.assert_array_equal(got[0].numpy(), expected[0].numpy())
    np.testing.assert_allclose(got[1].numpy(), expected[1].numpy(), rtol=2e-7, atol=1e-7)


@pytest.mark.parametrize("n", [0, 1, 7, 1000, 70000])
def test_randperm_is_the_stable_order_of_its_keys(n):
    # the packed (key, position) sort must give exactly the stable argsort of the draw's words
    from kiln.runtime import random as R

    kiln.manual_seed(11)
    seed, offset = R.default_generator.initial_seed(), R.default_generator._offset
    got = kiln.randperm(n).numpy()
    want = np.argsort(R.philox_bits(seed, offset, n), kind="stable")
    np.testing.assert_array_equal(got, want)
