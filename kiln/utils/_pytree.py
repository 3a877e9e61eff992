"""``torch.utils._pytree`` as code outside PyTorch calls it: flatten, unflatten and map over
nested containers, and register classes as containers (HF's ``ModelOutput`` does)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .pytree import TreeSpec, register_pytree_node, tree_flatten, tree_unflatten

__all__ = [
    "TreeSpec",
    "register_pytree_node",
    "tree_flatten",
    "tree_unflatten",
    "tree_leaves",
    "tree_structure",
    "tree_map",
    "tree_map_only",
    "tree_all",
    "tree_any",
]


def tree_leaves(tree: Any) -> list:
    return tree_flatten(tree)[0]


def tree_structure(tree: Any) -> TreeSpec:
    return tree_flatten(tree)[1]


def tree_map(fn: Callable, tree: Any, *rests: Any) -> Any:
    """``fn`` over the leaves (of several trees of one structure, leaf by leaf)."""
    leaves, spec = tree_flatten(tree)
    others = [tree_flatten(r)[0] for r in rests]
    return tree_unflatten([fn(*xs) for xs in zip(leaves, *others, strict=True)], spec)


def tree_map_only(types, fn: Callable, tree: Any) -> Any:
    """``fn`` over the leaves that are instances of ``types``; others stay as they are."""
    return tree_map(lambda x: fn(x) if isinstance(x, types) else x, tree)


def tree_all(pred: Callable, tree: Any) -> bool:
    return all(pred(x) for x in tree_leaves(tree))


def tree_any(pred: Callable, tree: Any) -> bool:
    return any(pred(x) for x in tree_leaves(tree))
