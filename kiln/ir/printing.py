"""Human-readable views of a graph: value descriptions (``f32[4, 3]``) and the node table.

``print_graph`` shows, per node, its name, opcode, target, arguments, shape, dtype, strides and
the user's source line, so a dump of any captured graph points back at the code that made it.
"""

from __future__ import annotations

import functools
import os
import sys
from typing import Any

from ..runtime.symbolic import statically_known_true
from ..runtime.tensor import Tensor, contiguous_strides
from .node import Node, format_target

__all__ = ["describe_val", "short_source", "graph_table", "print_graph", "DTYPE_ABBREVIATIONS"]

DTYPE_ABBREVIATIONS = {
    "float32": "f32",
    "float64": "f64",
    "float16": "f16",
    "bfloat16": "bf16",
    "int64": "i64",
    "int32": "i32",
    "int16": "i16",
    "int8": "i8",
    "uint8": "u8",
    "bool": "b8",
}


def _dtype_abbrev(t: Tensor) -> str:
    return DTYPE_ABBREVIATIONS.get(t.dtype.name, t.dtype.name)


def describe_val(val: Any, with_stride: bool = False) -> str:
    """``f32[4, 3]`` for a tensor (with ``stride=(...)`` when not contiguous and asked for),
    ``(f32[2], i64[2])`` for tuples, ``repr`` for Python values."""
    if isinstance(val, Tensor):
        shape = ", ".join(str(s) for s in val._shape)
        text = f"{_dtype_abbrev(val)}[{shape}]"
        if with_stride and not _same(val.stride(), contiguous_strides(val._shape)):
            text += f" stride={tuple(val.stride())}"
        return text
    if isinstance(val, (tuple, list)):
        inner = ", ".join(describe_val(v, with_stride) for v in val)
        return f"({inner})" if isinstance(val, tuple) else f"[{inner}]"
    text = repr(val)
    return text if len(text) <= 40 else text[:37] + "..."


def _same(a: tuple, b: tuple) -> bool:
    """Equal for every value of the symbols in them (printing records no guards)."""
    return len(a) == len(b) and all(statically_known_true("==", x, y) for x, y in zip(a, b))


def short_source(source: str) -> str:
    """``file:line`` relative to the working directory when inside it, else the file's name."""
    path, sep, line = source.rpartition(":")
    if not sep or not line.isdigit():
        return source
    return f"{_short_path(path, os.getcwd())}:{line}"


@functools.lru_cache(maxsize=1024)
def _short_path(path: str, cwd: str) -> str:
    # every node of every printed graph names a file: a few files, thousands of lookups
    try:
        rel = os.path.relpath(path, cwd)
    except ValueError:  # another drive on Windows
        rel = path
    if rel.startswith(".."):
        rel = os.path.basename(path)
    return rel


def _format_args(node: Node) -> str:
    parts = [_arg(a) for a in node.args]
    parts += [f"{k}={_arg(v)}" for k, v in node.kwargs.items()]
    text = ", ".join(parts)
    return text if len(text) <= 60 else text[:57] + "..."


def _arg(a: Any) -> str:
    if isinstance(a, Node):
        return a.name
    if isinstance(a, (tuple, list)):
        inner = ", ".join(_arg(x) for x in a)
        return f"({inner})" if isinstance(a, tuple) else f"[{inner}]"
    if isinstance(a, dict):
        return "{" + ", ".join(f"{k!r}: {_arg(v)}" for k, v in a.items()) + "}"
    return repr(a)


def _val_columns(val: Any) -> tuple[str, str, str]:
    if isinstance(val, Tensor):
        return str(list(val._shape)), val.dtype.name, str(tuple(val.stride()))
    if isinstance(val, (tuple, list)) and any(isinstance(v, Tensor) for v in val):
        cols = [_val_columns(v) for v in val]
        return tuple(", ".join(c[i] for c in cols) for i in range(3))
    return ("", "", "") if val is None else (describe_val(val), "", "")


def graph_table(graph) -> str:
    """The node table as text (one row per node)."""
    header = ("name", "op", "target", "args", "shape", "dtype", "stride", "source")
    rows = [header]
    for n in graph.nodes:
        shape, dtype, stride = _val_columns(n.meta.get("val"))
        source = n.meta.get("source")
        src = short_source(source) if source else ""
        if n.meta.get("source_text"):
            src += f"  {n.meta['source_text']}"
        target = "" if n.op == "output" else format_target(n.target)
        rows.append((n.name, n.op, target, _format_args(n), shape, dtype, stride, src))
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = []
    for k, row in enumerate(rows):
        lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())
        if k == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def print_graph(graph, file=None) -> str:
    """Print ``graph_table(graph)`` (to ``file``, default stdout) and return it."""
    text = graph_table(graph)
    print(text, file=file or sys.stdout)
    return text
