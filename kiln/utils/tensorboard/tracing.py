"""The hook through which ``SummaryWriter.add_graph`` captures a model as a graph.

``kiln.utils`` sits below the graph tracer (``kiln.ir``), so the facade registers the tracer here
at import time, as the device layer's kernel provider is registered. The tracer takes
``(model, *example_inputs)`` and returns a graph module whose ``graph.nodes`` carry ``op``,
``name``, ``target``, ``args`` and ``meta["val"]``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["set_graph_tracer", "trace_model"]

_tracer: list[Callable | None] = [None]


def set_graph_tracer(tracer: Callable | None) -> None:
    """Install the function ``add_graph`` uses to capture a model (``None`` removes it)."""
    _tracer[0] = tracer


def trace_model(model: Callable, example_inputs: tuple) -> Any:
    """``model``'s graph, traced on ``example_inputs`` without computing anything."""
    tracer = _tracer[0]
    if tracer is None:
        raise RuntimeError(
            "add_graph needs kiln's graph tracer, which is registered when `kiln` is imported"
        )
    return tracer(model, *example_inputs)
