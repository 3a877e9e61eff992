"""A captured graph cut into consecutive pieces that the backend compiles one by one.

Two callers cut graphs: compiled DDP (``ddp_graph_split``: one piece per gradient bucket, so
all-reduces overlap backward) and regional compilation (``regional_split``: one piece per call
of a repeated module, so a stack of identical blocks is compiled once). Both need the same
mechanics, kept here: pieces as standalone graph modules whose inputs are the values earlier
pieces (or the graph's inputs) computed, and whose outputs are the values later pieces or the
graph's output read. Each compiled piece backpropagates as its own autograd node, like the
graphs on either side of a graph break.

Capture marks which module call made each node (``mark_call``): a node's
``meta["module_calls"]`` lists the calls that enclose it, outermost first, as (serial number,
module class or marked function). Regional compilation finds its regions from those marks.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..ir import Graph, GraphModule, Node
from ..ir.passes import fetch_attr

__all__ = ["Piece", "build_pieces", "mark_call"]

_call_serials = itertools.count()


def mark_call(graph: Graph, before: Node | None, kind: Any) -> None:
    """Record that the ops traced after ``before`` (the graph's last node when the call began)
    belong to one call of ``kind``: a module's class, or a function marked with
    ``kiln.compiler.nested_compile_region``. Inner calls are marked first, as they end first,
    so each node's list grows outward."""
    if before is not None and before._erased:
        return  # the list changed under the call: leave its nodes unmarked
    call = (next(_call_serials), kind)
    for node in graph.nodes_after(before):
        if node.op == "call_function":
            node.meta.setdefault("module_calls", []).insert(0, call)


@dataclass
class Piece:
    """One piece: its graph module, the outer graph's nodes it reads (in its placeholders'
    order) and those it computes for later pieces or the output."""

    module: GraphModule
    inputs: list[Node]
    outputs: list[Node]
    compiled: Callable | None = None


def build_pieces(gm: GraphModule, segments: list[list[Node]]) -> list[Piece]:
    """One ``Piece`` per segment (consecutive ``call_function`` nodes of ``gm``, in order)."""
    pieces = []
    for k, nodes in enumerate(segments):
        own = set(nodes)
        graph = Graph()
        env: dict[Node, Node] = {}
        inputs: list[Node] = []
        attrs = {}

        def value_of(node: Node) -> Node:
            mapped = env.get(node)
            if mapped is not None:
                return mapped
            if node.op == "get_attr":
                mapped = graph.get_attr(node.target)
                attrs[node.target] = fetch_attr(gm, node.target)
            else:  # a graph input, or a value an earlier piece computes
                mapped = graph.placeholder(node.name)
                inputs.append(node)
            mapped.meta = copy.copy(node.meta)
            env[node] = mapped
            return mapped

        for node in nodes:
            env[node] = graph.node_copy(node, value_of)
        outputs = [n for n in nodes if any(user not in own for user in n.users)]
        graph.output(tuple(env[n] for n in outputs))
        name = f"{type(gm).__name__}_piece{k}"
        pieces.append(Piece(GraphModule(attrs, graph, class_name=name), inputs, outputs))
    return pieces
