"""``kiln.compiler``: PyTorch's spelling of the compiler controls (``kiln.compiler.reset()``)."""

from __future__ import annotations

from .dynamo import reset

__all__ = ["reset"]
