"""Throughput of kiln's vectorized LLVM math against numpy, one thread, float32.

Each function runs as a JIT-compiled <8 x float> loop with a scalar tail
(``llvm_math.elementwise_kernel``) over preallocated buffers, so page faults are not timed.
numpy runs its own ufunc (with ``out=``) on the same inputs. Inputs are drawn from each function's
typical domain. Prints ns/element and GB/s (bytes read + written), best of ``--repeat`` runs.

    python benchmarks/llvm_math_bench.py [--size 16777216] [--repeat 5] [exp sin ...]
"""

from __future__ import annotations

import argparse
import ctypes
import time
from collections.abc import Callable

import numpy as np

from kiln.inductor.codegen.llvm import jit as llvm_jit
from kiln.inductor.codegen.llvm import math_library as llvm_math

try:  # numpy has no erf; scipy is optional
    from scipy.special import erf as _scipy_erf
except ImportError:
    _scipy_erf = None


def _sigmoid(x: np.ndarray, out: np.ndarray) -> None:
    np.negative(x, out=out)
    np.exp(out, out=out)
    out += 1
    np.reciprocal(out, out=out)


def _rsqrt(x: np.ndarray, out: np.ndarray) -> None:
    np.sqrt(x, out=out)
    np.reciprocal(out, out=out)


def _ufunc(function: Callable[..., np.ndarray] | None) -> Callable[..., None] | None:
    if function is None:
        return None
    return lambda *args: function(*args[:-1], out=args[-1])


# name -> (input ranges, one per argument; numpy equivalent writing into its last argument)
CASES: dict[str, tuple[list[tuple[float, float]], Callable[..., None] | None]] = {
    "exp": ([(-10, 10)], _ufunc(np.exp)),
    "exp2": ([(-10, 10)], _ufunc(np.exp2)),
    "expm1": ([(-5, 5)], _ufunc(np.expm1)),
    "log": ([(1e-3, 1e3)], _ufunc(np.log)),
    "log2": ([(1e-3, 1e3)], _ufunc(np.log2)),
    "log1p": ([(-0.9, 100)], _ufunc(np.log1p)),
    "tanh": ([(-5, 5)], _ufunc(np.tanh)),
    "sigmoid": ([(-10, 10)], _sigmoid),
    "erf": ([(-4, 4)], _ufunc(_scipy_erf)),
    "sin": ([(-100, 100)], _ufunc(np.sin)),
    "cos": ([(-100, 100)], _ufunc(np.cos)),
    "tan": ([(-1.5, 1.5)], _ufunc(np.tan)),
    "atan": ([(-10, 10)], _ufunc(np.arctan)),
    "pow": ([(0, 10), (-5, 5)], _ufunc(np.power)),
    "sqrt": ([(0, 100)], _ufunc(np.sqrt)),
    "rsqrt": ([(0, 100)], _rsqrt),
}


def best_seconds(run: Callable[[], None], repeat: int) -> float:
    run()
    timings = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        timings.append(time.perf_counter() - start)
    return min(timings)


def bench(name: str, size: int, repeat: int) -> tuple[float, float | None]:
    """Seconds per call for kiln's kernel and numpy's equivalent (None if numpy has none)."""
    ranges, numpy_function = CASES[name]
    rng = np.random.default_rng(0)
    inputs = [rng.uniform(lo, hi, size).astype(np.float32) for lo, hi in ranges]
    out = np.empty_like(inputs[0])
    compiled = llvm_jit.compile_module(llvm_math.elementwise_kernel(name))
    kernel = compiled.cfunc("kernel", None, *[ctypes.c_void_p] * (len(inputs) + 1), ctypes.c_int64)
    pointers = [array.ctypes.data for array in inputs] + [out.ctypes.data, size]
    kiln_seconds = best_seconds(lambda: kernel(*pointers), repeat)
    if numpy_function is None:
        return kiln_seconds, None
    numpy_seconds = best_seconds(lambda: numpy_function(*inputs, out), repeat)
    return kiln_seconds, numpy_seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help=f"functions to time (default all): {list(CASES)}")
    parser.add_argument("--size", type=int, default=16 * 1024 * 1024)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    unknown = sorted(set(args.names) - set(CASES))
    if unknown:
        parser.error(f"unknown functions {unknown}; choose from {list(CASES)}")
    host = llvm_jit.host_target()
    print(f"{args.size} float32 elements, best of {args.repeat}, one thread, {host.cpu_name}")
    header = f"{'function':<9} {'kiln ns/el':>10} {'kiln GB/s':>9} {'numpy ns/el':>11} "
    print(header + f"{'numpy GB/s':>10} {'speedup':>8}")
    for name in args.names or CASES:
        kiln_seconds, numpy_seconds = bench(name, args.size, args.repeat)
        traffic = 4 * args.size * (len(CASES[name][0]) + 1)
        row = f"{name:<9} {kiln_seconds / args.size * 1e9:>10.3f} {traffic / kiln_seconds / 1e9:>9.2f} "
        if numpy_seconds is None:
            row += f"{'-':>11} {'-':>10} {'-':>8}"
        else:
            row += (
                f"{numpy_seconds / args.size * 1e9:>11.3f} {traffic / numpy_seconds / 1e9:>10.2f} "
            )
            row += f"{numpy_seconds / kiln_seconds:>7.1f}x"
        print(row)


if __name__ == "__main__":
    main()
