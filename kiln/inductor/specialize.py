"""Interim support for graphs with symbolic sizes: one static compile per concrete signature.

The capture frontend and AOT autograd hand the inductor graphs whose sizes are symbols (``s0``,
``u0``). Until kernels take their sizes as arguments, ``specializing`` compiles such a graph for
each concrete input signature it is called with (the graph is traced again on fakes of that
call's inputs, which turns every size node into a constant) and keeps the compiled versions by
signature, so a dynamic graph called with N shapes compiles N kernel sets while the frontend
captures once. A graph with data-dependent sizes (``nonzero``'s row count) has no static
version: it runs with the eager ops. Both are logged under ``KILN_LOGS=inductor``.

The real implementation (issue "Dynamic shapes", item 4) replaces this module: loop bounds,
strides and buffer sizes become expressions over the symbols, passed to each kernel as integer
arguments (vector loops with a scalar tail correct for every size), the wrapper allocates from
size expressions, and the compiled-graph index keys on the symbolic graph, so one compile serves
every size. Remove this file then, and the one call to it in ``compile_fx.inductor``.
"""

from __future__ import annotations

from collections.abc import Callable

from ..ir import GraphModule
from ..ir.tracer import trace
from ..ops.fake import to_fake
from ..runtime import logs as klog
from ..runtime.symbolic import SymInt, has_symbols
from ..runtime.tensor import Tensor

__all__ = ["is_symbolic_graph", "specializing"]


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


def specializing(gm: GraphModule, example_inputs, compile_static: Callable) -> Callable:
    """A callable that compiles ``gm`` with ``compile_static(gm, examples)`` once per concrete
    input signature (see the module docstring)."""
    if any(_symbolic(n.meta.get("val"), unbacked_only=True) for n in gm.graph.nodes):
        from ..aot.backend import boxed_eager_compiler

        message = (
            "inductor runs a graph with data-dependent sizes with the eager ops "
            "(symbolic kernels not yet supported)"
        )
        klog.log("inductor", message)
        klog.log("graph_breaks", message)
        return boxed_eager_compiler(gm, example_inputs)
    mutations = gm.graph.output_node.meta.get("input_mutations")
    compiled: dict = {}

    def compile_for(args: tuple, key: tuple) -> Callable:
        sizes = [tuple(a._shape) if isinstance(a, Tensor) else a for a in args]
        klog.log(
            "inductor",
            f"specializing: symbolic kernels not yet supported; compiling for input sizes {sizes}",
        )
        examples = [to_fake(a) if isinstance(a, Tensor) else a for a in args]
        static = trace(gm.forward, *examples)
        static = GraphModule({**_attributes(gm), **_attributes(static)}, static.graph)
        if mutations is not None:
            static.graph.output_node.meta["input_mutations"] = mutations
        if has_symbols(examples) or is_symbolic_graph(static, examples):
            raise RuntimeError("internal error: a specialized graph still has symbolic sizes")
        fn = compiled[key] = compile_static(static, examples)
        return fn

    def run(*args):
        key = tuple(
            (a._shape, a.stride(), a._dtype, a._device) if isinstance(a, Tensor) else a
            for a in args
        )
        fn = compiled.get(key)
        if fn is None:
            fn = compile_for(args, key)
        return fn(*args)

    return run


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
