"""A few programs drawn mostly from the dtype rules (dtype_rules.py) and the reduction rules
(reduction_rules.py), checked eagerly against PyTorch and compiled against eager kiln; and the
rules' dtype promotion against PyTorch's own. The long campaigns run them with ``--focus``."""

from __future__ import annotations

import dataclasses
import itertools

import pytest
from hypothesis import HealthCheck, given, settings

from tests.oracle import needs_torch, torch

from .builder import promote
from .differential import check_backend, check_eager
from .dtype_rules import result_type
from .generator import FAMILIES, config_for, programs


def _focused(check: str, family: str):
    return dataclasses.replace(config_for(check), focus=frozenset(FAMILIES[family]))


def _settings(count: int):
    return settings(max_examples=count, deadline=None, derandomize=True, database=None,
                    suppress_health_check=list(HealthCheck))  # fmt: skip


@needs_torch
@pytest.mark.parametrize("family", ["dtype", "reduction"])
def test_focused_programs_match_pytorch(family):
    @_settings(12)
    @given(programs(_focused("pytorch", family)))
    def check(program):
        check_eager(program)

    check()


@pytest.mark.parametrize("family", ["dtype", "reduction"])
def test_focused_programs_compile_as_eager(family):
    @_settings(3)
    @given(programs(_focused("aot_eager", family)))
    def check(program):
        check_backend(program, "aot_eager")

    check()


_DTYPES = ("bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32",
           "float64")  # fmt: skip


@needs_torch
def test_the_rules_promote_as_pytorch():
    """promote (two tensors) and result_type (tensors, 0-d tensors and Python numbers) give
    torch.result_type's dtype for every pair."""
    numbers = {"bool": True, "int64": 3, "float32": 2.5}
    for a, b in itertools.product(_DTYPES, repeat=2):
        x = torch.ones(2, dtype=getattr(torch, a))
        for kind in ("tensor", "zero_dim", "scalar"):
            if kind == "scalar" and b not in numbers:
                continue
            other = {
                "tensor": torch.ones(2, dtype=getattr(torch, b)),
                "zero_dim": torch.ones((), dtype=getattr(torch, b)),
                "scalar": numbers.get(b),
            }[kind]
            expected = str(torch.result_type(x, other)).split(".")[-1]
            assert result_type([(a, "tensor"), (b, kind)]) == expected, (a, b, kind)
        assert (
            promote(a, b)
            == str(torch.promote_types(getattr(torch, a), getattr(torch, b))).split(".")[-1]
        )
