"""Flatten nested Python containers of tensors into a list and back (tuples, lists, dicts,
namedtuples, and classes registered with ``register_pytree_node``, as PyTorch's pytree).

PyTorch's ``OrderedDict``, ``defaultdict`` and ``deque`` nodes come back as themselves: they
flatten as a dict or a list whose ``container`` (the class, with a ``defaultdict``'s factory or a
``deque``'s ``maxlen``) rebuilds them, so consumers that read ``kind`` see a dict or a list."""

from __future__ import annotations

from collections import OrderedDict, defaultdict, deque
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

    __slots__ = ("kind", "context", "children", "container")

    def __init__(self, kind: str, context: Any, children: list, container: tuple | None = None):
        self.kind = kind  # "leaf", "tuple", "list", "dict", "namedtuple", "custom"
        self.context = context
        self.children = children
        # a dict or list of another class: (OrderedDict,), (defaultdict, factory), (deque, maxlen)
        self.container = container

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
        key = (self.kind, context, tuple(c.key() for c in self.children))
        return key if self.container is None else (*key, self.container)


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
        if isinstance(v, deque):
            return TreeSpec("list", None, [rec(x) for x in v], (deque, v.maxlen))
        if isinstance(v, dict):
            keys = list(v)
            return TreeSpec("dict", keys, [rec(v[k]) for k in keys], _dict_container(v))
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
            return items if s.container is None else deque(items, s.container[1])
        if s.kind == "custom":
            cls, context = s.context
            return _NODES[cls][1](items, context)
        pairs = zip(s.context, items)
        if s.container is None:
            return dict(pairs)
        if s.container[0] is defaultdict:
            return defaultdict(s.container[1], pairs)
        return OrderedDict(pairs)

    return rec(spec)


def _dict_container(value: dict) -> tuple | None:
    """How to rebuild ``value``'s class: None for a plain dict (and other subclasses, rebuilt
    as dicts as before), PyTorch's two dict nodes as themselves."""
    if isinstance(value, defaultdict):
        return (defaultdict, value.default_factory)
    if isinstance(value, OrderedDict):
        return (OrderedDict,)
    return None
