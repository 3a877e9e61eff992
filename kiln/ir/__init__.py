"""``kiln.ir``: the FX-like graph every compiler stage speaks.

A ``Graph`` is a linked list of ``Node``s (placeholder, call_function, get_attr, output) whose
targets are kiln ops; a ``GraphModule`` runs it as generated, readable Python; ``trace`` records
any kiln callable into one (make_fx style) through ``TracingMode``; ``Interpreter`` runs a graph
node by node; ``passes`` holds dead-code and common-subexpression elimination and ``lint``.
"""

from __future__ import annotations

from .codegen import PythonCode, generate_code
from .dot import graph_to_dot
from .graph import NO_DEFAULT, Graph
from .graph_module import GraphModule
from .interpreter import Interpreter, call_target
from .node import OPCODES, Node, has_side_effect, map_aggregate, map_arg, register_side_effect
from .passes import (
    GraphLintError,
    common_subexpression_elimination,
    dead_code_elimination,
    fold_constants,
    lint,
)
from .printing import describe_val, graph_table, print_graph
from .source import node_source, user_source
from .tracer import TracingMode, trace

__all__ = [
    "Graph",
    "Node",
    "GraphModule",
    "Interpreter",
    "TracingMode",
    "trace",
    "NO_DEFAULT",
    "OPCODES",
    "PythonCode",
    "generate_code",
    "graph_to_dot",
    "call_target",
    "map_arg",
    "map_aggregate",
    "has_side_effect",
    "register_side_effect",
    "GraphLintError",
    "lint",
    "dead_code_elimination",
    "common_subexpression_elimination",
    "fold_constants",
    "describe_val",
    "graph_table",
    "print_graph",
    "node_source",
    "user_source",
]
