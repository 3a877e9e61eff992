"""kiln.compile against torch.compile on the ``kiln.bench`` workloads, robust to a shared machine.

    python benchmarks/compiled_vs_torch.py gpt_block_train_step mlp_train_step [--rounds 15]
        [--threads 2] [--no-eager]

Each column (kiln eager, kiln compiled, torch.compile) runs its own instance of the workload.
After warm-up, the columns are timed in turns, one step each per round, for ``--rounds`` rounds;
the table gives each column's minimum and median step time and the minimum-based ratios. On a
machine other jobs share, the minimum is the least disturbed estimate of the step's own cost
(noise only adds time); report the median too and ``uptime`` with any figure.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import kiln
from kiln.bench.workloads import WORKLOADS
from kiln.inductor.codegen import cpu


def _instances(name: str, threads: int, eager: bool) -> dict:
    cols = {}
    if eager:
        inst = WORKLOADS[name].build(kiln, False, "cpu")
        cols["kiln eager"] = (inst.fn, inst.args)
    inst = WORKLOADS[name].build(kiln, False, "cpu")
    cols["kiln compiled"] = (kiln.compile(inst.fn), inst.args)
    try:
        import torch
    except ImportError:
        return cols
    torch.set_num_threads(threads)
    if eager:
        inst = WORKLOADS[name].build(torch, False, "cpu")
        cols["torch eager"] = (inst.fn, inst.args)
    inst = WORKLOADS[name].build(torch, False, "cpu")
    cols["torch.compile"] = (torch.compile(inst.fn), inst.args)
    return cols


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workloads", nargs="+", choices=sorted(WORKLOADS))
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--no-eager", action="store_true")
    args = parser.parse_args()
    cpu.set_num_threads(args.threads)
    print(f"load average at start: {os.getloadavg()[0]:.2f}, threads {args.threads}")
    for name in args.workloads:
        cols = _instances(name, args.threads, not args.no_eager)
        for fn, a in cols.values():
            for _ in range(args.warmup):
                fn(*a)
        times: dict = {k: [] for k in cols}
        for r in range(args.rounds):
            order = list(cols)[r % len(cols) :] + list(cols)[: r % len(cols)]
            for k in order:
                fn, a = cols[k]
                start = time.perf_counter()
                fn(*a)
                times[k].append(time.perf_counter() - start)
        best = {k: min(v) for k, v in times.items()}
        cells = [
            f"{k} {best[k] * 1e3:.2f} ms (median {statistics.median(v) * 1e3:.2f})"
            for k, v in times.items()
        ]
        ratios = []
        if "kiln eager" in best:
            ratios.append(f"speedup {best['kiln eager'] / best['kiln compiled']:.2f}x")
        if "torch.compile" in best:
            ratios.append(f"kiln/torch {best['kiln compiled'] / best['torch.compile']:.2f}")
        print(f"{name}: " + " | ".join(cells + ratios))
    print(f"load average at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
