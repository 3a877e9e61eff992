"""LLVM JIT for kiln's CPU kernels: parse, verify, optimize, JIT with MCJIT, cache objects on disk.

The kernel code generator hands this module LLVM IR (text or an ``llvmlite.ir.Module``) and gets back
a :class:`CompiledModule` with function addresses and ctypes wrappers. It assumes llvmlite >= 0.45
(new pass manager only; ``llvm.initialize()`` raises in 0.50, so only the native target and asm
printer are initialized). Kernels use explicit vector types, so the loop and SLP vectorizers are off
unless asked for: that halves compile time. Compiled objects are cached on disk by a content hash of
the IR, the host CPU and the toolchain versions; a hit skips both optimization and code generation.
Each object file records the key it was written for and a checksum (``cache_records``): only the
object made for a key is ever loaded for it. Code generation emits an object file and every engine
loads one into an empty module, so live code costs about its own size, not its IR's.
"""

from __future__ import annotations

import concurrent.futures
import ctypes
import dataclasses
import functools
import hashlib
import json
import os
import threading
import time
import weakref
from pathlib import Path

import llvmlite
import llvmlite.binding as llvm
import llvmlite.ir as ir

from ....runtime import cache_records
from ....runtime.logs import compile_stage
from ....runtime.storage import data_address
from ....runtime.switch_interval import quick_handoff
from . import object_worker
from .helper_process import HelperProcess, helper_wanted

__all__ = [
    "CompiledModule",
    "HostTarget",
    "host_features",
    "JitStats",
    "asm",
    "cache_dir",
    "clear_kernel_memory",
    "count_emitted",
    "in_background",
    "kernel_function",
    "compile_kernels",
    "compile_in_background",
    "compile_module",
    "data_address",
    "host_target",
    "derived_key",
    "jit_stats",
    "kernel_key",
    "linked_ir",
    "load_object",
    "shared_object",
    "optimized_ir",
    "release_module",
    "reset_jit_stats",
    "wait_for_background",
]

# Bump when the cache layout or anything that changes the produced object (not covered by the key
# inputs) changes, so stale objects are never loaded.
_CACHE_FORMAT = "kiln-llvm-obj-2"

# LLVM's global context, parser, pass builders and MCJIT are not safe to drive from several threads
# at once: every entry point that touches LLVM holds this lock.
_LOCK = threading.RLock()


@dataclasses.dataclass(frozen=True)
class HostTarget:
    """The machine kernels are compiled for: what the object cache key and every TM use."""

    triple: str
    cpu_name: str
    features: str


@dataclasses.dataclass
class JitStats:
    """Counters a test (or ``KILN_LOGS``) reads to see what the JIT did in this process."""

    compiled: int = 0
    objects_generated: int = 0
    cache_hits: int = 0
    cache_misses: int = 0
    optimize_runs: int = 0
    optimize_seconds: float = 0.0
    finalize_seconds: float = 0.0
    kernel_uses: int = 0  # LLVM steps of the graphs compiled (a repeated kernel counts each time)
    kernels_compiled: int = 0  # distinct kernels optimized and turned into machine code
    kernels_reused: int = 0  # kernels found compiled already (this process or on disk)
    kernels_emitted: int = 0  # kernels whose IR was generated
    kernels_by_structure: int = 0  # kernels whose IR an equal kernel's was (not generated)


_stats = JitStats()
_COUNT_LOCK = threading.Lock()
_LOCAL_LINKAGE = (llvm.Linkage.internal, llvm.Linkage.private)


def jit_stats() -> JitStats:
    """A snapshot of this process's JIT counters (once the background compiles are done)."""
    wait_for_background()
    with _LOCK:
        return dataclasses.replace(_stats)


def count_emitted(emitted: int, by_structure: int) -> None:
    """Count kernels whose IR a graph generated, and those it took from an equal kernel's
    (under a lock of its own: ``_LOCK`` is held while LLVM compiles on the background thread,
    and the emitting thread must not wait for that)."""
    with _COUNT_LOCK:
        _stats.kernels_emitted += emitted
        _stats.kernels_by_structure += by_structure


def reset_jit_stats() -> None:
    """Zero the JIT counters (tests measure one compile at a time)."""
    global _stats
    wait_for_background()
    with _LOCK:
        _stats = JitStats()


@functools.cache
def host_target() -> HostTarget:
    """Initialize LLVM's native target once and describe the host CPU (and give the JIT the
    runtime helpers LLVM's code generator may call, before any kernel is loaded)."""
    with _LOCK:
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        object_worker.set_llvm_options()
        host = HostTarget(
            triple=llvm.get_process_triple(),
            cpu_name=llvm.get_host_cpu_name(),
            features=host_features(llvm.get_host_cpu_features().flatten(), _gather_mitigation()),
        )
        _define_runtime_helpers(host)
        return host


_GDS_STATUS = "/sys/devices/system/cpu/vulnerabilities/gather_data_sampling"


def _gather_mitigation() -> str:
    """The kernel's word on the CPU's gather data sampling (empty where it does not say)."""
    try:
        with open(_GDS_STATUS) as f:
            return f.read().strip()
    except OSError:
        return ""


def host_features(features: str, gather_mitigation: str) -> str:
    """The host's LLVM features, asking for scalar loads in place of gather instructions where
    the microcode's gather data sampling mitigation makes every gather slow (Skylake to Ice
    Lake): kernels load scattered lanes with ``llvm.masked.gather``, which LLVM otherwise turns
    into the gather instruction on those CPUs."""
    if gather_mitigation.startswith("Mitigation"):
        return f"{features},+prefer-no-gather" if features else "+prefer-no-gather"
    return features


# LLVM's x86 code generator turns a double -> half conversion into a call of ``__truncdfhf2``
# (no instruction does it), also where the kernel's IR converts through float: instruction
# selection merges the two roundings (a float16 cumsum, accumulated in float64, feeding atan).
# That function lives in libgcc (GCC 12 and later) or compiler-rt, neither of which a Python
# process need have loaded: MCJIT then resolved it to address 0 and the kernel jumped there.
# kiln defines it itself: rounded to float with round-to-odd (the sticky bit kept in the lowest
# mantissa bit), then to half in one hardware rounding — exactly double -> half's single rounding,
# since float carries more than two bits beyond half's precision.
_RUNTIME_HELPERS_IR = r"""
define half @__truncdfhf2(double %d) nounwind {
entry:
  %f = fptrunc double %d to float
  %back = fpext float %f to double
  %exact = fcmp ueq double %back, %d
  br i1 %exact, label %done, label %odd
odd:
  %ab = call double @llvm.fabs.f64(double %back)
  %ad = call double @llvm.fabs.f64(double %d)
  %away = fcmp ogt double %ab, %ad
  %bits = bitcast float %f to i32
  %toward = sub i32 %bits, 1
  %t = select i1 %away, i32 %toward, i32 %bits
  %o = or i32 %t, 1
  %fo = bitcast i32 %o to float
  br label %done
done:
  %r = phi float [%f, %entry], [%fo, %odd]
  %h = fptrunc float %r to half
  ret half %h
}
declare double @llvm.fabs.f64(double)
"""

_helper_engines: list = []  # the engines holding the helpers' machine code, for the process


def _define_runtime_helpers(host: HostTarget) -> None:
    module = llvm.parse_assembly(_RUNTIME_HELPERS_IR)
    module.triple = host.triple
    module.verify()
    machine = llvm.Target.from_triple(host.triple).create_target_machine(
        cpu=host.cpu_name, features=host.features, opt=2, jit=True
    )
    engine = llvm.create_mcjit_compiler(module, machine)
    engine.finalize_object()
    _helper_engines.append(engine)
    llvm.add_symbol("__truncdfhf2", engine.get_function_address("__truncdfhf2"))


def _new_target_machine(opt_level: int) -> llvm.TargetMachine:
    """A fresh TargetMachine for the host; MCJIT takes ownership of the one it is given."""
    host = host_target()
    return object_worker.target_machine(host.triple, host.cpu_name, host.features, opt_level)


@functools.cache
def _shared_target_machine(opt_level: int) -> llvm.TargetMachine:
    """A TargetMachine for pass pipelines and assembly dumps; never handed to an engine."""
    return _new_target_machine(opt_level)


def cache_dir() -> Path:
    """Where compiled objects live: ``$KILN_CACHE_DIR/llvm`` (default ``~/.cache/kiln/llvm``);
    a background compile uses the directory of the moment it was handed over."""
    pinned = getattr(_background_root, "path", None)
    if pinned is not None:
        return pinned
    return cache_records.cache_root() / "llvm"


# LLVM releases the GIL while it optimizes and emits machine code, so a graph's kernels can be
# compiled on a second thread while the calling thread lowers the next graph (the backward
# after the forward, the graph after a break) and runs the Python glue. One thread, jobs in
# the order given: a later graph reusing a kernel finds it compiled.
_BACKGROUND = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="kiln-llvm")
_background_root = threading.local()  # .path: the cache directory of the job running
_in_flight: set = set()  # futures of the jobs handed over and not finished
_in_flight_lock = threading.Lock()


# llvmlite lets one thread of a process into LLVM at a time: the helper process
# (``helper_process``) is a second LLVM, fed by a thread of its own that waits on its pipe
_HELPER_THREAD = concurrent.futures.ThreadPoolExecutor(
    max_workers=1, thread_name_prefix="kiln-llvm-helper"
)
_queued = {"here": 0, "helper": 0}  # jobs handed to each and not finished
_helper: HelperProcess | None = None
_helper_lock = threading.Lock()


def in_background(job, *args) -> concurrent.futures.Future:
    """Run ``job(*args)`` on the JIT's background thread (with this moment's cache directory)
    and return its future."""
    return _submit(_BACKGROUND, "here", job, *args)


def compile_in_background(texts: dict[str, str], uses: int = 0) -> concurrent.futures.Future:
    """``compile_kernels(texts, uses)`` in the background: on the JIT's thread, or in the helper
    process when it has fewer pieces waiting (pieces alternate while both are busy)."""
    helper = _the_helper()
    if helper is not None and _queued["helper"] < _queued["here"]:
        return _submit(_HELPER_THREAD, "helper", compile_kernels, texts, uses, True)
    return _submit(_BACKGROUND, "here", compile_kernels, texts, uses)


def _the_helper() -> HelperProcess | None:
    """The helper process (started on first use), or None where there is none to use."""
    global _helper
    if not helper_wanted():
        return None
    with _helper_lock:
        if _helper is None:
            host = host_target()
            _helper = HelperProcess(host.triple, host.cpu_name, host.features)
            _helper.start()
        return _helper if _helper.usable else None


def _submit(executor, lane: str, job, *args) -> concurrent.futures.Future:
    root = cache_dir()

    def run():
        _background_root.path = root
        try:
            with quick_handoff():  # each LLVM call gives the GIL back: get it back quickly
                return job(*args)
        finally:
            _background_root.path = None

    with _in_flight_lock:
        _queued[lane] += 1
    future = executor.submit(run)
    with _in_flight_lock:
        _in_flight.add(future)
    future.add_done_callback(lambda done: _finished(done, lane))
    return future


def _finished(future: concurrent.futures.Future, lane: str) -> None:
    with _in_flight_lock:
        _in_flight.discard(future)
        _queued[lane] -= 1


def wait_for_background() -> None:
    """Wait until every job handed to the background thread so far has finished (its failure,
    if any, is raised where its result is used, not here)."""
    if getattr(_background_root, "path", None) is not None:
        return  # a job asking: the jobs before it are done
    with _in_flight_lock:
        pending = list(_in_flight)
    concurrent.futures.wait(pending)


# a fork while the background thread holds LLVM's lock would leave the child's lock held
os.register_at_fork(before=wait_for_background)


def _toolchain_digest(parts) -> str:
    """A hash of ``parts`` together with everything about this host and toolchain that changes
    the machine code: an object made elsewhere never matches."""
    host = host_target()
    digest = hashlib.sha256()
    for part in (
        _CACHE_FORMAT,
        llvmlite.__version__,
        ".".join(map(str, llvm.llvm_version_info)),
        host.triple,
        host.cpu_name,
        host.features,
        *object_worker.LLVM_OPTIONS,
        *parts,
    ):
        digest.update(part.encode())
        digest.update(b"\0")
    return digest.hexdigest()


def _cache_key(ir_text: str, opt_level: int, vectorize: bool) -> str:
    return _toolchain_digest((f"O{opt_level}", f"vectorize={vectorize}", ir_text))


def derived_key(*parts: str) -> str:
    """A cache key for something that determines LLVM IR without being it (a lowered graph).

    It covers the host and toolchain like object keys do, so an index entry made on another CPU
    never points a caller at that CPU's object.
    """
    return _toolchain_digest(("derived", *parts))


def _object_path(key: str) -> Path:
    return cache_dir() / key[:2] / f"{key}.o"


def release_module(module: ir.Module) -> None:
    """Break the reference cycles of an emitted module once its text is taken, so reference
    counting frees it at once: blocks and their function, instructions and their block, a
    loop's phi and its update, arguments and their function, functions and the module.

    Left to the cyclic collector, every kernel's IR waits for a full walk: with the collector
    paused while a frame compiles (``dynamo.config.pause_gc_while_compiling``), the one
    collection after a cold nanoGPT compile walked ~230k young objects and freed ~130k, most
    of them IR (0.3-0.4 s). The module is unusable afterwards."""
    for value in module.globals.values():
        if isinstance(value, ir.Function):
            for block in value.blocks:
                for instruction in block.instructions:
                    instruction.operands = []
                    if isinstance(instruction, ir.PhiInstr):
                        instruction.incomings = []
                block.instructions = []
                block.terminator = None
            value.blocks = []
            value.args = ()
            value.return_value = None
    module.globals.clear()


def _ir_text(llvm_ir: str | ir.Module) -> str:
    """The IR's text; a module passed in is consumed (``release_module``)."""
    if isinstance(llvm_ir, ir.Module):
        text = str(llvm_ir)
        release_module(llvm_ir)
        return text
    if isinstance(llvm_ir, str):
        return llvm_ir
    raise TypeError(f"expected LLVM IR text or llvmlite.ir.Module, got {type(llvm_ir).__name__}")


def _parse(ir_text: str) -> llvm.ModuleRef:
    """Parse and verify IR and retarget it to the host triple and data layout."""
    return object_worker.parsed(
        ir_text, host_target().triple, str(_shared_target_machine(3).target_data)
    )


def _optimize(module: llvm.ModuleRef, opt_level: int, vectorize: bool) -> None:
    """Run LLVM's default new-pass-manager pipeline at ``opt_level`` over ``module`` in place."""
    object_worker.optimize(module, _shared_target_machine(opt_level), opt_level, vectorize)


class CompiledModule:
    """A JIT-compiled module: function addresses and ctypes wrappers that keep the engine alive.

    The MCJIT engine frees the machine code when it is garbage collected, so every ctypes function
    made by :meth:`cfunc` holds a reference to its ``CompiledModule``: a cache may drop its own
    reference at any time without freeing code a compiled function still calls.
    """

    def __init__(
        self,
        engine: llvm.ExecutionEngine,
        module: llvm.ModuleRef,
        cache_hit: bool,
        key: str,
        functions: tuple[str, ...],
        nbytes: int,
    ):
        self._engine = engine
        self._module = module
        self.name: str = module.name
        self.cache_hit = cache_hit
        self.key = key  # the object's cache key: load_object(key) finds it again
        self.functions: tuple[str, ...] = functions
        self.nbytes = nbytes  # about what the engine holds in memory, for caches' budgets
        # looked up once, where the engine is made: binding a kernel later needs no LLVM call,
        # so it does not wait for a background compile holding LLVM
        self._addresses = {f: engine.get_function_address(f) for f in functions}

    def address(self, name: str) -> int:
        """The machine-code address of the exported function ``name``."""
        address = self._addresses.get(name)
        if address is None:
            with _LOCK:
                address = self._engine.get_function_address(name)
        if not address:
            raise KeyError(f"no function {name!r} in compiled module; it defines {self.functions}")
        return address

    def cfunc(self, name: str, restype: object, *argtypes: object) -> ctypes._CFuncPtr:
        """A ctypes function for ``name`` (the GIL is released during the call)."""
        prototype = ctypes.CFUNCTYPE(restype, *argtypes)
        function = prototype(self.address(name))
        function._kiln_module = self
        return function


# What an engine holding one small object costs beyond the object itself (its TargetMachine,
# RuntimeDyld tables, an empty module): measured at about 40 KB with llvmlite 0.45-0.50.
_ENGINE_BYTES = 48 * 1024


def _exported_functions(module: llvm.ModuleRef) -> tuple[str, ...]:
    return tuple(
        fn.name
        for fn in module.functions
        if not fn.is_declaration and fn.linkage not in _LOCAL_LINKAGE
    )


def _engine_for_object(
    key: str, payload: bytes, functions: tuple[str, ...], cache_hit: bool
) -> CompiledModule:
    """An MCJIT engine that loads the object ``payload`` (through the object cache, so no code
    generation runs) into an empty module. Every compiled module is made this way, also right
    after code generation: an engine built over the IR module would keep that module (and its
    optimized IR) for as long as the code lives, about 20 times the object's size."""
    module = llvm.parse_assembly("")
    # MCJIT hands the module to the cache callbacks; a unique name ties it to this key.
    module.name = f"kiln_{key[:32]}"
    module.triple = host_target().triple
    engine = llvm.create_mcjit_compiler(module, _new_target_machine(3))
    given = [payload]  # LLVM copies the object: the bytes are dropped once handed over
    engine.set_object_cache(None, lambda _module: given.pop() if given else None)
    start = time.perf_counter()
    engine.finalize_object()
    _stats.finalize_seconds += time.perf_counter() - start
    _stats.compiled += 1
    # MCJIT keeps its copy of the object beside the loaded sections
    nbytes = 2 * len(payload) + _ENGINE_BYTES
    compiled = CompiledModule(engine, module, cache_hit, key, functions, nbytes)
    _ENGINES[_memory_key(key)] = compiled
    return compiled


@compile_stage("codegen")
def compile_module(
    llvm_ir: str | ir.Module,
    opt_level: int = 3,
    vectorize: bool = False,
    *,
    cache: bool = True,
) -> CompiledModule:
    """Optimize and JIT ``llvm_ir`` for the host CPU, reusing a cached object when one exists.

    ``vectorize`` turns on LLVM's loop and SLP vectorizers (off by default: kernels are written with
    explicit vector types). With ``cache`` the object is looked up on disk under :func:`cache_dir`
    by a content hash; on a hit neither the optimizer nor code generation runs. An object file
    not written for this very key (swapped, stale, damaged) is a miss: the object is generated
    again and the file rewritten when the directory is writable.
    """
    ir_text = _ir_text(llvm_ir)
    key = _cache_key(ir_text, opt_level, vectorize)
    path = _object_path(key)
    with _LOCK:
        module = _parse(ir_text)
        functions = _exported_functions(module)
        payload = cache_records.read_record(path, key) if cache else None
        cache_hit = payload is not None
        if payload is None:
            start = time.perf_counter()
            _optimize(module, opt_level, vectorize)
            _stats.optimize_seconds += time.perf_counter() - start
            _stats.optimize_runs += 1
            payload = _shared_target_machine(opt_level).emit_object(module)
            _stats.objects_generated += 1
            if cache:
                cache_records.write_record(path, key, payload)
        if cache:
            if cache_hit:
                _stats.cache_hits += 1
            else:
                _stats.cache_misses += 1
        return _engine_for_object(key, payload, functions, cache_hit)


@compile_stage("codegen")
def load_object(key: str, functions: tuple[str, ...]) -> CompiledModule | None:
    """The cached object stored under ``key`` by :func:`compile_module`, loaded without its IR.

    For callers that know which object they want from a key of their own (see
    :func:`derived_key`): neither parsing, optimization nor code generation runs. ``functions``
    names the exported functions (the object carries no module to list them from). None when the
    object is absent or its file was not written for ``key``.
    """
    with _LOCK:
        payload = cache_records.read_record(_object_path(key), key)
        if payload is None:
            return None
        _stats.cache_hits += 1
        return _engine_for_object(key, payload, functions, cache_hit=True)


# Kernels compiled one at a time would each pay LLVM's fixed cost per module (about 15 ms to
# optimize and emit even an empty one), so the new kernels of a graph share one object; every
# kernel is still found by its own key: in this process through ``_KERNELS``, in a later one
# through a small record per kernel (``kernels/<key>.index``) naming its object.

# engines by object key while something (a compiled kernel) still holds them: an object needed
# again is not loaded twice
_ENGINES: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
# kernel key -> (object key, its function, all functions of the object) of every kernel compiled
# or loaded in this process
_KERNELS: dict[str, tuple[str, str, tuple[str, ...]]] = {}


def _memory_key(key: str) -> str:
    # a new cache directory starts cold, in memory too (benchmarks time cold compiles that way)
    return f"{cache_dir()}:{key}"


def clear_kernel_memory() -> None:
    """Forget which kernels this process compiled (code in use stays alive): the next compile
    of one reads the disk cache."""
    wait_for_background()
    with _LOCK:
        _KERNELS.clear()
        _ENGINES.clear()


def kernel_key(ir_text: str) -> str:
    """The cache key of one kernel's IR (its function named ``kernel``): the IR with the host CPU,
    its features and the toolchain, so equal keys mean interchangeable machine code."""
    return _cache_key(ir_text, 3, False)


def shared_object(key: str, functions: tuple[str, ...]) -> CompiledModule | None:
    """The object under ``key`` as :func:`load_object` gives it, but the engine already holding
    it when one is alive: graphs sharing kernels share their machine code."""
    with _LOCK:
        loaded = _ENGINES.get(_memory_key(key))
        if loaded is not None and set(functions) <= set(loaded.functions):
            return loaded
        return load_object(key, functions)


def kernel_function(key: str) -> str:
    """The name of the kernel under ``key`` in the object :func:`compile_kernels` puts it in."""
    return f"kiln_kernel_{key[:24]}"


def _kernel_index_path(key: str) -> Path:
    return cache_dir() / "kernels" / key[:2] / f"{key}.index"


def _find_kernel(key: str) -> tuple[CompiledModule, str] | None:
    """The compiled kernel under ``key`` from this process or the disk cache, else None."""
    known = _KERNELS.get(_memory_key(key))
    if known is None:
        payload = cache_records.read_record(_kernel_index_path(key), key)
        if payload is None:
            return None
        try:
            stored = json.loads(payload)
            functions = tuple(str(f) for f in stored["functions"])
            known = (str(stored["object"]), str(stored["function"]), functions)
        except (ValueError, KeyError, TypeError):
            return None
        if known[1] not in functions:
            return None
    object_key, function, functions = known
    module = shared_object(object_key, functions)
    if module is None:
        return None
    try:
        module.address(function)
    except KeyError:
        return None
    _KERNELS[_memory_key(key)] = known
    return module, function


def _linked(texts: list[tuple[str, str]]) -> llvm.ModuleRef:
    """One module of the kernels ``(function name, IR)``, each kernel's function renamed; the
    linker keeps each kernel's own copies of internal helpers apart."""
    host = host_target()
    return object_worker.linked(texts, host.triple, str(_shared_target_machine(3).target_data))


def linked_ir(texts: list[tuple[str, str]]) -> str:
    """The IR of kernels ``(function name, IR)`` as one module (for dumps and packages)."""
    if not texts:
        return ""
    with _LOCK:
        return str(_linked(texts))


@compile_stage("codegen")
def compile_kernels(
    texts: dict[str, str], uses: int = 0, in_helper: bool = False
) -> dict[str, tuple[CompiledModule, str]]:
    """Machine code for kernels given as ``{kernel_key(ir): ir}``, each IR defining ``kernel``:
    ``{key: (compiled module, function name)}``; ``uses``: how many steps call them (counted in
    ``JitStats.kernel_uses``). A kernel compiled before, in this process or
    (through the disk cache) an earlier one, is reused; the others are linked into one module,
    optimized and compiled once, however many graphs or steps share them (``in_helper``: by
    the helper process, this process's LLVM staying free meanwhile)."""
    found: dict[str, tuple[CompiledModule, str]] = {}
    with _LOCK:
        _stats.kernel_uses += uses
        for key in texts:
            hit = _find_kernel(key)
            if hit is not None:
                found[key] = hit
        _stats.kernels_reused += len(found)
        missing = sorted(key for key in texts if key not in found)
        if not missing:
            return found
        object_key = _toolchain_digest(("kernels", *missing))
        functions = tuple(kernel_function(key) for key in missing)
        path = _object_path(object_key)
        payload = cache_records.read_record(path, object_key)
        cache_hit = payload is not None
        if cache_hit:
            _stats.cache_hits += 1
        else:
            _stats.cache_misses += 1
    if payload is None:
        parts = [(f, texts[k]) for f, k in zip(functions, missing)]
        start = time.perf_counter()
        payload = _helper.compile(parts) if in_helper and _helper is not None else None
        with _LOCK:
            if payload is None:  # here: no helper, or it could not
                module = _linked(parts)
                _optimize(module, 3, False)
                payload = _shared_target_machine(3).emit_object(module)
            _stats.optimize_seconds += time.perf_counter() - start
            _stats.optimize_runs += 1
            _stats.objects_generated += 1
            _stats.kernels_compiled += len(missing)
            cache_records.write_record(path, object_key, payload)
    with _LOCK:
        compiled = _engine_for_object(object_key, payload, functions, cache_hit)
        for key, function in zip(missing, functions):
            _KERNELS[_memory_key(key)] = (object_key, function, functions)
            found[key] = (compiled, function)
            record = {"object": object_key, "function": function, "functions": functions}
            cache_records.write_record(_kernel_index_path(key), key, json.dumps(record).encode())
        return found


def optimized_ir(llvm_ir: str | ir.Module, opt_level: int = 3, vectorize: bool = False) -> str:
    """The IR after the optimization pipeline, for dumps and tests."""
    with _LOCK:
        module = _parse(_ir_text(llvm_ir))
        _optimize(module, opt_level, vectorize)
        return str(module)


def asm(llvm_ir: str | ir.Module, opt_level: int = 3, vectorize: bool = False) -> str:
    """Host assembly for the optimized IR, for dumps and tests (``vfmadd``, no ``call expf``)."""
    with _LOCK:
        module = _parse(_ir_text(llvm_ir))
        _optimize(module, opt_level, vectorize)
        return _shared_target_machine(opt_level).emit_assembly(module)
