"""kiln.distributed on this machine: all-reduce bandwidth against raw mpi4py, and how much of
DDP's communication backward hides.

    python benchmarks/distributed_bench.py [--quick] [--compiled]

Starts two jobs through the launcher (``python -m kiln.distributed.run``):

1. 2 ranks, all-reduce: ``dist.all_reduce`` of a 4 MB float32 tensor against mpi4py's
   ``Allreduce(MPI.IN_PLACE, ...)`` of the same numpy buffer, calls alternating so that machine
   noise hits both; medians, as algorithm bandwidth (bytes reduced per second per rank).
2. 1 rank, then 2 ranks: a GPT training step (4 blocks, width 256, 8 sequences of 64 tokens per
   rank, AdamW) -- plainly on one rank, in ``DistributedDataParallel`` (1 MB buckets) on two.
   Per step on two ranks it reads how long backward waited at its end for all-reduces still in
   flight (``communication_wait_seconds``), and it times the same buckets' all-reduces alone,
   one after another: the communication DDP has to hide. A rank that finishes its backward
   first also waits for the other rank's compute (skew, large on a loaded machine), so the
   wait counted is the one of the rank that finished last, which waits only for communication:
   hidden = 1 - that wait / the all-reduces alone. The step times of one and two ranks are shown
   too; their difference also holds the contention for this machine's two cores, which makes it
   a noisy measure of communication.

Each rank uses one thread (OMP_NUM_THREADS=1, kiln.set_num_threads(1)). The report ends with
the load average, since other processes on a small machine move every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

MB4 = 1 << 20  # float32 elements in 4 MB


def _median_seconds(fn, number: int) -> float:
    times = []
    for _ in range(number):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def allreduce_job(rounds: int) -> dict:
    import numpy as np
    from mpi4py import MPI

    import kiln
    import kiln.distributed as dist

    dist.init_process_group("mpi")
    comm = MPI.COMM_WORLD.Dup()
    array = np.ones(MB4, np.float32)
    tensor = kiln.from_numpy(array)  # the same memory
    kiln_times, mpi_times = [], []
    for _ in range(3):  # warm-up
        dist.all_reduce(tensor)
        comm.Allreduce(MPI.IN_PLACE, array)
    timers = [
        (kiln_times, lambda: dist.all_reduce(tensor)),
        (mpi_times, lambda: comm.Allreduce(MPI.IN_PLACE, array)),
    ]
    for r in range(rounds):
        for times, fn in timers if r % 2 else reversed(timers):  # alternate who goes first
            comm.Barrier()
            times.append(_median_seconds(fn, 5))
    return {
        "bytes": array.nbytes,
        "kiln_seconds": statistics.median(kiln_times),
        "mpi4py_seconds": statistics.median(mpi_times),
    }


def _gpt(kiln):
    import kiln.nn as nn
    import kiln.nn.functional as F
    from kiln.bench.workloads import models_for

    class GPT(nn.Module):
        def __init__(self, vocab=64, block=64, width=256, layers=4, heads=4):
            super().__init__()
            self.token = nn.Embedding(vocab, width)
            self.position = nn.Embedding(block, width)
            blocks = [models_for(kiln).Block(width, heads, block) for _ in range(layers)]
            self.blocks = nn.Sequential(*blocks)
            self.norm = nn.LayerNorm(width)
            self.head = nn.Linear(width, vocab, bias=False)

        def forward(self, idx, targets):
            x = self.token(idx) + self.position(kiln.arange(idx.shape[1]))
            logits = self.head(self.norm(self.blocks(x)))
            return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))

    return GPT()


def step_job(steps: int, compiled: bool) -> dict:
    import numpy as np

    import kiln
    import kiln.distributed as dist
    from kiln.nn.parallel import DistributedDataParallel

    dist.init_process_group("mpi")
    kiln.set_num_threads(1)
    world, rank = dist.get_world_size(), dist.get_rank()
    kiln.manual_seed(0)
    model = _gpt(kiln)
    trained = DistributedDataParallel(model, bucket_cap_mb=1) if world > 1 else model
    optimizer = kiln.optim.AdamW(trained.parameters(), lr=1e-3)

    def step(idx, targets):
        optimizer.zero_grad()
        loss = trained(idx, targets)
        loss.backward()
        optimizer.step()
        return loss

    run = kiln.compile(step) if compiled else step
    g = np.random.default_rng(rank)
    batches = [
        (kiln.tensor(g.integers(0, 64, (8, 64))), kiln.tensor(g.integers(0, 64, (8, 64))))
        for _ in range(4)
    ]
    for i in range(3):  # warm-up (and compile)
        run(*batches[i % 4])
    times, waits = [], []
    for i in range(steps):
        if world > 1:
            dist.barrier()
        start = time.perf_counter()
        run(*batches[i % 4])
        times.append(time.perf_counter() - start)
        if world > 1:
            waits.append(trained.communication_wait_seconds())
    result = {"world": world, "step_seconds": statistics.median(times)}
    if world > 1:
        everyone = [None] * world
        dist.all_gather_object(everyone, waits)
        per_step = list(zip(*everyone))
        buckets = [kiln.zeros(n // 4) for n in trained.bucket_sizes()]
        alone = []
        for _ in range(steps):
            dist.barrier()
            start = time.perf_counter()
            for b in buckets:
                dist.all_reduce(b, op=dist.ReduceOp.AVG)
            alone.append(time.perf_counter() - start)
        result.update(
            wait_seconds=statistics.median(min(w) for w in per_step),
            first_rank_wait_seconds=statistics.median(max(w) for w in per_step),
            allreduce_alone_seconds=statistics.median(alone),
            bucket_bytes=trained.bucket_sizes(),
            parameter_bytes=sum(p.nbytes for p in model.parameters()),
        )
    return result


def _launch(ranks: int, role: str, args: argparse.Namespace) -> dict:
    with tempfile.TemporaryDirectory() as out:
        path = os.path.join(out, "result.json")
        command = [
            sys.executable, "-m", "kiln.distributed.run", "--nproc-per-node", str(ranks),
            "--local-ranks-filter", "0", os.path.abspath(__file__), "--role", role,
            "--output", path, *(["--quick"] if args.quick else []),
            *(["--compiled"] if args.compiled else []),
        ]  # fmt: skip
        env = dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS="1")
        subprocess.run(command, check=True, env=env)
        with open(path) as f:
            return json.load(f)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument("--compiled", action="store_true", help="time the kiln.compile'd step")
    parser.add_argument("--role", choices=["allreduce", "step"], help=argparse.SUPPRESS)
    parser.add_argument("--output", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role is not None:  # inside a rank
        if args.role == "allreduce":
            result = allreduce_job(5 if args.quick else 15)
        else:
            result = step_job(5 if args.quick else 12, args.compiled)
        import kiln.distributed as dist

        if dist.get_rank() == 0:
            with open(args.output, "w") as f:
                json.dump(result, f)
        return

    load_before = os.getloadavg()
    reduce = _launch(2, "allreduce", args)
    one = _launch(1, "step", args)
    two = _launch(2, "step", args)
    gb = reduce["bytes"] / 1e9
    ours, raw = gb / reduce["kiln_seconds"], gb / reduce["mpi4py_seconds"]
    print(f"\nall-reduce of {reduce['bytes'] >> 20} MB float32 on 2 ranks (median):")
    print(
        f"  kiln.distributed.all_reduce  {ours:6.2f} GB/s  ({reduce['kiln_seconds'] * 1e3:.2f} ms)"
    )
    print(
        f"  mpi4py Allreduce (in place)  {raw:6.2f} GB/s  ({reduce['mpi4py_seconds'] * 1e3:.2f} ms)"
    )
    print(f"  kiln / mpi4py                {ours / raw:6.1%}")
    mode = "compiled" if args.compiled else "eager"
    alone, waited = two["allreduce_alone_seconds"], two["wait_seconds"]
    print(f"\nGPT training step ({mode}; {two['parameter_bytes'] / 1e6:.1f} MB of parameters, "
          f"{len(two['bucket_bytes'])} buckets), 8x64 tokens per rank (medians):")  # fmt: skip
    print(f"  1 rank, no DDP              {one['step_seconds'] * 1e3:8.1f} ms")
    print(f"  2 ranks, DDP                {two['step_seconds'] * 1e3:8.1f} ms")
    print(f"  all-reduces alone           {alone * 1e3:8.1f} ms")
    print(f"  backward waited for them    {waited * 1e3:8.1f} ms  (the rank done first: "
          f"{two['first_rank_wait_seconds'] * 1e3:.1f} ms, skew included)")  # fmt: skip
    print(f"  hidden behind backward      {max(0.0, 1 - waited / alone):8.1%}")
    exposed = max(0.0, two["step_seconds"] - one["step_seconds"])
    print(f"  (2-rank minus 1-rank step: {exposed * 1e3:.1f} ms, contention for the cores "
          "included)")  # fmt: skip
    load_after = os.getloadavg()
    print(f"\n{os.cpu_count()} cores; load average {load_before[0]:.2f} before, "
          f"{load_after[0]:.2f} after")  # fmt: skip


if __name__ == "__main__":
    main()
