"""Every program in tests/fuzz/regressions.py, checked the way the fuzzer found it failing."""

from __future__ import annotations

import pytest

from tests.oracle import torch

from .differential import check_backend, check_eager
from .generator import KNOWN_ISSUES
from .regressions import REGRESSIONS


def _params():
    for number, case in enumerate(REGRESSIONS):
        for check in case.backends or ("pytorch",):
            marks = []
            if check in case.xfail:
                key = case.xfail[check]
                reason = f"known issue {key!r}: {KNOWN_ISSUES[key][0]}"
                marks.append(pytest.mark.xfail(strict=True, reason=reason))
            if check == "pytorch" and torch is None:
                marks.append(pytest.mark.skip(reason="PyTorch (the oracle) is not installed"))
            yield pytest.param(case, check, id=f"{number}-{check}", marks=marks)


@pytest.mark.parametrize("case,check", list(_params()))
def test_regression(case, check):
    """Strides are compared too: every case's outputs already have PyTorch's layout."""
    if check == "pytorch":
        check_eager(case.program, strides=True)
    else:
        check_backend(case.program, check, strides=True)


def test_every_known_issue_has_a_regression_that_shows_it():
    """A bug the generator leaves out must stay covered: each KNOWN_ISSUES entry is the reason
    of a strict xfail here, for one of the checks the entry says it breaks."""
    used = {(key, check) for case in REGRESSIONS for check, key in case.xfail.items()}
    for key, (_, checks) in KNOWN_ISSUES.items():
        assert any((key, check) in used for check in checks), f"no regression shows {key!r}"
    assert {key for key, _ in used} <= set(KNOWN_ISSUES)
