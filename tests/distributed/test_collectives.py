"""Every collective, sync and async, on 1, 2 and 3 ranks against numpy (``rank_collectives.py``
does the checking inside the ranks; one job per world size)."""

from __future__ import annotations

import pytest

from tests.distributed.launch import failed_checks, report, run_ranks

pytestmark = pytest.mark.distributed


@pytest.mark.parametrize("ranks", [1, 2, 3])
def test_every_collective_matches_numpy(ranks):
    job = run_ranks("rank_collectives.py", ranks, timeout=180)
    assert job.returncode == 0, report(job)
    assert not job.leftovers, f"processes left behind: {job.leftovers}"
    assert sorted(job.results) == list(range(ranks)), report(job)
    failures = failed_checks(job)
    assert not failures, "\n\n".join(failures)
    counts = {len(res["checks"]) for res in job.results.values()}
    assert len(counts) == 1 and counts.pop() > 100  # every rank ran every check
