"""CUDA launch-cost benchmark (issue 19): eager ops, compile counts, an AdamW training step.

    python benchmarks/cuda_bench.py [--json results.json] [--torch-compile]
    python benchmarks/cuda_bench.py --dry-run     # no GPU: the host-memory stand-in, tiny sizes

On an NVIDIA GPU it measures, in about five minutes:
1. per-op eager time (µs, median of device-synchronized batches) of small and large elementwise
   ops, an in-place AdamW-style update, a reduction and a copy, kiln against PyTorch eager;
2. kernel compiles in steady state: an eager MLP training loop with AdamW and a changing
   learning rate, counting eager kernels and compiled graphs after the warm-up steps (should be 0);
3. a training step (MLP forward, backward, AdamW, LR scheduler) per step: kiln eager, kiln
   compiled, PyTorch eager and, with ``--torch-compile``, torch.compile.
kiln runs first and PyTorch is imported afterwards, so Triton launches kiln's kernels without it.
``--dry-run`` runs the same code on the stand-in device (Triton's interpreter) with tiny sizes and
PyTorch on the CPU, to check the script; its timings mean nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

DEADLINE_S = 8 * 60
_start = time.perf_counter()


def _median_us(fn, sync, batch: int, repeats: int) -> float:
    """Median over ``repeats`` of the per-call time of ``batch`` back-to-back calls."""
    fn()
    sync()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(batch):
            fn()
        sync()
        times.append((time.perf_counter() - t0) / batch)
    return float(np.median(times)) * 1e6


def _op_cases(lib, device, small: int, large: int) -> dict:
    """name -> zero-argument callable; ``lib`` is kiln or torch (the same code for both)."""
    F = lib.nn.functional
    xs, ys = lib.randn(small, device=device), lib.randn(small, device=device)
    xl, yl = lib.randn(large, device=device), lib.randn(large, device=device)
    m, v, p = (lib.randn(large, device=device) for _ in range(3))
    v = v.abs()
    table = lib.randn(64, large // 64, device=device)
    dst = lib.empty(large // 64, 64, device=device)
    lr = [1e-3]

    def adamw_update():
        lr[0] *= 0.999  # a new Python scalar every call
        p.mul_(1 - lr[0] * 0.01)
        m.lerp_(yl, 0.1)
        v.mul_(0.999).addcmul_(yl, yl, value=0.001)
        p.addcdiv_(m, v.sqrt().add_(1e-8), value=-lr[0])

    return {
        f"add [{small}]": lambda: xs + ys,
        f"mul by a new scalar [{small}]": lambda: xs * (1.0 + 1e-6 * time.perf_counter() % 1.0),
        f"gelu [{small}]": lambda: F.gelu(xs),
        f"add [{large}]": lambda: xl + yl,
        f"exp [{large}]": lambda: xl.exp(),
        "adamw update (5 in-place ops)": adamw_update,
        f"sum [{large}]": lambda: xl.sum(),
        f"transpose copy [{64}x{large // 64}]": lambda: dst.copy_(table.t()),
    }


def eager_ops(lib, device, sync, sizes, batch, repeats) -> dict:
    return {
        name: _median_us(fn, sync, batch, repeats)
        for name, fn in _op_cases(lib, device, *sizes).items()
    }


def _mlp_step(lib, device, width: int, compiled: bool, compile_fn=None):
    lib.manual_seed(0)
    F = lib.nn.functional
    model = lib.nn.Sequential(
        lib.nn.Linear(width, 4 * width), lib.nn.GELU(), lib.nn.Linear(4 * width, width)
    ).to(device)
    opt = lib.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    sched = lib.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.999)
    x, y = lib.randn(64, width, device=device), lib.randn(64, width, device=device)

    def step():
        loss = F.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    run = (compile_fn or lib.compile)(step) if compiled else step

    def one():
        run()
        sched.step()

    return one


def kiln_part(kiln, device, args) -> dict:
    from kiln.inductor.codegen.triton_wrapper import graphs_compiled
    from kiln.runtime import devices

    def sync():
        kiln.cuda.synchronize()

    out = {"eager_ops_us": eager_ops(kiln, device, sync, args.sizes, args.batch, args.repeats)}

    def compiles() -> tuple[int, int]:
        return devices.op_cache_info()["compiles"], graphs_compiled()

    steps = {}
    for mode in ("eager", "compiled"):
        one = _mlp_step(kiln, device, args.width, compiled=mode == "compiled")
        for _ in range(args.warmup):
            one()
        sync()
        before = compiles()
        per_step = _median_us(one, sync, args.batch, args.repeats)
        after = compiles()
        steps[mode] = {
            "step_us": per_step,
            "eager_kernel_compiles_in_steady_state": after[0] - before[0],
            "graph_compiles_in_steady_state": after[1] - before[1],
        }
    out["training_step"] = steps
    out["allocator"] = {
        "memory_allocated": kiln.cuda.memory_allocated(),
        "max_memory_allocated": kiln.cuda.max_memory_allocated(),
        "memory_reserved": kiln.cuda.memory_reserved(),
    }
    return out


def torch_part(torch, device, args) -> dict:
    def sync():
        if device == "cuda":
            torch.cuda.synchronize()

    out = {"eager_ops_us": eager_ops(torch, device, sync, args.sizes, args.batch, args.repeats)}
    modes = ["eager"] + (["compiled"] if args.torch_compile else [])
    steps = {}
    for mode in modes:
        one = _mlp_step(torch, device, args.width, compiled=mode == "compiled")
        for _ in range(args.warmup):
            one()
        sync()
        steps[mode] = {"step_us": _median_us(one, sync, args.batch, args.repeats)}
    out["training_step"] = steps
    return out


def report(kiln_results: dict, torch_results: dict | None) -> str:
    lines = ["eager ops (µs per op)", f"  {'op':<36}{'kiln':>12}{'torch':>12}{'ratio':>10}"]
    for name, t in kiln_results["eager_ops_us"].items():
        ref = torch_results["eager_ops_us"].get(name) if torch_results else None
        ratio = f"{t / ref:10.2f}" if ref else f"{'-':>10}"
        lines.append(f"  {name:<36}{t:12.1f}{(ref or float('nan')):12.1f}{ratio}")
    lines.append("training step: MLP + AdamW + StepLR (µs per step)")
    for mode, r in kiln_results["training_step"].items():
        ref = (torch_results or {}).get("training_step", {}).get(mode, {}).get("step_us")
        lines.append(
            f"  kiln {mode:<9}{r['step_us']:12.1f}   torch {mode}: "
            f"{(ref if ref else float('nan')):.1f}   compiles in steady state: "
            f"{r['eager_kernel_compiles_in_steady_state']} eager kernels, "
            f"{r['graph_compiles_in_steady_state']} graphs"
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="stand-in device, tiny sizes")
    parser.add_argument("--torch-compile", action="store_true", help="also time torch.compile")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args(argv)
    if args.dry_run:
        args.sizes, args.width, args.batch, args.repeats, args.warmup = (64, 1024), 4, 1, 1, 3
    else:
        args.sizes, args.width, args.batch, args.repeats, args.warmup = (
            (1024, 1 << 24),
            256,
            20,
            5,
            5,
        )
    import kiln
    from kiln.runtime import cuda

    if args.dry_run:
        cuda.use_driver(cuda.HostMemoryDriver())
    elif not kiln.cuda.is_available():
        print(f"cuda_bench: no CUDA GPU ({cuda.unavailable_reason()}); try --dry-run")
        return 2
    results = {"device": kiln.cuda.get_device_name(), "dry_run": args.dry_run}
    results["kiln"] = kiln_part(kiln, "cuda", args)
    if time.perf_counter() - _start > DEADLINE_S:
        print("cuda_bench: past the deadline, PyTorch skipped")
        results["torch"] = None
    else:
        try:
            import torch
        except ImportError:
            torch = None
        if torch is None:
            results["torch"] = None
        else:
            device = "cuda" if torch.cuda.is_available() and not args.dry_run else "cpu"
            results["torch_device"] = device
            results["torch"] = torch_part(torch, device, args)
    print(f"cuda_bench on {results['device']} ({time.perf_counter() - _start:.0f} s)")
    print(report(results["kiln"], results["torch"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
