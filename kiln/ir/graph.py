"""``Graph``: an ordered, doubly linked list of ``Node``s with one ``output`` (torch.fx's shape).

Nodes are created at an insertion point (the end by default; ``inserting_before`` /
``inserting_after`` move it), get unique readable names (``add``, ``add_1``; never a Python
keyword or builtin, so generated code can use them as variables), and keep their ``users`` in
sync with their arguments. Iterating ``graph.nodes`` tolerates erasing the current node.
Analyses and rewrites live in ``passes``; source generation in ``codegen``.
"""

from __future__ import annotations

import builtins
import contextlib
import copy
import keyword
import re
from collections.abc import Callable, Iterator
from typing import Any

from ..ops.core.registry import Op
from .node import OPCODES, Node, map_arg

__all__ = ["Graph", "NO_DEFAULT"]


class _NoDefault:
    """Marks a placeholder without a default value."""

    def __repr__(self) -> str:
        return "NO_DEFAULT"


NO_DEFAULT = _NoDefault()

_RESERVED = set(keyword.kwlist) | set(dir(builtins)) | {"self", "kiln", "operator"}
_SUFFIX = re.compile(r"^(.*)_(\d+)$")


class _Namespace:
    """Hands out unique identifiers: ``add``, ``add_1``, ``add_2``..."""

    def __init__(self):
        self._used: set[str] = set()
        self._next_suffix: dict[str, int] = {}

    def create_name(self, candidate: str) -> str:
        if candidate.isidentifier():  # most names: nothing to replace (skips the regex)
            name = candidate
        else:
            name = re.sub(r"\W", "_", candidate) or "_unnamed"
            if name[0].isdigit():
                name = "_" + name
        if name not in self._used and name not in _RESERVED:
            self._used.add(name)
            return name
        match = _SUFFIX.match(name)
        base = match.group(1) if match else name
        n = self._next_suffix.get(base, 1)
        while f"{base}_{n}" in self._used or f"{base}_{n}" in _RESERVED:
            n += 1
        self._next_suffix[base] = n + 1
        name = f"{base}_{n}"
        self._used.add(name)
        return name

    def __contains__(self, name: str) -> bool:
        return name in self._used


class _NodeList:
    """A live view of a graph's nodes, in order (or reversed)."""

    def __init__(self, graph: Graph, reverse: bool = False):
        self._graph = graph
        self._reverse = reverse

    def __len__(self) -> int:
        return self._graph._len

    def __iter__(self) -> Iterator[Node]:
        root = self._graph._root
        step = "_prev" if self._reverse else "_next"
        cur = getattr(root, step)
        while cur is not root:
            nxt = getattr(cur, step)
            if not cur._erased:
                yield cur
            cur = nxt

    def __reversed__(self) -> Iterator[Node]:
        return iter(_NodeList(self._graph, not self._reverse))

    def __getitem__(self, idx: int) -> Node:
        return list(self)[idx]

    def __repr__(self) -> str:
        return repr(list(self))


def _name_for_target(op: str, target: Any) -> str:
    if isinstance(target, Op):
        return target.name
    if isinstance(target, str):
        return target.replace(".", "_")
    return getattr(target, "__name__", None) or op


class Graph:
    """An FX-like graph of kiln ops (see the module docstring)."""

    def __init__(self, owning_module=None):
        # node-list changes that may move the end of the inputs (insertions other than a
        # non-input appended at the end, moves, removals) so far
        self._edits = 0
        # the last input placeholder() put at the end of the inputs, and ``_edits`` after that:
        # while nothing else changed the list, the next input goes right after it
        self._last_input: tuple[Node, int] | None = None
        self._root = Node(self, "", "root", "", (), {})
        self._namespace = _Namespace()
        self._len = 0
        self._insert: Callable[[Node], None] = self._root.prepend
        self.owning_module = owning_module

    # ---------------------------------------------------------------- node list
    @property
    def nodes(self) -> _NodeList:
        return _NodeList(self)

    def last_node(self) -> Node | None:
        """The node at the end of the list now (None: empty); with ``nodes_after``, what a
        stretch of tracing added."""
        last = self._root._prev
        return None if last is self._root else last

    def nodes_after(self, node: Node | None) -> Iterator[Node]:
        """The live nodes after ``node`` (all of them for None), in order."""
        cur = (self._root if node is None else node)._next
        while cur is not self._root:
            if not cur._erased:
                yield cur
            cur = cur._next

    def find_nodes(self, *, op: str, target: Any = None) -> list[Node]:
        """Nodes with opcode ``op`` (and ``target``, when given), in order."""
        return [n for n in self.nodes if n.op == op and (target is None or n.target is target)]

    @property
    def output_node(self) -> Node | None:
        last = self._root._prev
        return last if last is not self._root and last.op == "output" else None

    # ---------------------------------------------------------------- creating nodes
    def create_node(
        self,
        op: str,
        target: Any,
        args: tuple | None = None,
        kwargs: dict | None = None,
        name: str | None = None,
    ) -> Node:
        """Make a node at the insertion point; ``name`` is a wish made unique if taken."""
        if op not in OPCODES:
            raise ValueError(f"unknown node opcode {op!r}; expected one of {OPCODES}")
        if op == "call_function" and not callable(target):
            raise TypeError(f"call_function target must be callable, got {target!r}")
        if op in ("placeholder", "get_attr") and not isinstance(target, str):
            raise TypeError(f"{op} target must be a string, got {target!r}")
        unique = self._namespace.create_name(name or _name_for_target(op, target))
        node = Node(self, unique, op, target, () if args is None else args, kwargs or {})
        edits = self._edits
        self._insert(node)
        if op != "placeholder" and self._insert == self._root.prepend:
            # appended after every node: the inputs still end where they did (tracing adds a
            # parameter's input between ops; a scan per input was quadratic in the inputs)
            self._edits = edits
        self._len += 1
        return node

    def placeholder(self, name: str, default: Any = NO_DEFAULT) -> Node:
        """A graph input. Unless an insertion point is set, it goes after the other inputs."""
        args = () if default is NO_DEFAULT else (default,)
        if self._insert == self._root.prepend:
            remembered = self._last_input
            if remembered is not None and remembered[1] == self._edits:
                last = remembered[0]
            else:  # the list changed since: find the end of the inputs again
                last = self._root
                for n in self.nodes:
                    if n.op != "placeholder":
                        break
                    last = n
            with self.inserting_after(last):
                node = self.create_node("placeholder", name, args, name=name)
            self._last_input = (node, self._edits)
            return node
        return self.create_node("placeholder", name, args, name=name)

    def get_attr(self, qualified_name: str) -> Node:
        """Read an attribute of the owning module (``"fc1.weight"``)."""
        return self.create_node("get_attr", qualified_name)

    def call_function(
        self,
        target: Callable,
        args: tuple = (),
        kwargs: dict | None = None,
        name: str | None = None,
    ) -> Node:
        """Call a kiln op (or any Python callable) on values and other nodes."""
        return self.create_node("call_function", target, args, kwargs, name)

    def output(self, value: Any) -> Node:
        """The graph's result: a node, or nested tuples/lists/dicts of nodes and constants."""
        return self.create_node("output", "output", (value,))

    @contextlib.contextmanager
    def inserting_before(self, node: Node | None = None):
        """New nodes go just before ``node`` (the start of the graph when None)."""
        anchor = node if node is not None else self._root._next
        saved = self._insert
        self._insert = anchor.prepend
        try:
            yield
        finally:
            self._insert = saved

    @contextlib.contextmanager
    def inserting_after(self, node: Node | None = None):
        """New nodes go after ``node`` (the end when None), in the order they are made."""
        last = [node if node is not None else self._root._prev]

        def insert(x: Node) -> None:
            last[0].append(x)
            last[0] = x

        saved = self._insert
        self._insert = insert
        try:
            yield
        finally:
            self._insert = saved

    # ---------------------------------------------------------------- editing
    def erase_node(self, node: Node) -> None:
        """Remove a node nothing reads any more."""
        if node.graph is not self:
            raise RuntimeError(f"node {node.name} belongs to another graph")
        if node._erased:
            raise RuntimeError(f"node {node.name} was already erased")
        if node.users:
            raise RuntimeError(
                f"cannot erase node {node.name}: it still has {len(node.users)} user(s) "
                f"{list(node.users)}"
            )
        node._remove_from_list()
        node._erased = True
        node._update_args_kwargs((), {})
        self._len -= 1

    def node_copy(self, node: Node, arg_transform: Callable[[Node], Any] = lambda n: n) -> Node:
        """Copy a node (of any graph) here, mapping its input nodes through ``arg_transform``."""
        args = map_arg(node.args, arg_transform)
        kwargs = map_arg(node.kwargs, arg_transform)
        if node.op == "placeholder":
            new = self.placeholder(node.target, args[0] if args else NO_DEFAULT)
        else:
            new = self.create_node(node.op, node.target, args, kwargs, node.name)
        new.meta = copy.copy(node.meta)
        return new

    def graph_copy(self, other: Graph, val_map: dict, return_output_node: bool = False):
        """Copy ``other``'s nodes here (``val_map`` maps its nodes to ours and is filled in).

        Returns the copied output value (and the original output node if asked), or None.
        """
        for node in other.nodes:
            if node in val_map:
                continue
            if node.op == "output":
                value = map_arg(node.args[0], lambda n: val_map[n])
                return (value, node) if return_output_node else value
            val_map[node] = self.node_copy(node, lambda n: val_map[n])
        return None

    def __deepcopy__(self, memo) -> Graph:
        new = Graph()
        memo[id(self)] = new
        result = new.graph_copy(self, {}, return_output_node=True)
        if result is not None:
            value, old_output = result
            new.output(value).meta = copy.copy(old_output.meta)
        return new

    # ---------------------------------------------------------------- analyses and output
    def eliminate_dead_code(self, is_impure_node: Callable[[Node], bool] | None = None) -> bool:
        """Erase nodes whose results nobody reads, keeping side effects; True if any went."""
        from .passes import remove_dead_nodes

        return remove_dead_nodes(self, is_impure_node)

    def lint(self) -> None:
        """Check every structural invariant; raise ``GraphLintError`` naming the first broken one."""
        from .passes import lint

        lint(self)

    def python_code(self, root_name: str = "self") -> str:
        """Readable Python source of ``forward(self, <inputs>)`` calling ``kiln.ops.*``."""
        from .codegen import generate_code

        return generate_code(self, root_name).src

    def __str__(self) -> str:
        inputs = ", ".join(n.name for n in self.nodes if n.op == "placeholder")
        lines = [f"graph({inputs}):"]
        lines += ["    " + n.format_node() for n in self.nodes]
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"<kiln.ir.Graph with {self._len} nodes>"
