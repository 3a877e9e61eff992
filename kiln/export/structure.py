"""How an exported program's call is laid out: the nesting of its inputs and outputs.

The graph takes and returns flat lists of tensors; the user's function took ``(args, kwargs)``
and returned any nesting of tuples, lists, dicts and namedtuples. ``CallLayout`` keeps both
nestings (``kiln.utils.pytree`` specs) and what each leaf is: a tensor (its place in the flat
list) or a constant the program was specialized to. It converts to and from JSON for saved
files (namedtuples come back as namedtuple classes of the same name and fields; no code runs).
"""

from __future__ import annotations

import collections
import math
from dataclasses import dataclass
from typing import Any

from ..runtime.tensor import Tensor
from ..utils.pytree import TreeSpec, tree_flatten, tree_unflatten

__all__ = ["CallLayout", "TENSOR", "CONSTANT"]

TENSOR, CONSTANT = "tensor", "constant"


@dataclass
class CallLayout:
    in_spec: TreeSpec
    in_leaves: list  # ("tensor", user input index) | ("constant", value)
    out_spec: TreeSpec
    out_leaves: list  # ("tensor", user output index) | ("constant", value)

    def __post_init__(self):
        # the common call: positional tensors only, in graph order, one tensor or a flat tuple
        # returned; such calls skip the tree walks (the layout is checked the same way)
        self._positional = (
            self.in_spec.key() == ("tuple", None, (("tuple", None, ((),) * len(self.in_leaves)),
                                                   ("dict", (), ())))
            and self.in_leaves == [(TENSOR, i) for i in range(len(self.in_leaves))]
        )  # fmt: skip
        every_tensor = self.out_leaves == [(TENSOR, i) for i in range(len(self.out_leaves))]
        self._single_output = every_tensor and self.out_spec.kind == "leaf"
        self._flat_output = every_tensor and self.out_spec.key() == (
            "tuple", None, ((),) * len(self.out_leaves)
        )  # fmt: skip

    def flatten_inputs(self, args: tuple, kwargs: dict, names: list[str]) -> list:
        """The call's tensors in graph order; constants and structure must be as exported."""
        if self._positional and not kwargs and len(args) == len(self.in_leaves):
            for a in args:  # a plain loop: this is the per-call path of every package call
                if not isinstance(a, Tensor):
                    break
            else:
                return list(args)
        leaves, spec = tree_flatten((tuple(args), dict(kwargs)))
        if spec.key() != self.in_spec.key():
            raise TypeError(
                "the inputs do not have the structure the program was exported with: expected "
                f"{_describe(self.in_spec)}, got {_describe(spec)}"
            )
        tensors = [None] * sum(1 for kind, _ in self.in_leaves if kind == TENSOR)
        for leaf, (kind, value) in zip(leaves, self.in_leaves):
            if kind == TENSOR:
                tensors[value] = leaf
            elif not _same_constant(leaf, value):
                raise RuntimeError(
                    f"the program was exported for the constant input {value!r} (it is baked "
                    f"into the graph), got {leaf!r}"
                )
        return tensors

    def unflatten_outputs(self, tensors: list) -> Any:
        if self._single_output:
            return tensors[0]
        if self._flat_output:
            return tuple(tensors)
        leaves = [tensors[v] if k == TENSOR else v for k, v in self.out_leaves]
        return tree_unflatten(leaves, self.out_spec)

    def to_json(self) -> dict:
        return {
            "in_spec": _spec_to_json(self.in_spec),
            "in_leaves": [_leaf_to_json(leaf) for leaf in self.in_leaves],
            "out_spec": _spec_to_json(self.out_spec),
            "out_leaves": [_leaf_to_json(leaf) for leaf in self.out_leaves],
        }

    @classmethod
    def from_json(cls, data: dict) -> CallLayout:
        return cls(
            _spec_from_json(data["in_spec"]),
            [_leaf_from_json(leaf) for leaf in data["in_leaves"]],
            _spec_from_json(data["out_spec"]),
            [_leaf_from_json(leaf) for leaf in data["out_leaves"]],
        )


def _same_constant(a, b) -> bool:
    if isinstance(a, Tensor) or isinstance(b, Tensor):
        return False
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return type(a) is type(b) and a == b


def _describe(spec: TreeSpec) -> str:
    if spec.kind == "leaf":
        return "*"
    inner = ", ".join(_describe(c) for c in spec.children)
    if spec.kind == "dict":
        inner = ", ".join(f"{k!r}: {_describe(c)}" for k, c in zip(spec.context, spec.children))
        return "{" + inner + "}"
    if spec.kind == "list":
        return f"[{inner}]"
    name = spec.context.__name__ if spec.kind == "namedtuple" else ""
    return f"{name}({inner})"


_JSON_SCALARS = (bool, int, float, str, type(None))


def _leaf_to_json(leaf) -> list:
    kind, value = leaf
    if kind == CONSTANT:
        if not isinstance(value, _JSON_SCALARS):
            raise TypeError(
                f"cannot save a program specialized to the constant {value!r} "
                f"({type(value).__name__}): only None, bool, int, float and str constants have "
                "a text form"
            )
        if isinstance(value, float) and not math.isfinite(value):
            return [kind, {"float": repr(value)}]
    return [kind, value]


def _leaf_from_json(data) -> tuple:
    kind, value = data
    if kind not in (TENSOR, CONSTANT):
        raise ValueError(f"unknown leaf kind {kind!r}")
    if kind == TENSOR and not isinstance(value, int):
        raise ValueError(f"tensor leaf index must be an int, got {value!r}")
    if isinstance(value, dict):
        value = float(value["float"])
    elif kind == CONSTANT and not isinstance(value, _JSON_SCALARS):
        raise ValueError(f"constant leaf of type {type(value).__name__}")
    return (kind, value)


def _spec_to_json(spec: TreeSpec) -> dict:
    out: dict = {"kind": spec.kind}
    if spec.kind == "dict":
        if not all(isinstance(k, (str, int)) for k in spec.context):
            raise TypeError(f"cannot save dict keys {spec.context!r}: only str and int keys")
        out["keys"] = list(spec.context)
    elif spec.kind == "namedtuple":
        out["name"] = spec.context.__name__
        out["fields"] = list(spec.context._fields)
    if spec.kind != "leaf":
        out["children"] = [_spec_to_json(c) for c in spec.children]
    return out


def _spec_from_json(data: dict) -> TreeSpec:
    kind = data["kind"]
    if kind == "leaf":
        return TreeSpec("leaf", None, [])
    if kind not in ("tuple", "list", "dict", "namedtuple"):
        raise ValueError(f"unknown structure kind {kind!r}")
    children = [_spec_from_json(c) for c in data["children"]]
    context = None
    if kind == "dict":
        context = list(data["keys"])
    elif kind == "namedtuple":
        context = collections.namedtuple(data["name"], data["fields"])
    return TreeSpec(kind, context, children)
