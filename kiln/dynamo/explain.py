"""``kiln.dynamo.explain(fn)(*args)``: what capture made of a function, for humans.

Runs ``fn`` once through a fresh compile context with the eager backend (resume functions are
compiled as the call reaches them) and collects every graph (with its ops) and every graph
break (reason, category, hint, user source line).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from .exc import BreakReason

__all__ = ["explain", "ExplainOutput", "GraphInfo"]

# ``{partitioner: bytes saved for backward}`` of a captured graph, or None: AOT autograd (a layer
# above this one) answers it and installs itself here when imported (``set_saved_bytes_report``)
_saved_bytes_report: list[Callable] = [lambda gm: None]


def set_saved_bytes_report(report: Callable) -> None:
    """Install the function that reports a captured graph's saved bytes per partitioner."""
    _saved_bytes_report[0] = report


@dataclass
class GraphInfo:
    """One captured graph: its module, name and the ops it calls."""

    name: str
    graph_module: object
    ops: list[str]
    # bytes the forward saves for the backward, by AOT partitioner (None: no backward)
    saved_bytes: dict[str, int] | None = None
    # sizes only known when the graph runs ("u0 = nonzero of a [5, 3] tensor ..."), and the
    # symbolic input sizes ("s0 = x.size()[0]")
    unbacked_sizes: list[str] = field(default_factory=list)
    symbolic_sizes: list[str] = field(default_factory=list)

    @property
    def op_count(self) -> int:
        return len(self.ops)


@dataclass
class ExplainOutput:
    graph_infos: list[GraphInfo] = field(default_factory=list)
    break_reasons: list[BreakReason] = field(default_factory=list)
    # the guards of every entry compiled (PyTorch's ``out_guards``: what a call must match)
    out_guards: list = field(default_factory=list)
    compile_times: str = ""  # how long the explained call took (capture included)

    @property
    def graphs(self) -> list:
        return [g.graph_module for g in self.graph_infos]

    @property
    def graph_count(self) -> int:
        return len(self.graph_infos)

    @property
    def graph_break_count(self) -> int:
        """PyTorch's definition: one less than the graphs (so -1 for a frame that ran eagerly);
        ``break_reasons`` lists every break capture met."""
        return self.graph_count - 1

    @property
    def op_count(self) -> int:
        return sum(g.op_count for g in self.graph_infos)

    @property
    def ops_per_graph(self) -> list[list[str]]:
        return [g.ops for g in self.graph_infos]

    def __str__(self) -> str:
        """PyTorch's layout (counts, break reasons, ops per graph), plus each break's category,
        location and hint and the bytes each graph saves for its backward."""
        lines = [
            f"Graph Count: {self.graph_count}",
            f"Graph Break Count: {self.graph_break_count}",
            f"Op Count: {self.op_count}",
            "Break Reasons:",
        ]
        for i, r in enumerate(self.break_reasons):
            lines.append(f"  Break Reason {i + 1}:")
            lines.append(f"    Reason: {r.message}")
            lines.append(f"    Category: {r.category}")
            lines.append(f"    Hint: {r.hint}")
            lines.append("    User Stack:")
            for frame in r.user_stack or [f"{r.location} in {r.function}"]:
                lines.append(f"      {frame}")
        lines.append("Ops per Graph:")
        for i, g in enumerate(self.graph_infos):
            lines.append(f"  Ops {i + 1} ({g.name}):")
            lines.extend(f"    {op}" for op in g.ops)
            if g.saved_bytes:
                saved = ", ".join(f"{k} {v} bytes" for k, v in g.saved_bytes.items())
                lines.append(f"    saved for backward: {saved}")
            if g.symbolic_sizes:
                lines.append(f"    symbolic sizes: {', '.join(g.symbolic_sizes)}")
            if g.unbacked_sizes:
                lines.append(f"    data-dependent sizes: {', '.join(g.unbacked_sizes)}")
        lines.append("Out Guards:")
        lines.extend(f"  Guard {i + 1}: {g.text}" for i, g in enumerate(self.out_guards))
        return "\n".join(lines) + "\n"

    # listener protocol of CompileContext
    def on_graph(self, gm, op_count: int, name: str) -> None:
        ops = [
            getattr(n.target, "name", None) or getattr(n.target, "__name__", str(n.target))
            for n in gm.graph.nodes
            if n.op == "call_function"
            and not getattr(n.target, "__name__", "").startswith("set_grad")
        ]
        backed, unbacked = _graph_symbols(gm)
        self.graph_infos.append(
            GraphInfo(name, gm, ops, _saved_bytes_report[0](gm), unbacked, backed)
        )

    def on_break(self, reason: BreakReason) -> None:
        self.break_reasons.append(reason)

    def on_guards(self, guards: list) -> None:
        self.out_guards.extend(guards)


def _graph_symbols(gm) -> tuple[list[str], list[str]]:
    """``(["s0 = x.size()[0]", ...], ["u0 = nonzero of ...", ...])`` of a captured graph."""
    from ..runtime.symbolic import SymInt
    from ..runtime.tensor import Tensor

    found: dict = {}

    def visit(value) -> None:
        if isinstance(value, Tensor):
            for v in (*value._shape, *value.stride()):
                visit(v)
        elif isinstance(value, SymInt):
            for symbol in value.expr.symbols():
                found.setdefault(symbol.name, symbol)
        elif isinstance(value, (tuple, list)):
            for v in value:
                visit(v)

    for node in gm.graph.nodes:
        visit(node.meta.get("val"))
    ordered = sorted(found.values(), key=lambda s: (s.unbacked, int(s.name[1:])))
    backed = [f"{s.name} = {s.origin}" for s in ordered if not s.unbacked]
    unbacked = [f"{s.name} = {s.origin}" for s in ordered if s.unbacked]
    return backed, unbacked


def explain(fn: Callable, *args, **kwargs):
    """``explain(fn)(*args, **kwargs)`` -> ``ExplainOutput`` (``explain(fn, *args)`` also works)."""
    from .eval_frame import CompileContext, OptimizedModule, compile_in_context

    if isinstance(getattr(fn, "__self__", None), OptimizedModule) and fn.__name__ == "forward":
        fn = fn.__self__  # ``explain(compiled.forward)``: the compiled module's forward
    if isinstance(fn, OptimizedModule):
        fn = fn._orig_mod  # what it compiles, not its wrapper around the compiled forward

    def run(*call_args, **call_kwargs) -> ExplainOutput:
        report = ExplainOutput()
        ctx = CompileContext("eager")
        ctx.listeners.append(report)
        # a module, function, bound method (``net.forward``) or callable object, as compile
        start = time.perf_counter()
        compile_in_context(fn, ctx)(*call_args, **call_kwargs)
        elapsed = time.perf_counter() - start
        report.compile_times = f"capture, compile and run: {elapsed:.4f} s"
        return report

    if args or kwargs:
        return run(*args, **kwargs)
    return run
