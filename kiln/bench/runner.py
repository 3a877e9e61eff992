"""Measure each workload in kiln eager, kiln compiled, PyTorch eager and torch.compile.

How the numbers are made (so they are honest whatever they are):
- Every column runs its own fresh instance of the workload, built from the same seeded values.
- Compile time is the wall time of the first call of a freshly compiled function (capture,
  compile and one run). *Cold*: the on-disk compile cache is an empty temporary folder. *Warm*:
  the capture caches are reset and a fresh instance is compiled again, in the same process, with
  that folder now populated (kiln's LLVM objects, torch inductor's FX graph and code caches). Each
  library first compiles a throwaway function, so one-time start-up (imports, JIT, worker pools)
  is reported apart and not charged to the first workload.
- Step time is the median over ``repeat`` samples of the wall time of whole steps (a sample runs a
  step enough times to last ``sample_seconds``), after warm-up steps; the columns are sampled in
  turn, in a rotating order, so machine noise hits them alike. CUDA columns synchronize at the end
  of each sample. PyTorch gets as many threads as kiln's compiled kernels.
- The first outputs are compared: kiln compiled against kiln eager, kiln eager against PyTorch.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import math
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from .dumps import count_kernels, dump_compiled, environ, observe_compiled_graphs
from .workloads import Instance, Workload

__all__ = [
    "COLUMNS",
    "ColumnResult",
    "Settings",
    "SuiteResult",
    "WorkloadResult",
    "machine_info",
    "run_suite",
]

COLUMNS = ("kiln_eager", "kiln_compiled", "torch_eager", "torch_compiled")
# relative difference (max |a - b| / max |b|) above which the first outputs disagree
CHECK_TOLERANCE = 1e-3


@dataclass
class Settings:
    quick: bool = False
    repeat: int = 10
    warmup: int = 2
    device: str = "cpu"
    threads: int = 0  # 0: kiln's default (the number of cores)
    backend: str = "inductor"
    debug_dir: str | None = "kiln_debug"
    torch: bool = True  # measure PyTorch when it is importable
    torch_compile: bool = True  # and torch.compile (its cold compiles take seconds per workload)
    sample_seconds: float = 0.05


@dataclass
class ColumnResult:
    status: str = "ok"  # "ok", "not installed", "skipped", "unavailable: ...", "failed: ..."
    step_seconds: float | None = None  # median wall time of one step
    samples: list[float] = field(default_factory=list)  # per-step time of each sample
    calls_per_sample: int = 0
    cold_compile_seconds: float | None = None
    warm_compile_seconds: float | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@dataclass
class WorkloadResult:
    name: str
    summary: str
    columns: dict[str, ColumnResult]
    kernels: int | None = None  # kiln kernels generated (cold compile)
    graphs: int | None = None  # graphs the inductor compiled, forward and backward (cold compile)
    check: dict[str, float] = field(default_factory=dict)  # comparison -> relative difference
    notes: list[str] = field(default_factory=list)
    debug_dir: str | None = None
    debug_files: int = 0

    def _ratio(self, top: str, bottom: str) -> float | None:
        a, b = self.columns.get(top), self.columns.get(bottom)
        if a is None or b is None or not (a.ok and b.ok):
            return None
        return a.step_seconds / b.step_seconds

    @property
    def kiln_speedup(self) -> float | None:
        """kiln eager time / kiln compiled time (above 1: compiling helps)."""
        return self._ratio("kiln_eager", "kiln_compiled")

    @property
    def torch_speedup(self) -> float | None:
        return self._ratio("torch_eager", "torch_compiled")

    @property
    def eager_vs_torch(self) -> float | None:
        """kiln eager time / PyTorch eager time (above 1: kiln is slower)."""
        return self._ratio("kiln_eager", "torch_eager")

    @property
    def compiled_vs_torch(self) -> float | None:
        return self._ratio("kiln_compiled", "torch_compiled")

    @property
    def check_failures(self) -> list[str]:
        return [k for k, v in self.check.items() if not v <= CHECK_TOLERANCE]


@dataclass
class SuiteResult:
    machine: dict
    settings: dict
    startup: dict[str, float | str]  # one-time compiler start-up per library
    workloads: list[WorkloadResult]
    seconds: float = 0.0


# ------------------------------------------------------------------------ the two libraries


class _Library:
    """What the runner needs from kiln or PyTorch: build, compile, reset, synchronize, caches."""

    key: str
    lib: object
    device: str

    def synchronize(self) -> None:
        if self.device == "cuda":
            self.lib.cuda.synchronize()


class _Kiln(_Library):
    key = "kiln"

    def __init__(self, settings: Settings, observed: list):
        import kiln

        self.lib = kiln
        self.device = settings.device
        self.backend = settings.backend
        self.observed = observed  # ObservedGraph for every inductor compile

    def compile(self, fn: Callable) -> Callable:
        return self.lib.compile(fn, backend=self.backend)

    def reset(self) -> None:
        self.lib.dynamo.reset()
        # the warm compile must read the on-disk cache, not graphs this process still holds
        from ..inductor.codegen.graph_index import clear_memory_cache

        clear_memory_cache()

    @contextlib.contextmanager
    def cache_dir(self, path: str):
        with environ(KILN_CACHE_DIR=path, TRITON_CACHE_DIR=os.path.join(path, "triton")):
            yield


class _Torch(_Library):
    key = "torch"

    def __init__(self, settings: Settings, torch):
        self.lib = torch
        self.device = settings.device

    def compile(self, fn: Callable) -> Callable:
        return self.lib.compile(fn)

    def reset(self) -> None:
        self.lib._dynamo.reset()

    @contextlib.contextmanager
    def cache_dir(self, path: str):
        triton = os.path.join(path, "triton")
        with environ(TORCHINDUCTOR_CACHE_DIR=path, TRITON_CACHE_DIR=triton):
            _clear_torch_caches()
            yield
        _clear_torch_caches()


def _clear_torch_caches() -> None:
    """Forget torch inductor's in-memory caches so a new cache folder really starts cold."""
    try:
        from torch._inductor.utils import clear_caches
    except ImportError:
        return
    clear_caches()


def _import_torch():
    """PyTorch, or the reason it cannot be used (``"not installed"``)."""
    try:
        import torch
    except ImportError:
        return None, "not installed"
    except Exception as error:  # a broken install must not stop the kiln columns
        return None, f"unavailable: import failed ({type(error).__name__}: {error})"
    return torch, None


# ------------------------------------------------------------------------------- measuring


def _first_output(out) -> np.ndarray | None:
    while isinstance(out, (tuple, list)) and out:
        out = out[0]
    if not hasattr(out, "detach"):
        return None
    return np.asarray(out.detach().cpu().numpy(), dtype=np.float64)


def _relative_difference(a, b) -> float:
    if a is None or b is None or a.shape != b.shape:
        return math.inf
    scale = float(np.max(np.abs(b))) if b.size else 0.0
    diff = float(np.max(np.abs(a - b))) if a.size else 0.0
    if math.isnan(diff):
        return math.inf
    return diff / max(scale, 1e-12)


def _short(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    first = text[0] if text else ""
    return f"{type(error).__name__}: {first}"[:200]


class _Column:
    """One measured column: a callable, its arguments and its result record."""

    def __init__(self, library: _Library, instance: Instance, fn: Callable):
        self.library = library
        self.args = instance.args
        self.fn = fn
        self.calls = 1
        self.first_output = None

    def call(self):
        return self.fn(*self.args)

    def timed(self, calls: int) -> float:
        fn, args = self.fn, self.args
        start = time.perf_counter()
        for _ in range(calls):
            fn(*args)
        self.library.synchronize()
        return (time.perf_counter() - start) / calls


def _timed_first_call(library: _Library, fn: Callable, args: tuple):
    start = time.perf_counter()
    out = fn(*args)
    library.synchronize()
    return time.perf_counter() - start, out


class _Runner:
    def __init__(self, settings: Settings, progress: Callable[[str], None], observed: list):
        self.settings = settings
        self.progress = progress
        self.kiln = _Kiln(settings, observed)
        torch, self.torch_status = (None, "skipped (--no-torch)")
        if settings.torch:
            torch, self.torch_status = _import_torch()
        self.torch = _Torch(settings, torch) if torch is not None else None
        if self.torch is not None and settings.device == "cuda" and not torch.cuda.is_available():
            self.torch_status = "unavailable: this PyTorch build has no CUDA device"
            self.torch = None
        # why the torch.compile column is empty, when it is for every workload
        self.torch_compile_status: str | None = None
        if not settings.torch_compile:
            self.torch_compile_status = "skipped (quick run)"
        self.cache_root = tempfile.mkdtemp(prefix="kiln-bench-cache-")

    def close(self) -> None:
        shutil.rmtree(self.cache_root, ignore_errors=True)

    def set_threads(self) -> int:
        from ..runtime.flags import get_num_threads, set_num_threads

        if self.settings.threads:
            set_num_threads(self.settings.threads)
        threads = get_num_threads()
        if self.torch is not None:
            self.torch.lib.set_num_threads(threads)
        return threads

    def startup(self) -> dict[str, float | str]:
        """Compile and run a throwaway function in each library (imports, JIT, worker pools)."""
        found: dict[str, float | str] = {}
        libraries = [self.kiln]
        if self.torch is not None and self.torch_compile_status is None:
            libraries.append(self.torch)
        for library in libraries:
            self.progress(f"start-up: first compile in {library.key}")
            x = library.lib.ones(8, device=self.settings.device)
            with library.cache_dir(os.path.join(self.cache_root, "startup", library.key)):
                try:
                    seconds, _ = _timed_first_call(library, library.compile(_warm_up), (x,))
                    found[library.key] = seconds
                except Exception as error:
                    found[library.key] = f"failed: {_short(error)}"
                library.reset()
        if isinstance(found.get("torch"), str):
            self.torch_compile_status = found["torch"]
        return found

    # -- compiled columns ----------------------------------------------------------------

    def _compile_kiln(self, workload: Workload, result: WorkloadResult) -> _Column | None:
        kiln = self.kiln
        column = result.columns["kiln_compiled"]
        with kiln.cache_dir(os.path.join(self.cache_root, "kiln", workload.name)):
            kiln.reset()
            instance = self._build(workload, kiln)
            mark = len(kiln.observed)
            self.progress(f"{workload.name}: kiln compile (cold cache)")
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                try:
                    seconds, out = _timed_first_call(kiln, kiln.compile(instance.fn), instance.args)
                except Exception as error:
                    column.status = f"failed: {_short(error)}"
                    return None
            result.notes += [f"kiln: {w.message}" for w in caught if _is_compile_warning(w)]
            column.cold_compile_seconds = seconds
            result.kernels = count_kernels(kiln.observed[mark:])
            result.graphs = sum(not o.eager_op for o in kiln.observed[mark:])
            cold_output = _first_output(out)
            if self.settings.debug_dir:
                self.progress(f"{workload.name}: writing IR dumps")
                self._write_dumps(workload, result)
            self.progress(f"{workload.name}: kiln compile (warm cache)")
            kiln.reset()
            instance = self._build(workload, kiln)
            fn = kiln.compile(instance.fn)
            column.warm_compile_seconds, _ = _timed_first_call(kiln, fn, instance.args)
        timed = _Column(kiln, instance, fn)
        timed.first_output = cold_output
        return timed

    def _write_dumps(self, workload: Workload, result: WorkloadResult) -> None:
        """Compile a fresh instance once more (warm cache, untimed) with the dumps on, so the
        timed compiles stay free of file I/O."""
        folder = os.path.join(self.settings.debug_dir, workload.name)
        shutil.rmtree(folder, ignore_errors=True)
        self.kiln.reset()
        try:
            instance = self._build(workload, self.kiln)
            files = dump_compiled(instance.fn, instance.args, folder, self.kiln.backend)
        except Exception as error:  # dumps are a service: never lose the measurement for them
            result.notes.append(f"IR dumps incomplete: {_short(error)}")
            files = [f for _, _, names in os.walk(folder) for f in names]
        finally:
            self.kiln.reset()
        result.debug_dir = folder
        result.debug_files = len(files)

    def _compile_torch(self, workload: Workload, result: WorkloadResult) -> _Column | None:
        torch = self.torch
        column = result.columns["torch_compiled"]
        with torch.cache_dir(os.path.join(self.cache_root, "torch", workload.name)):
            try:
                torch.reset()
                instance = self._build(workload, torch)
                self.progress(f"{workload.name}: torch.compile (cold cache)")
                column.cold_compile_seconds, out = _timed_first_call(
                    torch, torch.compile(instance.fn), instance.args
                )
                first = _first_output(out)
                self.progress(f"{workload.name}: torch.compile (warm cache)")
                torch.reset()
                instance = self._build(workload, torch)
                fn = torch.compile(instance.fn)
                column.warm_compile_seconds, _ = _timed_first_call(torch, fn, instance.args)
            except Exception as error:
                column.status = f"failed: {_short(error)}"
                return None
        timed = _Column(torch, instance, fn)
        timed.first_output = first
        return timed

    # -- one workload --------------------------------------------------------------------

    def _build(self, workload: Workload, library: _Library) -> Instance:
        library.lib.manual_seed(0)
        return workload.build(library.lib, self.settings.quick, self.settings.device)

    def measure(self, workload: Workload) -> WorkloadResult:
        result = WorkloadResult(
            workload.name, workload.summary, {k: ColumnResult() for k in COLUMNS}
        )
        gc.collect()
        columns: dict[str, _Column] = {}
        eager = self._build(workload, self.kiln)
        columns["kiln_eager"] = _Column(self.kiln, eager, eager.fn)
        compiled = self._compile_kiln(workload, result)
        if compiled is not None:
            columns["kiln_compiled"] = compiled
        if self.torch is None:
            result.columns["torch_eager"].status = self.torch_status
            result.columns["torch_compiled"].status = self.torch_status
        else:
            eager = self._build(workload, self.torch)
            columns["torch_eager"] = _Column(self.torch, eager, eager.fn)
            if self.torch_compile_status is not None:
                result.columns["torch_compiled"].status = self.torch_compile_status
            elif (compiled := self._compile_torch(workload, result)) is not None:
                columns["torch_compiled"] = compiled
        self._warm_up(workload, columns, result)
        self._check(columns, result)
        self._sample(workload, columns, result)
        return result

    def _warm_up(self, workload: Workload, columns: dict, result: WorkloadResult) -> None:
        self.progress(f"{workload.name}: warm-up")
        for key, column in list(columns.items()):
            try:
                out = column.call()
                if column.first_output is None:
                    column.first_output = _first_output(out)
                for _ in range(self.settings.warmup):
                    column.call()
                estimate = column.timed(1)
            except Exception as error:
                result.columns[key].status = f"failed: {_short(error)}"
                del columns[key]
                continue
            column.calls = max(1, round(self.settings.sample_seconds / max(estimate, 1e-9)))

    def _check(self, columns: dict, result: WorkloadResult) -> None:
        pairs = [("kiln_compiled", "kiln_eager"), ("kiln_eager", "torch_eager")]
        for a, b in pairs:
            if a in columns and b in columns:
                diff = _relative_difference(columns[a].first_output, columns[b].first_output)
                result.check[f"{a} vs {b}"] = diff
        for name in result.check_failures:
            result.notes.append(
                f"first outputs differ: {name}: relative difference {result.check[name]:.2e}"
            )

    def _sample(self, workload: Workload, columns: dict, result: WorkloadResult) -> None:
        """Time each column ``repeat`` times, in a rotating order; note any column during whose
        samples kiln compiled graphs (a recompile, or a CUDA eager op meeting a new shape or
        scalar: those run as single-op compiled graphs), since then compile time is in its step."""
        order = list(columns)
        repeat = self.settings.repeat
        observed = self.kiln.observed
        compiles = dict.fromkeys(order, 0)
        for r in range(repeat):
            self.progress(f"{workload.name}: timing {r + 1}/{repeat}")
            for key in order[r % len(order) :] + order[: r % len(order)]:
                column = columns[key]
                before = len(observed)
                result.columns[key].samples.append(column.timed(column.calls))
                compiles[key] += len(observed) - before
        for key, column in columns.items():
            record = result.columns[key]
            record.calls_per_sample = column.calls
            record.step_seconds = statistics.median(record.samples)
            if compiles[key]:
                result.notes.append(
                    f"{key.replace('_', ' ')}: kiln compiled {compiles[key]} graphs while it "
                    "was timed, so its times include compiling"
                )


def _warm_up(x):
    return (x * 2.0 + 1.0).relu()


def _is_compile_warning(w: warnings.WarningMessage) -> bool:
    text = str(w.message)
    return issubclass(w.category, RuntimeWarning) and (
        "backend" in text or "eagerly" in text or "recompiled" in text
    )


# ------------------------------------------------------------------------------ the suite


def machine_info(threads: int | None = None) -> dict:
    """The machine and software a table was measured with (for the report and the JSON)."""
    info = {
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "load_average": [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else [],
        "platform": platform.platform(),
        "python": platform.python_version(),
        "numpy": np.__version__,
    }
    try:
        import llvmlite

        info["llvmlite"] = llvmlite.__version__
    except ImportError:
        pass
    torch = sys.modules.get("torch")
    info["torch"] = getattr(torch, "__version__", None)
    # numpy's BLAS (kiln eager matmuls, kiln's extern mm) takes its thread count at start-up
    info["blas_threads"] = os.environ.get("OPENBLAS_NUM_THREADS") or "all cores (default)"
    if threads is not None:
        info["threads"] = threads
    return info


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def run_suite(
    workloads: list[Workload], settings: Settings, progress: Callable[[str], None] = lambda _: None
) -> SuiteResult:
    """Measure ``workloads`` with ``settings``; ``progress`` hears a short line per stage."""
    start = time.perf_counter()
    with observe_compiled_graphs() as observed:
        runner = _Runner(settings, progress, observed)
        try:
            threads, load_before, startup, results = _run(runner, workloads, progress)
        finally:
            runner.close()
    machine = machine_info(threads)
    machine["load_average_before"] = load_before
    return SuiteResult(
        machine=machine,
        settings={k: getattr(settings, k) for k in settings.__dataclass_fields__},
        startup=startup,
        workloads=results,
        seconds=time.perf_counter() - start,
    )


def _run(runner: _Runner, workloads: list[Workload], progress: Callable[[str], None]):
    threads = runner.set_threads()
    load_before = machine_info()["load_average"]
    startup = runner.startup()
    results = []
    for n, workload in enumerate(workloads):
        progress(f"[{n + 1}/{len(workloads)}] {workload.name}")
        try:
            results.append(runner.measure(workload))
        except Exception as error:  # one broken workload must not lose the others' numbers
            failed = ColumnResult(status=f"failed: {_short(error)}")
            columns = {key: dataclasses.replace(failed) for key in COLUMNS}
            results.append(WorkloadResult(workload.name, workload.summary, columns))
    return threads, load_before, startup, results
