"""Python source for a graph: ``def forward(self, <inputs>)`` calling ``kiln.ops.<name>(...)``.

The code is meant to be read and stepped through: each line ends with the result's shape/dtype and
the user's ``file:line``, and a comment with the user's source text starts each group of nodes
that came from one line. Op calls are written back in their schema's form (keyword-only
arguments by name, arguments equal to their defaults left out). Values with no literal spelling
(generators, numpy scalars, real tensors in a hand-built graph) become globals of the code.
"""

from __future__ import annotations

import inspect
import math
import operator
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..ops import public
from ..ops.core.registry import Op
from ..runtime.device import device as Device
from ..runtime.dtypes import dtype as DType
from .graph import Graph
from .node import Node
from .printing import describe_val, short_source
from .sym_nodes import SYM_METHODS

__all__ = ["PythonCode", "generate_code"]


@dataclass
class PythonCode:
    """Generated source, the globals it needs, and which node each line computes."""

    src: str
    globals: dict[str, Any]
    line_nodes: dict[int, Node] = field(default_factory=dict)


_EMPTY = inspect.Parameter.empty
# size arithmetic (``s0 * 4``) is written as Python writes it
_INFIX = {
    operator.add: "+", operator.sub: "-", operator.mul: "*", operator.floordiv: "//",
    operator.mod: "%", operator.eq: "==", operator.ne: "!=", operator.lt: "<", operator.le: "<=",
    operator.gt: ">", operator.ge: ">=",
}  # fmt: skip
_KW_ONLY = inspect.Parameter.KEYWORD_ONLY


def _is_default(value: Any, default: Any) -> bool:
    if default is _EMPTY:
        return False
    if value is default:
        return True
    scalar = (bool, int, float, str)
    return type(value) is type(default) and isinstance(value, scalar) and value == default


def op_call_text(op: Op, args: tuple, value: Callable[[Any], str]) -> str:
    """``kiln.ops.<name>(...)`` from an op's canonical positional args, written as its schema
    reads: keyword-only parameters by name, and arguments equal to their defaults left out
    (trailing positional ones, any keyword one), with ``value`` writing each argument.

    Shared by the graph's Python code and ``kiln.export``'s graph text, so both read alike."""
    positional, keywords = [], []
    for p, a in zip(op.signature.parameters.values(), args):
        if p.kind is _KW_ONLY:
            if not _is_default(a, p.default):
                keywords.append(f"{p.name}={value(a)}")
        else:
            positional.append((p, a))
    while positional and _is_default(positional[-1][1], positional[-1][0].default):
        positional.pop()
    parts = [value(a) for _, a in positional] + keywords
    return f"kiln.ops.{op.name}({', '.join(parts)})"


class _Emitter:
    """Formats values as Python expressions, registering globals for the unspellable ones."""

    def __init__(self, graph: Graph):
        self.graph = graph
        self.globals: dict[str, Any] = {"kiln": public, "operator": operator}
        self._global_ids: dict[int, str] = {}

    def add_global(self, obj: Any, hint: str) -> str:
        key = id(obj)
        name = self._global_ids.get(key)
        if name is None:
            hint = re.sub(r"\W", "_", hint).strip("_") or "value"
            n = 0
            while f"_{hint}_{n}" in self.graph._namespace or f"_{hint}_{n}" in self.globals:
                n += 1
            name = f"_{hint}_{n}"
            self._global_ids[key] = name
            self.globals[name] = obj
        return name

    def value(self, a: Any) -> str:
        if isinstance(a, Node):
            return a.name
        if a is None or a is Ellipsis or isinstance(a, (bool, int, str)):
            return "..." if a is Ellipsis else repr(a)
        if isinstance(a, float):
            if math.isnan(a):
                return "float('nan')"
            if math.isinf(a):
                return "float('inf')" if a > 0 else "-float('inf')"
            return repr(a)
        if isinstance(a, tuple):
            inner = ", ".join(self.value(x) for x in a)
            if hasattr(a, "_fields"):  # a namedtuple: call its class
                return f"{self.add_global(type(a), type(a).__name__)}({inner})"
            return f"({inner},)" if len(a) == 1 else f"({inner})"
        if isinstance(a, list):
            return "[" + ", ".join(self.value(x) for x in a) + "]"
        if isinstance(a, dict):
            return "{" + ", ".join(f"{self.value(k)}: {self.value(v)}" for k, v in a.items()) + "}"
        if isinstance(a, slice):
            return f"slice({self.value(a.start)}, {self.value(a.stop)}, {self.value(a.step)})"
        if isinstance(a, DType):
            return repr(a)
        if isinstance(a, Device):
            return f"kiln.device({str(a)!r})"
        if isinstance(a, Op):
            return f"kiln.ops.{a.name}"
        return self.add_global(a, type(a).__name__.lower())

    def callee(self, target: Any) -> str:
        if isinstance(target, Op):
            return f"kiln.ops.{target.name}"
        name = getattr(target, "__name__", None)
        if getattr(target, "__module__", None) in ("_operator", "operator") and (
            getattr(operator, name or "", None) is target
        ):
            return f"operator.{name}"
        if getattr(public, name or "", None) is target:
            return f"kiln.{name}"
        return self.add_global(target, name or "fn")

    def call(self, node: Node) -> str:
        target, args, kwargs = node.target, node.args, node.kwargs
        if target is operator.getitem and len(args) == 2 and not kwargs:
            return f"{self.value(args[0])}[{self.value(args[1])}]"
        if not kwargs and target in _INFIX and len(args) == 2:
            return f"{self.value(args[0])} {_INFIX[target]} {self.value(args[1])}"
        method = SYM_METHODS.get(target) if not kwargs else None
        if method is not None:
            rest = ", ".join(self.value(a) for a in args[1:])
            return f"{self.value(args[0])}.{method}({rest})"
        if isinstance(target, Op) and not kwargs and len(args) == len(target.param_names):
            return op_call_text(target, args, self.value)
        parts = [self.value(a) for a in args]
        parts += [f"{k}={self.value(v)}" for k, v in kwargs.items()]
        return f"{self.callee(target)}({', '.join(parts)})"


def _attr_path(root: str, qualified_name: str) -> str:
    expr = root
    for part in qualified_name.split("."):
        expr = f"{expr}.{part}" if part.isidentifier() else f"getattr({expr}, {part!r})"
    return expr


def _comment(node: Node) -> str:
    desc = describe_val(node.meta.get("val"), with_stride=True) if "val" in node.meta else ""
    src = node.meta.get("source")
    parts = [p for p in (desc, short_source(src) if src else "") if p]
    return "  # " + "  ".join(parts) if parts else ""


def generate_code(graph: Graph, root_name: str = "self") -> PythonCode:
    """Source of ``forward`` for ``graph`` (see the module docstring)."""
    emit = _Emitter(graph)
    header = []
    body: list[tuple[str, Node | None]] = []
    last_source = None
    for node in graph.nodes:
        if node.op == "placeholder":
            default = f"={emit.value(node.args[0])}" if node.args else ""
            header.append(f"{node.name}{default},{_comment(node)}")
            continue
        if node.op == "output":
            body.append((f"return {emit.value(node.args[0]) if node.args else 'None'}", node))
            continue
        source = node.meta.get("source")
        if source and source != last_source:
            text = node.meta.get("source_text")
            body.append((f"# {short_source(source)}{': ' + text if text else ''}", None))
        last_source = source or last_source
        if node.op == "get_attr":
            expr = _attr_path(root_name, node.target)
        else:
            expr = emit.call(node)
        body.append((f"{node.name} = {expr}{_comment(node)}", node))
    if not body or body[-1][1] is None or body[-1][1].op != "output":
        body.append(("return None", None))

    lines = []
    if header:
        lines.append("def forward(")
        lines += ["    " + h for h in [f"{root_name},", *header]]
        lines.append("):")
    else:
        lines.append(f"def forward({root_name}):")
    line_nodes = {}
    for text, node in body:
        lines.append("    " + text)
        if node is not None:
            line_nodes[len(lines)] = node
    return PythonCode("\n".join(lines) + "\n", emit.globals, line_nodes)
