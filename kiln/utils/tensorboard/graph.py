"""A captured kiln graph as the ``GraphDef`` TensorBoard's graph dashboard draws.

Nodes are laid out as PyTorch's ``add_graph`` lays out a traced model: inputs under ``input/``,
the result under ``output/`` (both of op ``IO Node``), parameters and buffers as
``prim::GetAttr`` nodes and each operation as ``aten::<op>``, all under the model's class name
so the dashboard groups them; edges follow the graph's data flow, and ``_output_shapes`` holds
each value's shape. The graph is read duck-typed (``op``, ``name``, ``target``, ``args``,
``all_input_nodes``, ``meta["val"]``), so this layer never imports the tracer.
"""

from __future__ import annotations

from typing import Any

from tensorboard.compat.proto.attr_value_pb2 import AttrValue
from tensorboard.compat.proto.config_pb2 import RunMetadata
from tensorboard.compat.proto.graph_pb2 import GraphDef
from tensorboard.compat.proto.node_def_pb2 import NodeDef
from tensorboard.compat.proto.step_stats_pb2 import DeviceStepStats, StepStats
from tensorboard.compat.proto.tensor_shape_pb2 import TensorShapeProto
from tensorboard.compat.proto.versions_pb2 import VersionDef

from ...runtime.tensor import Tensor

__all__ = ["graph_def", "run_metadata"]


def _shapes(value: Any) -> AttrValue | None:
    values = value if isinstance(value, (tuple, list)) else (value,)
    if not values or not all(isinstance(v, Tensor) for v in values):
        return None
    shapes = [TensorShapeProto(dim=[TensorShapeProto.Dim(size=d) for d in v.shape]) for v in values]
    return AttrValue(list=AttrValue.ListValue(shape=shapes))


def _op_name(target: Any) -> str:
    name = getattr(target, "name", None) or getattr(target, "__name__", None) or str(target)
    return f"aten::{name}"


def _constants(node: Any) -> str:
    """The node's arguments that are not graph values, as PyTorch's ``attr`` string shows them."""
    shown = [repr(a) for a in node.args if not hasattr(a, "all_input_nodes")]
    shown += [f"{k}={v!r}" for k, v in node.kwargs.items() if not hasattr(v, "all_input_nodes")]
    return "{" + ", ".join(shown) + "}"


def graph_def(graph_module: Any, scope: str) -> GraphDef:
    """The ``GraphDef`` of ``graph_module.graph``, with operations under ``scope``."""
    names: dict[Any, str] = {}
    nodes = []
    for node in graph_module.graph.nodes:
        if node.op == "placeholder":
            name, op, attr = f"input/{node.name}", "IO Node", ""
        elif node.op == "output":
            name, op, attr = "output/output", "IO Node", ""
        elif node.op == "get_attr":
            name, op, attr = (
                f"{scope}/{node.target}",
                "prim::GetAttr",
                f"{{ name : {node.target} }}",
            )
        else:
            name, op, attr = f"{scope}/{node.name}", _op_name(node.target), _constants(node)
        names[node] = name
        attrs = {"attr": AttrValue(s=attr.encode("utf-8"))}
        if node.op == "output":
            shapes = _shapes([i.meta.get("val") for i in node.all_input_nodes])
        else:
            shapes = _shapes(node.meta.get("val"))
        if shapes is not None:
            attrs["_output_shapes"] = shapes
        inputs = [names[i] for i in node.all_input_nodes]
        nodes.append(NodeDef(name=name, op=op, input=inputs, attr=attrs))
    return GraphDef(node=nodes, versions=VersionDef(producer=22))


def run_metadata() -> bytes:
    """The run metadata PyTorch stores beside a graph (the dashboard's device list)."""
    stats = StepStats(dev_stats=[DeviceStepStats(device="/device:CPU:0")])
    return RunMetadata(step_stats=stats).SerializeToString()
