"""GPU check: correctness of kiln's CUDA device, then the benchmark workloads, in one short run.

    python benchmarks/gpu_check.py [--json results.json]

On a machine with an NVIDIA GPU it (1) checks the cuda device against the CPU (transfers, eager
ops as cached Triton kernels, views and in-place writes, random numbers, autograd, compiled
graphs, the caching allocator) before PyTorch is imported, so Triton launches without it; then
(2) times each workload (pointwise chain, softmax, layer_norm, matmul, MLP forward, MLP training
step) with kiln eager and kiln compiled, reports achieved GB/s or TFLOP/s, and puts PyTorch eager
and torch.compile beside them when PyTorch with CUDA is importable. A deadline keeps the whole
run under 8 minutes: workloads that would start after it are reported as skipped.

Without a GPU it prints why and exits with status 2 (nothing measured).
Exit status: 0 all checks passed, 1 a check or workload failed, 2 no GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

DEADLINE_S = 7 * 60
_start = time.perf_counter()


def _elapsed() -> float:
    return time.perf_counter() - _start


def _bench(fn, sync, warmup: int = 2, iters: int = 10) -> float:
    """Median milliseconds of ``fn()`` (device synchronized around each run)."""
    for _ in range(warmup):
        fn()
    sync()
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return float(np.median(times)) * 1e3


# ------------------------------------------------------------------------------ correctness


def correctness_checks(kiln) -> list[str]:
    """Run each check; returns the names of those that failed."""
    F = kiln.nn.functional

    def close(got, expected, tol=1e-5):
        assert got.is_cuda, f"result on {got.device}"
        g, e = got.cpu().float().numpy(), expected.float().numpy()
        np.testing.assert_allclose(g, e, rtol=tol, atol=tol, equal_nan=True)

    def transfers():
        for d in (kiln.float32, kiln.bfloat16, kiln.int64, kiln.bool):
            x = (kiln.randn(33, 17) * 4).to(d)
            np.testing.assert_array_equal(x.cuda().cpu().numpy(), x.numpy())
        x = kiln.randn(8, 9)
        np.testing.assert_array_equal(x.cuda()[1:, ::2].t().cpu().numpy(), x.numpy()[1:, ::2].T)

    def eager_ops():
        x, w = kiln.randn(64, 300), kiln.randn(300)
        xc, wc = x.cuda(), w.cuda()
        close((xc * 2).sin() + wc, (x * 2).sin() + w)
        close(F.softmax(xc, -1), F.softmax(x, -1))
        close(F.layer_norm(xc, (300,)), F.layer_norm(x, (300,)), 1e-4)
        close(xc.sum(0), x.sum(0), 1e-4)
        close(xc.amax(-1), x.amax(-1))
        close(xc.argmax(-1), x.argmax(-1))
        big = kiln.randn(4, 5000)
        big[1, 77] = float("nan")
        close(big.cuda().amax(-1), big.amax(-1))
        close(big.cuda().argmax(-1), big.argmax(-1))

    def matmuls():
        a, b = kiln.randn(129, 70), kiln.randn(70, 65)
        close(a.cuda() @ b.cuda(), a @ b, 1e-3)
        # bfloat16 results may differ by one rounding step (1/8 near 20)
        close(a.cuda().bfloat16() @ b.cuda().bfloat16(), a.bfloat16() @ b.bfloat16(), 0.3)
        close(a.cuda().double() @ b.cuda().double(), a.double() @ b.double(), 1e-9)
        close(kiln.bmm(a.cuda()[None], b.cuda()[None]), (a @ b)[None], 1e-3)

    def views_and_inplace():
        x = kiln.zeros(6, 8, device="cuda")
        x[1:4, ::2] += 5
        x[:, 1] = 2.5
        x[0] = kiln.arange(8)
        expected = np.zeros((6, 8), np.float32)
        expected[1:4, ::2] += 5
        expected[:, 1] = 2.5
        expected[0] = np.arange(8)
        np.testing.assert_array_equal(x.cpu().numpy(), expected)

    def random_numbers():
        kiln.manual_seed(7)
        a, b = kiln.rand(1000, device="cuda"), kiln.randn(999, device="cuda")
        kiln.manual_seed(7)
        np.testing.assert_array_equal(a.cpu().numpy(), kiln.rand(1000).numpy())
        np.testing.assert_allclose(b.cpu().numpy(), kiln.randn(999).numpy(), rtol=1e-6, atol=1e-6)

    def autograd():
        x = kiln.randn(16, 40, requires_grad=True)
        xc = x.detach().cuda().requires_grad_()
        (F.gelu(xc) * xc.cos()).sum().backward()
        (F.gelu(x) * x.cos()).sum().backward()
        close(xc.grad, x.grad, 1e-5)

    def compiled_graphs():
        w, b = kiln.randn(300), kiln.randn(300)
        fn = kiln.compile(lambda x, w, b: F.layer_norm(x, (300,), w, b).relu())
        x = kiln.randn(64, 300)
        close(fn(x.cuda(), w.cuda(), b.cuda()), F.layer_norm(x, (300,), w, b).relu(), 1e-4)

    def caching_allocator():
        x = kiln.empty(1 << 20, device="cuda")
        used = kiln.cuda.memory_allocated()
        reserved = kiln.cuda.memory_reserved()
        del x
        assert kiln.cuda.memory_allocated() < used
        y = kiln.empty(1 << 20, device="cuda")
        assert kiln.cuda.memory_reserved() == reserved, "a freed block was not reused"
        del y

    def data_dependent():
        x = kiln.randn(50, 3)
        np.testing.assert_array_equal(
            x.cuda()[x.cuda() > 0].cpu().numpy(), x.numpy()[x.numpy() > 0]
        )

    def torch_free():
        assert "torch" not in sys.modules, "PyTorch was imported before the kiln checks"

    checks = [
        transfers,
        eager_ops,
        matmuls,
        views_and_inplace,
        random_numbers,
        autograd,
        compiled_graphs,
        caching_allocator,
        data_dependent,
        torch_free,
    ]
    failed = []
    for check in checks:
        t0 = time.perf_counter()
        try:
            check()
            print(f"  PASS  {check.__name__:<20} {time.perf_counter() - t0:6.1f} s", flush=True)
        except Exception:  # noqa: BLE001 - report every check
            failed.append(check.__name__)
            print(f"  FAIL  {check.__name__}", flush=True)
            traceback.print_exc()
    return failed


# ------------------------------------------------------------------------------ workloads


def workloads(lib, F, device, dtype_mm, scale: int = 1):  # noqa: N803 - PyTorch's F
    """(name, size text, make inputs, fn, (bytes moved | None, flops | None), trains).

    ``scale`` divides every dimension (``--emulate`` runs tiny versions)."""
    n = (1 << 24) // scale**2
    rows, cols = 8192 // scale, 4096 // scale
    m = 4096 // scale
    batch, d_in, d_hidden = 8192 // scale, 1024 // scale, 4096 // scale

    def chain(x):
        return ((((x * 2 + 1).sin() * x).exp() - 3).tanh() * 0.5 + x).relu()

    def mlp(x, w1, b1, w2, b2):
        return F.linear(F.gelu(F.linear(x, w1, b1)), w2, b2)

    def mlp_inputs():
        return [
            lib.randn(batch, d_in, device=device),
            lib.randn(d_hidden, d_in, device=device) * 0.03,
            lib.zeros(d_hidden, device=device),
            lib.randn(d_in, d_hidden, device=device) * 0.03,
            lib.zeros(d_in, device=device),
        ]

    mlp_flops = 2 * batch * d_in * d_hidden * 2
    return [
        (
            "pointwise chain x10",
            f"{n} f32",
            lambda: [lib.randn(n, device=device)],
            chain,
            (2 * 4 * n, None),
            False,
        ),
        (
            "softmax",
            f"{rows}x{cols} f32",
            lambda: [lib.randn(rows, cols, device=device)],
            lambda x: F.softmax(x, -1),
            (2 * 4 * rows * cols, None),
            False,
        ),
        (
            "layer_norm",
            f"{rows}x{cols} f32",
            lambda: [
                lib.randn(rows, cols, device=device),
                lib.randn(cols, device=device),
                lib.randn(cols, device=device),
            ],
            lambda x, w, b: F.layer_norm(x, (cols,), w, b),
            (2 * 4 * rows * cols, None),
            False,
        ),
        (
            "matmul",
            f"{m}^3 {dtype_mm}",
            lambda: [
                lib.randn(m, m, device=device).to(getattr(lib, dtype_mm)),
                lib.randn(m, m, device=device).to(getattr(lib, dtype_mm)),
            ],
            lambda a, b: a @ b,
            (None, 2 * m**3),
            False,
        ),
        (
            "MLP forward",
            f"{batch}x{d_in}->{d_hidden}->{d_in} f32",
            mlp_inputs,
            mlp,
            (None, mlp_flops),
            False,
        ),
        ("MLP train step", "same, fwd+bwd", mlp_inputs, mlp, (None, 3 * mlp_flops), True),
    ]


def _training(fn, lib):
    def step(x, w1, b1, w2, b2):
        out = fn(x, w1, b1, w2, b2)
        loss = (out * out).mean()
        loss.backward()
        return loss

    return step


def run_library(lib, F, device, compile_fn, sync, label, scale=1, dtype_mm="bfloat16"):  # noqa: N803
    results = {}
    for name, size, make, fn, (nbytes, flops), trains in workloads(lib, F, device, dtype_mm, scale):
        if _elapsed() > DEADLINE_S:
            print(f"  {label:<14} {name:<20} skipped (time budget)", flush=True)
            continue
        row = {}
        try:
            inputs = make()
            target = fn
            if trains:
                inputs = [inputs[0]] + [p.requires_grad_() for p in inputs[1:]]
                target = _training(fn, lib)
            row["eager_ms"] = _bench(lambda: target(*inputs), sync)
            t0 = time.perf_counter()
            compiled = compile_fn(target)
            compiled(*inputs)
            sync()
            row["compile_s"] = time.perf_counter() - t0
            row["compiled_ms"] = _bench(lambda: compiled(*inputs), sync)
            best = row["compiled_ms"] / 1e3
            if nbytes:
                row["GB/s"] = nbytes / best / 1e9
            if flops:
                row["TFLOP/s"] = flops / best / 1e12
        except Exception as e:  # noqa: BLE001 - report and go on
            row["error"] = f"{type(e).__name__}: {e}"[:200]
            traceback.print_exc()
        results[name] = dict(size=size, **row)
        print(f"  {label:<14} {name:<20} {_fmt(row)}", flush=True)
    return results


def _fmt(row: dict) -> str:
    if "error" in row:
        return "FAILED " + row["error"]
    rate = f"{row['GB/s']:8.1f} GB/s" if "GB/s" in row else f"{row.get('TFLOP/s', 0):8.1f} TFLOP/s"
    return (
        f"eager {row['eager_ms']:9.3f} ms  compiled {row['compiled_ms']:9.3f} ms  {rate}"
        f"  (compile {row['compile_s']:.1f} s)"
    )


def _summary(report: dict) -> None:
    def ms(row, key):
        return f"{row[key]:.3f}" if row and key in row else "-"

    header = [
        "workload",
        "size",
        "kiln eager ms",
        "kiln compiled ms",
        "achieved",
        "torch eager ms",
        "torch.compile ms",
    ]
    lines = [header]
    for name, row in report["kiln"].items():
        t = report.get("torch", {}).get(name)
        rate = (
            f"{row['GB/s']:.0f} GB/s"
            if "GB/s" in row
            else f"{row['TFLOP/s']:.1f} TFLOP/s"
            if "TFLOP/s" in row
            else "FAILED"
        )
        lines.append(
            [
                name,
                row["size"],
                ms(row, "eager_ms"),
                ms(row, "compiled_ms"),
                rate,
                ms(t, "eager_ms"),
                ms(t, "compiled_ms"),
            ]
        )
    widths = [max(len(str(line[i])) for line in lines) for i in range(len(header))]
    print()
    for line in lines:
        print("  ".join(str(c).ljust(w) for c, w in zip(line, widths)))
    print()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument(
        "--emulate",
        action="store_true",
        help="test this script without a GPU: host-memory CUDA stand-in, tiny sizes, "
        "Triton's interpreter (figures are meaningless)",
    )
    args = parser.parse_args(argv)

    import kiln
    from kiln.runtime import cuda

    scale = 1
    if args.emulate:
        cuda.use_driver(cuda.HostMemoryDriver())
        scale = 64
    if os.environ.get("KILN_GPU_CHECK_FORCE_NO_GPU") or not kiln.cuda.is_available():
        reason = cuda.unavailable_reason() or "disabled by KILN_GPU_CHECK_FORCE_NO_GPU"
        print(f"gpu_check: no CUDA GPU available ({reason}); nothing was checked or measured.")
        return 2
    import triton

    name = kiln.cuda.get_device_name()
    print(
        f"gpu_check on {name} (sm_{''.join(map(str, kiln.cuda.get_device_capability()))}), "
        f"triton {triton.__version__}",
        flush=True,
    )
    print("correctness (kiln alone in the process):", flush=True)
    failed = correctness_checks(kiln)

    print("workloads:", flush=True)
    sync = kiln.cuda.synchronize
    report = {"device": name, "failed_checks": failed}
    report["kiln"] = run_library(
        kiln, kiln.nn.functional, "cuda", kiln.compile, sync, "kiln", scale
    )
    try:
        import torch
    except ImportError:
        torch = None
        print("  PyTorch is not importable: no comparison", flush=True)
    if torch is not None and torch.cuda.is_available() and not args.emulate:
        report["torch"] = run_library(
            torch, torch.nn.functional, "cuda", torch.compile, torch.cuda.synchronize, "torch"
        )
    _summary(report)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
    errors = [n for lib in ("kiln",) for n, r in report[lib].items() if "error" in r]
    print(
        f"done in {_elapsed():.0f} s; failed checks: {failed or 'none'}; "
        f"failed workloads: {errors or 'none'}",
        flush=True,
    )
    return 1 if failed or errors else 0


if __name__ == "__main__":
    sys.exit(main())
