"""Bytecode capture: ``kiln.compile`` symbolically evaluates CPython bytecode into graphs.

``compile`` (also ``kiln.compile``) wraps a function or module; ``explain`` reports graphs and
graph breaks; ``reset`` forgets every compiled entry. See DESIGN.md ("dynamo").
"""

from __future__ import annotations

from . import config
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
]
