"""Graph passes: plain functions that check or rewrite a graph in place and return it.

``lint`` checks every structural invariant a pass may rely on; ``dead_code_elimination`` and
``common_subexpression_elimination`` never remove or merge nodes with side effects (in-place ops,
random ops, registered side-effecting callables); ``fold_constants`` evaluates pure ops whose
inputs are all constants of a ``GraphModule``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..autograd.grad_mode import no_grad
from ..ops.core.registry import Op
from ..runtime.device import device as Device
from ..runtime.tensor import Tensor
from .graph import Graph
from .node import OPCODES, Node, map_arg

__all__ = [
    "GraphLintError",
    "lint",
    "remove_dead_nodes",
    "dead_code_elimination",
    "common_subexpression_elimination",
    "fold_constants",
]


class GraphLintError(RuntimeError):
    """A graph breaks one of its structural invariants."""


def _graph_of(gm_or_graph) -> Graph:
    return gm_or_graph if isinstance(gm_or_graph, Graph) else gm_or_graph.graph


def _recompile(gm_or_graph) -> None:
    if not isinstance(gm_or_graph, Graph):
        gm_or_graph.recompile()


# ------------------------------------------------------------------------------------- lint


def _ordered_nodes(graph: Graph) -> list[Node]:
    """Walk the linked list checking its links (a broken list must not loop forever)."""
    root = graph._root
    out = []
    prev = root
    cur = root._next
    while cur is not root:
        if len(out) > graph._len:
            raise GraphLintError(
                f"the node list is longer than the {graph._len} nodes the graph holds (a cycle?)"
            )
        if cur._prev is not prev:
            raise GraphLintError(f"broken node list: {cur.name}.prev is not {prev.name or 'root'}")
        out.append(cur)
        prev, cur = cur, cur._next
    if root._prev is not prev:
        raise GraphLintError("broken node list: the last node does not link back to the root")
    if len(out) != graph._len:
        raise GraphLintError(f"graph counts {graph._len} nodes but its list holds {len(out)}")
    return out


def _check_node(graph: Graph, n: Node, names: set, defined: set) -> None:
    if n.graph is not graph:
        raise GraphLintError(f"node {n.name} is in the list of a graph it does not belong to")
    if n._erased:
        raise GraphLintError(f"erased node {n.name} is still in the node list")
    if n.op not in OPCODES:
        raise GraphLintError(f"node {n.name} has unknown opcode {n.op!r}")
    if not n.name.isidentifier():
        raise GraphLintError(f"node name {n.name!r} is not a Python identifier")
    if n.name in names:
        raise GraphLintError(f"node name {n.name!r} is used twice")
    names.add(n.name)
    if n.op in ("placeholder", "get_attr") and not isinstance(n.target, str):
        raise GraphLintError(f"{n.op} node {n.name} has a non-string target {n.target!r}")
    if n.op == "call_function" and not callable(n.target):
        raise GraphLintError(f"call_function node {n.name} has a non-callable target {n.target!r}")
    inputs: dict[Node, None] = {}
    map_arg((n.args, n.kwargs), lambda a: inputs.setdefault(a))
    for a in inputs:
        if a.graph is not graph:
            raise GraphLintError(f"node {n.name} reads {a.name}, a node of another graph")
        if a._erased:
            raise GraphLintError(f"node {n.name} reads {a.name}, which was erased")
        if a not in defined:
            raise GraphLintError(
                f"node {n.name} reads {a.name} before it is defined (not in topological order)"
            )
        if n not in a.users:
            raise GraphLintError(f"{a.name}.users is missing {n.name}, which reads it")
    if list(inputs) != list(n._input_nodes):
        raise GraphLintError(f"node {n.name}: recorded input nodes disagree with its arguments")
    for u in n.users:
        if u._erased:
            raise GraphLintError(f"{n.name}.users lists {u.name}, which was erased")
        if u.graph is not graph or n not in u._input_nodes:
            raise GraphLintError(f"{n.name}.users lists {u.name}, which does not read it")


def lint(gm_or_graph) -> Graph | Any:
    """Check the graph's invariants; raise ``GraphLintError`` naming the first broken one.

    Checked: linked-list integrity and node count, unique identifier names, valid opcodes and
    targets, placeholders first, exactly one output and it is last, arguments are live nodes of
    this graph defined earlier (topological order), ``users`` consistent both ways, and get_attr
    targets present on the owning module.
    """
    graph = _graph_of(gm_or_graph)
    nodes = _ordered_nodes(graph)
    names: set = set()
    defined: set = set()
    seen_other = None
    for n in nodes:
        _check_node(graph, n, names, defined)
        if n.op == "placeholder" and seen_other is not None:
            raise GraphLintError(f"placeholder {n.name} comes after non-input node {seen_other}")
        if n.op != "placeholder":
            seen_other = n.name
        defined.add(n)
    outputs = [n for n in nodes if n.op == "output"]
    if len(outputs) != 1:
        raise GraphLintError(f"a graph needs exactly one output node, found {len(outputs)}")
    if nodes[-1] is not outputs[0]:
        raise GraphLintError(f"output node {outputs[0].name} is not the last node")
    if outputs[0].users:
        raise GraphLintError("the output node has users")
    module = graph.owning_module
    if module is not None:
        for n in nodes:
            if n.op == "get_attr":
                try:
                    fetch_attr(module, n.target)
                except AttributeError:
                    raise GraphLintError(
                        f"get_attr node {n.name}: the module has no attribute {n.target!r}"
                    ) from None
    return gm_or_graph


def fetch_attr(module, qualified_name: str):
    """``module.a.b.c`` from ``"a.b.c"``, with a message naming the missing part."""
    obj = module
    for i, part in enumerate(qualified_name.split(".")):
        if not hasattr(obj, part):
            done = ".".join(qualified_name.split(".")[:i]) or type(module).__name__
            raise AttributeError(f"{done} has no attribute {part!r} (from {qualified_name!r})")
        obj = getattr(obj, part)
    return obj


# ------------------------------------------------------------------------------------- DCE


def remove_dead_nodes(graph: Graph, is_impure_node: Callable[[Node], bool] | None = None) -> bool:
    """Erase unread side-effect-free nodes, last to first; True if the graph changed."""
    impure = is_impure_node or Node.is_impure
    changed = False
    for node in reversed(graph.nodes):
        if not node.users and not impure(node):
            graph.erase_node(node)
            changed = True
    return changed


def dead_code_elimination(gm_or_graph):
    """Remove dead nodes from a Graph or GraphModule (recompiled); returns its argument."""
    if remove_dead_nodes(_graph_of(gm_or_graph)):
        _recompile(gm_or_graph)
    return gm_or_graph


# ------------------------------------------------------------------------------------- CSE


def _key(a: Any) -> Any:
    """A hashable, exact description of an argument (floats by repr: -0.0 and nan differ)."""
    if isinstance(a, Node):
        return a
    if a is None or isinstance(a, (bool, int, str)):
        return (type(a), a)
    if isinstance(a, float):
        return (float, repr(a))
    if isinstance(a, tuple):
        return ("tuple", tuple(_key(x) for x in a))
    if isinstance(a, list):
        return ("list", tuple(_key(x) for x in a))
    if isinstance(a, dict):
        return ("dict", tuple((k, _key(v)) for k, v in a.items()))
    if isinstance(a, slice):
        return ("slice", _key(a.start), _key(a.stop), _key(a.step))
    if isinstance(a, Device):
        return ("device", str(a))
    return ("object", id(a))  # dtypes and ops are singletons; anything else only equals itself


def _mutates(node: Node) -> bool:
    t = node.target
    return node.op == "call_function" and (
        (isinstance(t, Op) and t.inplace) or (not isinstance(t, Op) and node.is_impure())
    )


def common_subexpression_elimination(gm_or_graph, keep=frozenset()):
    """Merge nodes computing the same op on the same inputs (keeping the first).

    Random and in-place nodes are never merged; a node that mutates memory also ends every
    earlier match, since a value read before the write may differ after it. Nodes in ``keep``
    are never merged into an earlier twin (callers that need distinct tensors for them).
    """
    graph = _graph_of(gm_or_graph)
    seen: dict = {}
    changed = False
    for node in graph.nodes:
        if node.op not in ("call_function", "get_attr"):
            continue
        if _mutates(node):
            seen.clear()
            continue
        if node.is_impure():
            continue
        key = (node.op, _key(node.target), _key(node.args), _key(node.kwargs))
        first = seen.get(key)
        if first is None:
            seen[key] = node
            continue
        if node in keep:
            continue
        node.replace_all_uses_with(first)
        graph.erase_node(node)
        changed = True
    if changed:
        _recompile(gm_or_graph)
    return gm_or_graph


# ------------------------------------------------------------------------------------- folding


def fold_constants(gm):
    """Evaluate pure ops whose tensor inputs are all get_attr constants; store the results.

    Ops without any node input (``full``, ``arange``) are left alone: folding them would only
    trade a cheap op for a stored tensor.
    """
    from .interpreter import call_target

    graph = gm.graph
    values: dict[Node, Any] = {}
    folded: list[Node] = []
    with no_grad():
        for node in graph.nodes:
            if node.op == "get_attr":
                values[node] = fetch_attr(gm, node.target)
            elif (
                node.op == "call_function"
                and not node.is_impure()
                and node.all_input_nodes
                and all(i in values for i in node.all_input_nodes)
            ):
                args = map_arg(node.args, values.__getitem__)
                kwargs = map_arg(node.kwargs, values.__getitem__)
                values[node] = call_target(node.target, args, kwargs)
                folded.append(node)
    count = 0
    for node in folded:
        value = values[node]
        if not isinstance(value, Tensor) or all(u in values for u in node.users):
            continue
        name = f"_folded_constant{count}"
        while hasattr(gm, name):
            count += 1
            name = f"_folded_constant{count}"
        count += 1
        gm.add_attribute(name, value)
        with graph.inserting_before(node):
            const = graph.get_attr(name)
        const.meta = dict(node.meta)
        node.replace_all_uses_with(const, lambda u: u not in values)
    remove_dead_nodes(graph)
    gm.recompile()
    return gm
