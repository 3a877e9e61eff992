"""AOT tests must see compile failures: a backend error would otherwise fall back to eager with
a RuntimeWarning, and a compiled-vs-eager comparison would pass without compiling anything."""

from __future__ import annotations

import warnings

import pytest

import kiln
from kiln.dynamo import config


@pytest.fixture(autouse=True)
def _strict_compile(monkeypatch):
    monkeypatch.setattr(config, "suppress_errors", False)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="backend .* failed to compile")
        yield
    kiln.dynamo.reset()
