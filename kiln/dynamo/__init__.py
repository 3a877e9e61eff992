"""Bytecode capture: ``kiln.compile`` symbolically evaluates CPython bytecode into graphs.

``compile`` (also ``kiln.compile``) wraps a function or module; ``explain`` reports graphs and
graph breaks; ``reset`` forgets every compiled entry; ``disable``, ``allow_in_graph``,
``graph_break`` and ``mark_dynamic`` are PyTorch's capture controls (``decorators.py``). See DESIGN.md ("dynamo").
"""

from __future__ import annotations

from ..backends import list_backends, register_backend
from . import config
from .decorators import (
    allow_in_graph,
    cudagraph_mark_step_begin,
    disable,
    graph_break,
    is_compiling,
    mark_dynamic,
    mark_static,
    maybe_mark_dynamic,
    optimize,
)
from .eval_frame import OptimizedModule, compile, reset
from .exc import BreakReason, GraphBreakError
from .explain import ExplainOutput, explain
from .logging import set_logs

__all__ = [
    "compile",
    "reset",
    "explain",
    "ExplainOutput",
    "GraphBreakError",
    "BreakReason",
    "OptimizedModule",
    "config",
    "set_logs",
    "disable",
    "allow_in_graph",
    "graph_break",
    "mark_dynamic",
    "maybe_mark_dynamic",
    "mark_static",
    "optimize",
    "is_compiling",
    "list_backends",
    "register_backend",
    "cudagraph_mark_step_begin",
]
