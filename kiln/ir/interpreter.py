"""``Interpreter``: run a graph node by node (torch.fx.Interpreter's shape).

Backends that want to see every node subclass it and override one method per opcode
(``placeholder``, ``get_attr``, ``call_function``, ``output``) or ``run_node``. Values no later
node reads are dropped as the run goes, as eager execution would free them. While a node runs,
its recorded user source is the current source for any tracer below (so re-tracing a graph
through an Interpreter keeps the user's file:line), and an error raised by the node gets a note
naming the node and that source.
"""

from __future__ import annotations

from typing import Any

from ..ops.core.dispatch import dispatch
from ..ops.core.registry import Op
from .graph import Graph
from .node import Node, format_target, map_arg
from .passes import fetch_attr
from .printing import short_source
from .source import node_source

__all__ = ["Interpreter", "call_target"]


def call_target(target: Any, args: tuple, kwargs: dict) -> Any:
    """Call a node's target. An op with its canonical positional args skips re-binding."""
    if isinstance(target, Op) and not kwargs and len(args) == len(target.param_names):
        return dispatch(target, tuple(args))
    return target(*args, **kwargs)


class Interpreter:
    """Runs ``module.graph`` (a GraphModule, or a bare Graph without get_attr nodes)."""

    def __init__(self, module, garbage_collect_values: bool = True):
        self.module = module
        self.graph: Graph = module if isinstance(module, Graph) else module.graph
        self.garbage_collect_values = garbage_collect_values
        self.env: dict[Node, Any] = {}
        self._dies_after: dict[Node, list[Node]] = {}
        seen: set = set()
        for node in reversed(self.graph.nodes):
            for inp in node.all_input_nodes:
                if inp not in seen:
                    seen.add(inp)
                    self._dies_after.setdefault(node, []).append(inp)

    def run(self, *args, initial_env: dict[Node, Any] | None = None) -> Any:
        """Run the graph on ``args`` (one per placeholder) and return the output value."""
        n_inputs = sum(1 for n in self.graph.nodes if n.op == "placeholder")
        if len(args) > n_inputs:
            raise TypeError(f"graph takes {n_inputs} inputs but {len(args)} were given")
        self.env = dict(initial_env or {})
        self.args_iter = iter(args)
        for node in self.graph.nodes:
            if node in self.env:
                continue
            self.env[node] = self.run_node(node)
            if self.garbage_collect_values:
                for dead in self._dies_after.get(node, ()):
                    self.env.pop(dead, None)
            if node.op == "output":
                return self.env[node]
        return None

    def run_node(self, n: Node) -> Any:
        source = n.meta.get("source")
        with node_source(source, n.meta.get("source_text")):
            args, kwargs = self.fetch_args_kwargs_from_env(n)
            try:
                return getattr(self, n.op)(n.target, args, kwargs)
            except Exception as e:
                where = f" (from {short_source(source)})" if source else ""
                e.add_note(f"while running graph node {n.name}: {format_target(n.target)}{where}")
                raise

    # ---------------------------------------------------------------- one method per opcode
    def placeholder(self, target: str, args: tuple, kwargs: dict) -> Any:
        try:
            return next(self.args_iter)
        except StopIteration:
            if args:
                return args[0]
            raise TypeError(f"graph input {target!r} was not given") from None

    def get_attr(self, target: str, args: tuple, kwargs: dict) -> Any:
        return self.fetch_attr(target)

    def call_function(self, target: Any, args: tuple, kwargs: dict) -> Any:
        return call_target(target, args, kwargs)

    def output(self, target: str, args: tuple, kwargs: dict) -> Any:
        return args[0] if args else None

    # ---------------------------------------------------------------- helpers
    def fetch_attr(self, target: str) -> Any:
        if isinstance(self.module, Graph):
            raise RuntimeError(f"get_attr {target!r}: a bare Graph has no module to read from")
        return fetch_attr(self.module, target)

    def fetch_args_kwargs_from_env(self, n: Node) -> tuple[tuple, dict]:
        return self.map_nodes_to_values(n.args, n), self.map_nodes_to_values(n.kwargs, n)

    def map_nodes_to_values(self, args: Any, n: Node) -> Any:
        def load(a: Node) -> Any:
            if a not in self.env:
                raise RuntimeError(f"node {n.name} reads {a.name}, which has no value yet")
            return self.env[a]

        return map_arg(args, load)
