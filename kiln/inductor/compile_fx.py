"""The inductor backend: lower a prim graph, schedule it, generate kernels, wrap them in a callable.

``compile_graph(gm, example_inputs)`` compiles one (forward or backward) graph; ``inductor`` is the
``kiln.compile`` backend that runs AOT autograd with ``compile_graph`` for both graphs.
``options["cpu_codegen"]`` picks the kernel generator: ``"llvm"`` (default when available),
``"numpy"`` (the reference executor) or ``"triton"`` (Triton's interpreter, a testing aid).
A graph with symbolic sizes gets kernels for every size (``symbolic_compile``; LLVM or Triton
kernels, and steps the LLVM generator leaves to numpy replayed at each call's sizes) unless
``options["symbolic_kernels"]`` is False, which compiles it per concrete size (``specialize``).
"""

from __future__ import annotations

import os
import threading
import warnings
import weakref

from ..ir.node import Node, map_arg
from ..profiler import add_activation_listener
from ..runtime import logs as klog
from ..runtime.symbolic import SizeDependentError, shape_env_of
from . import config, wrapper_runtime
from .graph_lowering import GraphLowering
from .scheduler import ExternCall, ScatterStep, schedule
from .specialize import is_symbolic_graph
from .symbolic_compile import compile_symbolic
from .symbolic_sizes import graph_symbols

__all__ = [
    "compile_graph",
    "compile_graph_cached",
    "inductor",
    "CompiledGraph",
    "SymbolicUnsupportedError",
]


class SymbolicUnsupportedError(NotImplementedError):
    """A graph with symbolic sizes needs something kernels for every size do not do yet: it
    takes the interim route (``specialize.py``)."""


class CompiledGraph:
    """Calls the kernels of one graph in order (through its generated wrapper) and returns its
    outputs as a tuple."""

    def __init__(
        self,
        sched,
        codegen: str,
        graph_key: str | None = None,
        mutations=(),
        sizes=None,
        fallback=None,
        eager=None,
    ):
        from .codegen.wrapper import generate_wrapper
        from .reinplace import plan_inplace

        self.schedule = sched
        self.codegen = codegen
        self.sizes = binding = sizes  # kernels for every size: how a call finds its sizes
        self.fallback = fallback
        lowered = sched.lowered
        buffers = {b.name: b for b in lowered.buffers}
        self.num_kernels = len(sched.kernels)
        kernels = {}
        numpy_reasons = {}
        self._cpu_kernels = None
        dtypes = {name: b.dtype for name, b in buffers.items()}
        dtypes.update({b.name: b.dtype for b in lowered.inputs if b is not None})
        dtypes.update({name: t.dtype for name, t in lowered.constants.items()})
        if codegen == "llvm":
            from .codegen.cpu import CPUKernels

            storage = {name: b.layout.storage_size() for name, b in buffers.items()}
            storage.update(
                {b.name: b.layout.storage_size() for b in lowered.inputs if b is not None}
            )
            storage.update({name: _storage_elems(t) for name, t in lowered.constants.items()})
            symbols = binding.symbols if binding is not None else ()
            compiled = CPUKernels(sched, dtypes, storage, graph_key, symbols)
            self._cpu_kernels = compiled  # owns the JIT engine the kernels live in
            kernels = compiled.by_step
            numpy_reasons = compiled.numpy_steps
        elif codegen != "numpy":
            raise ValueError(f"unknown cpu_codegen {codegen!r}")
        numpy_steps = {}
        for i, step in enumerate(sched.steps):
            if i in kernels or isinstance(step, ExternCall):
                continue
            if binding is not None:  # its loop bodies recorded now, replayed at each call's sizes
                numpy_steps[i] = _every_size_step(step, dtypes)
            elif isinstance(step, ScatterStep):
                numpy_steps[i] = _numpy_scatter(step.buffer)
            else:
                numpy_steps[i] = _numpy_step(step)
        self.numpy_reasons = numpy_reasons
        self.inplace = plan_inplace(sched, mutations) if mutations else {}
        if self.inplace:
            sched.plan_reuse(set(self.inplace))
        self.wrapper = generate_wrapper(
            sched, kernels, numpy_steps, self.inplace, sizes=binding, fallback=fallback
        )
        self.source = self.wrapper.source
        self._plain = self.wrapper.call
        self._steps = (kernels, numpy_steps)  # for the kernel-reporting wrapper, made when needed
        self._profiled = None
        self._call = self._plain
        # LLVM makes the kernels in the background: the first call waits for all of them before
        # running any step, so that a failure there (after ``compile_graph`` returned, beyond
        # dynamo's reach) runs the graph with the eager ops instead (``eager`` makes that run)
        compiling = self._cpu_kernels is not None and self._cpu_kernels.compiling
        self._eager = eager if compiling else None
        self._unchecked = compiling
        _LIVE_GRAPHS.add(self)
        if _profiling[0]:
            self.report_kernels(True)

    def __call__(self, *args):
        if self._unchecked:
            self._take_kernels()
        return self._call(list(args))

    def boxed_call(self, args: list) -> tuple:
        """The graph run on ``args``, which it empties and whose items it drops after their
        last use (``WrapperModule``): the caller's way to hand over inputs it no longer needs."""
        if self._unchecked:
            self._take_kernels()
        return self._call(args)

    def _take_kernels(self) -> None:
        """Wait for the background compile; if it failed, every call from now on runs the graph
        with the eager ops (saying why once), as a failure at compile time does."""
        with _TAKING:
            if self._unchecked:  # not taken by another thread meanwhile
                self._take_kernels_once()

    def _take_kernels_once(self) -> None:
        eager = self._eager
        try:
            self._cpu_kernels.wait()
        except Exception as why:
            if eager is None:
                raise
            message = (
                f"inductor: compiling the kernels of a graph failed ({type(why).__name__}: "
                f"{why}); the graph runs with the eager ops"
            )
            klog.log("graph_breaks", message)
            warnings.warn(message, RuntimeWarning, stacklevel=3)
            run = eager()

            def call(args: list) -> tuple:
                values = tuple(args)
                args.clear()
                return run(*values)

            self._plain = self._profiled = self._call = call
        finally:
            self._unchecked = False
            self._eager = None  # the graph module is needed no longer

    def report_kernels(self, active: bool) -> None:
        """Switch to (or back from) the wrapper that reports kernels to ``kiln.profiler``."""
        if active and self._profiled is None:
            from .codegen.wrapper import generate_wrapper

            kernels, numpy_steps = self._steps
            self._profiled = generate_wrapper(
                self.schedule,
                kernels,
                numpy_steps,
                self.inplace,
                profiled=self._plain,
                sizes=self.sizes,
                fallback=self.fallback,
            ).call
        self._call = self._profiled if active else self._plain

    @property
    def ir_text(self) -> str:
        """The kernels' LLVM IR ("" without LLVM kernels), for dumps."""
        return self._cpu_kernels.ir_text if self._cpu_kernels is not None else ""

    @property
    def module_ir(self) -> str:
        """The kernels' LLVM IR as one module ("" without LLVM kernels), for packages."""
        return self._cpu_kernels.module_ir if self._cpu_kernels is not None else ""


_TAKING = threading.Lock()

# live compiled graphs, switched to their kernel-reporting wrappers while a profile records
_LIVE_GRAPHS: weakref.WeakSet = weakref.WeakSet()
_profiling = [False]


def _on_recording(active: bool) -> None:
    _profiling[0] = active
    for graph in list(_LIVE_GRAPHS):
        graph.report_kernels(active)


add_activation_listener(_on_recording)


def _storage_elems(t) -> int:
    from .ir import Layout

    return Layout(tuple(t.shape), tuple(t.stride()), t.dtype).storage_size()


def _numpy_scatter(buf):
    from .codegen.numpy_backend import run_scatter

    def run(storages):
        run_scatter(buf, storages)

    return run


def _every_size_step(step, dtypes: dict):
    """A numpy-run step of a graph compiled for every size (``numpy_backend.EverySizeStep``).
    Recording runs its loop bodies on a probe as well: a failure there, a ``SizeDependentError``
    included, sends the graph to the per-size route (which runs the bodies directly) with the
    reason logged, rather than failing the compile."""
    from .codegen.numpy_backend import EverySizeStep

    try:
        return EverySizeStep(step, dtypes)
    except SizeDependentError:
        raise
    except Exception as why:
        raise SymbolicUnsupportedError(
            f"recording {step.name} for numpy failed ({type(why).__name__}: {why})"
        ) from why


def _numpy_step(step):
    import numpy as np

    from .codegen.numpy_backend import compute_buffer

    def run(storages):
        for node in step.nodes:
            values = compute_buffer(node, storages)
            target = wrapper_runtime.strided_view(storages[node.name], node.layout)
            np.copyto(target, values, casting="unsafe")

    return run


@klog.compile_stage("inductor")
def compile_graph(
    gm,
    example_inputs,
    options: dict | None = None,
    sizes=None,
    fallback=None,
    *,
    graph_key: str | None = None,
) -> CompiledGraph:
    """Lower, schedule and generate code for one graph (see the module docstring).

    ``sizes`` (a ``SizeBinding``; inside ``ShapeEnv.kernel_scope``): the graph's sizes are
    symbolic and its kernels serve every size; calls they do not serve run ``fallback``. A graph
    with symbolic sizes given without them takes ``compile_symbolic``'s routes (kernels for
    every size, else per concrete size; data-dependent sizes run with the eager ops).
    ``graph_key``: ``_graph_key`` of the graph for the LLVM generator when the caller has it
    (the cache's lookup made it: describing a GPT-2 optimizer step's 9,000 nodes twice cost
    ~0.1 s)."""
    options = options or {}
    if sizes is None and is_symbolic_graph(gm, example_inputs):
        return compile_symbolic(
            gm, example_inputs, options, _compile_static(options), compile_graph
        )
    complex_value = _complex_value(gm, example_inputs)
    if complex_value is not None:
        return _eager_graph(gm, example_inputs, complex_value)
    lowered = GraphLowering(gm, example_inputs).run()
    sched = schedule(lowered)
    if klog.enabled("inductor"):
        klog.log("inductor", f"schedule:\n{sched.describe()}")
    codegen = options.get("cpu_codegen", "llvm")
    device = _graph_device(gm, example_inputs)
    triton = codegen == "triton" or device.type == "cuda"
    if sizes is not None and not (triton or codegen in ("llvm", "numpy")):
        raise SymbolicUnsupportedError(
            f"kernels for every size are LLVM, numpy or Triton kernels (not {codegen})"
        )
    if triton:
        from .codegen.triton_wrapper import TritonCompiledGraph

        compiled = TritonCompiledGraph(sched, device, options, sizes, fallback)
    else:
        if options.get("triton.cudagraphs"):
            klog.log("cudagraphs", "skipping cudagraphs due to cpu device")
        mutations = gm.graph.output_node.meta.get("input_mutations", ())
        key = graph_key if graph_key is not None else _graph_key(gm, example_inputs, codegen)
        compiled = CompiledGraph(
            sched, codegen, key, mutations, sizes, fallback, eager=_eager_run(gm, example_inputs)
        )
    _dump(gm, compiled)
    return compiled


def compile_graph_cached(gm, example_inputs, options: dict):
    """``compile_graph`` through the compiled-graph cache (``graph_cache.py``): a graph compiled
    before is rebuilt from its stored wrapper, kernels for every size included. Other code
    generators, and compiles whose schedule someone reads (logs, dumps) take ``compile_graph``
    itself."""
    if not _graph_cacheable(gm, example_inputs, options):
        return compile_graph(gm, example_inputs, options)
    if is_symbolic_graph(gm, example_inputs):

        def compile_static(graph_module, examples):
            return compile_graph_cached(graph_module, examples, options)

        return compile_symbolic(gm, example_inputs, options, compile_static, _through_cache)
    return _through_cache(gm, example_inputs, options)


def _through_cache(gm, example_inputs, options: dict, sizes=None, fallback=None):
    """``compile_graph`` (kernels for every size when ``sizes`` is given) through the cache."""
    from . import graph_cache

    mutations = gm.graph.output_node.meta.get("input_mutations", ())
    # the configuration that changes which kernels a graph gets is part of its key
    keyed = dict(
        options,
        direct_convolutions=config.direct_convolutions,
        copies_for_every_size=config.copies_for_every_size,
    )
    saved_from = gm.graph.output_node.meta.get("saved_from")
    if saved_from is not None:  # outputs before it are stored in eager's layout
        keyed["saved_from"] = saved_from
    graph_key = _graph_key(gm, example_inputs, "llvm")
    key = graph_cache.entry_key(graph_key, mutations, keyed)
    env = shape_env_of(example_inputs) if sizes is not None else None
    cached = graph_cache.load(key, gm, sizes, fallback, env)
    if cached is not None:
        if options.get("triton.cudagraphs"):
            klog.log("cudagraphs", "skipping cudagraphs due to cpu device")
        _LIVE_GRAPHS.add(cached)
        if _profiling[0]:
            cached.report_kernels(True)
        return cached
    compiled = compile_graph(gm, example_inputs, options, sizes, fallback, graph_key=graph_key)
    if isinstance(compiled, CompiledGraph) and compiled.codegen == "llvm":
        graph_cache.save(key, gm, compiled)
    return compiled


def _graph_cacheable(gm, example_inputs, options: dict) -> bool:
    plain = (str, int, float, bool, type(None))
    return (
        config.fx_graph_cache
        and not config.force_disable_caches
        and options.get("cpu_codegen", "llvm") == "llvm"
        and all(isinstance(v, plain) for v in options.values())
        and not klog.debug_dir()
        and not klog.enabled("inductor")
        and not klog.enabled("output_code")
        and _graph_device(gm, example_inputs).type == "cpu"
        and _complex_value(gm, example_inputs) is None
    )


def _compile_static(options: dict):
    """``compile_graph`` with these options, for graphs specialized to concrete sizes."""

    def compile_static(graph_module, examples):
        return compile_graph(graph_module, examples, options)

    return compile_static


def _complex_value(gm, example_inputs) -> str | None:
    """A description of the first complex tensor in the graph, if it has one: the kernels have no
    complex arithmetic, so such graphs run with the eager ops."""
    from ..runtime.tensor import Tensor

    for t in example_inputs:
        if isinstance(t, Tensor) and t.dtype.is_complex:
            return f"an input of dtype {t.dtype}"
    for node in gm.graph.nodes:
        vals = node.meta.get("val")
        for v in vals if isinstance(vals, (list, tuple)) else [vals]:
            if isinstance(v, Tensor) and v.dtype.is_complex:
                return f"node {node.name} ({v.dtype})"
    return None


def _eager_graph(gm, example_inputs, reason: str):
    """The graph run by the eager ops (AOT's calling convention), saying why under
    ``KILN_LOGS=graph_breaks``/``inductor``."""
    from ..aot.backend import boxed_eager_compiler

    message = f"inductor runs a graph with the eager ops: it has complex values ({reason})"
    klog.log("graph_breaks", message)
    klog.log("inductor", message)
    return boxed_eager_compiler(gm, example_inputs)


def _eager_run(gm, example_inputs):
    """What makes the graph's run by the eager ops (AOT's calling convention), should its
    kernels fail to compile."""

    def make():
        from ..aot.backend import boxed_eager_compiler

        return boxed_eager_compiler(gm, example_inputs)

    return make


def _graph_key(gm, example_inputs, codegen: str) -> str:
    """What determines a lowered graph's kernels: its nodes (not the source comments of its code:
    the same graph called from another line is the same graph), the layouts of its inputs and
    tensor attributes (their values are passed by pointer), other attribute values, and kiln's
    source. The CPU code generator adds the schedule's outline (``codegen.cpu._signature``)."""
    from ..ir.node import format_target

    parts = [codegen, kiln_source_digest()]
    parts += [_describe(v) for v in example_inputs]
    symbols = graph_symbols(example_inputs)
    if symbols:  # kernels for every size rest on the ranges their decisions were made in
        parts.append(f"symbols {[(s.name, s.lower, s.upper) for s in symbols]}")
    for node in gm.graph.nodes:
        args = _arg_text((node.args, node.kwargs))
        line = f"{node.name} {node.op} {format_target(node.target)} {args}"
        val = node.meta.get("val")
        if val is not None:
            line += f" -> {_describe(val)}"
        if node.op == "get_attr":
            line += f" = {_describe(_fetch_attr(gm, node.target))}"
        parts.append(line)
    return "\n".join(parts)


def _arg_text(a) -> str:
    """``repr`` of a node's arguments with each node as ``%name``: the common containers are
    written directly (a warm resnet18 compile keys four graphs, 2,200 nodes, each compile)."""
    kind = type(a)
    if kind is Node:
        return "%" + a.name
    if kind is tuple:
        inner = ", ".join([_arg_text(x) for x in a])
        return f"({inner},)" if len(a) == 1 else f"({inner})"
    if kind is list:
        return "[" + ", ".join([_arg_text(x) for x in a]) + "]"
    if kind is dict:
        return "{" + ", ".join([f"{k!r}: {_arg_text(v)}" for k, v in a.items()]) + "}"
    if isinstance(a, (tuple, list, dict, slice)):  # named tuples, subclasses, slices
        return repr(map_arg(a, lambda n: _NodeRef(n.name)))
    return repr(a)


class _NodeRef:
    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return f"%{self.name}"


def _describe(value) -> str:
    from ..runtime.tensor import Tensor

    if isinstance(value, Tensor):  # (the fields themselves: their text is the properties')
        return (
            f"T{value._shape}{value.stride()}+{value.storage_offset()}"
            f" {value._dtype} {value._device}"
        )
    if isinstance(value, (list, tuple)):
        return f"[{', '.join(_describe(v) for v in value)}]"
    return f"{type(value).__name__} {value!r}"


def _fetch_attr(gm, target: str):
    value = gm
    for name in target.split("."):
        value = getattr(value, name)
    return value


def kiln_source_digest() -> str:
    """A hash of every kiln source file (once per process): cached kernels must come from this
    very compiler (lowering, scheduling and codegen all shape the code)."""
    from ..aot.cache import source_digest

    return source_digest()


_dump_counter = [0]


def _dump(gm, compiled) -> None:
    """KILN_LOGS=output_code prints the wrapper; KILN_DEBUG_DIR/inductor/<n>_graph/ gets the graph,
    the loop IR and schedule, the wrapper (output_code.py) and the kernels (LLVM IR or Triton)."""
    sched = compiled.schedule
    source = getattr(compiled, "source", "")
    if klog.enabled("inductor"):
        reasons = getattr(compiled, "numpy_reasons", None)
        if reasons:
            klog.log("inductor", f"kernels run by numpy: {reasons}")
        if sched.lowered.fallbacks:
            klog.log("inductor", f"eager fallbacks: {sched.lowered.fallbacks}")
    klog.log("output_code", f"output_code.py:\n{source}")
    debug_dir = klog.debug_dir()
    if not debug_dir:
        return
    n = _dump_counter[0]
    _dump_counter[0] += 1
    folder = os.path.join(debug_dir, "inductor", f"{n:03d}_graph")
    os.makedirs(folder, exist_ok=True)
    files = {
        "graph.py": getattr(gm, "code", ""),
        "schedule.txt": sched.describe() + "\n" + _loop_ir(sched),
        "output_code.py": source,
    }
    if getattr(compiled, "ir_text", ""):
        files["kernels.ll"] = compiled.ir_text
    for name, text in files.items():
        with open(os.path.join(folder, name), "w") as f:
            f.write(text)


def _loop_ir(sched) -> str:
    """A readable listing of each buffer's loops: ranges, reduction, and what it reads."""
    from .dependencies import reads_of
    from .ir import ComputedBuffer, Reduction, Scatter

    lines = ["", "loop IR:"]
    for buf in sched.lowered.buffers:
        if not isinstance(buf, ComputedBuffer):
            lines.append(f"  {buf.name} = extern {getattr(buf, 'description', '')}")
            continue
        data = buf.data
        kind = type(data).__name__
        extra = ""
        if isinstance(data, Reduction):
            extra = f" reduce {data.reduction_type} over {list(data.reduction_ranges)}"
        reads = (
            ""
            if isinstance(data, Scatter)
            else ", ".join(f"{r.name}[{r.index}]" for r in reads_of(buf))
        )
        lines.append(
            f"  {buf.name}: {kind} {list(data.ranges)}{extra} {buf.dtype.name} reads {reads}"
        )
    return "\n".join(lines)


def _graph_device(gm, example_inputs):
    """The device a graph computes on: its first CUDA input or output, else the CPU."""
    from ..runtime.device import cpu
    from ..runtime.tensor import Tensor

    for t in example_inputs:
        if isinstance(t, Tensor) and t.device.type == "cuda":
            return t.device
    for node in gm.graph.nodes:
        if node.op == "output":
            vals = node.meta.get("val")
            for v in vals if isinstance(vals, (list, tuple)) else [vals]:
                if isinstance(v, Tensor) and v.device.type == "cuda":
                    return v.device
    return cpu


def inductor(gm, example_inputs, options: dict | None = None):
    """Backend: AOT autograd + inductor for both the forward and the backward graph.

    Composite ops that inductor lowers itself (``var``: Welford's single pass) are kept whole
    instead of being decomposed by AOT autograd.
    """
    from ..aot.backend import aot_module_simplified
    from ..aot.partitioners import default_partition, min_cut_partition
    from .nonfinite_weights import eager_where_weights_are_not_finite

    options = options or {}

    def compiler(graph_module, examples):
        compiled = compile_graph_cached(graph_module, examples, options)
        return eager_where_weights_are_not_finite(compiled, graph_module, examples)

    partition = default_partition if options.get("partitioner") == "default" else min_cut_partition
    return aot_module_simplified(
        gm,
        example_inputs,
        compiler,
        compiler,
        partition_fn=partition,
        decompositions=inductor_decompositions(),
        cache_store=_aot_entry_store(options),
    )


def _aot_entry_store(options: dict):
    """Where AOT keeps this configuration's traced graphs; None (nothing kept) when an option
    is not a plain value whose text names it exactly."""
    from .codegen.aot_entries import AOTEntryStore

    plain = (str, int, float, bool, type(None))
    if not all(isinstance(k, str) and isinstance(v, plain) for k, v in options.items()):
        return None
    return AOTEntryStore(f"inductor {sorted(options.items())!r}")


def inductor_decompositions() -> dict:
    """AOT's decomposition table minus the composite ops inductor lowers directly."""
    from ..aot.decompositions import decomposition_table
    from .lowering import LOWERINGS

    return {op: fn for op, fn in decomposition_table().items() if op not in LOWERINGS}
