"""``python -m kiln.bench.deploy``: what an ahead-of-time compiled package costs to load and run.

For each inference workload of the suite, the same function is exported and compiled into a
package (``kiln.export.aot_compile``) and, in this process, compiled with ``kiln.compile``. Two
numbers per workload:

- *load*: ``import kiln.export`` plus ``load_package`` in a fresh process that has imported only
  ``kiln`` (what a deployed server pays at start-up), the best of ``loads`` processes after one
  that fills the bytecode cache; CPU time beside wall time, since shared machines inflate wall time;
- *step*: the median wall time of one call of the package and of the ``kiln.compile`` function,
  sampled in turn (the same machine noise hits both), after warm-up calls.

The package must be no slower than ``kiln.compile``: the report gives the ratio and marks a
package that is slower by more than the samples' spread. The first outputs of the package, of the
compiled function and of eager are compared.
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
from dataclasses import asdict, dataclass

import kiln

from .workloads import Instance, get_workload

__all__ = ["DeployResult", "DEPLOY_SUITE", "measure_workload", "format_deploy_report", "main"]

DEPLOY_SUITE = ("mlp_forward", "gpt_block_forward", "call_overhead")

_LOAD = """
import json, sys, time
import kiln
wall, cpu = time.perf_counter(), time.process_time()
import kiln.export
kiln.export.load_package(sys.argv[1])
print(json.dumps({"cpu_ms": (time.process_time() - cpu) * 1e3,
                  "wall_ms": (time.perf_counter() - wall) * 1e3}))
"""


@dataclass
class DeployResult:
    workload: str
    load_cpu_ms: float
    load_wall_ms: float
    package_step_ms: float
    compiled_step_ms: float
    spread: float  # the larger relative spread (IQR / median) of the two step samples
    max_difference: float  # max |package - eager| and |compiled - eager| over the first outputs

    @property
    def ratio(self) -> float:
        """Package step time over ``kiln.compile`` step time (at most 1: no slower)."""
        return self.package_step_ms / self.compiled_step_ms

    @property
    def slower(self) -> bool:
        """Slower than ``kiln.compile`` by more than the noise the samples show."""
        return self.ratio > 1 + max(self.spread, 0.05)


def _load_times(path: str, loads: int) -> tuple[float, float]:
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    runs = []
    for _ in range(loads + 1):  # the first fills the bytecode cache
        done = subprocess.run(
            [sys.executable, "-c", _LOAD, path],
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"loading {path} in a fresh process failed:\n{done.stderr}")
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    best = min(runs[1:], key=lambda r: r["cpu_ms"])
    return best["cpu_ms"], best["wall_ms"]


def _sample(fn, args: tuple, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn(*args)
    return (time.perf_counter() - start) / calls


def _calls_per_sample(fn, args: tuple, seconds: float) -> int:
    one = _sample(fn, args, 1)
    return max(1, int(seconds / max(one, 1e-7)))


def _spread(samples: list[float]) -> float:
    if len(samples) < 4:
        return 0.0
    q1, _, q3 = statistics.quantiles(samples, n=4)
    return (q3 - q1) / statistics.median(samples)


def _largest_difference(instance: Instance, package, compiled) -> float:
    with kiln.no_grad():
        expected = instance.fn(*instance.args)
        return max(
            float((package(*instance.args) - expected).abs().max()),
            float((compiled(*instance.args) - expected).abs().max()),
        )


def measure_workload(
    name: str, *, quick: bool = False, repeat: int = 10, warmup: int = 3, loads: int = 3,
    sample_seconds: float = 0.05,
) -> DeployResult:  # fmt: skip
    """Export, package and compile one inference workload; time loading and steady calls."""
    workload = get_workload(name)
    if workload.trains:
        raise ValueError(f"{name} is a training step: packages run inference only")
    instance = workload.build(kiln, quick, "cpu")
    from kiln.export import aot_compile, export, load_package

    with tempfile.TemporaryDirectory(prefix="kiln-deploy-") as folder:
        path = os.path.join(folder, f"{name}.kpkg")
        aot_compile(export(instance.fn, instance.args), path)
        load_cpu, load_wall = _load_times(path, loads)
        package = load_package(path)
    compiled = kiln.compile(instance.fn)
    difference = _largest_difference(instance, package, compiled)
    samples: dict[str, list[float]] = {"package": [], "compiled": []}
    runners = {"package": package, "compiled": compiled}
    with kiln.no_grad():
        for fn in runners.values():
            for _ in range(warmup):
                fn(*instance.args)
        calls = {
            k: _calls_per_sample(fn, instance.args, sample_seconds) for k, fn in runners.items()
        }
        for index in range(repeat):
            order = ("package", "compiled") if index % 2 == 0 else ("compiled", "package")
            for key in order:
                samples[key].append(_sample(runners[key], instance.args, calls[key]))
    return DeployResult(
        workload=name,
        load_cpu_ms=load_cpu,
        load_wall_ms=load_wall,
        package_step_ms=statistics.median(samples["package"]) * 1e3,
        compiled_step_ms=statistics.median(samples["compiled"]) * 1e3,
        spread=max(_spread(samples["package"]), _spread(samples["compiled"])),
        max_difference=difference,
    )


def format_deploy_report(results: list[DeployResult]) -> str:
    """A table: load time (CPU / wall), step time of the package and of ``kiln.compile``."""
    lines = [
        f"{'workload':20s} {'load cpu':>9s} {'load wall':>10s} {'package':>10s} "
        f"{'compiled':>10s} {'pkg/compiled':>13s}  max |diff|",
    ]
    for r in results:
        mark = "  SLOWER" if r.slower else ""
        lines.append(
            f"{r.workload:20s} {r.load_cpu_ms:7.1f}ms {r.load_wall_ms:8.1f}ms "
            f"{r.package_step_ms:8.3f}ms {r.compiled_step_ms:8.3f}ms {r.ratio:12.2f}x  "
            f"{r.max_difference:.1e}{mark}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m kiln.bench.deploy",
        description="Load time and step time of kiln.export packages against kiln.compile.",
    )
    parser.add_argument("--quick", action="store_true", help="small shapes, fewer samples")
    parser.add_argument(
        "--workload", action="append", choices=DEPLOY_SUITE, metavar="NAME",
        help=f"run only this workload (repeatable): {', '.join(DEPLOY_SUITE)}",
    )  # fmt: skip
    parser.add_argument("--repeat", type=int, help="samples per column (10; quick 5)")
    parser.add_argument("--loads", type=int, default=3, help="fresh processes timed (3)")
    parser.add_argument("--json", metavar="FILE", help="write the results as JSON")
    args = parser.parse_args(argv)
    results = []
    for name in args.workload or DEPLOY_SUITE:
        print(f"{name}: exporting, packaging, timing ...", file=sys.stderr, flush=True)
        results.append(
            measure_workload(
                name,
                quick=args.quick,
                repeat=args.repeat or (5 if args.quick else 10),
                loads=args.loads,
                sample_seconds=0.01 if args.quick else 0.05,
            )  # fmt: skip
        )
    print(format_deploy_report(results))
    if args.json:
        with open(args.json, "w") as out:
            json.dump([asdict(r) | {"ratio": r.ratio} for r in results], out, indent=1)
        print(f"JSON: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
