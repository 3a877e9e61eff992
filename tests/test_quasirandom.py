"""``kiln.quasirandom.SobolEngine`` against ``torch.quasirandom.SobolEngine``.

Unscrambled sequences must equal PyTorch's bit for bit (direction numbers, Gray-code order,
draw / draw_base2 / fast_forward / reset). Scrambled ones do NOT match PyTorch's bits for a
seed: the scramble's random matrices and shift come from kiln's generator, whose stream is not
PyTorch's. They are checked for what scrambling promises instead: one seed gives one sequence,
points stay a (0, m, s)-net's balanced strata, and the mean of a smooth integrand converges.
"""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.quasirandom import SobolEngine
from tests.oracle import assert_raises_alike, needs_torch, torch

pytestmark = needs_torch


def _same(actual, expected) -> None:
    assert str(actual.dtype).split(".")[-1] == str(expected.dtype).split(".")[-1]
    assert np.array_equal(actual.numpy(), expected.numpy())


@pytest.mark.parametrize("dimension", [1, 2, 7, 40, SobolEngine.MAXDIM])
def test_unscrambled_points_equal_pytorchs_bit_for_bit(dimension):
    ours, theirs = SobolEngine(dimension), torch.quasirandom.SobolEngine(dimension)
    _same(ours.sobolstate, theirs.sobolstate)
    for n in (1, 1, 6, 25, 100):
        _same(ours.draw(n, dtype=kiln.float64), theirs.draw(n, dtype=torch.float64))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_draw_follows_the_dtype_and_the_default_dtype(dtype):
    ours, theirs = SobolEngine(5), torch.quasirandom.SobolEngine(5)
    _same(ours.draw(9, dtype=getattr(kiln, dtype)), theirs.draw(9, dtype=getattr(torch, dtype)))
    _same(ours.draw(4), theirs.draw(4))


@pytest.mark.parametrize("skips", [(1,), (3,), (2, 5), (1000, 1), (0, 7)])
def test_fast_forward_skips_exactly_the_points_draw_would_make(skips):
    ours, theirs = SobolEngine(6), torch.quasirandom.SobolEngine(6)
    for n in skips:
        ours.fast_forward(n)
        theirs.fast_forward(n)
        assert ours.num_generated == theirs.num_generated
        _same(ours.draw(5, dtype=kiln.float64), theirs.draw(5, dtype=torch.float64))


def test_reset_starts_the_sequence_again():
    engine = SobolEngine(3)
    first = engine.draw(8)
    engine.draw(5)
    assert np.array_equal(engine.reset().draw(8).numpy(), first.numpy())


def test_draw_base2_gives_powers_of_two_and_refuses_breaking_the_balance():
    ours, theirs = SobolEngine(4), torch.quasirandom.SobolEngine(4)
    _same(ours.draw_base2(3), theirs.draw_base2(3))
    _same(ours.draw_base2(3), theirs.draw_base2(3))
    assert_raises_alike(ValueError, lambda: ours.draw_base2(2), lambda: theirs.draw_base2(2))


def test_draw_writes_into_out():
    out = kiln.empty(0)
    result = SobolEngine(2).draw(4, out=out)
    assert result is out and out.shape == (4, 2)
    _same(out, torch.quasirandom.SobolEngine(2).draw(4))


@pytest.mark.parametrize("dimension", [0, 21202])
def test_dimensions_pytorch_refuses_raise_its_error(dimension):
    assert_raises_alike(
        ValueError,
        lambda: SobolEngine(dimension),
        lambda: torch.quasirandom.SobolEngine(dimension),
    )


def test_dimensions_beyond_kilns_table_raise_a_value_error_naming_the_bound():
    with pytest.raises(ValueError, match=r"\[1, 100\] in kiln"):
        SobolEngine(SobolEngine.MAXDIM + 1)


def test_repr_matches_pytorchs():
    for kwargs in ({}, {"scramble": True, "seed": 4}):
        assert repr(SobolEngine(3, **kwargs)) == repr(torch.quasirandom.SobolEngine(3, **kwargs))


def test_a_seed_gives_one_scrambled_sequence_and_seeds_differ():
    a = SobolEngine(5, scramble=True, seed=11).draw(64)
    b = SobolEngine(5, scramble=True, seed=11).draw(64)
    c = SobolEngine(5, scramble=True, seed=12).draw(64)
    assert np.array_equal(a.numpy(), b.numpy())
    assert not np.array_equal(a.numpy(), c.numpy())
    assert not np.array_equal(a.numpy(), SobolEngine(5).draw(64).numpy())


@pytest.mark.parametrize("scramble", [False, True])
def test_points_fill_each_dyadic_stratum_once_as_pytorchs_do(scramble):
    """The first 2**m points of a Sobol sequence (scrambled or not) put one point in each of
    2**m equal intervals of every coordinate; PyTorch's points do as well."""
    m = 7
    for points in (
        SobolEngine(8, scramble=scramble, seed=0).draw_base2(m, dtype=kiln.float64).numpy(),
        torch.quasirandom.SobolEngine(8, scramble=scramble, seed=0)
        .draw_base2(m, dtype=torch.float64)
        .numpy(),
    ):
        assert ((points >= 0) & (points < 1)).all()
        strata = np.floor(points * 2**m).astype(int)
        for column in strata.T:
            assert np.array_equal(np.sort(column), np.arange(2**m))


def test_scrambled_estimates_converge_like_pytorchs():
    """The mean of prod(1 + (x - 1/2)) / 1 (exact integral 1) over 2**10 scrambled points:
    errors over several seeds are as small as PyTorch's, far below plain Monte Carlo's."""

    def errors(engine_class):
        out = []
        for seed in range(6):
            x = engine_class(6, scramble=True, seed=seed).draw_base2(10, dtype=None).numpy()
            out.append(abs(np.prod(1 + (x.astype(np.float64) - 0.5), axis=1).mean() - 1))
        return np.array(out)

    ours, theirs = errors(SobolEngine), errors(torch.quasirandom.SobolEngine)
    assert ours.max() < 5e-3 and theirs.max() < 5e-3
    assert ours.mean() < 4 * theirs.mean() + 1e-4


def test_scramble_keeps_the_first_point_off_zero_and_uses_the_shift():
    engine = SobolEngine(3, scramble=True, seed=5)
    first = engine.draw(1, dtype=kiln.float64).numpy()[0]
    assert np.allclose(first, engine.shift.numpy() / 2**30, atol=2**-24)
    assert (first > 0).any()


def test_the_scramble_transform_equals_pytorchs_for_the_same_random_bits():
    """Only the random bits differ from PyTorch's scrambling: fed PyTorch's lower-triangular
    matrices, kiln's transform of the direction numbers gives PyTorch's bit for bit."""
    from kiln.quasirandom import scramble_state, sobol_state

    state = torch.zeros(12, 30, dtype=torch.long)
    torch._sobol_engine_initialize_state_(state, 12)
    lower = torch.randint(2, (12, 30, 30), generator=torch.Generator().manual_seed(0)).tril()
    torch._sobol_engine_scramble_(state, lower, 12)
    assert np.array_equal(scramble_state(sobol_state(12), lower.numpy()), state.numpy())
