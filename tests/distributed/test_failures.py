"""A failing rank ends the whole job within seconds, with errors naming it and nothing left
running: a rank that raises, one that is killed, one that exits with a status, one that hangs
(the group's timeout), collectives that differ across ranks (KILN_DISTRIBUTED_DEBUG=1), and a
collective before ``init_process_group``."""

from __future__ import annotations

import re
import time

import pytest

import kiln
import kiln.distributed as dist
from tests.distributed.launch import report, run_launcher, run_ranks
from tests.oracle import needs_torch, torch

pytestmark = pytest.mark.distributed

# the ranks start, run one collective, then rank 1 fails; all of that must end this soon after
_SECONDS_AFTER_FAILURE = 12.0


def _ended_soon(job) -> None:
    assert job.results, report(job)
    failed_at = max(r["time"] for r in job.results.values())
    ended = time.time()  # the job has ended when its results are read
    assert ended - failed_at < _SECONDS_AFTER_FAILURE + 1.5, report(job)
    assert not job.leftovers, f"processes left behind: {job.leftovers}"


def test_a_rank_that_raises_fails_every_rank_naming_it():
    job = run_launcher("rank_failures.py", 2, "raise", "60", timeout=120)
    _ended_soon(job)
    assert job.returncode == 1, report(job)
    assert "ValueError: rank 1 fails on purpose" in job.output, report(job)
    assert re.search(
        r"\[rank0\]: .*DistBackendError: \[rank 0\] rank 1 failed \(ValueError: rank 1 fails on "
        r"purpose\) while rank 0 was waiting in all_reduce",
        job.output,
    ), report(job)
    assert "kiln.distributed.run: rank 1 failed first: ValueError: rank 1 fails" in job.stderr
    assert "was not stopped" not in job.output


def test_a_killed_rank_fails_every_rank_naming_it():
    job = run_launcher("rank_failures.py", 2, "kill", "60", timeout=120)
    _ended_soon(job)
    assert job.returncode == 128 + 9, report(job)
    assert re.search(
        r"\[rank0\]: .*DistBackendError: \[rank 0\] rank 1 \(pid \d+\) was killed by signal 9 "
        r"\(SIGKILL\) while rank 0 was waiting in all_reduce",
        job.output,
    ), report(job)
    assert re.search(r"kiln.distributed.run: rank 1 \(pid \d+\) was killed by signal 9", job.stderr)


def test_a_rank_exit_status_ends_the_job_with_that_status():
    job = run_launcher("rank_failures.py", 2, "exit", "60", timeout=120)
    _ended_soon(job)
    assert job.returncode == 3, report(job)
    assert (
        "DistBackendError: [rank 0] rank 1 failed (exited with status 3) while rank 0 was "
        "waiting in all_reduce" in job.output
    ), report(job)
    assert "kiln.distributed.run: rank 1 failed first: exited with status 3" in job.stderr


def test_a_rank_that_never_arrives_times_out_by_the_group_timeout():
    job = run_launcher("rank_failures.py", 2, "hang", "2", timeout=120)
    _ended_soon(job)
    assert job.returncode == 1, report(job)
    assert re.search(
        r"\[rank0\]: .*DistBackendError: \[rank 0\] all_reduce \(collective #2 of process group "
        r"0, 2 ranks\) did not complete within 2 s",
        job.output,
    ), report(job)


def test_mismatched_collectives_are_reported_with_debug_checks():
    # started with plain mpiexec: the failure handling lives in the ranks, not the launcher
    job = run_ranks("rank_failures.py", 2, "mismatch", "60", env={"KILN_DISTRIBUTED_DEBUG": "1"})
    _ended_soon(job)
    assert job.returncode != 0, report(job)
    for rank, other in ((0, 1), (1, 0)):
        assert (
            f"RuntimeError: Detected mismatch between collectives on ranks. Rank {rank} is "
            f"running collective: CollectiveFingerPrint(SequenceNumber=2, OpType=ALL_REDUCE, "
            f"TensorShape=[[{4 + rank}]], TensorDtypes=float32, TensorDeviceTypes=cpu, "
            f"ReduceOp=SUM), but Rank {other} is running collective: "
            f"CollectiveFingerPrint(SequenceNumber=2, OpType=ALL_REDUCE, "
            f"TensorShape=[[{4 + other}]]"
        ) in job.output, report(job)


@needs_torch
@pytest.mark.parametrize(
    "call",
    [
        lambda lib, d: d.all_reduce(lib.ones(2)),
        lambda lib, d: d.broadcast(lib.ones(2), src=0),
        lambda lib, d: d.barrier(),
        lambda lib, d: d.get_rank(),
        lambda lib, d: d.get_world_size(),
    ],
)
def test_a_collective_before_init_process_group_names_the_fix_like_torch(call):
    with pytest.raises(ValueError) as ours:
        call(kiln, dist)
    with pytest.raises(ValueError) as theirs:
        call(torch, torch.distributed)
    assert str(ours.value) == str(theirs.value)
    assert "init_process_group" in str(ours.value)
