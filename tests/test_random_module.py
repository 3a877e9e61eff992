"""``kiln.random`` (torch.random), ``kiln.nn.attention`` and ``set_flush_denormal``."""

from __future__ import annotations

import pytest

import kiln
from kiln.nn.attention import SDPBackend, current_backends, sdpa_kernel


def test_fork_rng_restores_the_stream():
    kiln.manual_seed(3)
    first = kiln.rand(3)
    with kiln.random.fork_rng():
        kiln.rand(100)
    after = kiln.rand(3)
    kiln.manual_seed(3)
    assert kiln.equal(kiln.rand(3), first)
    assert kiln.equal(kiln.rand(3), after)
    with kiln.random.fork_rng(enabled=False):
        kiln.rand(1)
    assert kiln.random.initial_seed() == 3
    assert kiln.random.default_generator is kiln.default_generator


def test_sdpa_kernel_selects_and_restores():
    q = kiln.randn(1, 2, 4, 8)
    expected = kiln.nn.functional.scaled_dot_product_attention(q, q, q)
    with sdpa_kernel([SDPBackend.MATH, SDPBackend.FLASH_ATTENTION]):
        assert current_backends() == {SDPBackend.MATH, SDPBackend.FLASH_ATTENTION}
        with sdpa_kernel(SDPBackend.MATH):
            got = kiln.nn.functional.scaled_dot_product_attention(q, q, q)
            assert current_backends() == {SDPBackend.MATH}
    assert SDPBackend.MATH in current_backends() and len(current_backends()) == 5
    assert kiln.equal(got, expected)
    with pytest.raises(AssertionError, match="SDPBackend"):
        with sdpa_kernel(["math"]):
            pass


def test_set_flush_denormal_reports_unsupported():
    assert kiln.set_flush_denormal(True) is False
    with pytest.raises(RuntimeError, match="bool"):
        kiln.set_flush_denormal(1)
