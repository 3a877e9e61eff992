"""The capture frontend's fuzzer in the suite: a fixed set of drawn programs (control flow,
containers, closures, globals, graph breaks, in-place ops, modules; several calls with changing
sizes, dtypes and requires_grad), each compiled with every backend and compared with eager kiln,
and eager kiln compared with PyTorch. ``python -m tests.fuzz.frontend_campaign`` runs thousands.
"""

from __future__ import annotations

import pytest

from tests.oracle import needs_torch

from .frontend_campaign import report
from .frontend_differential import find_mismatch
from .frontend_programs import draw_program

# seeds 0-14; the inductor checks (slower: LLVM) on every fifth one
_SEEDS = range(15)


def _check(seed: int, check: str) -> None:
    program = draw_program(seed)
    problem = find_mismatch(program, check)
    assert problem is None, report(program, check, problem)


@needs_torch
@pytest.mark.parametrize("seed", _SEEDS)
def test_eager_kiln_runs_frontend_programs_as_pytorch(seed):
    _check(seed, "pytorch")


@pytest.mark.parametrize("check", ["eager", "aot_eager"])
@pytest.mark.parametrize("seed", _SEEDS)
def test_compiled_frontend_programs_match_eager(seed, check):
    _check(seed, check)


@pytest.mark.parametrize("check", ["inductor", "inductor-dynamic"])
@pytest.mark.parametrize("seed", _SEEDS[::5])
def test_inductor_frontend_programs_match_eager(seed, check):
    _check(seed, check)
