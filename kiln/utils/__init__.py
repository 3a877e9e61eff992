"""``kiln.utils``: data loading (``kiln.utils.data``), hook handles (``kiln.utils.hooks``) and
activation checkpointing (``kiln.utils.checkpoint``)."""

from . import checkpoint, data, hooks

__all__ = ["checkpoint", "data", "hooks"]
