"""``kiln.return_types``: the named tuples of multi-output ops (``kiln.max(x, 0)`` returns a
``kiln.return_types.max``), reachable by name so pickled results load again."""

from __future__ import annotations

from .ops.core.registry import RETURN_TYPES


def __getattr__(name: str) -> type:
    try:
        return RETURN_TYPES[name]
    except KeyError:
        raise AttributeError(f"module 'kiln.return_types' has no attribute {name!r}") from None


def __dir__() -> list[str]:
    return sorted(RETURN_TYPES)
