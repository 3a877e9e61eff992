"""2-rank training of a tiny GPT equals single-process training on the whole batch: DDP eager
and compiled, fully_shard eager and compiled (with half the parameter memory per rank); and
DDP's features. One 2-rank job (``rank_training.py``); the reference trains here."""

from __future__ import annotations

import numpy as np
import pytest

from tests.distributed.launch import failed_checks, report, run_ranks
from tests.distributed.training_setup import reference_training

pytestmark = pytest.mark.distributed

RUNS = ("ddp_eager", "ddp_compiled", "fsdp", "fsdp_compiled")


@pytest.fixture(scope="module")
def job():
    job = run_ranks("rank_training.py", 2, timeout=600)
    assert job.returncode == 0, report(job)
    assert not job.leftovers, f"processes left behind: {job.leftovers}"
    assert sorted(job.results) == [0, 1], report(job)
    return job


@pytest.fixture(scope="module")
def reference():
    return reference_training()


@pytest.mark.parametrize("run", RUNS)
def test_two_rank_training_equals_single_process_training(job, reference, run):
    losses, params, _ = reference
    for rank, result in job.results.items():
        ours = result["runs"][run]
        np.testing.assert_allclose(ours["losses"], losses, rtol=1e-5, err_msg=f"{run} rank {rank}")
        assert set(params) <= set(ours["params"]), sorted(set(params) - set(ours["params"]))
        for name, value in params.items():
            np.testing.assert_allclose(
                np.array(ours["params"][name]), value, rtol=1e-5, atol=1e-8,
                err_msg=f"{run}: parameter {name} on rank {rank}",
            )  # fmt: skip


def test_compiled_ddp_graph_is_split_into_bucket_sized_pieces(job):
    for result in job.results.values():
        run = result["runs"]["ddp_compiled"]
        assert run["buckets"] > 1
        assert run["pieces"] > 1, "the compiled backward is one node: no bucket can start early"


def test_fully_shard_keeps_half_the_parameter_gradient_and_optimizer_memory(job):
    for result in job.results.values():
        sharded = result["runs"]["fsdp"]["bytes"]
        replicated = result["runs"]["ddp_eager"]["bytes"]
        full = result["runs"]["fsdp"]["full_parameter_bytes"]
        assert replicated["parameters"] == full
        for kind in ("parameters", "gradients", "optimizer"):
            ratio = sharded[kind] / replicated[kind]
            assert 0.45 <= ratio <= 0.55, f"{kind}: {sharded[kind]} of {replicated[kind]} bytes"


def test_fully_shard_module_state_dict_holds_shards_under_the_original_names(job, reference):
    _, _, keys = reference
    for result in job.results.values():
        assert result["runs"]["fsdp"]["is_fsdp_module"]
        assert result["runs"]["fsdp"]["sharded_keys"] == keys


def test_ddp_features_and_state_dicts(job):
    failures = failed_checks(job)
    assert not failures, "\n\n".join(failures)
    assert len(job.results[0]["checks"]) == 12
