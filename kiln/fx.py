"""``kiln.fx``: the few ``torch.fx`` names programs use without tracing.

Model code marks leaf functions with ``torch.fx.wrap`` at import time, and checks
``isinstance(x, torch.fx.Proxy)``; both work here (``wrap`` returns what it is given; nothing is
a ``Proxy``). kiln does not offer FX's tracer: ``symbolic_trace`` raises and names what kiln
has instead (``kiln.compile`` captures bytecode; ``kiln.ir.trace`` makes a readable graph).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["wrap", "symbolic_trace", "Proxy"]


def wrap(fn_or_name: Callable | str) -> Callable | str:
    """``torch.fx.wrap``: a leaf function for FX tracing; kiln's capture needs no mark."""
    return fn_or_name


class Proxy:
    """``torch.fx.Proxy``: the type of FX's traced values. kiln never makes one, so model code
    asking ``isinstance(x, torch.fx.Proxy)`` takes its ordinary path."""

    def __init__(self, *args: Any, **kwargs: Any):
        raise NotImplementedError("kiln.fx has no tracer: kiln never makes an fx.Proxy")


def symbolic_trace(root: Any, concrete_args: dict | None = None) -> Any:
    """Refused: kiln has no FX tracer."""
    raise NotImplementedError(
        "kiln.fx.symbolic_trace is not implemented: kiln has no FX tracer. Use kiln.compile "
        "(bytecode capture, as torch.compile) to compile, or kiln.ir.trace(fn, *example_inputs) "
        "for a readable graph of a function"
    )
