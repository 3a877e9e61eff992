"""What the compiler made of a workload, written as files a user can open.

``observe_compiled_graphs`` keeps every graph the inductor compiles (forward and backward graphs
alike: AOT autograd hands both to ``compile_fx.compile_graph``; on CUDA, eager ops are compiled
there too, one op per graph; a graph with symbolic sizes, each kernel set its routes compile)
without changing what is compiled. ``dump_compiled`` compiles a
function with kiln's own ``KILN_DEBUG_DIR`` dumps on (dynamo graph, guards, bytecode, AOT graphs,
each inductor graph's schedule, wrapper and kernels) and adds what they leave out: each graph's
loop IR printed with its bodies, and ``explain()``'s report.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass

__all__ = [
    "ObservedGraph",
    "count_kernels",
    "dump_compiled",
    "environ",
    "graph_role",
    "loop_ir",
    "observe_compiled_graphs",
    "write_loop_ir",
]


@contextlib.contextmanager
def environ(**values: str):
    """Set environment variables for the block (kiln reads ``KILN_*`` variables when it uses
    them, so this steers a compile), then restore them."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@dataclass
class ObservedGraph:
    """One graph the inductor compiled: its input GraphModule and the compiled graph."""

    gm: object
    graph: object  # CompiledGraph (CPU) or TritonCompiledGraph (CUDA)
    eager_op: bool  # compiled for one eager CUDA op (kiln.runtime.devices), not by a backend


_EAGER_DEVICE_MODULE = "kiln.runtime.devices"


@contextlib.contextmanager
def observe_compiled_graphs() -> Iterator[list[ObservedGraph]]:
    """Within the block, every graph ``kiln.inductor.compile_fx.compile_graph`` makes or
    ``compile_graph_cached`` loads from the compiled-graph cache is also appended to the yielded
    list (its caller still gets the very same object)."""
    from ..inductor import compile_fx

    seen: list[ObservedGraph] = []
    originals = {
        name: getattr(compile_fx, name) for name in ("compile_graph", "compile_graph_cached")
    }

    def observing(original):
        def compile_graph(gm, example_inputs, *args, **kwargs):
            graph = original(gm, example_inputs, *args, **kwargs)
            # a graph with symbolic sizes comes back through ``compile_graph`` from the
            # inductor's own routes (kernels for every size, or per concrete size), and a graph
            # the cache missed comes back from ``compile_graph_cached`` too: keep each kernel set
            # once and not the routes' wrappers
            if hasattr(graph, "num_kernels") and not (seen and seen[-1].graph is graph):
                caller = sys._getframe(1).f_globals.get("__name__", "")
                seen.append(ObservedGraph(gm, graph, eager_op=caller == _EAGER_DEVICE_MODULE))
            return graph

        return compile_graph

    for name, original in originals.items():
        setattr(compile_fx, name, observing(original))
    try:
        yield seen
    finally:
        for name, original in originals.items():
            setattr(compile_fx, name, original)


def graph_role(gm) -> str:
    """``backward`` for a graph that takes tangents (AOT's naming), else ``forward``."""
    names = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
    return "backward" if any(name.startswith("tangents") for name in names) else "forward"


def count_kernels(observed: list[ObservedGraph]) -> int:
    """Kernels generated for the graphs a backend compiled (eager CUDA ops left out)."""
    return sum(o.graph.num_kernels for o in observed if not o.eager_op)


class _LoopIRPrinter:
    """An ops handler that prints a loop body as one assignment per op."""

    def __init__(self):
        self.lines: list[str] = []
        self._temps = 0
        self._indirect = 0

    def _emit(self, text: str) -> str:
        name = f"tmp{self._temps}"
        self._temps += 1
        self.lines.append(f"{name} = {text}")
        return name

    def load(self, name, index):
        return self._emit(f"load({name}, {index!r})")

    def indirect_indexing(self, value, size, wrap_negative=True, error="RuntimeError"):
        from ..inductor import sym

        self._indirect += 1
        atom = sym.Indirect(f"ind{self._indirect}", size)
        self.lines.append(f"{atom!r} = indirect({value}, size={size})")
        return atom

    def __getattr__(self, op: str):
        def emit(*args, **kwargs):
            parts = [str(a) for a in args] + [f"{k}={v}" for k, v in kwargs.items()]
            return self._emit(f"{op}({', '.join(parts)})")

        return emit


def _body(fn: Callable, *index) -> list[str]:
    from ..inductor.virtualized import set_ops_handler

    printer = _LoopIRPrinter()
    with set_ops_handler(printer):
        result = fn(*index)
    return printer.lines + [f"return {result}"]


def _describe_buffer(buf) -> list[str]:
    from ..inductor.dependencies import iteration_vars
    from ..inductor.ir import ComputedBuffer, Pointwise, Reduction, Scatter

    head = f"{buf.name}: {list(buf.shape)} {buf.dtype}"
    if not isinstance(buf, ComputedBuffer):
        description = getattr(buf, "description", type(buf).__name__)
        return [f"{head} = extern {description}"]
    data = buf.data
    index, rindex = iteration_vars(buf)
    loops = ", ".join(f"{v!r} < {s}" for v, s in zip(index, data.ranges))
    if isinstance(data, Reduction):
        rloops = ", ".join(f"{v!r} < {s}" for v, s in zip(rindex, data.reduction_ranges))
        lines = [f"{head} = {data.reduction_type} reduction over ({rloops}) for ({loops})"]
        body = _body(data.inner_fn, index, rindex)
    elif isinstance(data, Pointwise):
        lines = [f"{head} = pointwise for ({loops})"]
        body = _body(data.inner_fn, index)
    elif isinstance(data, Scatter):
        lines = [f"{head} = scatter-{data.mode} for ({loops}); value:"]
        body = _body(data.value_fn, index)
    else:
        return [f"{head} = {type(data).__name__}"]
    return lines + ["    " + line for line in body]


def loop_ir(compiled_graph) -> str:
    """The loop IR of one compiled graph: every buffer's loop nest and body, in schedule order."""
    if getattr(compiled_graph, "schedule", None) is None:
        return "# loaded from the compiled-graph cache: its loop IR was not built in this process\n"
    lowered = compiled_graph.schedule.lowered
    lines = [f"# inputs: {[b.name if b is not None else None for b in lowered.inputs]}"]
    if lowered.fallbacks:
        lines.append(f"# ops run through their eager kernels: {lowered.fallbacks}")
    for buf in lowered.buffers:
        try:
            lines += _describe_buffer(buf)
        except Exception as error:  # a dump must never stop the benchmark
            lines.append(f"{buf.name}: (body not printable: {type(error).__name__}: {error})")
    return "\n".join(lines) + "\n"


def _write(folder: str, name: str, text: str) -> str:
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, name)
    with open(path, "w") as f:
        f.write(text)
    return path


def _graph_folders(root: str) -> list[str]:
    """The inductor's ``KILN_DEBUG_DIR`` folders (``<n>_graph``) under ``root``, in order."""
    if not os.path.isdir(root):
        return []
    return sorted(d for d in os.listdir(root) if d.endswith("_graph"))


def write_loop_ir(observed: list[ObservedGraph], root: str, folders: list[str]) -> list[str]:
    """Write each observed graph's loop IR, bodies included, as ``loop_ir.txt`` beside what the
    inductor dumped for it (``folders`` are its new ``<n>_graph`` folders, made in the same order
    as ``observed``); a graph without such a folder gets ``graph<i>/``. Returns the paths."""
    paths = []
    for i, item in enumerate(observed):
        name = folders[i] if i < len(folders) else f"graph{i}"
        what = "one eager CUDA op" if item.eager_op else f"{graph_role(item.gm)} graph"
        header = f"# loop IR of a {what}: {item.graph.num_kernels} kernels\n"
        paths.append(_write(os.path.join(root, name), "loop_ir.txt", header + loop_ir(item.graph)))
    return paths


def dump_compiled(
    fn: Callable, args: tuple, folder: str, backend: str = "inductor", options: dict | None = None
) -> list[str]:
    """Compile ``fn`` afresh, call it once on ``args`` and write everything the compiler made
    under ``folder``: through ``KILN_DEBUG_DIR`` the dynamo graph, guards and bytecode, the AOT
    graphs and, per inductor graph (``inductor/<n>_graph/``), the graph, schedule, wrapper and
    kernels; then each graph's loop IR with its bodies, and ``explain.txt`` (which calls ``fn``
    once more). Returns the files in ``folder``, sorted.

    ``fn`` may already be compiled: it is captured again in a private compile context (as
    ``explain`` does), so the caller's compiled entries are neither reused nor disturbed."""
    from ..dynamo import explain
    from ..dynamo.eval_frame import CompileContext, OptimizedModule
    from ..nn.modules.module import Module

    os.makedirs(folder, exist_ok=True)
    root = os.path.join(folder, "inductor")
    earlier = set(_graph_folders(root))
    context = CompileContext(backend, options=options)
    if isinstance(fn, Module):
        fresh = OptimizedModule(getattr(fn, "_orig_mod", fn), context)
    else:
        fresh = context.wrapper_for(getattr(fn, "_kiln_original", fn))
    with environ(KILN_DEBUG_DIR=os.path.abspath(folder)), observe_compiled_graphs() as observed:
        fresh(*args)
    write_loop_ir(observed, root, [d for d in _graph_folders(root) if d not in earlier])
    report = explain(fn)(*args)
    _write(folder, "explain.txt", f"{report}\n")
    found = [os.path.join(root, f) for root, _, files in os.walk(folder) for f in files]
    return sorted(found)
