"""Graphviz (``dot``) source for a graph: one box per node, one edge per data dependency.

Only the text is produced (no graphviz dependency): ``dot -Tsvg graph.dot`` renders it.
"""

from __future__ import annotations

from .node import format_target
from .printing import describe_val, short_source

__all__ = ["graph_to_dot"]

_FILL = {
    "placeholder": "lightblue",
    "get_attr": "lightgrey",
    "call_function": "white",
    "output": "palegreen",
}


def _quote(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def graph_to_dot(graph, name: str = "graph") -> str:
    """The graph as a ``digraph`` in the dot language (see the module docstring)."""
    lines = [f"digraph {_quote(name)} {{", "  rankdir=TB;", '  node [shape=box, style="filled"];']
    for n in graph.nodes:
        label = [n.name]
        if n.op == "call_function":
            label.append(format_target(n.target))
        elif n.op != "output":
            label.append(f"{n.op}: {n.target}")
        if "val" in n.meta and n.op != "output":
            label.append(describe_val(n.meta["val"]))
        if n.meta.get("source"):
            label.append(short_source(n.meta["source"]))
        attrs = f"label={_quote(chr(10).join(label))}, fillcolor={_FILL[n.op]}"
        lines.append(f"  {_quote(n.name)} [{attrs}];")
    for n in graph.nodes:
        for inp in n.all_input_nodes:
            lines.append(f"  {_quote(inp.name)} -> {_quote(n.name)};")
    lines.append("}")
    return "\n".join(lines) + "\n"
