"""Shared test setup: a fixed seed per test so failures reproduce."""

from __future__ import annotations

import numpy as np
import pytest

import kiln


@pytest.fixture(autouse=True)
def _seed():
    kiln.manual_seed(0)
    np.random.seed(0)
    yield
