"""What the compiler made of a workload, written as files a user can open.

``observe_compiled_graphs`` keeps every graph the inductor compiles (forward and backward graphs
alike: AOT autograd hands both to ``compile_fx.compile_graph``) without changing what is compiled;
``write_inductor_dumps`` writes each one's loop IR, schedule, generated wrapper and LLVM IR. The
dynamo graphs, guards, transformed bytecode and AOT graphs come from kiln's own ``KILN_DEBUG_DIR``
dumps, which the runner points at the same folder while it compiles.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator

__all__ = [
    "count_kernels",
    "dump_compiled",
    "environ",
    "graph_role",
    "loop_ir",
    "observe_compiled_graphs",
    "write_inductor_dumps",
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


@contextlib.contextmanager
def observe_compiled_graphs() -> Iterator[list]:
    """Within the block, every ``(GraphModule, compiled graph)`` pair that
    ``kiln.inductor.compile_fx.compile_graph`` makes is also appended to the yielded list (the
    backend still gets the very same object)."""
    from ..inductor import compile_fx

    seen: list = []
    original = compile_fx.compile_graph

    def compile_graph(gm, example_inputs, options=None):
        graph = original(gm, example_inputs, options)
        seen.append((gm, graph))
        return graph

    compile_fx.compile_graph = compile_graph
    try:
        yield seen
    finally:
        compile_fx.compile_graph = original


def graph_role(gm) -> str:
    """``backward`` for a graph that takes tangents (AOT's naming), else ``forward``."""
    names = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
    return "backward" if any(name.startswith("tangents") for name in names) else "forward"


def count_kernels(observed: list) -> int:
    """Generated kernels over the observed ``(GraphModule, compiled graph)`` pairs."""
    return sum(graph.num_kernels for _, graph in observed)


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

    def indirect_indexing(self, value, size):
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


def write_inductor_dumps(observed: list, folder: str) -> list[str]:
    """Write loop IR, schedule, wrapper source and LLVM IR of the observed ``(GraphModule,
    compiled graph)`` pairs under ``folder/inductor``; returns the paths written."""
    out = os.path.join(folder, "inductor")
    paths = []
    for number, (gm, graph) in enumerate(observed):
        stem = f"graph{number}_{graph_role(gm)}"
        schedule = graph.schedule.describe() or "(no steps: the graph only returns inputs)"
        codegen = getattr(graph, "codegen", "triton")
        header = f"# {graph.num_kernels} kernels, codegen {codegen}\n"
        paths.append(_write(out, f"{stem}_loop_ir.txt", loop_ir(graph)))
        paths.append(_write(out, f"{stem}_schedule.txt", header + schedule + "\n"))
        paths.append(_write(out, f"{stem}_output_code.py", graph.source))
        if getattr(graph, "ir_text", ""):
            paths.append(_write(out, f"{stem}_kernels.ll", graph.ir_text))
    return paths


def dump_compiled(
    fn: Callable, args: tuple, folder: str, backend: str = "inductor", options: dict | None = None
) -> list[str]:
    """Compile ``fn`` afresh, call it once on ``args`` and write everything the compiler made
    under ``folder``: the dynamo graph, guards and bytecode and the AOT graphs (through
    ``KILN_DEBUG_DIR``), each inductor graph's loop IR, schedule, wrapper and LLVM IR, and
    ``explain.txt`` (which calls ``fn`` once more). Returns the files in ``folder``, sorted.

    ``fn`` may already be compiled: it is captured again in a private compile context (as
    ``explain`` does), so the caller's compiled entries are neither reused nor disturbed."""
    from ..dynamo import explain
    from ..dynamo.eval_frame import CompileContext, OptimizedModule
    from ..nn.modules.module import Module

    os.makedirs(folder, exist_ok=True)
    context = CompileContext(backend, options=options)
    if isinstance(fn, Module):
        fresh = OptimizedModule(getattr(fn, "_orig_mod", fn), context)
    else:
        fresh = context.wrapper_for(getattr(fn, "_kiln_original", fn))
    with environ(KILN_DEBUG_DIR=os.path.abspath(folder)), observe_compiled_graphs() as observed:
        fresh(*args)
    write_inductor_dumps(observed, folder)
    report = explain(fn)(*args)
    _write(folder, "explain.txt", f"{report}\n")
    found = [os.path.join(root, f) for root, _, files in os.walk(folder) for f in files]
    return sorted(found)
