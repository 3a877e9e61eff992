"""The ``"eager"`` backend: run the captured graph with the eager ops (no further compilation)."""

from __future__ import annotations

from collections.abc import Callable

from ..dynamo.backends import register_backend

__all__ = ["eager"]


@register_backend("eager")
def eager(gm, example_inputs: list) -> Callable:
    """Return the GraphModule itself: its generated ``forward`` calls each op eagerly."""
    return gm.forward
