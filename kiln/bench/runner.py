"""Measure each workload in kiln eager, kiln compiled, PyTorch eager and torch.compile.

How the numbers are made (so they are honest whatever they are):
- Every column runs its own fresh instance of the workload, built from the same seeded values.
- Compile time is the wall time of the first call of a freshly compiled function (capture,
  compile and one run; for a workload whose batch changes, the first call of every batch), plus
  what its second round takes beyond a steady one (a recompile on the second call).
  *Cold*: the on-disk compile cache is an empty temporary folder. *Warm*: the capture caches are
  reset and a fresh instance is compiled again, in the same process, with that folder now
  populated. Each library first compiles a throwaway function, so one-time start-up is reported
  apart. kiln's cold compile is split by stage (dynamo, aot, inductor, codegen) through
  ``runtime.logs.recording_compile_stages``.
- Step times are interleaved: in each round every column runs once (a single step, or as many
  as last ``min_sample_seconds`` when a step is shorter than that), in a rotating order, so a
  neighbour process hits the columns alike. At least ``repeat`` rounds, more while the
  workload's ``sample_budget`` lasts, at most ``max_rounds``. Each column reports the median,
  quartiles and extremes of its samples. CUDA columns synchronize after each sample. PyTorch
  gets as many threads as kiln's compiled kernels.
- The load average is read before the run and after each workload, and on Linux the CPU time
  other processes took while a workload was timed: the report warns when they competed.
- Memory (resident set, Linux): per column the memory it holds after building and warming up
  (parameters, optimizer state, caches, compiled code) and the peak one more step adds.
- A workload that names its compulsory bytes also times a numpy copy of as many bytes in the
  same rounds, so its GB/s is read against the copy bandwidth of this machine, now.
- A memory-bound workload is also compiled with ``dynamic=True`` and timed in the same rounds:
  its steady step over the default compile's is the cost of kernels for every size.
- A workload whose step is a whole program with changing shapes (``Workload.end_to_end``) is
  read end to end: its eager step against the compiled program's cold first run. For every
  workload the cold compile counts the graphs dynamo captured and its recompiles.
- The first outputs are compared: kiln compiled against kiln eager, kiln eager against PyTorch.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import math
import os
import shutil
import statistics
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ..runtime.logs import recording_compile_stages
from .dumps import count_kernels, dump_compiled, environ, observe_compiled_graphs
from .machine import (
    StepPeak,
    copy_arrays,
    cpu_snapshot,
    load_average,
    machine_info,
    others_busy_cores,
    resident_bytes,
)
from .workloads import Instance, Workload

__all__ = [
    "COLUMNS",
    "ColumnResult",
    "Settings",
    "SuiteResult",
    "WorkloadResult",
    "machine_info",
    "run_suite",
    "spread",
]

COLUMNS = ("kiln_eager", "kiln_compiled", "torch_eager", "torch_compiled")
# the numpy copy a memory-bound workload's bandwidth is read against (timed in the same rounds)
COPY_REFERENCE = "numpy_copy"
# kiln compiled with ``dynamic=True`` (symbolic sizes from the first call), timed beside the
# default compile of a memory-bound workload: what kernels for every size cost in steady state
DYNAMIC_REFERENCE = "kiln_dynamic"
# relative difference (max |a - b| / max |b|) above which the first outputs disagree
CHECK_TOLERANCE = 1e-3
# other processes keeping this many cores busy while a workload is timed earn a warning
BUSY_NEIGHBOURS = 0.5


@dataclass
class Settings:
    quick: bool = False
    repeat: int = 10  # rounds of samples, at least
    warmup: int = 2
    device: str = "cpu"
    threads: int = 0  # 0: kiln's default (the number of cores)
    backend: str = "inductor"
    debug_dir: str | None = "kiln_debug"
    torch: bool = True  # measure PyTorch when it is importable
    torch_compile: bool = True  # and torch.compile (its cold compiles take seconds per workload)
    min_sample_seconds: float = 1e-3  # a sample runs steps until it lasts this long
    sample_budget: float = (
        2.0  # seconds of sampling per workload beyond the first ``repeat`` rounds
    )
    max_rounds: int = 200
    memory: bool = True  # measure resident memory per column (Linux)


@dataclass
class ColumnResult:
    status: str = "ok"  # "ok", "not installed", "skipped", "unavailable: ...", "failed: ..."
    step_seconds: float | None = None  # median wall time of one step
    quartiles: tuple[float, float] | None = None  # first and third quartile of the samples
    extremes: tuple[float, float] | None = None  # fastest and slowest sample
    samples: list[float] = field(default_factory=list)  # per-step time of each sample
    calls_per_sample: int = 0
    cold_compile_seconds: float | None = None
    warm_compile_seconds: float | None = None
    compile_stages: dict[str, float] = field(default_factory=dict)  # cold compile, by stage
    held_bytes: int | None = None  # resident memory the column keeps after its warm-up
    step_peak_bytes: int | None = None  # most resident memory one step adds on top

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def relative_spread(self) -> float | None:
        """Half the interquartile range over the median (0.05: the middle half of the samples
        lies within about 5% of the median)."""
        if self.quartiles is None or not self.step_seconds:
            return None
        return (self.quartiles[1] - self.quartiles[0]) / 2 / self.step_seconds


@dataclass
class WorkloadResult:
    name: str
    summary: str
    columns: dict[str, ColumnResult]
    kernels: int | None = None  # kiln kernels generated (cold compile)
    graphs: int | None = None  # graphs the inductor compiled, forward and backward (cold compile)
    captures: int | None = None  # graphs dynamo captured (cold compile)
    recompiles: int | None = None  # captures after a guard failed (cold compile)
    end_to_end: bool = False  # a step is a whole program whose shapes change (see Workload)
    check: dict[str, float] = field(default_factory=dict)  # comparison -> relative difference
    notes: list[str] = field(default_factory=list)
    debug_dir: str | None = None
    debug_files: int = 0
    moved_bytes: int | None = None  # compulsory bytes of one step (memory-bound workloads)
    copy_seconds: float | None = None  # median time of a numpy copy of ``moved_bytes``
    dynamic_seconds: float | None = None  # median step of kiln compiled with dynamic=True
    load_average: float | None = None  # 1-minute load average once the workload was timed
    others_busy_cores: float | None = None  # cores other processes used while it was timed

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

    def bandwidth(self, key: str) -> float | None:
        """Bytes per second column ``key`` moves (its compulsory bytes over its median step)."""
        column = self.columns.get(key)
        if self.moved_bytes is None or column is None or not column.ok:
            return None
        return self.moved_bytes / column.step_seconds

    @property
    def end_to_end_speedup(self) -> float | None:
        """kiln eager run / kiln compiled first run, compile included (above 1: compiling pays
        for itself within one run of the program)."""
        return self._first_run_speedup("kiln_eager", "kiln_compiled")

    @property
    def torch_end_to_end_speedup(self) -> float | None:
        return self._first_run_speedup("torch_eager", "torch_compiled")

    def _first_run_speedup(self, eager: str, compiled: str) -> float | None:
        a, b = self.columns.get(eager), self.columns.get(compiled)
        if a is None or b is None or not (a.ok and b.ok) or not b.cold_compile_seconds:
            return None
        return a.step_seconds / b.cold_compile_seconds

    @property
    def dynamic_vs_static(self) -> float | None:
        """Steady step with ``dynamic=True`` / with the default compile (static sizes)."""
        static = self.columns.get("kiln_compiled")
        if self.dynamic_seconds is None or static is None or not static.ok:
            return None
        return self.dynamic_seconds / static.step_seconds

    @property
    def copy_bandwidth(self) -> float | None:
        if self.moved_bytes is None or not self.copy_seconds:
            return None
        return self.moved_bytes / self.copy_seconds

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
    warnings: list[str] = field(default_factory=list)  # why the figures may not be trusted


def spread(samples: list[float]) -> tuple[float, tuple[float, float], tuple[float, float]]:
    """Median, (first, third) quartile and (min, max) of ``samples`` (at least one)."""
    ordered = sorted(samples)
    median = statistics.median(ordered)
    if len(ordered) == 1:
        quartiles = (median, median)
    else:
        q1, _, q3 = statistics.quantiles(ordered, n=4, method="inclusive")
        quartiles = (q1, q3)
    return median, quartiles, (ordered[0], ordered[-1])


def load_warnings(machine: dict, workloads: list[WorkloadResult]) -> list[str]:
    """Why this run's times may not be trusted: a load average above the core count, other
    processes busy while workloads were timed."""
    cores = machine.get("cores") or 1
    found = []
    loads = {"at the start": (machine.get("load_average_before") or [None])[0]}
    loads.update({f"after {w.name}": w.load_average for w in workloads})
    high = {when: load for when, load in loads.items() if load is not None and load > cores}
    if high:
        worst = max(high, key=high.get)
        found.append(
            f"the load average exceeded the {cores} cores ({high[worst]:.2f} {worst}; "
            f"{len(high)} of {len(loads)} readings): other processes competed for the CPUs, so "
            "step times are unreliable (columns are interleaved, so ratios suffer less)"
        )
    busy = [w for w in workloads if (w.others_busy_cores or 0.0) >= BUSY_NEIGHBOURS]
    if busy:
        named = ", ".join(f"{w.name} {w.others_busy_cores:.1f}" for w in busy)
        found.append(f"other processes kept cores busy while these were timed (cores): {named}")
    return found


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
    """One measured column: a callable, the arguments of its steps and its result record.
    Step ``i`` uses argument set ``i % len(arg_sets)``, in every column alike."""

    def __init__(self, library: _Library | None, instance: Instance, fn: Callable):
        self.library = library
        self.arg_sets = instance.arg_sets
        self.fn = fn
        self.calls = 1
        self.first_output = None

    def call(self, step: int = 0):
        return self.fn(*self.arg_sets[step % len(self.arg_sets)])

    def timed(self, calls: int, step: int = 0) -> float:
        """Seconds per step of ``calls`` steps starting at step ``step``."""
        fn, arg_sets = self.fn, self.arg_sets
        n = len(arg_sets)
        start = time.perf_counter()
        for i in range(step, step + calls):
            fn(*arg_sets[i % n])
        if self.library is not None:
            self.library.synchronize()
        return (time.perf_counter() - start) / calls


def _copy_column(nbytes: int) -> _Column:
    """A plain numpy copy of ``nbytes``, timed like a column."""
    source, destination = copy_arrays(nbytes)

    def numpy_copy():
        np.copyto(destination, source)

    return _Column(None, Instance(numpy_copy, ()), numpy_copy)


def _timed_first_calls(library: _Library, fn: Callable, instance: Instance):
    """Seconds until a freshly compiled function runs at its steady speed, and its first output:
    the first call with every argument set (a compile per shape), plus what the second round
    takes beyond a steady one (a recompile there, on state the first call created such as
    SGD's momentum buffers, is compile time too; the steady round is the faster of two more)."""

    def one_round():
        start = time.perf_counter()
        outputs = [fn(*args) for args in instance.arg_sets]
        library.synchronize()
        return time.perf_counter() - start, outputs

    first, outputs = one_round()
    second, _ = one_round()
    steady = min(one_round()[0], one_round()[0])
    return first + max(0.0, second - steady), outputs[0]


def balanced_order(columns: list, r: int) -> list:
    """The columns' order in round ``r``: a Williams design, in which over a cycle (n rounds for
    n columns, 2n when n is odd) every column runs right after every other one equally often.
    A column can slow the one after it (PyTorch's OpenMP threads keep spinning after its ops,
    taking a core from kiln's kernel threads: the dynamic column, always after PyTorch's in a
    plain rotation, measured 1.25-1.54x the static one with PyTorch's columns and 0.98-1.00x
    without), so each pays that equally."""
    n = len(columns)
    first, low, high = [0], 1, n - 1
    while len(first) < n:
        first.append(low if len(first) % 2 else high)
        if len(first) % 2:
            high -= 1
        else:
            low += 1
    k = r % (n if n % 2 == 0 else 2 * n)
    row = [(x + k) % n for x in first]
    if k >= n:
        row.reverse()
    return [columns[i] for i in row]


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
        self.memory = settings.memory and StepPeak.available()
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
        """Run a throwaway training step in each library and compile a throwaway function
        (imports, lazy initialization, JIT, worker pools), so the first workload's times and
        memory are not charged with them."""
        for library in (self.kiln, self.torch):
            if library is not None:
                _eager_training_step(library.lib, self.settings.device)
        found: dict[str, float | str] = {}
        libraries = [self.kiln]
        if self.torch is not None and self.torch_compile_status is None:
            libraries.append(self.torch)
        for library in libraries:
            self.progress(f"start-up: first compile in {library.key}")
            x = library.lib.ones(8, device=self.settings.device)
            with library.cache_dir(os.path.join(self.cache_root, "startup", library.key)):
                try:
                    seconds, _ = _timed_first_calls(
                        library, library.compile(_warm_up), Instance(_warm_up, (x,))
                    )
                    found[library.key] = seconds
                except Exception as error:
                    found[library.key] = f"failed: {_short(error)}"
                library.reset()
        if isinstance(found.get("torch"), str):
            self.torch_compile_status = found["torch"]
        return found

    # -- the columns -----------------------------------------------------------------------

    def _eager(self, library: _Library, workload: Workload, result: WorkloadResult) -> _Column:
        instance = self._build(workload, library)
        return _Column(library, instance, instance.fn)

    def _compile_kiln(self, workload: Workload, result: WorkloadResult) -> _Column | None:
        kiln = self.kiln
        column = result.columns["kiln_compiled"]
        with kiln.cache_dir(os.path.join(self.cache_root, "kiln", workload.name)):
            kiln.reset()
            instance = self._build(workload, kiln)
            mark = len(kiln.observed)
            captured = _capture_counts()
            self.progress(f"{workload.name}: kiln compile (cold cache)")
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                try:
                    with recording_compile_stages() as stages:
                        fn = instance.compiled(kiln.compile)
                        seconds, out = _timed_first_calls(kiln, fn, instance)
                except Exception as error:
                    column.status = f"failed: {_short(error)}"
                    return None
            result.notes += [f"kiln: {w.message}" for w in caught if _is_compile_warning(w)]
            column.cold_compile_seconds = seconds
            column.compile_stages = dict(stages)
            result.kernels = count_kernels(kiln.observed[mark:])
            result.graphs = sum(not o.eager_op for o in kiln.observed[mark:])
            result.captures, result.recompiles = (
                b - a for a, b in zip(captured, _capture_counts())
            )
            cold_output = _first_output(out)
            if self.settings.debug_dir:
                self.progress(f"{workload.name}: writing IR dumps")
                self._write_dumps(workload, result)
            self.progress(f"{workload.name}: kiln compile (warm cache)")
            # the cold instance goes before the warm one is built: its buffers are then reused,
            # not left in the pool on top of the column's own (its held memory counts them)
            instance = fn = out = None
            kiln.reset()
            gc.collect()
            instance = self._build(workload, kiln)
            fn = instance.compiled(kiln.compile)
            column.warm_compile_seconds, _ = _timed_first_calls(kiln, fn, instance)
        timed = _Column(kiln, instance, fn)
        timed.first_output = cold_output
        return timed

    def _compile_dynamic(self, workload: Workload) -> _Column:
        """The step compiled with ``dynamic=True`` (warm cache, untimed compile)."""
        kiln = self.kiln
        with kiln.cache_dir(os.path.join(self.cache_root, "kiln", workload.name)):
            instance = self._build(workload, kiln)
            fn = instance.compiled(
                lambda f: kiln.lib.compile(f, backend=kiln.backend, dynamic=True)
            )
            out = fn(*instance.args)  # compiled here, where the cache folder is this workload's
        column = _Column(kiln, instance, fn)
        # the first step's output (a training step's later outputs follow its updated weights)
        column.first_output = _first_output(out)
        return column

    def _write_dumps(self, workload: Workload, result: WorkloadResult) -> None:
        """Compile a fresh instance once more (warm cache, untimed) with the dumps on, so the
        timed compiles stay free of file I/O."""
        folder = os.path.join(self.settings.debug_dir, workload.name)
        shutil.rmtree(folder, ignore_errors=True)
        self.kiln.reset()
        try:
            instance = self._build(workload, self.kiln)
            if instance.compile_with is not None:
                result.notes.append("no IR dumps: its models are compiled, not its step")
                return
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
                column.cold_compile_seconds, out = _timed_first_calls(
                    torch, instance.compiled(torch.compile), instance
                )
                first = _first_output(out)
                self.progress(f"{workload.name}: torch.compile (warm cache)")
                instance = out = None  # as for kiln's column: the cold instance goes first
                torch.reset()
                gc.collect()
                instance = self._build(workload, torch)
                fn = instance.compiled(torch.compile)
                column.warm_compile_seconds, _ = _timed_first_calls(torch, fn, instance)
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

    def _makers(self, workload: Workload, result: WorkloadResult) -> dict[str, Callable]:
        """How to make each column that can run (a missing one gets its reason as status)."""
        makers: dict[str, Callable] = {
            "kiln_eager": lambda: self._eager(self.kiln, workload, result),
            "kiln_compiled": lambda: self._compile_kiln(workload, result),
        }
        if self.torch is None:
            result.columns["torch_eager"].status = self.torch_status
            result.columns["torch_compiled"].status = self.torch_status
            return makers
        makers["torch_eager"] = lambda: self._eager(self.torch, workload, result)
        if self.torch_compile_status is not None:
            result.columns["torch_compiled"].status = self.torch_compile_status
        else:
            makers["torch_compiled"] = lambda: self._compile_torch(workload, result)
        return makers

    def measure(self, workload: Workload) -> WorkloadResult:
        result = WorkloadResult(
            workload.name, workload.summary, {k: ColumnResult() for k in COLUMNS},
            end_to_end=workload.end_to_end,
        )  # fmt: skip
        columns: dict[str, _Column] = {}
        for key, make in self._makers(workload, result).items():
            held_before = resident_bytes() if self.memory else None
            try:
                column = make()
            except Exception as error:
                result.columns[key].status = f"failed: {_short(error)}"
                continue
            if column is not None and self._warm_up(workload, key, column, result):
                columns[key] = column
                if held_before is not None:
                    result.columns[key].held_bytes = max(0, resident_bytes() - held_before)
        if workload.moved_bytes is not None:
            result.moved_bytes = workload.moved_bytes(self.settings.quick)
            copy = _copy_column(result.moved_bytes)
            if self._warm_up(workload, COPY_REFERENCE, copy, result):
                columns[COPY_REFERENCE] = copy
        # the steady-state price of kernels for every size, at the default shapes (a program
        # whose shapes change is dynamic in both columns after its first recompile)
        if "kiln_compiled" in columns and not workload.end_to_end:
            try:
                dynamic = self._compile_dynamic(workload)
            except Exception as error:
                result.notes.append(f"{DYNAMIC_REFERENCE} failed: {_short(error)}")
            else:
                if self._warm_up(workload, DYNAMIC_REFERENCE, dynamic, result):
                    columns[DYNAMIC_REFERENCE] = dynamic
        self._check(columns, result)
        start = cpu_snapshot()
        self._sample(workload, columns, result)
        result.others_busy_cores = others_busy_cores(start, cpu_snapshot())
        result.load_average = (load_average() or [None])[0]
        if self.memory:
            self._step_peaks(workload, columns, result)
        return result

    def _warm_up(self, workload: Workload, key: str, column: _Column, result) -> bool:
        """Run every argument set once and ``warmup`` more steps; pick the calls per sample.
        False (and the column's status says why) when a step fails."""
        self.progress(f"{workload.name}: warm-up {key}")
        try:
            out = column.call(0)
            if column.first_output is None:
                column.first_output = _first_output(out)
            for step in range(1, len(column.arg_sets) + self.settings.warmup):
                column.call(step)
            estimate = column.timed(1)
        except Exception as error:
            if key in result.columns:
                result.columns[key].status = f"failed: {_short(error)}"
            else:
                result.notes.append(f"{key} failed: {_short(error)}")
            return False
        column.calls = max(1, math.ceil(self.settings.min_sample_seconds / max(estimate, 1e-9)))
        return True

    def _check(self, columns: dict, result: WorkloadResult) -> None:
        pairs = [
            ("kiln_compiled", "kiln_eager"),
            ("kiln_eager", "torch_eager"),
            (DYNAMIC_REFERENCE, "kiln_eager"),
        ]
        for a, b in pairs:
            if a in columns and b in columns:
                diff = _relative_difference(columns[a].first_output, columns[b].first_output)
                result.check[f"{a} vs {b}"] = diff
        for name in result.check_failures:
            result.notes.append(
                f"first outputs differ: {name}: relative difference {result.check[name]:.2e}"
            )

    def _rounds(self, round_index: int, elapsed: float) -> bool:
        """Whether to sample another round."""
        s = self.settings
        if round_index < s.repeat:
            return True
        return round_index < s.max_rounds and elapsed < s.sample_budget

    def _sample(self, workload: Workload, columns: dict, result: WorkloadResult) -> None:
        """Sample every column once per round, in a rotating order; note any column during
        whose samples kiln compiled graphs (a recompile, or a CUDA eager op meeting a new shape
        or scalar: those run as single-op compiled graphs), since then compile time is in its
        step."""
        order = list(columns)
        if not order:
            return
        observed = self.kiln.observed
        compiles = dict.fromkeys(order, 0)
        samples: dict[str, list[float]] = {key: [] for key in order}
        gc.collect()
        start = time.perf_counter()
        r = 0
        while self._rounds(r, time.perf_counter() - start):
            self.progress(f"{workload.name}: timing round {r + 1}")
            for key in balanced_order(order, r):
                column = columns[key]
                before = len(observed)
                samples[key].append(column.timed(column.calls, r * column.calls))
                compiles[key] += len(observed) - before
            r += 1
        for key, column in columns.items():
            median, quartiles, extremes = spread(samples[key])
            if key == COPY_REFERENCE:
                result.copy_seconds = median
                continue
            if key == DYNAMIC_REFERENCE:
                result.dynamic_seconds = median
                continue
            record = result.columns[key]
            record.samples = samples[key]
            record.calls_per_sample = column.calls
            record.step_seconds, record.quartiles, record.extremes = median, quartiles, extremes
            if compiles[key]:
                result.notes.append(
                    f"{key.replace('_', ' ')}: kiln compiled {compiles[key]} graphs while it "
                    "was timed, so its times include compiling"
                )

    def _step_peaks(self, workload: Workload, columns: dict, result: WorkloadResult) -> None:
        """One more step per column, under the resident-memory high-water mark."""
        for key, column in columns.items():
            if key in (COPY_REFERENCE, DYNAMIC_REFERENCE):
                continue
            self.progress(f"{workload.name}: peak memory of {key}")
            peak = StepPeak()
            peak.start()
            column.call(0)
            if column.library is not None:
                column.library.synchronize()
            result.columns[key].step_peak_bytes = peak.stop()


def _warm_up(x):
    return (x * 2.0 + 1.0).relu()


def _capture_counts() -> tuple[int, int]:
    """Graphs dynamo captured and recompiles so far in this process."""
    from ..dynamo.counters import counters

    return counters["stats"]["unique_graphs"], counters["recompiles"]["total"]


def _eager_training_step(lib, device: str) -> None:
    model = lib.nn.Linear(8, 8).to(device)
    optimizer = lib.optim.AdamW(model.parameters())
    x, target = lib.ones(4, 8, device=device), lib.zeros(4, 8, device=device)
    loss = lib.nn.functional.mse_loss(model(x).relu(), target)
    loss.backward()
    optimizer.step()


def _is_compile_warning(w: warnings.WarningMessage) -> bool:
    text = str(w.message)
    return issubclass(w.category, RuntimeWarning) and (
        "backend" in text or "eagerly" in text or "recompiled" in text
    )


# ------------------------------------------------------------------------------ the suite


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
        warnings=load_warnings(machine, results),
    )


def _run(runner: _Runner, workloads: list[Workload], progress: Callable[[str], None]):
    threads = runner.set_threads()
    load_before = load_average() or []
    cores = os.cpu_count() or 1
    if load_before and load_before[0] > cores:
        progress(
            f"warning: load average {load_before[0]:.2f} exceeds the {cores} cores: other "
            "processes compete for the CPUs, times will be unreliable"
        )
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
