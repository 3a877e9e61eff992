"""Eager-mode cost of kiln ops: per-op dispatch overhead on tiny tensors (vs PyTorch eager) and
throughput on large tensors (vs the raw numpy call doing the same work).

    python benchmarks/eager_overhead.py [--quick]

Targets (issue "Eager runtime"): tiny-tensor ops within 3x of PyTorch eager; large-tensor ops within
1.2x of numpy. Each figure is a median over repeated timings, measured alternately in one process.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import kiln

try:
    import torch
except ImportError:  # the benchmark still reports kiln vs numpy
    torch = None


def _median_time(fn, number: int, repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        samples.append((time.perf_counter() - t0) / number)
    return statistics.median(samples)


def tiny_ops(quick: bool):
    number = 2000 if quick else 20000
    repeat = 5
    xk, yk = kiln.randn(4), kiln.randn(4)
    mk = kiln.randn(4, 4)
    gk = kiln.randn(4, requires_grad=True)
    cases = [
        ("add", lambda m, x, y, mm, g: x + y),
        ("mul scalar", lambda m, x, y, mm, g: x * 2.0),
        ("exp", lambda m, x, y, mm, g: x.exp()),
        ("relu", lambda m, x, y, mm, g: m.relu(x)),
        ("sum", lambda m, x, y, mm, g: x.sum()),
        ("sum(dim)", lambda m, x, y, mm, g: mm.sum(1)),
        ("matmul 4x4", lambda m, x, y, mm, g: mm @ mm),
        ("view", lambda m, x, y, mm, g: mm.view(16)),
        ("index [1]", lambda m, x, y, mm, g: mm[1]),
        ("transpose", lambda m, x, y, mm, g: mm.t()),
        ("add (requires_grad)", lambda m, x, y, mm, g: g + y),
    ]
    rows = []
    if torch is not None:
        xt, yt = torch.randn(4), torch.randn(4)
        mt = torch.randn(4, 4)
        gt = torch.randn(4, requires_grad=True)
    for name, fn in cases:
        k = _median_time(lambda: fn(kiln, xk, yk, mk, gk), number, repeat)
        t = (
            _median_time(lambda: fn(torch, xt, yt, mt, gt), number, repeat)
            if torch
            else float("nan")
        )
        rows.append((name, k * 1e6, t * 1e6, k / t if torch else float("nan")))
    return rows


def large_ops(quick: bool):
    n = 1024 if quick else 4096
    repeat = 3 if quick else 5
    a = np.random.default_rng(0).standard_normal((n, n)).astype(np.float32)
    b = np.random.default_rng(1).standard_normal((n, n)).astype(np.float32)
    ka, kb = kiln.from_numpy(a), kiln.from_numpy(b)

    def chain_np():
        x = a
        for _ in range(5):
            x = np.multiply(np.add(x, b), 0.5)
        return x

    def chain_kiln():
        x = ka
        for _ in range(5):
            x = (x + kb) * 0.5
        return x

    cases = [
        ("add", lambda: np.add(a, b), lambda: ka + kb),
        ("exp", lambda: np.exp(a), lambda: ka.exp()),
        ("sum", lambda: a.sum(), lambda: ka.sum()),
        ("sum(dim=1)", lambda: a.sum(1), lambda: ka.sum(1)),
        ("10-op chain", chain_np, chain_kiln),
        ("matmul", lambda: a @ b, lambda: ka @ kb),
    ]
    rows = []
    for name, np_fn, k_fn in cases:
        np_fn(), k_fn()
        times_np, times_k = [], []
        for _ in range(repeat):  # alternate to share machine noise
            times_np.append(_median_time(np_fn, 1, 1))
            times_k.append(_median_time(k_fn, 1, 1))
        tn, tk = statistics.median(times_np), statistics.median(times_k)
        rows.append((f"{name} {n}x{n}", tk * 1e3, tn * 1e3, tk / tn))
    return rows


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="fewer repetitions, smaller large tensors"
    )
    args = parser.parse_args(argv)
    print(
        f"kiln eager overhead (threads: numpy default; torch threads: {torch.get_num_threads() if torch else '-'})"
    )
    print(f"\n{'tiny op':<22}{'kiln us':>10}{'torch us':>10}{'kiln/torch':>12}")
    for name, k, t, r in tiny_ops(args.quick):
        print(f"{name:<22}{k:>10.2f}{t:>10.2f}{r:>12.2f}")
    print(f"\n{'large op':<22}{'kiln ms':>10}{'numpy ms':>10}{'kiln/numpy':>12}")
    for name, k, t, r in large_ops(args.quick):
        print(f"{name:<22}{k:>10.2f}{t:>10.2f}{r:>12.2f}")


if __name__ == "__main__":
    main()
