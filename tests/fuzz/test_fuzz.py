"""The differential fuzzer: random programs, eager kiln against PyTorch and every backend against
eager kiln (values, dtypes, NaN/inf placement, requires_grad, in-place effects, gradients).

Profiles (``KILN_FUZZ``): ``fast`` (the default, in the suite: a fixed set of a few hundred
programs spread over the backends, derandomized so every run checks the same ones) and ``long``
(on demand: thousands of fresh random programs, ``KILN_FUZZ_SCALE`` multiplies the counts).
Hypothesis shrinks a failing program before reporting it; the report holds a reproducer and the
entry to add to tests/fuzz/regressions.py.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings

from tests.oracle import needs_torch

from .differential import BACKENDS, check_backend, check_eager
from .generator import COUNTS, config_for, programs

PROFILE = os.environ.get("KILN_FUZZ", "fast")
if PROFILE not in ("fast", "long"):
    raise ValueError(f"KILN_FUZZ must be 'fast' or 'long', got {PROFILE!r}")

_COUNTS = COUNTS[PROFILE]
_SCALE = float(os.environ.get("KILN_FUZZ_SCALE", "1"))


def _settings(check: str):
    return settings(
        max_examples=max(1, int(_COUNTS[check] * _SCALE)),
        deadline=None,
        derandomize=PROFILE == "fast",
        database=None if PROFILE == "fast" else settings.default.database,
        suppress_health_check=[
            HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much,
        ],
        print_blob=PROFILE == "long",
    )  # fmt: skip


@needs_torch
def test_eager_programs_match_pytorch():
    @_settings("pytorch")
    @given(programs(config_for("pytorch", PROFILE)))
    def check(program):
        check_eager(program)

    check()


@pytest.mark.parametrize("backend", list(BACKENDS))
def test_compiled_programs_match_eager(backend):
    @_settings(backend)
    @given(programs(config_for(backend, PROFILE)))
    def check(program):
        check_backend(program, backend)

    check()
