"""Capture tests see internal errors (users get an eager fallback instead) and start clean."""

from __future__ import annotations

import pytest

import kiln
from kiln.dynamo import config


@pytest.fixture(autouse=True)
def _strict_capture(monkeypatch):
    monkeypatch.setattr(config, "suppress_errors", False)
    yield
    kiln.dynamo.reset()


@pytest.fixture
def default_stance():
    """Tests that change ``kiln.compiler.set_stance`` get the default stance back."""
    yield
    kiln.compiler.set_stance("default")
