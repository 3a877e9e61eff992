"""kiln in one screen: compile a function, read what the compiler made of it, time it.

    python examples/quickstart.py            # 4096 x 1024 inputs
    python examples/quickstart.py --rows 64  # a smoke run

1. ``@kiln.compile`` captures the function's bytecode into a graph and compiles fused kernels.
2. ``kiln.dynamo.explain`` says what was captured (graphs, ops, graph breaks and why).
3. ``kiln.bench.dumps.dump_compiled`` writes every stage (graph, AOT graphs, loop IR, schedule,
   generated wrapper, LLVM IR) under ``kiln_debug/quickstart/``.
4. Eager and compiled calls are timed in turn.
5. ``KILN_LOGS`` (here ``kiln.dynamo.set_logs``) shows a recompile when an input shape changes.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import time

import numpy as np

import kiln
import kiln.nn.functional as F
from kiln.bench.dumps import dump_compiled


@kiln.compile
def gelu_layer_norm(x, weight, bias):
    """The tail of a transformer feed-forward: tanh-GELU, then layer norm over the last axis."""
    y = F.gelu(x, approximate="tanh")
    return F.layer_norm(y, (y.shape[-1],), weight, bias)


eager_gelu_layer_norm = gelu_layer_norm.__wrapped__  # the undecorated function


def median_ms(functions: dict, args: tuple, repeat: int = 15) -> dict:
    """Median milliseconds per call of each function, called in turn (noise hits all alike)."""
    times: dict = {name: [] for name in functions}
    for _ in range(repeat):
        for name, fn in functions.items():
            start = time.perf_counter()
            fn(*args)
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) * 1e3 for name, t in times.items()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=4096)
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--debug-dir", default=os.path.join("kiln_debug", "quickstart"))
    args = parser.parse_args(argv)

    kiln.manual_seed(0)
    x = kiln.randn(args.rows, args.width)
    weight, bias = kiln.randn(args.width), kiln.randn(args.width)
    inputs = (x, weight, bias)

    start = time.perf_counter()
    out = gelu_layer_norm(*inputs)  # first call: capture + compile + run
    first_ms = (time.perf_counter() - start) * 1e3
    expected = eager_gelu_layer_norm(*inputs)
    diff = float(np.max(np.abs(out.numpy() - expected.numpy())))
    print(
        f"first call (capture, compile, run): {first_ms:.0f} ms; max |compiled - eager| = {diff:.2e}"
    )

    print("\n== kiln.dynamo.explain ==")
    report = kiln.dynamo.explain(gelu_layer_norm)(*inputs)
    print(report)
    print(report.graphs[0].code)

    print(f"== what the compiler made: {args.debug_dir}/ ==")
    shutil.rmtree(args.debug_dir, ignore_errors=True)  # only this run's files
    files = dump_compiled(gelu_layer_norm, inputs, args.debug_dir)
    for path in files:
        print(f"  {os.path.relpath(path, args.debug_dir)}")
    wrapper = next(p for p in files if p.endswith("output_code.py"))
    print(f"\n-- {os.path.relpath(wrapper)} (the Python that a compiled call runs) --")
    with open(wrapper) as f:
        print(f.read())

    ms = median_ms({"eager": eager_gelu_layer_norm, "compiled": gelu_layer_norm}, inputs)
    eager, compiled = ms["eager"], ms["compiled"]
    print(
        f"== speed ({args.rows}x{args.width}, median of 15) ==\n"
        f"eager {eager:.2f} ms, compiled {compiled:.2f} ms: {eager / compiled:.2f}x"
    )

    print("\n== a new input shape fails the guards and recompiles (KILN_LOGS=recompiles) ==")
    kiln.dynamo.set_logs("recompiles")
    gelu_layer_norm(kiln.randn(8, args.width), weight, bias)
    kiln.dynamo.set_logs("")


if __name__ == "__main__":
    main()
