"""Bytecode capture: ``kiln.compile`` symbolically evaluates CPython bytecode into graphs.

``compile`` (also ``kiln.compile``) wraps a function or module; ``explain`` reports graphs and
graph breaks; ``reset`` forgets every compiled entry; ``disable``, ``allow_in_graph``,
``graph_break`` and ``mark_dynamic`` are PyTorch's capture controls (``decorators.py``). See DESIGN.md ("dynamo").
"""

from __future__ import annotations

import sys as _sys

from ..runtime.compiling import CAPTURE_CONTROLS
from ..runtime.logs import set_logs
from . import config, counters, testing  # noqa: F401 - testing: torch._dynamo.testing's
from .backends import register_backend
from .decorators import (  # noqa: F401 - CAPTURE_CONTROLS in __all__ names six of these
    allow_in_graph,
    assume_constant_result,
    cudagraph_mark_step_begin,
    disable,
    graph_break,
    is_compiling,
    list_backends,
    mark_dynamic,
    mark_static,
    maybe_mark_dynamic,
    optimize,
)
from .eval_frame import OptimizedModule, compile, reset
from .exc import BreakReason, GraphBreakError
from .explain import ExplainOutput, explain
from .stance import set_stance

# PyTorch code imports these as ``torch._dynamo.<name>`` (``import torch._dynamo.exc``): that
# must find these very modules, not load second copies whose classes kiln never raises
for _name in ("config", "exc", "testing", "decorators", "eval_frame", "explain"):
    _sys.modules.setdefault(f"kiln._dynamo.{_name}", _sys.modules[f"{__name__}.{_name}"])
del _name

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
    "set_stance",
    *CAPTURE_CONTROLS,
    "optimize",
    "is_compiling",
    "list_backends",
    "register_backend",
    "assume_constant_result",
    "cudagraph_mark_step_begin",
]
