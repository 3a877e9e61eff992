"""Run inside each of 2 ranks: rank 1 fails in the way ``argv[1]`` names while rank 0 waits in
a collective. Every rank records when it failed or started waiting (``emit``), so the test can
tell how long the failure took to end the job."""

from __future__ import annotations

import datetime
import os
import sys
import time

import kiln
import kiln.distributed as dist
from tests.distributed.launch import emit

mode = sys.argv[1]
dist.init_process_group("mpi", timeout=datetime.timedelta(seconds=float(sys.argv[2])))
rank = dist.get_rank()
t = kiln.ones(4)
dist.all_reduce(t)  # the group works
assert t.tolist() == [2.0] * 4
emit({"rank": rank, "time": time.time()})
if mode == "mismatch":  # with KILN_DISTRIBUTED_DEBUG=1: shapes differ across the ranks
    try:
        dist.all_reduce(kiln.ones(4 + rank))
    except RuntimeError as error:
        # one write (atomic on a pipe): the traceback below is printed in pieces, which the
        # other rank's may cut into
        os.write(2, f"{type(error).__name__}: {error}\n".encode())
        raise
elif rank == 1:
    if mode == "raise":
        raise ValueError("rank 1 fails on purpose")
    if mode == "kill":
        os.kill(os.getpid(), 9)
    if mode == "exit":
        sys.exit(3)
    if mode == "hang":
        time.sleep(60)
dist.all_reduce(t)
print("rank", rank, "was not stopped")
