"""Graphs with symbolic sizes that kernels for every size do not serve: one static compile per
concrete signature that comes twice.

``symbolic_compile`` gives most symbolic graphs one kernel set for every size. A graph it cannot
compile (a size-dependent decision, a step run by numpy, Triton), and a call its
kernels do not serve (a size of 1), come here: ``specializing`` compiles the graph for each
concrete input signature it is called with *a second time* (the graph is traced again on fakes
of that call's inputs, which turns every size node into a constant) and keeps the compiled
versions by signature. A signature seen for the first time runs the graph with the eager ops (the
policy of static capture: a shape seen once runs eagerly), so a context that grows by one token a
step never pays a kernel compile per length, while sizes that repeat (batch sizes of an epoch)
get kernels on their second call, up to ``config.static_kernel_sets_per_graph`` sets per graph.
A graph with data-dependent sizes (``nonzero``'s row count) has no static version: it always runs
with the eager ops. All of it is logged under ``KILN_LOGS=inductor``, and the per-size decisions
under ``recompiles`` too. What is left for this route to shrink: extern calls (matmuls take their
shapes at run time already), scatters and unbacked sizes in the symbolic kernels.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from ..aot.backend import boxed_eager_compiler
from ..ir import GraphModule
from ..ir.tracer import trace
from ..ops.core.fake import to_fake
from ..runtime import logs as klog
from ..runtime.symbolic import SymInt, has_symbols
from ..runtime.tensor import Tensor
from . import config

__all__ = [
    "COMPILE_STATS",
    "SymbolicGraphStats",
    "has_unbacked_sizes",
    "is_symbolic_graph",
    "specializing",
]


@dataclasses.dataclass
class SymbolicGraphStats:
    """What the inductor did with graphs of symbolic sizes in this process (tests read these):
    graphs compiled once for every size (``symbolic_compile``), graphs refused that route, and
    calls those kernels did not serve; for the interim route, kernel sets compiled for a
    concrete signature, calls run with the eager ops because their signature was not compiled
    for yet (new, or come fewer than ``eager_calls`` times), and calls
    run eagerly because the graph had its limit of kernel sets."""

    symbolic_compiles: int = 0
    symbolic_refused: int = 0
    fallback_calls: int = 0
    static_compiles: int = 0
    eager_first_calls: int = 0
    eager_over_limit_calls: int = 0

    def reset(self) -> None:
        for field in dataclasses.fields(self):
            setattr(self, field.name, 0)


COMPILE_STATS = SymbolicGraphStats()


def _symbolic(value, unbacked_only: bool = False) -> bool:
    if value.__class__ is SymInt:
        return not unbacked_only or any(s.unbacked for s in value.expr.symbols())
    if isinstance(value, Tensor):
        return any(_symbolic(v, unbacked_only) for v in (*value._shape, *value.stride()))
    if isinstance(value, (tuple, list)):
        return any(_symbolic(v, unbacked_only) for v in value)
    return False


def is_symbolic_graph(gm: GraphModule, example_inputs) -> bool:
    """Whether a graph (or its example inputs) has symbolic sizes."""
    if any(_symbolic(v) for v in example_inputs):
        return True
    return any(_symbolic(n.meta.get("val")) for n in gm.graph.nodes)


def has_unbacked_sizes(gm: GraphModule) -> bool:
    """Whether a graph computes sizes only known when it runs (``nonzero``'s row count)."""
    return any(_symbolic(n.meta.get("val"), unbacked_only=True) for n in gm.graph.nodes)


def specializing(
    gm: GraphModule, example_inputs, compile_static: Callable, eager_calls: int = 1
) -> Callable:
    """A callable that compiles ``gm`` with ``compile_static(gm, examples)`` once per concrete
    input signature (see the module docstring); ``eager_calls``: how many calls of a signature
    run with the eager ops before it is compiled."""
    if has_unbacked_sizes(gm):
        message = (
            "inductor runs a graph with data-dependent sizes with the eager ops "
            "(symbolic kernels not yet supported)"
        )
        klog.log("inductor", message)
        klog.log("graph_breaks", message)
        return boxed_eager_compiler(gm, example_inputs)
    mutations = gm.graph.output_node.meta.get("input_mutations")
    saved_from = gm.graph.output_node.meta.get("saved_from")
    compiled: dict = {}
    seen: dict = {}  # signature -> calls run with the eager ops
    over_limit: set = set()  # signatures that came again once the limit was reached
    eager = boxed_eager_compiler(gm, example_inputs)

    def compile_for(args: tuple, key: tuple) -> Callable:
        sizes = [list(a._shape) if isinstance(a, Tensor) else a for a in args]
        message = f"inductor: input sizes {sizes} came again: compiling static kernels for them"
        klog.log("recompiles", message)
        klog.log("inductor", message)
        examples = [to_fake(a) if isinstance(a, Tensor) else a for a in args]
        static = trace(gm.forward, *examples)
        static = GraphModule({**_attributes(gm), **_attributes(static)}, static.graph)
        if mutations is not None:
            static.graph.output_node.meta["input_mutations"] = mutations
        if saved_from is not None:
            static.graph.output_node.meta["saved_from"] = saved_from
        if has_symbols(examples) or is_symbolic_graph(static, examples):
            raise RuntimeError("internal error: a specialized graph still has symbolic sizes")
        fn = compiled[key] = compile_static(static, examples)
        COMPILE_STATS.static_compiles += 1
        return fn

    def run(*args):
        key = tuple(
            (a._shape, a.stride(), a._dtype, a._device) if isinstance(a, Tensor) else a
            for a in args
        )
        fn = compiled.get(key)
        if fn is not None:
            return fn(*args)
        calls = seen.get(key, 0)
        if calls < eager_calls:
            seen[key] = calls + 1
            if not calls:
                _log_eager_call(args, "are new to this symbolic graph")
            COMPILE_STATS.eager_first_calls += 1
            return eager(*args)
        if len(compiled) >= config.static_kernel_sets_per_graph:
            if key not in over_limit:  # log once per signature
                over_limit.add(key)
                _log_eager_call(
                    args,
                    f"came again, but the graph has {len(compiled)} static kernel sets"
                    " (inductor.config.static_kernel_sets_per_graph)",
                )
            COMPILE_STATS.eager_over_limit_calls += 1
            return eager(*args)
        return compile_for(args, key)(*args)

    return run


def _log_eager_call(args: tuple, why: str) -> None:
    if klog.enabled("recompiles") or klog.enabled("inductor"):
        sizes = [list(a._shape) if isinstance(a, Tensor) else a for a in args]
        message = f"inductor: input sizes {sizes} {why}: run with the eager ops"
        klog.log("recompiles", message)
        klog.log("inductor", message)


def _attributes(gm: GraphModule) -> dict:
    """The tensors a graph's ``get_attr`` nodes read (AOT's constants)."""
    out = {}
    for node in gm.graph.nodes:
        if node.op == "get_attr":
            value = gm
            for part in node.target.split("."):
                value = getattr(value, part)
            out[node.target] = value
    return out
