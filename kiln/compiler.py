"""``kiln.compiler``: PyTorch's spelling of the compiler controls (``kiln.compiler.reset()``).

``is_compiling`` lives in the runtime (library code asks it without importing the compiler);
this module imports the capture frontend only when one of its controls (``reset``, ``disable``, ``allow_in_graph``,
``graph_break``, ``mark_dynamic``...) is first used.
"""

from __future__ import annotations

from .runtime.compiling import CAPTURE_CONTROLS, is_compiling

__all__ = ["reset", "is_compiling"]

# the capture frontend's controls, imported when first used (see the module docstring)
_FROM_DECORATORS = frozenset(
    {"is_dynamo_compiling", *CAPTURE_CONTROLS, "cudagraph_mark_step_begin", "nested_compile_region"}
)
# from ``kiln.dynamo`` (its ``list_backends`` is PyTorch's: without the debug backends)
_FROM_DYNAMO = frozenset(
    {"list_backends", "register_backend", "set_stance", "assume_constant_result"}
)


def __dir__() -> list[str]:
    return sorted(set(globals()) | _FROM_DECORATORS | _FROM_DYNAMO)


def __getattr__(name: str):
    if name in _FROM_DECORATORS:
        from .dynamo import decorators

        return getattr(decorators, name)
    if name in _FROM_DYNAMO:
        from . import dynamo

        return getattr(dynamo, name)
    raise AttributeError(f"module 'kiln.compiler' has no attribute {name!r}")


def reset() -> None:
    """Forget every compiled entry (``kiln.dynamo.reset``)."""
    from .dynamo import reset as dynamo_reset

    dynamo_reset()
