"""The benchmark's workloads compute the same thing in kiln and in PyTorch (quick shapes)."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.bench.workloads import WORKLOADS, get_workload
from tests.oracle import needs_torch, torch


def _first(out) -> np.ndarray:
    while isinstance(out, (tuple, list)):
        out = out[0]
    return out.detach().cpu().numpy()


@needs_torch
@pytest.mark.parametrize("name", WORKLOADS)
def test_first_steps_match_pytorch(name):
    workload = WORKLOADS[name]
    ours = workload.build(kiln, True, "cpu")
    theirs = workload.build(torch, True, "cpu")
    assert len(ours.arg_sets) == len(theirs.arg_sets)
    # a training step's second loss sees the update; a varying batch, every batch size
    steps = max(2 if workload.trains else 1, len(ours.arg_sets))
    for step in range(steps):
        expected = _first(theirs.fn(*theirs.arg_sets[step % len(theirs.arg_sets)]))
        got = _first(ours.fn(*ours.arg_sets[step % len(ours.arg_sets)]))
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)


def test_a_varying_batch_workload_changes_the_batch_every_step():
    instance = get_workload("mlp_train_step_varying_batch").build(kiln, True, "cpu")
    batches = [x.shape[0] for x, _ in instance.arg_sets]
    assert len(set(batches)) == len(batches) > 2 and instance.args is instance.arg_sets[0]


def test_instances_start_from_identical_values():
    a = get_workload("mlp_forward").build(kiln, True, "cpu")
    b = get_workload("mlp_forward").build(kiln, True, "cpu")
    np.testing.assert_array_equal(a.args[0].numpy(), b.args[0].numpy())
    np.testing.assert_array_equal(_first(a.fn(*a.args)), _first(b.fn(*b.args)))


def test_unknown_workload_lists_the_known_ones():
    with pytest.raises(KeyError, match="pointwise_chain"):
        get_workload("matmul_chain")


def test_dcgan_compiles_its_models_and_matches_its_eager_step():
    workload = get_workload("dcgan_train_step")
    eager = workload.build(kiln, True, "cpu")
    compiled_instance = workload.build(kiln, True, "cpu")
    step = compiled_instance.compiled(kiln.compile)
    assert step is not compiled_instance.fn
    for _ in range(2):  # the second step sees both optimizers' updates
        expected = [t.item() for t in eager.fn(*eager.args)]
        got = [t.item() for t in step(*compiled_instance.args)]
        np.testing.assert_allclose(got, expected, rtol=1e-4)
