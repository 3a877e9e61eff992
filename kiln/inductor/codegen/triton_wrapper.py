"""The Triton module of a graph: kernels plus a Python ``call`` that runs them, and its runtimes.

``build_module`` prints every step of a schedule (pointwise/reduction kernels, the matmul
template with its epilogue, extern calls) and a wrapper ``call(inputs)`` that allocates buffers
(freeing each after its last use, so the device's caching allocator recycles memory), launches
kernels on static grids and returns the output buffers. The module is written to disk as
``output_code.py`` (Triton needs the source file) and executed with an ``rt`` object that knows
the device: ``HostRuntime`` runs kernels through Triton's interpreter on numpy buffers (tests),
``CudaKernelRuntime`` on the GPU. ``TritonCompiledGraph`` is what ``compile_graph`` returns.
Kernels that read indices from memory each set an int32 flag of the call's for an index out of
range; ``call`` reads the flags once, after its last kernel, and raises the CPU kernels' error.
"""

from __future__ import annotations

import collections
import hashlib
import os
import re
import time
from dataclasses import dataclass, field

import numpy as np

from ...runtime import cache_records
from ...runtime import dtypes as dt
from ...runtime import logs as klog
from ...runtime.storage import empty_array
from ...runtime.sym_expr import Symbol
from ...runtime.symbolic import SymInt
from .. import sym, wrapper_runtime
from ..dependencies import index_error_type
from ..graph_lowering import _layout_of
from ..ir import InputBuffer
from ..scheduler import ExternCall, Kernel, ScatterStep, Schedule, _step_reads, _step_writes
from .cpu_pool import INDEX_ERRORS, index_error
from .triton import TritonConfig, storage_dtype_name
from .triton_interpret import LIBDEVICE, HostBuffer, interpret_mode
from .triton_kernels import GeneratedKernel, generate_kernel, generate_scatter
from .triton_math import helper_source
from .triton_matmul import fusable_epilogue, generate_matmul, matmul_shapes

__all__ = ["TritonModule", "build_module", "TritonCompiledGraph", "HostRuntime", "graphs_compiled"]

_compiled_graphs = [0]  # TritonCompiledGraphs built in this process (compile counts in tests)


def graphs_compiled() -> int:
    """How many graphs this process compiled to Triton modules (eager single-op graphs too)."""
    return _compiled_graphs[0]


@dataclass
class _Step:
    kind: str  # "kernel" | "matmul" | "scatter" | "extern"
    kernel: Kernel | None = None
    call: ExternCall | ScatterStep | None = None
    writes: list = field(default_factory=list)
    reads: list = field(default_factory=list)  # buffers read from outside the step
    generated: list = field(default_factory=list)  # GeneratedKernels, launched in order


@dataclass
class TritonModule:
    """A generated module: its source, where it was written, and its entry point."""

    source: str
    path: str
    kernels: list  # GeneratedKernel
    call: object
    namespace: dict


def _plan(sched: Schedule) -> list[_Step]:
    """Group the schedule's steps: a matmul absorbs a following pointwise kernel as epilogue."""
    steps: list[_Step] = []
    i = 0
    raw = sched.steps
    while i < len(raw):
        s = raw[i]
        if isinstance(s, ExternCall) and matmul_shapes(s) is not None:
            nxt = raw[i + 1] if i + 1 < len(raw) else None
            epilogue = nxt if isinstance(nxt, Kernel) and fusable_epilogue(s, nxt) else None
            step = _Step("matmul", epilogue, s)
            i += 2 if epilogue is not None else 1
        elif isinstance(s, ExternCall):
            step = _Step("extern", None, s)
            i += 1
        elif isinstance(s, ScatterStep):
            step = _Step("scatter", None, s)
            i += 1
        else:
            step = _Step("kernel", s)
            i += 1
        parts = [x for x in (step.call, step.kernel) if x is not None]
        step.writes = [w for x in parts for w in _step_writes(x)]
        reads = [r for x in parts for r in _step_reads(x)]
        step.reads = [r for r in dict.fromkeys(reads) if r not in step.writes]
        steps.append(step)
    return steps


def _step_nodes(step: _Step) -> list:
    """The buffers a step's generated kernels compute."""
    nodes = [step.call.buffer] if step.call is not None else []
    return nodes + (list(step.kernel.nodes) if step.kernel is not None else [])


def _origins(nodes) -> str:
    names, sources = [], []
    for n in nodes:
        for o in getattr(n, "origins", []):
            names.append(getattr(o, "name", str(o)))
            src = getattr(o, "meta", {}).get("source")
            if src and src not in sources:
                sources.append(src)
    text = ", ".join(names)
    return text + (f"  [{'; '.join(sources)}]" if sources else "")


MODULE_HEADER = """\
# kiln inductor: generated Triton module (output_code.py)
# `rt` (kiln's runtime for the device) and `externs` are provided by the loader.
import triton
import triton.language as tl
from triton.language.extra import libdevice

# Triton's own combine functions (its interpreter reduces with them through numpy)
_sum = tl.standard._sum_combine
_max = tl.standard._elementwise_max
_min = tl.standard._elementwise_min
"""


def _cache_dir() -> str:
    return str(cache_records.cache_root() / "triton")


def _write_source(source: str) -> str:
    """Write ``source`` to ``<cache>/<hash>/output_code.py`` (Triton reads kernels' source)."""
    digest = hashlib.sha256(source.encode()).hexdigest()[:20]
    directory = os.path.join(_cache_dir(), digest)
    path = os.path.join(directory, "output_code.py")
    if not os.path.exists(path):
        os.makedirs(directory, exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            f.write(source)
        os.replace(tmp, path)
    return path


def build_module(
    sched: Schedule,
    rt,
    cfg: TritonConfig | None = None,
    symbols: tuple = (),
    layouts: dict | None = None,
) -> TritonModule:
    """Generate, write and load the Triton module of ``sched`` for runtime ``rt``.

    Kernels for every size: ``symbols`` are the graph's size symbols and ``layouts`` the layouts
    a call works out from their values, by name; the module adds its extern calls' layouts, and
    its ``call(inputs, S)`` (which empties ``inputs``) takes the call's ``CallSizes`` (``symbolic_sizes``), whose values
    follow ``symbols`` and whose layouts follow ``layouts``. Size expressions in the wrapper
    (allocations, grids, kernels' size arguments) are evaluated from the symbol values."""
    cfg = cfg or TritonConfig()
    lowered = sched.lowered
    buffers = {b.name: b for b in lowered.buffers}
    for b in lowered.inputs:
        if b is not None:
            buffers[b.name] = b
    for name, t in lowered.constants.items():
        buffers[name] = InputBuffer(name, _layout_of(t))
    if not cfg.int64_indexing:
        # symbolic storage sizes are checked per call instead (``TritonCompiledGraph``)
        static = [b.layout.storage_size() for b in buffers.values()]
        biggest = max([n for n in static if n.__class__ is int] + [0])
        cfg.int64_indexing = biggest > 2**31 - 1
    outputs = [o[1].name for o in lowered.outputs if o[0] == "buffer"]
    steps = _plan(sched)
    for i, step in enumerate(steps):
        others = {r for j, s in enumerate(steps) if j != i for r in s.reads}
        must_store = {w for w in step.writes if w in others or w in outputs}
        if step.kind == "kernel":
            step.generated = [
                generate_kernel(
                    step.kernel,
                    step.kernel.name,
                    must_store,
                    buffers,
                    cfg,
                    _origins(step.kernel.nodes),
                )
            ]
        elif step.kind == "scatter":
            buf = step.call.buffer
            step.generated = generate_scatter(
                buf, f"scatter_{buf.name}", buffers, cfg, _origins([buf])
            )
        elif step.kind == "matmul":
            nodes = [step.call.buffer] + (step.kernel.nodes if step.kernel else [])
            step.generated = [
                generate_matmul(
                    step.call,
                    step.kernel,
                    f"mm_{step.call.buffer.name}",
                    must_store,
                    buffers,
                    cfg,
                    _origins(nodes),
                )
            ]
    if symbols:
        _check_size_arguments(steps, symbols)
    source, externs = _render(steps, lowered, buffers, outputs, symbols, layouts)
    namespace = load_source(source, rt, externs=externs)
    path = namespace["__file__"]
    _share_jit_functions(namespace, steps, rt.interpret)
    kernels = [k for s in steps for k in s.generated]
    return TritonModule(source, path, kernels, namespace["call"], namespace)


def _check_size_arguments(steps, symbols) -> None:
    """Kernels for every size read sizes only from their integer arguments: a kernel whose code
    names a size symbol itself (a size printed as text somewhere) would fail when it runs, so
    the graph takes the per-size route instead."""
    from ..compile_fx import SymbolicUnsupportedError

    names = "|".join(re.escape(s.name) for s in symbols)
    for k in (k for step in steps for k in step.generated):
        code = "\n".join(line.split("#", 1)[0] for line in k.source.splitlines())
        found = re.search(rf"\b({names})\b", code)
        if found:
            raise SymbolicUnsupportedError(
                f"Triton kernel {k.name} names the size symbol {found.group(1)} in its code"
                " instead of taking it as an integer argument"
            )


def load_source(source: str, rt, **names) -> dict:
    """Write ``source`` to disk and execute it as a module whose globals include ``rt``.

    Under the interpreter, ``TRITON_INTERPRET`` is set only while the module runs (when its
    kernels are decorated), and ``libdevice`` is replaced by numpy versions."""
    path = _write_source(source)
    namespace = {"__name__": f"kiln_triton_{os.path.basename(os.path.dirname(path))}"}
    namespace.update(rt=rt, index_error=index_error, __file__=path, **names)
    code = compile(source, path, "exec")
    # Triton's own library must be imported as compiled (not interpreted) functions, so it
    # stays usable for GPU kernels in this process: import it before interpret mode
    import triton.language  # noqa: F401

    if rt.interpret:
        with interpret_mode():
            exec(code, namespace)
        namespace["libdevice"] = LIBDEVICE
    else:
        exec(code, namespace)
    return namespace


# (interpreted?, function source) -> the @triton.jit function first made from it. Reusing it
# skips Triton's per-function work (the interpreter's AST rewrite, the JIT's hashing) for kernels
# and helpers that recur across graphs; they only read helpers of identical source as globals.
_JIT_FUNCTIONS: collections.OrderedDict = collections.OrderedDict()
_JIT_FUNCTIONS_MAX = 8192


def _share_jit_functions(namespace: dict, steps, interpret: bool) -> None:
    kernels = [k for s in steps for k in s.generated]
    named = [(k.name, k.source) for k in kernels]
    helpers = set().union(*(k.helpers for k in kernels)) if kernels else set()
    named += [(h, helper_source([h])) for h in sorted(helpers)]
    for name, source in named:
        key = (interpret, source)
        shared = _JIT_FUNCTIONS.setdefault(key, namespace[name])
        _JIT_FUNCTIONS.move_to_end(key)
        namespace[name] = shared
    while len(_JIT_FUNCTIONS) > _JIT_FUNCTIONS_MAX:
        _JIT_FUNCTIONS.popitem(last=False)


def _render(steps, lowered, buffers, outputs, symbols=(), layouts: dict | None = None):
    """The module's text: header, helpers, kernels, then the ``call`` wrapper (see
    ``build_module`` for ``layouts``)."""
    kernels = [k for s in steps for k in s.generated]
    helpers = set().union(*(k.helpers for k in kernels)) if kernels else set()
    out = [MODULE_HEADER]
    if helpers:
        out += ["", helper_source(helpers)]
    for k in kernels:
        out += ["", k.source]
        if k.kind == "matmul":
            out.append(f"{k.name}_configs = {k.tune_configs!r}")
            out.append("")
    externs: list = []
    body: list[str] = []
    # the kernels that read indices from memory: each sets its own flag for one out of range
    checked = [k for k in kernels if INDEX_ERRORS in k.args]
    flags = {k.name: f"index_flags[{i}]" for i, k in enumerate(checked)}
    if checked:
        errors = {
            k.name: index_error_type(_step_nodes(s)).__name__
            for s in steps
            for k in s.generated
            if INDEX_ERRORS in k.args
        }
        readers = ", ".join(f"({f'{k.name}: {k.comment}'!r}, {errors[k.name]})" for k in checked)
        out += ["", "# kernels flagging an index out of range, in flag order (named in the error),"]
        out.append("# each with the exception its ops raise eagerly")
        out.append(f"INDEX_READERS = ({readers},)")
    allocated: set = set()
    last_use: dict = {}
    for i, step in enumerate(steps):
        for r in step.reads:
            last_use[r] = i
    names = {}  # buffer name -> python identifier in call()
    if symbols:  # this call's size symbol values, as locals the size expressions below read
        body.append(f"{', '.join(_size_code(s) for s in symbols)}, = S.values.values()")
    inputs = [b for b in lowered.inputs if b is not None] + [buffers[n] for n in lowered.constants]
    for b in inputs:
        names[b.name] = _pyname(b.name)
        body.append(f"{names[b.name]} = inputs[{b.name!r}]")
    body.append("inputs.clear()")  # the caller's references go: each input dies after its use
    if checked:
        body.append(f"index_flags = rt.index_flags({len(checked)})  # zeros, one per reader")
    # what the wrapper frees after its last reader: its own buffers and the graph's inputs
    freeable = allocated | {b.name for b in lowered.inputs if b is not None}
    for i, step in enumerate(steps):
        body.append("")
        if step.kind == "extern":
            buf = step.call.buffer
            names[buf.name] = _pyname(buf.name)
            body.append(f"# extern {buf.description}: {_origins([buf])}")
            body.append(_alloc(names[buf.name], buf))
            allocated.add(buf.name)
            freeable.add(buf.name)
            ins = [names[item[0].name] for item in buf.inputs if isinstance(item, tuple)]
            call = f"rt.extern(externs[{len(externs)}], {names[buf.name]}, [{', '.join(ins)}]"
            if layouts is not None:  # this call's layouts and size values
                refs = []
                for k, layout in enumerate(wrapper_runtime.extern_layouts(buf)):
                    refs.append(f"S.layouts[{len(layouts)}]")
                    layouts[f"E{len(externs)}_{k}"] = layout
                call += f", ({', '.join(refs)},), S.values"
            body.append(call + ")")
            externs.append(buf)
        else:
            for name in step.writes:
                if any(name in k.stored for k in step.generated):
                    names[name] = _pyname(name)
                    body.append(_alloc(names[name], buffers[name]))
                    allocated.add(name)
                    freeable.add(name)
            for k in step.generated:
                body.append(f"# {k.name}: {k.kind}; {k.comment}")
                body.append(_launch(k, {**names, INDEX_ERRORS: flags.get(k.name)}))
        dead = [
            n for n, last in last_use.items() if last == i and n in freeable and n not in outputs
        ] + [n for n in step.writes if n in allocated and n not in last_use and n not in outputs]
        if dead:
            body.append(f"del {', '.join(names[n] for n in sorted(set(dead)))}")
    returned = ", ".join(f"{n!r}: {names[n]}" for n in dict.fromkeys(outputs) if n in names)
    body.append("")
    if checked:  # once per call: reading the flags waits for the device
        body.append(
            "for flagged, (where, error) in zip(rt.read_index_flags(index_flags), INDEX_READERS):"
        )
        body.append("    if flagged:")
        body.append("        index_error(where, error=error)")
    body.append(f"return {{{returned}}}")
    out += ["", f"def call(inputs{'' if layouts is None else ', S'}):"] + [
        "    " + line if line else "" for line in body
    ]
    return "\n".join(out) + "\n", externs


def _launch(k: GeneratedKernel, names: dict) -> str:
    args = ", ".join(names[a] for a in k.args)
    if k.kind == "matmul":
        m, n, batch = (_size_code(s) for s in k.sizes[:3])
        extra = "".join(f", {_size_code(s)}" for s in k.sizes[3:])
        return (
            f"rt.launch_tuned({k.name}, {k.name}_configs, "
            f"lambda c: (triton.cdiv({m}, c['BLOCK_M']) * triton.cdiv({n}, c['BLOCK_N']), "
            f"{batch}), {args}{extra})"
        )
    if k.grid[0].__class__ is int and k.grid[0] == 0:
        return f"# {k.name} has nothing to compute (empty iteration space)"
    sizes = ", ".join(_size_code(s) for s in k.sizes)
    grid = f"({', '.join(_size_code(g) for g in k.grid)},)"
    blocks = ", ".join(f"{c}={v}" for c, v in k.constexprs.items())
    return f"{k.name}[{grid}]({args}, {sizes}, {blocks}, num_warps={k.num_warps})"


def _size_code(size) -> str:
    """A size as wrapper code: an int, or an expression over the call's size symbols (locals
    named ``size_<symbol>``)."""
    if size.__class__ is Symbol:
        return f"size_{size.name}"
    size = sym.size_value(size)
    if size.__class__ is int:
        return str(size)
    return size.expr.code(_size_code)


def _pyname(name: str) -> str:
    ident = "".join(c if c.isalnum() or c == "_" else "_" for c in name)
    return ident if ident and not ident[0].isdigit() else f"b_{ident}"


def _alloc(pyname: str, buf) -> str:
    numel = sym.size_value(buf.layout.storage_size())
    numel = max(numel, 1) if numel.__class__ is int else f"max({_size_code(numel)}, 1)"
    return f"{pyname} = rt.empty({numel}, {buf.dtype.name!r})"


# ------------------------------------------------------------------------------ ahead of time

_TRITON_TYPES = {
    "float32": "fp32",
    "float64": "fp64",
    "float16": "fp16",
    "bfloat16": "bf16",
    "int64": "i64",
    "int32": "i32",
    "int16": "i16",
    "int8": "i8",
    "uint8": "u8",
}


class _CompileOnly:
    interpret = False


def compile_for_gpu(module: TritonModule, capability: tuple = (9, 0)) -> dict:
    """Compile every kernel of ``module`` to a cubin for an NVIDIA GPU of ``capability``.

    Needs no GPU (Triton ships ptxas): it checks, on any machine, that generated kernels pass
    Triton's compiler, which is stricter than its interpreter (loop-carried types, for one).
    Returns kernel name -> compiled kernel."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    namespace = load_source(module.source, _CompileOnly())
    target = GPUTarget("cuda", capability[0] * 10 + capability[1], 32)
    out = {}
    for k in module.kernels:
        fn = namespace[k.name]
        names = fn.arg_names
        signature = {
            names[i]: "*" + _TRITON_TYPES[storage_dtype_name(k.arg_dtypes[a])]
            for i, a in enumerate(k.args)
        }
        if k.kind == "matmul":
            sizes = names[len(k.args) : len(k.args) + len(k.sizes) - 3]
            signature.update({n: "i32" for n in sizes})
            constexprs = {c: v for c, v in k.tune_configs[0].items() if not c.startswith("num_")}
            constexprs["UPCAST"] = False
            options = {c: k.tune_configs[0][c] for c in ("num_warps", "num_stages")}
        else:
            sizes = names[len(k.args) : len(k.args) + len(k.sizes)]
            signature.update({n: "i32" for n in sizes})
            constexprs = dict(k.constexprs)
            options = {"num_warps": k.num_warps}
        signature.update({c: "constexpr" for c in constexprs})
        source = ASTSource(fn=fn, signature=signature, constexprs=constexprs)
        out[k.name] = triton.compile(source, target=target, options=options)
    return out


# ------------------------------------------------------------------------------ runtimes


class HostRuntime:
    """Runs a module's kernels with Triton's interpreter on host memory (numpy buffers).

    Every runtime offers the same small interface to generated code (``empty``, ``extern``,
    ``launch_tuned``) and to ``TritonCompiledGraph`` (``input``, ``constant``, ``output``)."""

    interpret = True

    def activate(self) -> None:
        pass

    def empty(self, numel: int, dtype_name: str) -> HostBuffer:
        d = dt._dtype_by_name(dtype_name)
        return HostBuffer.of_array(empty_array((numel,), d.np), storage_dtype_name(d))

    def input(self, t, layout) -> HostBuffer:
        storage = wrapper_runtime.input_storage(t, layout)
        return HostBuffer.of_array(storage, storage_dtype_name(t.dtype))

    def constant(self, t) -> HostBuffer:
        storage = wrapper_runtime.storage_of_tensor(t)
        return HostBuffer.of_array(storage, storage_dtype_name(t.dtype))

    def output(self, storage: HostBuffer, layout):
        return wrapper_runtime.to_tensor(storage.array, layout)

    def extern(
        self, ext, out: HostBuffer, inputs: list, layouts=None, values: dict | None = None
    ) -> None:
        """``layouts``/``values``: a call's concrete layouts and size values (kernels for
        every size; ``wrapper_runtime.run_extern``)."""
        storages = {ext.name: out.array}
        tensors = [item for item in ext.inputs if isinstance(item, tuple)]
        for (src, _layout), b in zip(tensors, inputs):
            storages[src.name] = b.array
        wrapper_runtime.run_extern(ext, storages, layouts, values)

    def index_flags(self, count: int) -> list:
        """``count`` int32 error flags, zeroed, as kernel arguments (see ``_render``)."""
        flags = np.zeros(count, np.int32)
        return [HostBuffer.of_array(flags[i : i + 1]) for i in range(count)]

    def read_index_flags(self, flags: list) -> list:
        return [int(f.array[0]) for f in flags]

    def launch_tuned(self, kernel, configs: list, grid, *args) -> None:
        # the interpreter has no bfloat16 arithmetic: UPCAST makes tl.dot see float32
        config = configs[0]
        kernel[grid(config)](*args, UPCAST=True, **config)


def _cudagraph_unavailable(rt) -> str:
    """Why this graph's launches are not captured into a CUDA graph (they run one by one)."""
    if rt.interpret:
        return "no CUDA graph capture without a GPU (kernels run in Triton's interpreter)"
    return "kiln does not capture CUDA graphs yet (issue 19, item 4)"


# the largest storage (in elements) kernels with 32-bit offsets address
_INT32_ELEMENTS = 2**31 - 1


class TritonCompiledGraph:
    """A graph compiled to Triton kernels; called like ``CompiledGraph``, with tensors.

    ``sizes`` (a ``SizeBinding``): the graph's sizes are symbolic and its kernels serve every
    size, taking symbolic extents, strides and offsets as integer arguments the wrapper works
    out per call; a call they do not serve (``SizeBinding.resolve``, or buffers too large for
    the 32-bit offsets the kernels were printed with) runs ``fallback``."""

    codegen = "triton"

    def __init__(
        self,
        sched: Schedule,
        device=None,
        options: dict | None = None,
        sizes=None,
        fallback=None,
    ):
        from ...runtime.device import cpu

        self.schedule = sched
        self.sizes = sizes
        self.fallback = fallback
        self.device = device or cpu
        lowered = sched.lowered
        self._inputs = lowered.inputs
        self._constants = lowered.constants
        self._outputs = lowered.outputs
        if self.device.type == "cuda":
            from .triton_cuda import CudaKernelRuntime

            self.rt = CudaKernelRuntime.for_device(self.device)
        else:
            self.rt = HostRuntime()
        started = time.perf_counter()
        _compiled_graphs[0] += 1
        cfg = TritonConfig.from_options(options)
        if sizes is None:
            self.module = build_module(sched, self.rt, cfg)
        else:
            self.module = self._build_symbolic(sched, cfg, sizes)
        self.cudagraph_skip_reason = None
        if cfg.cudagraphs:
            self.cudagraph_skip_reason = _cudagraph_unavailable(self.rt)
            klog.log("cudagraphs", f"skipping cudagraphs due to {self.cudagraph_skip_reason}")
        self.compile_seconds = time.perf_counter() - started
        self.num_kernels = len(self.module.kernels)
        self.source = self.module.source
        self.source_path = self.module.path

    def _build_symbolic(self, sched: Schedule, cfg: TritonConfig, binding) -> TritonModule:
        """The module for every size; binds what a call works out from its sizes: the inputs'
        and outputs' layouts (then the module's extern layouts), the sizes the graph returns,
        and, with 32-bit offsets, every symbolic storage size (checked per call)."""
        lowered = sched.lowered
        layouts = {}
        for k, buf in enumerate(self._inputs):
            if buf is not None:
                layouts[f"I{k}"] = buf.layout
        consts = []
        for k, out in enumerate(self._outputs):
            if out[0] == "buffer":
                layouts[f"O{k}"] = out[2]
            elif out[1].__class__ is SymInt:
                consts.append(out[1])
        self._returned = len(consts)
        module = build_module(sched, self.rt, cfg, tuple(binding.symbols), layouts)
        self._checks_storage = not cfg.int64_indexing
        if self._checks_storage:
            every = [b.layout for b in lowered.buffers] + [b.layout for b in self._inputs if b]
            consts += [n for n in (x.storage_size() for x in every) if n.__class__ is SymInt]
        binding.bind(layouts, {}, tuple(consts))
        self._layout_index = {name: i for i, name in enumerate(layouts)}
        return module

    def __call__(self, *args):
        return self.boxed_call(list(args))

    def boxed_call(self, args: list) -> tuple:
        """The graph run on ``args``, which it empties: the module's ``call`` drops each input
        after its last kernel, so inputs the caller handed over free as the graph runs."""
        binding = self.sizes
        sizes = None
        if binding is not None:
            sizes = binding.resolve(args)
            if sizes is None or (
                self._checks_storage
                and max(sizes.consts[self._returned :], default=0) > _INT32_ELEMENTS
            ):
                return self.fallback(*args)
            layouts, index = sizes.layouts, self._layout_index
        rt = self.rt
        rt.activate()
        inputs = {}
        for k, buf in enumerate(self._inputs):
            if buf is not None:
                layout = buf.layout if sizes is None else layouts[index[f"I{k}"]]
                inputs[buf.name] = rt.input(args[k], layout)
        args.clear()
        for name, t in self._constants.items():
            inputs[name] = rt.constant(t)
        results = self.module.call(inputs) if sizes is None else self.module.call(inputs, sizes)
        outs = []
        returned = 0
        for k, out in enumerate(self._outputs):
            if out[0] != "buffer":
                if sizes is not None and out[1].__class__ is SymInt:
                    outs.append(sizes.consts[returned])
                    returned += 1
                else:
                    outs.append(out[1])
                continue
            _, buf, layout = out
            if sizes is not None:
                layout = layouts[index[f"O{k}"]]
            outs.append(rt.output(results[buf.name], layout))
        return tuple(outs)
