"""Exported graphs as versioned text: written readable, read back without running any of it.

The text looks like the Python kiln generates for graphs, one node per line::

    # kiln.export graph, format 1
    def forward(p_fc_weight: Tensor(float32, [4, 8]), x: Tensor(float32, [2, 8])):
        linear: Tensor(float32, [2, 4]) = kiln.ops.linear(x, p_fc_weight)  # model.py:12
        return (linear,)

but it is data: ``text_to_graphs`` parses it with ``ast`` and walks the tree, accepting only
this shape — ``def`` blocks whose statements are annotated assignments of one op call (looked up
by name in kiln's op registry), ``x[i]`` for multi-output results, and a ``return``. Arguments
are literals (numbers, strings, None, tuples, lists, ``float('inf')``, ``slice(...)``), names of
earlier nodes or of ``def`` blocks (the branches of ``cond`` nodes), and ``kiln.<dtype>`` /
``kiln.device(...)``. The annotation is each node's result metadata; after parsing, the graph is
run on fake tensors through every op's meta function and must give the same shapes and dtypes,
so a hand-edited op or argument is caught even where the checksum would not be.

Format 2 adds symbolic sizes (programs exported with a ``Dim``): each size symbol is declared
before the graphs (``s0 = kiln.sym.symbol(8, 2, 512)``: the example's size and the range the
trace assumed), shapes in annotations may be expressions over them (``[s0, 4]``,
``SymInt(4*s0)``), and size nodes read and combine them (``kiln.sym.size(x, 0)``,
``kiln.sym.mul(sym_size, 4)``). Format 1 files read as before.
"""

from __future__ import annotations

import ast
import math
import operator
from typing import Any

from ..ir import Graph, GraphModule, Node
from ..ir.codegen import op_call_text
from ..ir.interpreter import Interpreter
from ..ir.sym_nodes import sym_size, sym_stride
from ..ops.core.fake import FakeTensorMode
from ..ops.core.registry import OPS, Op
from ..runtime import dtypes as dt
from ..runtime import memory_format as mf
from ..runtime.device import device as Device
from ..runtime.layouts import strided
from ..runtime.sym_expr import INF
from ..runtime.symbolic import ShapeEnv, SymInt, hashable, sym_max, sym_min
from ..runtime.tensor import Tensor, contiguous_strides, make_fake

__all__ = ["FORMAT_VERSION", "GraphTextError", "graph_to_text", "text_to_graphs"]

FORMAT_VERSION = 2
_HEADER = "# kiln.export graph, format {}"

_DTYPES = {d.name: d for d in dt.all_dtypes}
_NAMED_CONSTANTS: dict[str, Any] = {
    "contiguous_format": mf.contiguous_format,
    "channels_last": mf.channels_last,
    "channels_last_3d": mf.channels_last_3d,
    "preserve_format": mf.preserve_format,
    "strided": strided,
}


class GraphTextError(ValueError):
    """The graph text is not what kiln writes (edited, damaged, or from a newer format)."""


# the size computations a graph with symbolic shapes holds, as ``kiln.sym.<name>(...)``
_SYM_CALLS = {
    "size": sym_size,
    "stride": sym_stride,
    "add": operator.add,
    "sub": operator.sub,
    "mul": operator.mul,
    "floordiv": operator.floordiv,
    "mod": operator.mod,
    "max": sym_max,
    "min": sym_min,
}
_SYM_NAMES = {fn: name for name, fn in _SYM_CALLS.items()}
# operators of size expressions in annotations
_EXPR_OPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
}


# ------------------------------------------------------------------------------------ writing


class _Writer:
    def __init__(self):
        self.blocks: list[str] = []
        self.names: dict[int, str] = {}  # id(branch GraphModule) -> def name
        self.counts = {"true_graph": 0, "false_graph": 0}

    def subgraph(self, gm, kind: str) -> str:
        name = self.names.get(id(gm))
        if name is None:
            name = f"{kind}_{self.counts[kind]}"
            self.counts[kind] += 1
            self.names[id(gm)] = name
            self.block(gm.graph, name)
        return name

    def block(self, graph: Graph, name: str) -> None:
        params, body = [], []
        for node in graph.nodes:
            if node.op == "placeholder":
                params.append(f"{node.name}: {_annotation(node.meta.get('val'))}")
            elif node.op == "output":
                body.append(f"return {self.value(node.args[0])}")
            elif node.op == "call_function":
                body.append(f"{node.name}: {_annotation(node.meta.get('val'))} = "
                            f"{self.call(node)}{_source_comment(node)}")  # fmt: skip
            else:
                raise GraphTextError(f"cannot write node {node.name}: opcode {node.op}")
        lines = [f"def {name}({', '.join(params)}):"] + ["    " + b for b in body]
        self.blocks.append("\n".join(lines))

    def call(self, node: Node) -> str:
        target, args = node.target, node.args
        if node.kwargs:
            raise GraphTextError(f"cannot write node {node.name}: keyword arguments")
        if target is operator.getitem:
            return f"{self.value(args[0])}[{self.value(args[1])}]"
        if target in _SYM_NAMES:
            return f"kiln.sym.{_SYM_NAMES[target]}({', '.join(self.value(a) for a in args)})"
        if not isinstance(target, Op):
            raise GraphTextError(
                f"cannot write node {node.name}: its target {target!r} is not a kiln op"
            )
        if target is OPS["cond"]:
            pred, true_branch, false_branch, operands = args
            branches = (self.subgraph(true_branch, "true_graph"),
                        self.subgraph(false_branch, "false_graph"))  # fmt: skip
            return f"kiln.ops.cond({self.value(pred)}, {branches[0]}, {branches[1]}, " \
                f"{self.value(operands)})"  # fmt: skip
        return op_call_text(target, args, self.value)

    def value(self, a: Any) -> str:
        if isinstance(a, Node):
            return a.name
        if a is None or isinstance(a, (bool, str)):
            return repr(a)
        if a is Ellipsis:
            return "..."
        if isinstance(a, int):
            return repr(int(a))
        if isinstance(a, float):
            if math.isnan(a):
                return "float('nan')"
            if math.isinf(a):
                return "float('inf')" if a > 0 else "float('-inf')"
            return repr(float(a))
        if isinstance(a, complex):
            return f"complex({self.value(a.real)}, {self.value(a.imag)})"
        if isinstance(a, tuple) and not hasattr(a, "_fields"):
            inner = ", ".join(self.value(x) for x in a)
            return f"({inner},)" if len(a) == 1 else f"({inner})"
        if isinstance(a, list):
            return "[" + ", ".join(self.value(x) for x in a) + "]"
        if isinstance(a, slice):
            return f"slice({self.value(a.start)}, {self.value(a.stop)}, {self.value(a.step)})"
        if isinstance(a, dt.dtype):
            return f"kiln.{a.name}"
        if isinstance(a, Device):
            return f"kiln.device({str(a)!r})"
        for name, constant in _NAMED_CONSTANTS.items():
            if a is constant:
                return f"kiln.{name}"
        raise GraphTextError(f"an argument of type {type(a).__name__} ({a!r}) has no text form")


def _annotation(val: Any) -> str:
    if isinstance(val, Tensor):
        shape = list(val.shape)
        parts = [val.dtype.name, str(shape)]
        stride = tuple(val.stride())
        if hashable(stride) != hashable(tuple(contiguous_strides(tuple(shape)))):
            parts.append(f"stride={list(stride)}")
        if val.device.type != "cpu":
            parts.append(f"device={str(val.device)!r}")
        return f"Tensor({', '.join(parts)})"
    if isinstance(val, (tuple, list)):
        inner = ", ".join(_annotation(v) for v in val)
        return f"({inner},)" if len(val) == 1 else f"({inner})"
    if val is None:
        return "None"
    if val.__class__ is SymInt:
        return f"SymInt({val})"
    if isinstance(val, (bool, int, float)):
        return type(val).__name__
    raise GraphTextError(f"node metadata of type {type(val).__name__} has no text form")


def _source_comment(node: Node) -> str:
    source = node.meta.get("source")
    if not source:
        return ""
    return "  # " + str(source).replace("\n", " ")


def _symbols_of(graph: Graph) -> list:
    """The size symbols of ``graph``'s inputs, by name."""
    found: dict = {}
    for node in graph.nodes:
        if node.op != "placeholder":
            continue
        val = node.meta.get("val")
        sizes = (*val._shape, *val.stride()) if isinstance(val, Tensor) else (val,)
        for size in sizes:
            if size.__class__ is SymInt:
                for symbol in size.expr.symbols():
                    found[symbol.name] = symbol
    return [found[name] for name in sorted(found, key=lambda n: (len(n), n))]


def graph_to_text(graph: Graph) -> str:
    """The text of ``graph`` (as ``def forward``) and of its ``cond`` branches, after the
    declarations of its size symbols."""
    writer = _Writer()
    writer.block(graph, "forward")
    symbols = []
    for symbol in _symbols_of(graph):
        if symbol.unbacked or symbol.hint is None:
            raise GraphTextError(f"size symbol {symbol.name} ({symbol.origin}) has no value")
        upper = None if symbol.upper == INF else symbol.upper
        symbols.append(f"{symbol.name} = kiln.sym.symbol({symbol.hint}, {symbol.lower}, {upper})")
    head = "\n".join([_HEADER.format(FORMAT_VERSION), *symbols])
    return "\n\n".join([head, *writer.blocks]) + "\n"


# ------------------------------------------------------------------------------------ reading


class _Reader:
    def __init__(self, text: str):
        self.lines = text.splitlines()
        self.graphs: dict[str, GraphModule] = {}
        self.env = ShapeEnv()
        self.symbols: dict[str, SymInt] = {}

    def symbol(self, stmt: ast.Assign) -> None:
        """``s0 = kiln.sym.symbol(hint, lower, upper)``: a size symbol of the graphs."""
        value = stmt.value
        if not (len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
                and isinstance(value, ast.Call) and _dotted(value.func) == "kiln.sym.symbol"
                and len(value.args) == 3 and not value.keywords):  # fmt: skip
            raise self.fail(stmt, "expected 's<n> = kiln.sym.symbol(hint, lower, upper)'")
        name = stmt.targets[0].id
        hint, lower, upper = (self.literal(a, {}) for a in value.args)
        upper = INF if upper is None else upper
        numbers = (hint, lower, upper)
        if (not name.startswith("s") or not name[1:].isdigit() or name in self.symbols
                or not all(isinstance(v, int) and not isinstance(v, bool) for v in numbers)
                or not 0 <= lower <= hint <= upper):  # fmt: skip
            raise self.fail(stmt, f"bad size symbol {ast.unparse(stmt)!r}")
        symbol = self.env.create_symbol(hint, name, lower, upper)
        symbol.name = name
        self.symbols[name] = self.env.symint(symbol)

    def size(self, node: ast.AST) -> Any:
        """A size in an annotation: an int, or an expression over the declared symbols."""
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return node.value
        if isinstance(node, ast.Name) and node.id in self.symbols:
            return self.symbols[node.id]
        if isinstance(node, ast.BinOp) and type(node.op) in _EXPR_OPS:
            return _EXPR_OPS[type(node.op)](self.size(node.left), self.size(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -self.size(node.operand)
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id in ("max", "min") and len(node.args) == 2
                and not node.keywords):  # fmt: skip
            fn = sym_max if node.func.id == "max" else sym_min
            return fn(self.size(node.args[0]), self.size(node.args[1]))
        raise self.fail(node, f"{ast.unparse(node)!r} is not a size kiln writes")

    def sizes(self, node: ast.AST, what: str) -> tuple:
        if not isinstance(node, ast.List):
            raise self.fail(node, f"bad {what} {ast.unparse(node)!r}")
        values = tuple(self.size(e) for e in node.elts)
        if any(v.__class__ is int and v < 0 for v in values):
            raise self.fail(node, f"negative size in {ast.unparse(node)!r}")
        return values

    def fail(self, where: ast.AST | None, message: str) -> GraphTextError:
        line = getattr(where, "lineno", None)
        at = f"line {line}: " if line else ""
        return GraphTextError(f"graph text {at}{message}")

    # ---- literals and references
    def literal(self, node: ast.AST, env: dict) -> Any:
        if isinstance(node, ast.Constant):
            if (
                node.value is Ellipsis
                or isinstance(node.value, (bool, int, float, str))
                or (node.value is None)
            ):
                return node.value
            raise self.fail(node, f"constant {node.value!r} is not allowed")
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            inner = self.literal(node.operand, env)
            if isinstance(inner, (int, float)) and not isinstance(inner, bool):
                return -inner
            raise self.fail(node, "'-' applies to numbers only")
        if isinstance(node, ast.Name):
            if node.id in env:
                return env[node.id]
            if node.id in self.graphs:
                return self.graphs[node.id]
            raise self.fail(node, f"{node.id!r} is not an earlier node or a graph")
        if isinstance(node, ast.Tuple):
            return tuple(self.literal(e, env) for e in node.elts)
        if isinstance(node, ast.List):
            return [self.literal(e, env) for e in node.elts]
        if isinstance(node, ast.Attribute) and _dotted(node) is not None:
            dotted = _dotted(node)
            if dotted.startswith("kiln.") and dotted.count(".") == 1:
                name = dotted[5:]
                if name in _DTYPES:
                    return _DTYPES[name]
                if name in _NAMED_CONSTANTS:
                    return _NAMED_CONSTANTS[name]
            raise self.fail(node, f"unknown name {dotted}")
        if isinstance(node, ast.Call) and not node.keywords:
            callee = _dotted(node.func)
            args = [self.literal(a, env) for a in node.args]
            if callee == "float" and len(args) == 1 and args[0] in ("inf", "-inf", "nan"):
                return float(args[0])
            if callee == "slice" and len(args) == 3:
                return slice(*args)
            if callee == "complex" and len(args) == 2:
                return complex(*args)
            if callee == "kiln.device" and len(args) == 1 and isinstance(args[0], str):
                return Device(args[0])
        raise self.fail(node, f"{ast.unparse(node)!r} is not a value kiln writes")

    # ---- metadata annotations
    def meta(self, node: ast.AST) -> Any:
        if isinstance(node, ast.Constant) and node.value is None:
            return None
        if isinstance(node, ast.Name) and node.id in ("int", "float", "bool"):
            return {"int": int, "float": float, "bool": bool}[node.id]
        if isinstance(node, ast.Tuple):
            return tuple(self.meta(e) for e in node.elts)
        if (isinstance(node, ast.Call) and _dotted(node.func) == "SymInt" and len(node.args) == 1
                and not node.keywords):  # fmt: skip
            return self.size(node.args[0])
        if isinstance(node, ast.Call) and _dotted(node.func) == "Tensor" and len(node.args) == 2:
            dtype_node, shape_node = node.args
            if not isinstance(dtype_node, ast.Name) or dtype_node.id not in _DTYPES:
                raise self.fail(node, f"unknown dtype in {ast.unparse(node)}")
            shape = self.sizes(shape_node, "shape")
            keywords = {k.arg: k.value for k in node.keywords}
            if set(keywords) - {"stride", "device"}:
                raise self.fail(node, f"bad tensor annotation {ast.unparse(node)}")
            stride = contiguous_strides(shape)
            if "stride" in keywords:
                stride = self.sizes(keywords["stride"], "strides")
            if len(stride) != len(shape):
                raise self.fail(node, f"bad strides in {ast.unparse(node)}")
            device = Device(self.literal(keywords["device"], {}) if "device" in keywords
                            else "cpu")  # fmt: skip
            return make_fake(shape, _DTYPES[dtype_node.id], device, tuple(stride))
        raise self.fail(node, f"{ast.unparse(node)!r} is not a metadata annotation")

    # ---- statements
    def source_of(self, stmt: ast.stmt) -> str | None:
        if stmt.lineno != stmt.end_lineno:
            return None
        rest = self.lines[stmt.lineno - 1][stmt.end_col_offset :].strip()
        return rest[1:].strip() or None if rest.startswith("#") else None

    def function(self, fn: ast.FunctionDef) -> GraphModule:
        args = fn.args
        if (fn.decorator_list or fn.returns is not None or args.vararg or args.kwarg
                or args.kwonlyargs or args.defaults or args.posonlyargs):  # fmt: skip
            raise self.fail(fn, f"def {fn.name} has a form kiln does not write")
        graph = Graph()
        env: dict[str, Node] = {}
        for arg in args.args:
            if arg.annotation is None:
                raise self.fail(arg, f"input {arg.arg} has no metadata annotation")
            node = self.named(graph.placeholder(arg.arg), arg.arg, arg)
            node.meta["val"] = self.meta(arg.annotation)
            env[arg.arg] = node
        body = list(fn.body)
        if not body or not isinstance(body[-1], ast.Return) or body[-1].value is None:
            raise self.fail(fn, f"def {fn.name} must end with a return")
        for stmt in body[:-1]:
            if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)
                    and stmt.value is not None and stmt.simple):  # fmt: skip
                raise self.fail(stmt, "expected 'name: annotation = kiln.ops.<op>(...)'")
            name = stmt.target.id
            if name in env:
                raise self.fail(stmt, f"{name} is assigned twice")
            target, call_args = self.call(stmt.value, env)
            node = self.named(graph.call_function(target, call_args, name=name), name, stmt)
            node.meta["val"] = self.meta(stmt.annotation)
            source = self.source_of(stmt)
            if source:
                node.meta["source"] = source
            env[name] = node
        graph.output(self.literal(body[-1].value, env))
        return GraphModule({}, graph, class_name=fn.name)

    def named(self, node: Node, wanted: str, where: ast.AST) -> Node:
        if node.name != wanted:
            raise self.fail(where, f"{wanted!r} cannot be a node name")
        return node

    def call(self, value: ast.AST, env: dict) -> tuple:
        if isinstance(value, ast.Subscript):
            base = self.literal(value.value, env)
            index = self.literal(value.slice, env)
            if not isinstance(base, Node) or not isinstance(index, int):
                raise self.fail(value, "expected node[int]")
            return operator.getitem, (base, index)
        if not isinstance(value, ast.Call):
            raise self.fail(value, "expected an op call")
        callee = _dotted(value.func) or ""
        if callee.startswith("kiln.sym.") and callee[len("kiln.sym.") :] in _SYM_CALLS:
            if value.keywords:
                raise self.fail(value, f"{callee} takes no keyword arguments")
            return _SYM_CALLS[callee[len("kiln.sym.") :]], tuple(
                self.literal(a, env) for a in value.args
            )
        if not callee.startswith("kiln.ops.") or callee.count(".") != 2:
            raise self.fail(value, f"{ast.unparse(value.func)} is not a kiln op")
        op = OPS.get(callee[len("kiln.ops.") :])
        if op is None:
            raise self.fail(
                value, f"unknown op {callee} (written by a newer kiln, or the text was edited)"
            )
        args = [self.literal(a, env) for a in value.args]
        kwargs = {}
        for k in value.keywords:
            if k.arg is None:
                raise self.fail(value, "'**' arguments are not allowed")
            kwargs[k.arg] = self.literal(k.value, env)
        try:
            return op, op.bind(*args, **kwargs)
        except TypeError as e:
            raise self.fail(value, f"bad arguments for {callee}: {e}") from None


def _dotted(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


def text_to_graphs(text: str) -> GraphModule:
    """Parse graph text into the ``forward`` GraphModule (branches linked in), checked against
    the ops' meta functions. Raises ``GraphTextError`` for anything kiln would not write."""
    first = text.split("\n", 1)[0].strip()
    prefix = _HEADER.format("")
    if not first.startswith(prefix):
        raise GraphTextError("graph text does not start with the kiln.export graph header")
    version = first[len(prefix) :]
    if not version.isdigit():
        raise GraphTextError(f"graph text has an unreadable format version {version!r}")
    if int(version) > FORMAT_VERSION:
        raise GraphTextError(
            f"graph text has format {version}, newer than the {FORMAT_VERSION} this kiln "
            "reads: load it with a newer kiln"
        )
    try:
        module = ast.parse(text)
    except SyntaxError as e:
        raise GraphTextError(f"graph text line {e.lineno}: {e.msg}") from None
    reader = _Reader(text)
    forward = None
    for stmt in module.body:
        if isinstance(stmt, ast.Assign) and not reader.graphs and forward is None:
            reader.symbol(stmt)
            continue
        if not isinstance(stmt, ast.FunctionDef):
            raise reader.fail(stmt, "only 'def' blocks are allowed at the top level")
        if stmt.name in reader.graphs or forward is not None:
            raise reader.fail(stmt, f"def {stmt.name} comes after forward or twice")
        gm = reader.function(stmt)
        if stmt.name == "forward":
            forward = gm
        else:
            reader.graphs[stmt.name] = gm
    if forward is None:
        raise GraphTextError("graph text has no 'def forward'")
    check_metadata(forward.graph)
    return forward


class _MetaCheck(Interpreter):
    """Runs a graph on fakes, comparing each result with the node's recorded metadata."""

    def run_node(self, n: Node) -> Any:
        try:
            result = super().run_node(n)
        except GraphTextError:
            raise
        except Exception as e:  # an op called with arguments it does not take
            raise GraphTextError(
                f"graph text: node {n.name} ({_describe_target(n)}) fails on its inputs: "
                f"{type(e).__name__}: {e}"
            ) from None
        if n.op == "call_function":
            _compare(n, n.meta.get("val"), result)
        return result


def _compare(node: Node, recorded, computed) -> None:
    if recorded.__class__ is SymInt or computed.__class__ is SymInt:
        if hashable(recorded) != hashable(computed):
            raise GraphTextError(
                f"graph text: node {node.name} is annotated {_annotation(recorded)} but "
                f"{_describe_target(node)} computes {_annotation(computed)}"
            )
        return
    if isinstance(recorded, Tensor) or isinstance(computed, Tensor):
        same = (
            isinstance(recorded, Tensor)
            and isinstance(computed, Tensor)
            and hashable(tuple(recorded.shape)) == hashable(tuple(computed.shape))
            and recorded.dtype == computed.dtype
        )
        if not same:
            raise GraphTextError(
                f"graph text: node {node.name} is annotated {_annotation(recorded)} but "
                f"{_describe_target(node)} computes {_annotation(computed)}"
            )
        return
    if isinstance(recorded, (tuple, list)) and isinstance(computed, (tuple, list)):
        if len(recorded) != len(computed):
            raise GraphTextError(f"graph text: node {node.name} has the wrong number of results")
        for r, c in zip(recorded, computed):
            _compare(node, r, c)


def _describe_target(node: Node) -> str:
    if isinstance(node.target, Op):
        return f"kiln.ops.{node.target.name}"
    if node.target in _SYM_NAMES:
        return f"kiln.sym.{_SYM_NAMES[node.target]}"
    return "getitem" if node.target is operator.getitem else str(node.target)


def check_metadata(graph: Graph) -> None:
    """Raise ``GraphTextError`` unless every op gives the shapes and dtypes recorded for it."""
    inputs = [n.meta.get("val") for n in graph.nodes if n.op == "placeholder"]
    with FakeTensorMode():
        _MetaCheck(graph, garbage_collect_values=False).run(*inputs)
