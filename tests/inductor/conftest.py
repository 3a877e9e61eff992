"""Fixtures shared by the inductor tests."""

from __future__ import annotations

import pytest

import kiln
from kiln.inductor.specialize import COMPILE_STATS


@pytest.fixture
def stats():
    """The inductor's compile counters, from zero, with dynamo's caches empty around the test."""
    COMPILE_STATS.reset()
    kiln.dynamo.reset()
    yield COMPILE_STATS
    kiln.dynamo.reset()
