"""``kiln.utils``: data loading (``kiln.utils.data``), hook handles (``kiln.utils.hooks``),
activation checkpointing (``kiln.utils.checkpoint``) and DLPack interop (``kiln.utils.dlpack``)."""

from . import checkpoint, data, dlpack, hooks

__all__ = ["checkpoint", "data", "dlpack", "hooks"]
