"""``kiln.compiler``: PyTorch's spelling of the compiler controls (``kiln.compiler.reset()``).

Low layers (``kiln.optim``) import this module to ask ``is_compiling()``, so it imports the
capture frontend only when one of its controls (``reset``, ``disable``, ``allow_in_graph``,
``graph_break``, ``mark_dynamic``...) is first used.
"""

from __future__ import annotations

__all__ = ["reset", "is_compiling"]

# the capture frontend's controls, imported when first used (see the module docstring)
_FROM_DECORATORS = frozenset(
    {
        "is_dynamo_compiling",
        "disable",
        "allow_in_graph",
        "graph_break",
        "mark_dynamic",
        "maybe_mark_dynamic",
        "mark_static",
        "cudagraph_mark_step_begin",
    }
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


def is_compiling() -> bool:
    """True while ``kiln.compile`` captures the calling code, False when it runs eagerly: code
    that would read a tensor's value for speed in eager mode (``.item()``) keeps tensors when
    captured. The capture frontend answers True itself; called for real, this returns False."""
    return False


def reset() -> None:
    """Forget every compiled entry (``kiln.dynamo.reset``)."""
    from .dynamo import reset as dynamo_reset

    dynamo_reset()
