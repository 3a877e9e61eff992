"""``kiln.utils.tensorboard``: PyTorch's ``SummaryWriter``, writing event files TensorBoard reads.

The protocol buffers and the event-file writer come from the ``tensorboard`` package (the
``tensorboard`` extra), imported when ``SummaryWriter`` is first asked for, so ``import kiln``
never needs it. ``tracing`` holds the hook through which ``add_graph`` captures a model: the
graph tracer lives in a higher layer (``kiln.ir``), which registers it there.
"""

from __future__ import annotations

from typing import Any

from . import tracing

__all__ = ["SummaryWriter", "FileWriter", "tracing"]


def __getattr__(name: str) -> Any:
    if name in ("SummaryWriter", "FileWriter"):
        try:
            from . import writer
        except ModuleNotFoundError as e:
            if e.name is None or not e.name.startswith("tensorboard"):
                raise
            raise ImportError(
                "kiln.utils.tensorboard needs the tensorboard package (2.14 or newer): install "
                "it, or kiln with the 'tensorboard' extra"
            ) from e
        return getattr(writer, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
