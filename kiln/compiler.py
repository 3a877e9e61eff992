"""``kiln.compiler``: PyTorch's spelling of the compiler controls (``kiln.compiler.reset()``).

Low layers (``kiln.optim``) import this module to ask ``is_compiling()``, so it imports the
capture frontend only when ``reset`` is called.
"""

from __future__ import annotations

__all__ = ["reset", "is_compiling"]


def is_compiling() -> bool:
    """True while ``kiln.compile`` captures the calling code, False when it runs eagerly: code
    that would read a tensor's value for speed in eager mode (``.item()``) keeps tensors when
    captured. The capture frontend answers True itself; called for real, this returns False."""
    return False


def reset() -> None:
    """Forget every compiled entry (``kiln.dynamo.reset``)."""
    from .dynamo import reset as dynamo_reset

    dynamo_reset()
