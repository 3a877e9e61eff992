"""``kiln.dynamo.explain(fn)(*args)``: what capture made of a function, for humans.

Runs ``fn`` once through a fresh compile context with the eager backend (resume functions are
compiled as the call reaches them) and collects every graph (with its ops) and every graph
break (reason, category, hint, user source line).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from .exc import BreakReason

__all__ = ["explain", "ExplainOutput", "GraphInfo"]


@dataclass
class GraphInfo:
    """One captured graph: its module, name and the ops it calls."""

    name: str
    graph_module: object
    ops: list[str]
    # bytes the forward saves for the backward, by AOT partitioner (None: no backward)
    saved_bytes: dict[str, int] | None = None

    @property
    def op_count(self) -> int:
        return len(self.ops)


@dataclass
class ExplainOutput:
    graph_infos: list[GraphInfo] = field(default_factory=list)
    break_reasons: list[BreakReason] = field(default_factory=list)

    @property
    def graphs(self) -> list:
        return [g.graph_module for g in self.graph_infos]

    @property
    def graph_count(self) -> int:
        return len(self.graph_infos)

    @property
    def graph_break_count(self) -> int:
        return len(self.break_reasons)

    @property
    def op_count(self) -> int:
        return sum(g.op_count for g in self.graph_infos)

    @property
    def ops_per_graph(self) -> list[list[str]]:
        return [g.ops for g in self.graph_infos]

    def __str__(self) -> str:
        lines = [
            f"Graph count: {self.graph_count}",
            f"Graph break count: {self.graph_break_count}",
            f"Op count: {self.op_count}",
        ]
        for i, g in enumerate(self.graph_infos):
            lines.append(f"Graph {i} ({g.name}): {g.op_count} ops: {', '.join(g.ops)}")
            if g.saved_bytes:
                saved = ", ".join(f"{k} {v} bytes" for k, v in g.saved_bytes.items())
                lines.append(f"  saved for backward: {saved}")
        if self.break_reasons:
            lines.append("Break reasons:")
        for i, r in enumerate(self.break_reasons):
            lines.append(f"  {i + 1}. {r.message}")
            lines.append(f"     category: {r.category}")
            lines.append(f"     at: {r.location} (in {r.function})")
            lines.append(f"     hint: {r.hint}")
        return "\n".join(lines)

    # listener protocol of CompileContext
    def on_graph(self, gm, op_count: int, name: str) -> None:
        ops = [
            getattr(n.target, "name", None) or getattr(n.target, "__name__", str(n.target))
            for n in gm.graph.nodes
            if n.op == "call_function"
            and not getattr(n.target, "__name__", "").startswith("set_grad")
        ]
        from ..aot.aot_autograd import saved_bytes_report

        self.graph_infos.append(GraphInfo(name, gm, ops, saved_bytes_report(gm)))

    def on_break(self, reason: BreakReason) -> None:
        self.break_reasons.append(reason)


def explain(fn: Callable, *args, **kwargs):
    """``explain(fn)(*args, **kwargs)`` -> ``ExplainOutput`` (``explain(fn, *args)`` also works)."""
    from ..nn.modules.module import Module
    from .eval_frame import CompileContext, OptimizedModule

    def run(*call_args, **call_kwargs) -> ExplainOutput:
        report = ExplainOutput()
        ctx = CompileContext("eager")
        ctx.listeners.append(report)
        compiled = (
            OptimizedModule(fn, ctx)
            if isinstance(fn, Module)
            else ctx.wrapper_for(getattr(fn, "_kiln_original", fn))
        )
        compiled(*call_args, **call_kwargs)
        return report

    if args or kwargs:
        return run(*args, **kwargs)
    return run
