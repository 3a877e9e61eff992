"""``torch.utils.model_zoo``: ``load_url``, PyTorch's older name for
``hub.load_state_dict_from_url``, which model files from before ``torch.hub`` still import.

``kiln.hub`` reads checkpoints with ``kiln.load``, which lives above this layer, so the facade
installs the loader here when ``kiln`` is imported (as it installs ``add_graph``'s tracer).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["load_url", "set_url_loader"]

_loader: list[Callable | None] = [None]


def set_url_loader(loader: Callable | None) -> None:
    """Install the function ``load_url`` calls (``kiln.hub.load_state_dict_from_url``)."""
    _loader[0] = loader


def load_url(url: str, *args: Any, **kwargs: Any) -> Any:
    """The checkpoint at ``url``, downloaded once into the hub cache (see
    ``kiln.hub.load_state_dict_from_url`` for the arguments)."""
    loader = _loader[0]
    if loader is None:
        raise RuntimeError("load_url needs kiln.hub, which is registered when `kiln` is imported")
    return loader(url, *args, **kwargs)
