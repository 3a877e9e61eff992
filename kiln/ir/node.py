"""``Node``: one operation of an ``ir.Graph`` (torch.fx's design, over kiln ops).

A node has an opcode (``placeholder``, ``call_function``, ``get_attr``, ``output``), a ``target``
(a kiln ``Op`` or any Python callable for ``call_function``; a string otherwise), ``args`` and
``kwargs`` that may nest tuples, lists, dicts and slices holding other nodes, a ``users`` map kept
in sync with those arguments, and a free-form ``meta`` dict (``"val"``: a data-less tensor with
the result's shape, dtype and strides; ``"source"``: the user's ``file:line``). Nodes form a
doubly linked list owned by their graph; ``prev``/``next`` walk it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..ops.core.registry import Op

__all__ = [
    "Node",
    "OPCODES",
    "map_arg",
    "map_aggregate",
    "has_side_effect",
    "register_side_effect",
    "format_target",
]

OPCODES = ("placeholder", "call_function", "get_attr", "output")

# Python callables (non-op targets) that must never be removed or merged by passes
_SIDE_EFFECT_FUNCTIONS: set = set()


def register_side_effect(fn: Callable) -> Callable:
    """Mark a Python callable used as a ``call_function`` target as having side effects."""
    _SIDE_EFFECT_FUNCTIONS.add(fn)
    return fn


def has_side_effect(target) -> bool:
    """True for targets that DCE must keep and CSE must not merge: mutation and randomness."""
    if isinstance(target, Op):
        return bool(target.inplace or target.kind == "random" or target.nondeterministic_seeded)
    return target in _SIDE_EFFECT_FUNCTIONS


def map_aggregate(a: Any, fn: Callable[[Any], Any]) -> Any:
    """Apply ``fn`` to every leaf of nested tuples (named too), lists, dicts and slices."""
    # exact types first: this runs for every argument of every node a compile makes or loads,
    # and most values are leaves or plain tuples
    kind = type(a)
    if kind in _LEAF_TYPES:
        return fn(a)
    if kind is tuple:
        return tuple([map_aggregate(x, fn) for x in a])
    if kind is list:
        return [map_aggregate(x, fn) for x in a]
    if kind is dict:
        return {k: map_aggregate(v, fn) for k, v in a.items()}
    if isinstance(a, tuple):
        mapped = [map_aggregate(x, fn) for x in a]
        return kind(*mapped) if hasattr(a, "_fields") else tuple(mapped)
    if isinstance(a, list):
        return [map_aggregate(x, fn) for x in a]
    if isinstance(a, dict):
        return {k: map_aggregate(v, fn) for k, v in a.items()}
    if isinstance(a, slice):
        return slice(
            map_aggregate(a.start, fn), map_aggregate(a.stop, fn), map_aggregate(a.step, fn)
        )
    return fn(a)


_NESTED = (tuple, list, dict, slice)


def _flat_inputs(values, inputs: dict) -> bool:
    """Add the nodes among ``values`` to ``inputs``; False (stop) at a nested container."""
    for v in values:
        kind = type(v)
        if kind is Node:
            inputs[v] = None
        elif kind not in _LEAF_TYPES and isinstance(v, _NESTED):
            return False
    return True


def map_arg(a: Any, fn: Callable[[Node], Any]) -> Any:
    """Apply ``fn`` to every ``Node`` inside a nested argument structure."""
    return map_aggregate(a, lambda x: fn(x) if isinstance(x, Node) else x)


def format_target(target) -> str:
    """A readable name for a node's target: ``kiln.ops.add``, ``operator.getitem``, ``x``."""
    if isinstance(target, str):
        return target
    if isinstance(target, Op):
        return repr(target)
    module = getattr(target, "__module__", None)
    name = getattr(target, "__qualname__", None) or getattr(target, "__name__", None)
    if name is None:
        return repr(target)
    if module in (None, "builtins"):
        return name
    if module == "_operator":
        module = "operator"
    return f"{module}.{name}"


def _format_arg(a: Any) -> str:
    if isinstance(a, Node):
        return "%" + a.name
    if isinstance(a, tuple):
        inner = ", ".join(_format_arg(x) for x in a)
        return f"({inner},)" if len(a) == 1 else f"({inner})"
    if isinstance(a, list):
        return "[" + ", ".join(_format_arg(x) for x in a) + "]"
    if isinstance(a, dict):
        return "{" + ", ".join(f"{k!r}: {_format_arg(v)}" for k, v in a.items()) + "}"
    return repr(a)


# leaves ``map_aggregate`` hands to ``fn`` without further checks (``Node`` added below)
_LEAF_TYPES: set = {int, float, bool, str, type(None)}


class Node:
    """One operation in a ``Graph`` (see the module docstring)."""

    def __init__(
        self,
        graph,
        name: str,
        op: str,
        target: Any,
        args: tuple,
        kwargs: dict,
    ):
        self.graph = graph
        self.name = name
        self.op = op
        self.target = target
        self.users: dict[Node, None] = {}
        self.meta: dict[str, Any] = {}
        self._input_nodes: dict[Node, None] = {}
        self._args: tuple = ()
        self._kwargs: dict = {}
        self._prev = self
        self._next = self
        self._erased = False
        self._update_args_kwargs(args, kwargs)

    # ---------------------------------------------------------------- linked list
    @property
    def next(self) -> Node:
        return self._next

    @property
    def prev(self) -> Node:
        return self._prev

    def prepend(self, x: Node) -> None:
        """Move ``x`` (new or already in this graph) to just before this node."""
        if x is self:
            raise ValueError(f"cannot insert node {self.name} before itself")
        x._remove_from_list()
        p = self._prev
        p._next, x._prev = x, p
        x._next, self._prev = self, x
        self.graph._edits += 1

    def append(self, x: Node) -> None:
        """Move ``x`` to just after this node."""
        self._next.prepend(x)

    def _remove_from_list(self) -> None:
        p, n = self._prev, self._next
        p._next, n._prev = n, p
        self.graph._edits += 1
        # keep our own links: an iteration that is standing on this node can still move on

    # ---------------------------------------------------------------- arguments and users
    @property
    def args(self) -> tuple:
        return self._args

    @args.setter
    def args(self, value: tuple) -> None:
        self._update_args_kwargs(value, self._kwargs)

    @property
    def kwargs(self) -> dict:
        return self._kwargs

    @kwargs.setter
    def kwargs(self, value: dict) -> None:
        self._update_args_kwargs(self._args, value)

    @property
    def all_input_nodes(self) -> list[Node]:
        """The distinct nodes this node reads, in order of first appearance."""
        return list(self._input_nodes)

    def _update_args_kwargs(self, args, kwargs) -> None:
        if not isinstance(args, tuple):
            if not isinstance(args, list):
                raise TypeError(
                    f"node {self.name}: args must be a tuple, got {type(args).__name__}"
                )
            args = tuple(args)
        if not isinstance(kwargs, dict):
            raise TypeError(f"node {self.name}: kwargs must be a dict, got {type(kwargs).__name__}")
        for old in self._input_nodes:
            old.users.pop(self, None)
        inputs: dict[Node, None] = {}
        # most nodes read flat arguments (nodes and plain values): collect the nodes in one pass
        # and keep the tuple (immutable, so sharing it is safe); nested containers are copied
        if _flat_inputs(args, inputs) and _flat_inputs(kwargs.values(), inputs):
            self._args = args
            self._kwargs = dict(kwargs)
        else:
            inputs.clear()

            def collect(n: Node) -> Node:
                inputs.setdefault(n)
                return n

            self._args = map_arg(args, collect)
            self._kwargs = map_arg(kwargs, collect)
        self._input_nodes = inputs
        for n in inputs:
            n.users.setdefault(self)

    def update_arg(self, idx: int, arg: Any) -> None:
        """Replace positional argument ``idx``."""
        args = list(self._args)
        args[idx] = arg
        self.args = tuple(args)

    def update_kwarg(self, key: str, arg: Any) -> None:
        """Replace (or add) keyword argument ``key``."""
        self.kwargs = {**self._kwargs, key: arg}

    def replace_input_with(self, old: Node, new: Any) -> None:
        """Make this node read ``new`` wherever it read ``old``."""

        def swap(n: Node):
            return new if n is old else n

        self._update_args_kwargs(map_arg(self._args, swap), map_arg(self._kwargs, swap))

    def replace_all_uses_with(
        self, replace_with: Any, delete_user_cb: Callable[[Node], bool] | None = None
    ) -> list[Node]:
        """Make every user (for which ``delete_user_cb`` is true) read ``replace_with`` instead.

        Returns the users that changed; this node is left without them (erase it if dead).
        """
        changed = []
        for user in list(self.users):
            if user is replace_with or (delete_user_cb is not None and not delete_user_cb(user)):
                continue
            user.replace_input_with(self, replace_with)
            changed.append(user)
        return changed

    # ---------------------------------------------------------------- properties of the op
    def is_impure(self) -> bool:
        """Placeholders, the output and side-effecting calls survive dead-code elimination."""
        if self.op in ("placeholder", "output"):
            return True
        if self.op == "call_function":
            return has_side_effect(self.target)
        return False

    @property
    def stack_trace(self) -> str | None:
        """The user's ``file:line`` this node came from (``meta["source"]``), if known."""
        return self.meta.get("source")

    # ---------------------------------------------------------------- printing
    def format_node(self) -> str:
        """One line in torch.fx's style: ``%add : [num_users=1] = call_function[...](...)``."""
        if self.op == "output":
            return f"return {_format_arg(self._args[0]) if self._args else 'None'}"
        head = f"%{self.name} : [num_users={len(self.users)}] = {self.op}[target={format_target(self.target)}]"
        if self.op == "placeholder":
            return head + (f"(default={self._args[0]!r})" if self._args else "")
        if self.op == "get_attr":
            return head
        return f"{head}(args = {_format_arg(self._args)}, kwargs = {_format_arg(self._kwargs)})"

    def __repr__(self) -> str:
        return self.name


_LEAF_TYPES.add(Node)
