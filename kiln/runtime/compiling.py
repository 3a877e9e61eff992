"""``is_compiling``: the one thing eager code asks about the compiler.

Library code (optimizers, distributions, transformer layers) skips value-dependent shortcuts such
as ``.item()`` while its code is being captured. It asks here, in the lowest layer, so it never
imports the compiler; the capture frontend recognises this function and answers True itself.
"""

from __future__ import annotations

__all__ = ["is_compiling", "mark_compile_region"]

# The decorator-style capture controls PyTorch exports from both ``torch._dynamo`` and
# ``torch.compiler``: ``kiln.dynamo`` re-exports them from ``dynamo/decorators.py``, and
# ``kiln.compiler`` resolves them lazily, so it names them without importing the frontend.
CAPTURE_CONTROLS = (
    "disable",
    "allow_in_graph",
    "graph_break",
    "mark_dynamic",
    "maybe_mark_dynamic",
    "mark_static",
)


def is_compiling() -> bool:
    """True while ``kiln.compile`` captures the calling code, False when it runs eagerly: code
    that would read a tensor's value for speed in eager mode (``.item()``) keeps tensors when
    captured. The capture frontend answers True itself; called for real, this returns False."""
    return False


def mark_compile_region(fn, min_graph_ops: int = 0):
    """Mark ``fn`` so that capture records each call of it as a region (``nested_compile_region``
    in the compiler): a graph holding several equal calls compiles one of them and runs it for
    all. ``min_graph_ops``: only in graphs of at least that many ops (library code uses this
    where cutting a small graph would cost more per call than its compile saves)."""
    fn._kiln_compile_region = min_graph_ops
    return fn
