"""Flatten nested Python containers of tensors into a list and back (tuples, lists, dicts, namedtuples)."""

from __future__ import annotations

from typing import Any

__all__ = ["tree_flatten", "tree_unflatten", "TreeSpec"]


class TreeSpec:
    """The shape of a nested value: container kinds and keys, with leaves as slots."""

    __slots__ = ("kind", "context", "children")

    def __init__(self, kind: str, context: Any, children: list):
        self.kind = kind  # "leaf", "tuple", "list", "dict", "namedtuple"
        self.context = context
        self.children = children

    def __repr__(self) -> str:
        return f"TreeSpec({self.kind}, {self.context!r}, {self.children!r})"

    def key(self) -> tuple:
        """A hashable form: equal for values with the same structure (and dict keys)."""
        if self.kind == "leaf":
            return ()
        context = tuple(self.context) if self.kind == "dict" else self.context
        return (self.kind, context, tuple(c.key() for c in self.children))


_LEAF = TreeSpec("leaf", None, [])


def tree_flatten(value: Any) -> tuple[list, TreeSpec]:
    leaves: list = []

    def rec(v):
        if isinstance(v, tuple) and hasattr(v, "_fields"):
            return TreeSpec("namedtuple", type(v), [rec(x) for x in v])
        if isinstance(v, tuple):
            return TreeSpec("tuple", None, [rec(x) for x in v])
        if isinstance(v, list):
            return TreeSpec("list", None, [rec(x) for x in v])
        if isinstance(v, dict):
            keys = list(v)
            return TreeSpec("dict", keys, [rec(v[k]) for k in keys])
        leaves.append(v)
        return _LEAF

    spec = rec(value)
    return leaves, spec


def tree_unflatten(leaves: list, spec: TreeSpec) -> Any:
    it = iter(leaves)

    def rec(s: TreeSpec):
        if s.kind == "leaf":
            return next(it)
        items = [rec(c) for c in s.children]
        if s.kind == "tuple":
            return tuple(items)
        if s.kind == "namedtuple":
            return s.context(*items)
        if s.kind == "list":
            return items
        return dict(zip(s.context, items))

    return rec(spec)
