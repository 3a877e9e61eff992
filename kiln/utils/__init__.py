"""``kiln.utils``: data loading (``kiln.utils.data``), hook handles (``kiln.utils.hooks``),
activation checkpointing (``kiln.utils.checkpoint``), DLPack interop (``kiln.utils.dlpack``) and
the safetensors reader and writer (``kiln.utils.safetensors``, public as
``kiln.serialization.safetensors``)."""

from . import _pytree, checkpoint, data, dlpack, hooks

__all__ = ["_pytree", "checkpoint", "data", "dlpack", "hooks"]
