"""Building an ONNX graph from an exported kiln graph, node by node.

``GraphBuilder`` walks a kiln graph in order: placeholders are bound to ONNX names (graph inputs
or initializers), each call runs the op's translation (``translations.py``), which emits ONNX
nodes through ``emit`` and returns the names holding the op's results. Constants become
initializers; every emitted node carries the kiln node's user source as its doc string, so a
problem found later in the ONNX file still points at the user's line. A branch graph (``cond``)
is built by a child builder that reads its operands from the enclosing graph by name.
"""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

from ..ir import Graph, Node
from ..ops.core.registry import Op
from ..runtime import dtypes as dt
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
