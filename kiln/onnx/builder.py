"""Building an ONNX graph from an exported kiln graph, node by node.

``GraphBuilder`` walks a kiln graph in order: placeholders are bound to ONNX names (graph inputs
or initializers), each call runs the op's translation (``translations.py``), which emits ONNX
nodes through ``emit`` and returns the names holding the op's results. Constants become
initializers; every emitted node carries the kiln node's user source as its doc string, so a
problem found later in the ONNX file still points at the user's line. A branch graph (``cond``)
is built by a child builder that reads its operands from the enclosing graph by name.

Symbolic sizes (a program exported with dynamic axes): each size symbol is bound to a
``Shape`` slice of the graph input it was read from (``bind_symbols``); a size expression
(``s0``, ``3*s0``) becomes ONNX integer arithmetic on those (``size``, ``sizes``, made once per
expression), so reshapes, expands, ranges and slices hold for every size, and the graph's
dims are ``dim_param`` names taken from the dynamic axes (``onnx_dims``).
"""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

from ..ir import Graph, Node
from ..ir.sym_nodes import sym_stride
from ..ops.core.registry import Op
from ..runtime import dtypes as dt
from ..runtime.sym_expr import Expr, FloorDiv, Max, Min, Mod
from ..runtime.symbolic import SymInt
from ..runtime.tensor import Tensor

__all__ = ["GraphBuilder", "OnnxExportError", "onnx_type"]


class OnnxExportError(RuntimeError):
    """The model has something the ONNX exporter cannot express (named, with the user's line)."""


def onnx_type(dtype) -> int:
    from onnx import TensorProto

    table = {
        dt.float32: TensorProto.FLOAT, dt.float64: TensorProto.DOUBLE,
        dt.float16: TensorProto.FLOAT16, dt.bfloat16: TensorProto.BFLOAT16,
        dt.int64: TensorProto.INT64, dt.int32: TensorProto.INT32, dt.int16: TensorProto.INT16,
        dt.int8: TensorProto.INT8, dt.uint8: TensorProto.UINT8, dt.bool_: TensorProto.BOOL,
    }  # fmt: skip
    if dtype not in table:
        raise OnnxExportError(f"dtype {dtype} has no ONNX tensor type")
    return table[dtype]


def where(node: Node) -> str:
    source = node.meta.get("source")
    return f"node {node.name} ({_target_name(node)})" + (f" at {source}" if source else "")


def _target_name(node: Node) -> str:
    target = node.target
    return (
        f"kiln.ops.{target.name}"
        if isinstance(target, Op)
        else getattr(target, "__name__", str(target))
    )


class GraphBuilder:
    """The ONNX nodes, initializers and names of one graph (the main graph or a branch)."""

    def __init__(self, translations: dict, opset: int = 17, parent=None):
        self.translations = translations
        self.opset = opset if parent is None else parent.opset
        self.parent = parent
        self.nodes: list = []
        self.initializers: list = []
        self.values: dict[Node, Any] = {}
        self._taken: set[str] = set() if parent is None else parent._taken
        self.current: Node | None = None
        # symbolic sizes: ONNX 1-element int64 values by expression (shared with branches),
        # and each symbol's dim_param name
        self._sizes: dict = {} if parent is None else parent._sizes
        self.dim_params: dict = {} if parent is None else parent.dim_params

    # ---------------------------------------------------------------- names and constants
    def fresh(self, base: str) -> str:
        base = base or "v"
        name, n = base, 1
        while name in self._taken:
            name = f"{base}_{n}"
            n += 1
        self._taken.add(name)
        return name

    def reserve(self, name: str) -> str:
        if name in self._taken:
            raise OnnxExportError(f"the ONNX name {name!r} is used twice")
        self._taken.add(name)
        return name

    def constant(self, value, dtype, base: str = "const") -> str:
        """An initializer holding ``value`` (a Python number, list or numpy array) as ``dtype``."""
        from onnx import numpy_helper

        array = np.asarray(value, dtype=dtype.np if isinstance(dtype, dt.dtype) else dtype)
        name = self.fresh(base)
        self.initializers.append(numpy_helper.from_array(array, name))
        return name

    def int64s(self, values, base: str = "ints") -> str:
        return self.constant(np.asarray(list(values), dtype=np.int64), np.int64, base)

    def tensor_initializer(self, tensor: Tensor, name: str) -> str:
        from onnx import numpy_helper

        array = np.ascontiguousarray(tensor.detach().numpy())
        self.initializers.append(numpy_helper.from_array(array, self.reserve(name)))
        return name

    # ---------------------------------------------------------------- nodes
    def emit(self, op_type: str, inputs: list, outputs: int = 1, **attrs) -> list[str]:
        """Add an ONNX node; returns its output names ("" inputs are omitted optional ones)."""
        from onnx import helper

        base = self.current.name if self.current is not None else op_type.lower()
        names = [self.fresh(base if outputs == 1 else f"{base}_{i}") for i in range(outputs)]
        node = helper.make_node(op_type, inputs, names, name=self.fresh(f"{op_type}_{base}"),
                                **{k: v for k, v in attrs.items() if v is not None})  # fmt: skip
        if self.current is not None and self.current.meta.get("source"):
            node.doc_string = f"{self.current.meta['source']} ({_target_name(self.current)})"
        self.nodes.append(node)
        return names

    def one(self, op_type: str, inputs: list, **attrs) -> str:
        return self.emit(op_type, inputs, 1, **attrs)[0]

    def cast(self, name: str, from_dtype, to_dtype) -> str:
        if from_dtype == to_dtype:
            return name
        return self.one("Cast", [name], to=onnx_type(to_dtype))

    # ---------------------------------------------------------------- symbolic sizes
    def bind_symbols(self, name: str, val: Tensor) -> None:
        """Read each size symbol of graph input ``name`` (its fake ``val``) from its shape."""
        for d, size in enumerate(val.shape):
            symbol = size.expr.as_symbol() if size.__class__ is SymInt else None
            if symbol is not None and size.expr not in self._sizes:
                self._sizes[size.expr] = self.one("Shape", [name], start=d, end=d + 1)
                self.dim_params.setdefault(symbol, symbol.name)

    def onnx_dims(self, shape) -> list:
        """A shape for a value info: ints, and ``dim_param`` strings for symbolic sizes."""
        return [size if size.__class__ is not SymInt
                else size.expr.code(lambda s: self.dim_params.get(s, s.name))
                for size in shape]  # fmt: skip

    def size(self, value) -> str:
        """A size (an int or a SymInt) as a 1-element int64 ONNX value."""
        if value.__class__ is not SymInt:
            return self.int64s([int(value)], "size")
        return self._expr(value.expr)

    def sizes(self, values) -> str:
        """A list of sizes (ints and SymInts) as a 1-D int64 ONNX value."""
        values = list(values)
        if not any(v.__class__ is SymInt for v in values):
            return self.int64s(values, "shape")
        parts, run = [], []
        for v in values:
            if v.__class__ is SymInt:
                if run:
                    parts.append(self.int64s(run, "shape"))
                    run = []
                parts.append(self.size(v))
            else:
                run.append(int(v))
        if run:
            parts.append(self.int64s(run, "shape"))
        return self.one("Concat", parts, axis=0) if len(parts) > 1 else parts[0]

    def scalar(self, value) -> str:
        """A size as a 0-d int64 ONNX value (Range's inputs, a size used as a number)."""
        return self.one("Squeeze", [self.size(value), self.int64s([0], "axes")])

    def _expr(self, expr: Expr) -> str:
        name = self._sizes.get(expr)
        if name is not None:
            return name
        if not expr.terms:
            return self.int64s([expr.const], "size")
        total = None
        for monomial, coeff in sorted(expr.terms.items(), key=lambda t: t[0]):
            term = None
            for atom in monomial:
                part = self._atom(atom)
                term = part if term is None else self.one("Mul", [term, part])
            if coeff != 1:
                term = self.one("Mul", [term, self.int64s([coeff], "coeff")])
            total = term if total is None else self.one("Add", [total, term])
        if expr.const:
            total = self.one("Add", [total, self.int64s([expr.const], "size")])
        self._sizes[expr] = total
        return total

    def _atom(self, atom) -> str:
        key = Expr({(atom,): 1}, 0)
        name = self._sizes.get(key)
        if name is not None:
            return name
        kind = {FloorDiv: "Div", Mod: "Mod", Max: "Max", Min: "Min"}.get(atom.__class__)
        if kind is None:
            raise OnnxExportError(f"{where(self.current)}: size {atom} has no ONNX form")
        # sizes are non-negative and divisors positive: ONNX's truncating Div is floor division
        name = self.one(kind, [self._expr(atom.a), self._expr(atom.b)])
        self._sizes[key] = name
        return name

    # ---------------------------------------------------------------- walking a kiln graph
    def value(self, a: Any) -> Any:
        """The ONNX name(s) of a kiln argument (nodes) or the argument itself (constants)."""
        if isinstance(a, Node):
            if a not in self.values:
                raise OnnxExportError(f"{where(a)} has no ONNX value")
            return self.values[a]
        if isinstance(a, (list, tuple)):
            return type(a)(self.value(x) for x in a)
        return a

    def run(self, graph: Graph) -> Any:
        """Translate every call of ``graph`` (placeholders already bound); returns the output
        value's names."""
        for node in graph.nodes:
            if node.op == "placeholder":
                if node not in self.values and node.users:
                    raise OnnxExportError(f"graph input {node.name} is not bound")
                continue
            if node.op == "output":
                return self.value(node.args[0])
            self.current = node
            if not isinstance(node.target, Op) and node.target is not operator.getitem:
                # a size computation (``sym_size``, ``operator.mul`` ...): its value's expression
                val = node.meta.get("val")
                if node.target is sym_stride or (val.__class__ is not SymInt
                                                 and not isinstance(val, int)):  # fmt: skip
                    raise OnnxExportError(f"{where(node)} has no ONNX translation")
                self.values[node] = ("size", val)
                continue
            if node.target is operator.getitem:
                parts = self.value(node.args[0])
                if not isinstance(parts, tuple) or parts[node.args[1]] is None:
                    raise OnnxExportError(
                        f"{where(node)}: result {node.args[1]} of {node.args[0].name} is not "
                        "exported to ONNX"
                    )
                self.values[node] = parts[node.args[1]]
                continue
            translate = self.translations.get(node.target.name)
            if translate is None:
                raise OnnxExportError(f"{where(node)} has no ONNX translation")
            self.values[node] = translate(self, node, *node.args)
        return None
