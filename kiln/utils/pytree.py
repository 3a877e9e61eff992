"""Flatten nested Python containers of tensors into a list and back (tuples, lists, dicts,
namedtuples, and classes registered with ``register_pytree_node``, as PyTorch's pytree)."""

from __future__ import annotations

from typing import Any

__all__ = ["tree_flatten", "tree_unflatten", "TreeSpec", "register_pytree_node"]

# classes flattened by their own functions: cls -> (flatten(value) -> (children, context),
# unflatten(children, context) -> value)
_NODES: dict = {}


def register_pytree_node(cls: type, flatten_fn, unflatten_fn, **_options) -> None:
    """Make instances of ``cls`` containers (PyTorch's signature; its serialization options
    are accepted and unused)."""
    if cls in _NODES:
        raise ValueError(f"{cls} is already registered as pytree node.")
    _NODES[cls] = (flatten_fn, unflatten_fn)


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
        if self.kind == "custom":
            cls, inner = self.context
            try:
                hash(inner)
            except TypeError:
                inner = repr(inner)
            context = (cls, inner)
        return (self.kind, context, tuple(c.key() for c in self.children))


_LEAF = TreeSpec("leaf", None, [])


def tree_flatten(value: Any) -> tuple[list, TreeSpec]:
    leaves: list = []

    def rec(v):
        node = _NODES.get(type(v))
        if node is not None:
            children, context = node[0](v)
            return TreeSpec("custom", (type(v), context), [rec(x) for x in children])
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
        if s.kind == "custom":
            cls, context = s.context
            return _NODES[cls][1](items, context)
        return dict(zip(s.context, items))

    return rec(spec)
