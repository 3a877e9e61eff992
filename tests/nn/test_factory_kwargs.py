"""``nn.factory_kwargs`` against PyTorch: the merged factory arguments and the errors."""

from __future__ import annotations

import pytest

import kiln
from tests.oracle import first_lines_of_errors, needs_torch, torch

pytestmark = needs_torch


def _spec(lib, case):
    return {
        "none": None,
        "empty": {},
        "plain": {"dtype": lib.float64, "device": "cpu"},
        "nested": {"dtype": lib.float64, "factory_kwargs": {"device": "cpu"}},
        "memory": {"memory_format": lib.channels_last},
    }[case]


@pytest.mark.parametrize("case", ["none", "empty", "plain", "nested", "memory"])
def test_factory_kwargs_merges_as_pytorch(case):
    got = kiln.nn.factory_kwargs(_spec(kiln, case))
    want = torch.nn.factory_kwargs(_spec(torch, case))
    assert sorted(got) == sorted(want)
    assert {k: str(v).replace("kiln", "torch") for k, v in got.items()} == {
        k: str(v) for k, v in want.items()
    }


@pytest.mark.parametrize(
    "spec",
    [
        lambda lib: {"size": 3},
        lambda lib: {"dtype": lib.float32, "factory_kwargs": {"dtype": lib.float64}},
    ],
)
def test_factory_kwargs_refuses_what_pytorch_refuses(spec):
    got, want = first_lines_of_errors(
        lambda: kiln.nn.factory_kwargs(spec(kiln)), lambda: torch.nn.factory_kwargs(spec(torch))
    )
    assert got == want
