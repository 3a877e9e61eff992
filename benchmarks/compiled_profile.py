"""Where a compiled workload's step time goes: per kernel / extern call of every inductor graph.

    python benchmarks/compiled_profile.py gpt_block_forward [--steps 30] [--threads 2] [--top 25]

Compiles one ``kiln.bench`` workload with the inductor, then times every call the generated
wrappers make (LLVM kernels, extern matmuls, numpy steps, buffer allocation, input/output
wrapping) and the graphs as a whole; what is left of the step is outside the graphs (dynamo
guards, AOT runtime, the autograd engine around ``loss.backward()``, optimizer glue). Medians per
step over ``--steps`` steps (the 2 cores are shared: medians are steadier than means).
Timing never changes what runs: the wrapper's own namespace entries are wrapped.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import defaultdict

import kiln
from kiln.bench.dumps import observe_compiled_graphs
from kiln.bench.workloads import WORKLOADS
from kiln.inductor import config as inductor_config

_clock = time.perf_counter


class _Timed:
    """Calls ``fn`` and adds its wall time to ``totals[label]``."""

    __slots__ = ("fn", "label", "totals")

    def __init__(self, fn, label, totals):
        self.fn = fn
        self.label = label
        self.totals = totals

    def __call__(self, *args, **kwargs):
        start = _clock()
        try:
            return self.fn(*args, **kwargs)
        finally:
            self.totals[self.label] += _clock() - start


def _describe(step) -> str:
    text = step.describe()
    return text if len(text) < 110 else text[:107] + "..."


def instrument(observed, totals) -> None:
    for g, item in enumerate(observed):
        graph = item.graph
        call = getattr(graph, "_call", None)
        if call is None:
            continue
        ns = call.__globals__
        for i, step in enumerate(graph.schedule.steps):
            for prefix in ("K", "S"):
                key = f"{prefix}{i}"
                if key in ns and not isinstance(ns[key], _Timed):
                    ns[key] = _Timed(ns[key], f"g{g} {key:>4} {_describe(step)}", totals)
        for helper in ("_input", "_alloc", "_tensor", "_ptr"):
            if helper in ns and not isinstance(ns[helper], _Timed):
                ns[helper] = _Timed(ns[helper], f"g{g} {helper}", totals)
        graph._call = _Timed(call, f"g{g} (whole graph)", totals)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workload", choices=sorted(WORKLOADS))
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.threads:
        kiln.set_num_threads(args.threads)
    # the compiled-graph cache rebuilds graphs without their schedule, which the labels read
    inductor_config.fx_graph_cache = False
    instance = WORKLOADS[args.workload].build(kiln, args.quick, "cpu")
    with observe_compiled_graphs() as observed:
        # as the bench compiles it: the models, where the workload says so (DCGAN's step
        # cannot be compiled whole: its first backward consumes a graph the second reads)
        compile_with = getattr(instance, "compile_with", None)
        fn = compile_with(kiln.compile) if compile_with else kiln.compile(instance.fn)
        for _ in range(3):
            fn(*instance.args)
    totals: dict = defaultdict(float)
    instrument(observed, totals)
    per_step: dict = defaultdict(list)
    steps = []
    for _ in range(args.steps):
        totals.clear()
        start = _clock()
        fn(*instance.args)
        steps.append(_clock() - start)
        for label, seconds in totals.items():
            per_step[label].append(seconds)
    step = statistics.median(steps)
    graphs = sum(statistics.median(v) for k, v in per_step.items() if "(whole graph)" in k)
    print(f"{args.workload}: step median {step * 1e3:.2f} ms (min {min(steps) * 1e3:.2f})")
    print(f"  inside compiled graphs {graphs * 1e3:.2f} ms, outside {(step - graphs) * 1e3:.2f} ms")
    rows = sorted(((statistics.median(v), min(v), k) for k, v in per_step.items()), reverse=True)
    print("    median       min")
    for seconds, least, label in rows[: args.top]:
        print(f"  {seconds * 1e3:8.3f} {least * 1e3:8.3f} ms  {label}")


if __name__ == "__main__":
    main()
