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
from .generator import FuzzConfig, known_issues_for, programs

PROFILE = os.environ.get("KILN_FUZZ", "fast")
if PROFILE not in ("fast", "long"):
    raise ValueError(f"KILN_FUZZ must be 'fast' or 'long', got {PROFILE!r}")

# programs per check; compiling is the cost (~50-300 ms a graph with LLVM, more with Triton's
# interpreter), so the fast profile spreads its programs over the backends
_COUNTS = {
    "fast": {
        "pytorch": 150, "eager": 40, "aot_eager": 50, "inductor": 60, "inductor-numpy": 40,
        "inductor-triton": 12, "inductor-verify": 25,
    },
    "long": {
        "pytorch": 3000, "eager": 600, "aot_eager": 800, "inductor": 1200, "inductor-numpy": 800,
        "inductor-triton": 200, "inductor-verify": 400,
    },
}[PROFILE]  # fmt: skip
_SCALE = float(os.environ.get("KILN_FUZZ_SCALE", "1"))


def config_for(check: str) -> FuzzConfig:
    """Programs for ``check``: Triton's interpreter runs each program instance as numpy code, so
    its tensors are smaller; known bugs another change is fixing are left out (KNOWN_ISSUES)."""
    if check == "inductor-triton":
        return FuzzConfig(max_lines=5, max_numel=24, known_issues=known_issues_for(check))
    lines = 6 if PROFILE == "fast" else 8
    return FuzzConfig(max_lines=lines, known_issues=known_issues_for(check))


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
    @given(programs(config_for("pytorch")))
    def check(program):
        check_eager(program)

    check()


@pytest.mark.parametrize("backend", list(BACKENDS))
def test_compiled_programs_match_eager(backend):
    @_settings(backend)
    @given(programs(config_for(backend)))
    def check(program):
        check_backend(program, backend)

    check()
