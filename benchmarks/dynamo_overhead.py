"""What bytecode capture costs: a cache hit (guards + dispatch) and capturing a tiny GPT.

    python benchmarks/dynamo_overhead.py [--quick]

1. Cache hit: a function of 3 tensor arguments, called eagerly and through ``kiln.compile``
   (eager backend); the difference is what a compiled call adds (target: < 10 us; PyTorch's
   torch.compile adds ~22 us). The guard function alone is timed too. Calls alternate between the
   two so machine noise hits both equally; each figure is a median.
2. Capture: the tiny GPT forward from tests/models (2 layers, 16 wide): time of the first call
   (symbolic evaluation, guards, code generation, backend) minus a steady-state call.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import kiln  # noqa: E402
from kiln.dynamo.testing import CompileCounter  # noqa: E402


def _per_call(fn, number: int) -> float:
    t0 = time.perf_counter()
    for _ in range(number):
        fn()
    return (time.perf_counter() - t0) / number


def cache_hit(quick: bool) -> dict:
    def three_inputs(x, y, z):
        return (x + y) * z

    x, y, z = kiln.randn(4, 4), kiln.randn(4, 4), kiln.randn(4, 4)
    compiled = kiln.compile(three_inputs)
    compiled(x, y, z)  # capture
    guard, _ = compiled._kiln_cache.entries[0]
    closure = three_inputs.__closure__
    number, repeat = (2000, 7) if quick else (20000, 15)
    eager, hit, guards = [], [], []
    for _ in range(repeat):
        eager.append(_per_call(lambda: three_inputs(x, y, z), number))
        hit.append(_per_call(lambda: compiled(x, y, z), number))
        guards.append(_per_call(lambda: guard(closure, x, y, z), number))
    eager_us = statistics.median(eager) * 1e6
    hit_us = statistics.median(hit) * 1e6
    return {
        "eager call": eager_us,
        "compiled call (cache hit)": hit_us,
        "overhead of a hit": hit_us - eager_us,
        "guard function alone": statistics.median(guards) * 1e6,
    }


def gpt_capture(quick: bool) -> dict:
    from tests.models.models import GPTConfig, models_for

    model = models_for(kiln).TinyGPT(GPTConfig())
    idx = kiln.randint(0, 32, (2, 8))
    rounds = 3 if quick else 7
    first, steady = [], []
    for _ in range(rounds):
        kiln.dynamo.reset()
        counter = CompileCounter()
        compiled = kiln.compile(model, backend=counter, fullgraph=True)
        t0 = time.perf_counter()
        compiled(idx)
        first.append(time.perf_counter() - t0)
        steady.append(_per_call(lambda: compiled(idx), 5))
    ops = counter.op_count
    capture_ms = (statistics.median(first) - statistics.median(steady)) * 1e3
    return {"graph ops": ops, "capture time (ms)": capture_ms,
            "steady call (ms)": statistics.median(steady) * 1e3}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    args = parser.parse_args()
    print(f"Python {sys.version.split()[0]}")
    print("cache hit, 3 tensor arguments (microseconds):")
    for name, value in cache_hit(args.quick).items():
        print(f"  {name:<28} {value:8.2f}")
    print("tiny GPT forward:")
    for name, value in gpt_capture(args.quick).items():
        print(
            f"  {name:<28} {value:8.2f}" if isinstance(value, float) else f"  {name:<28} {value:8d}"
        )


if __name__ == "__main__":
    main()
