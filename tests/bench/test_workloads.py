"""The benchmark's workloads compute the same thing in kiln and in PyTorch (quick shapes)."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.bench.workloads import DEFAULT_SUITE, WORKLOADS, get_workload
from tests.oracle import needs_torch, torch


def _first(out) -> np.ndarray:
    while isinstance(out, (tuple, list)):
        out = out[0]
    return out.detach().cpu().numpy()


@needs_torch
@pytest.mark.parametrize("name", DEFAULT_SUITE)
def test_first_step_matches_pytorch(name):
    workload = WORKLOADS[name]
    ours = workload.build(kiln, True, "cpu")
    theirs = workload.build(torch, True, "cpu")
    for _ in range(2 if workload.trains else 1):  # a training step's second loss sees the update
        expected = _first(theirs.fn(*theirs.args))
        got = _first(ours.fn(*ours.args))
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)


def test_instances_start_from_identical_values():
    a = get_workload("mlp_forward").build(kiln, True, "cpu")
    b = get_workload("mlp_forward").build(kiln, True, "cpu")
    np.testing.assert_array_equal(a.args[0].numpy(), b.args[0].numpy())
    np.testing.assert_array_equal(_first(a.fn(*a.args)), _first(b.fn(*b.args)))


def test_unknown_workload_lists_the_known_ones():
    with pytest.raises(KeyError, match="pointwise_chain"):
        get_workload("matmul_chain")
