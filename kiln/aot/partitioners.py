"""Split a joint forward+backward graph into a forward graph and a backward graph.

The joint graph's placeholders are the primals then the tangents (``meta["aot_role"]``), and its
output is ``(*forward_outputs, *input_gradients)``. Both partitioners return a forward graph
``primals -> (*forward_outputs, *saved)`` and a backward graph ``(*saved, *tangents) ->
input_gradients``; they differ in what they save.

- ``default_partition`` saves every forward value the backward reads.
- ``min_cut_partition`` chooses the saved set by a minimum cut (``min_cut.py``'s maximum flow)
  over a graph whose edge capacities are the bytes a saved value keeps alive: cheap ops
  (pointwise, views, creation, counter-based random) may be recomputed in the backward from
  what is saved; matmuls, convolutions, reductions and gathers never are. An input the forward writes
  (``meta["mutated_input"]``) is not saved for recomputing from: the backward runs after the
  new value is copied in.

Memory is counted by storage: a view keeps its whole base alive, so saving a view costs its
base's bytes, and several saved views of one base cost that base once (``saved_bytes``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..ir import Graph, Node
from ..ir.node import map_arg
from ..ir.sym_nodes import sym_size
from ..ops.core.registry import Op
from ..runtime.symbolic import INT_LIKE, SymInt, hint_int
from ..runtime.tensor import Tensor
from .functionalize import is_view_node
from .min_cut import FlowGraph

__all__ = ["Partition", "default_partition", "min_cut_partition", "tensor_bytes", "storage_root"]

_RECOMPUTABLE_KINDS = {"pointwise", "view", "creation"}


@dataclass
class Partition:
    """A forward/backward pair and what the forward saves for the backward.

    ``saved_bytes`` is the storage the saved values keep alive (each base counted once);
    ``saved_input_bytes`` is the part of it that is graph inputs (alive anyway, for parameters),
    so ``saved_bytes - saved_input_bytes`` are the activation bytes the partition adds.
    """

    forward: Graph
    backward: Graph
    saved: list = field(default_factory=list)  # names of the saved values, in order
    saved_bytes: int = 0
    saved_input_bytes: int = 0
    num_fwd_outputs: int = 0
    name: str = ""

    @property
    def saved_activation_bytes(self) -> int:
        return self.saved_bytes - self.saved_input_bytes

    def summary(self) -> str:
        return (
            f"{self.name}: saves {len(self.saved)} tensors, {self.saved_bytes} bytes "
            f"({self.saved_activation_bytes} bytes of activations, "
            f"{self.saved_input_bytes} bytes of inputs)"
        )


def tensor_bytes(node: Node) -> int:
    """Bytes of the tensor a node computes (0 for non-tensors); a symbolic size counts as its
    hint (the size seen when capturing), with no guard: costs only choose what to save."""
    val = node.meta.get("val")
    if isinstance(val, Tensor):
        return hint_int(val.numel()) * val.dtype.itemsize
    return 0


def storage_root(node: Node) -> Node:
    """The node whose storage ``node`` lives in: follows view ops back to their base."""
    while is_view_node(node) and isinstance(node.args[0], Node):
        node = node.args[0]
    return node


def _storage_bytes(nodes) -> tuple[int, int]:
    """(bytes kept alive by ``nodes``, of which graph inputs), counting each storage once."""
    roots = {storage_root(n) for n in nodes}
    total = sum(tensor_bytes(r) for r in roots)
    inputs = sum(tensor_bytes(r) for r in roots if r.op == "placeholder")
    return total, inputs


def _roles(joint: Graph):
    primals, tangents = [], []
    for n in joint.nodes:
        if n.op == "placeholder":
            (tangents if n.meta.get("aot_role") == "tangent" else primals).append(n)
    return primals, tangents


def _outputs(joint: Graph, num_fwd_outputs: int):
    out = joint.output_node.args[0]
    out = list(out) if isinstance(out, (tuple, list)) else [out]
    return out[:num_fwd_outputs], out[num_fwd_outputs:]


def _tangent_dependent(joint: Graph, tangents) -> set:
    dep = set(tangents)
    for n in joint.nodes:
        if n.op == "call_function" and any(i in dep for i in n.all_input_nodes):
            dep.add(n)
    return dep


def _ancestors(targets, stop: set) -> set:
    seen = set()
    stack = [t for t in targets if isinstance(t, Node)]
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        if n in stop:
            continue
        stack.extend(n.all_input_nodes)
    return seen


def _extract(joint: Graph, inputs: list, outputs: list) -> Graph:
    """A new graph computing ``outputs`` from ``inputs`` (which become its placeholders)."""
    needed = _ancestors(outputs, set(inputs))
    graph = Graph()
    env: dict[Node, Node] = {}
    for n in inputs:
        ph = graph.placeholder(n.name)
        ph.meta = dict(n.meta)
        env[n] = ph
    for n in joint.nodes:
        if n in env or n not in needed or n.op == "output":
            continue
        if n.op == "placeholder":
            raise RuntimeError(f"partition: {n.name} is needed but is not an input of this graph")
        env[n] = graph.node_copy(n, lambda x: env[x])
    graph.output(tuple(map_arg(o, lambda x: env[x]) if isinstance(o, Node) else o for o in outputs))
    return graph


def _build(joint: Graph, saved: list, num_fwd_outputs: int, name: str) -> Partition:
    primals, tangents = _roles(joint)
    fwd_outs, grads = _outputs(joint, num_fwd_outputs)
    saved = saved + _saved_symbols(joint, primals, saved + tangents)
    forward = _extract(joint, primals, list(fwd_outs) + saved)
    backward = _extract(joint, saved + tangents, list(grads))
    total, inputs = _storage_bytes(saved)
    return Partition(
        forward,
        backward,
        saved=[n.name for n in saved],
        saved_bytes=total,
        saved_input_bytes=inputs,
        num_fwd_outputs=num_fwd_outputs,
        name=name,
    )


def _symbols_of(values) -> tuple[set, set]:
    """``(read, used)``: the size symbols a graph taking ``values`` can read off them (a size,
    stride or int that is exactly one symbol), and every symbol in their sizes."""
    read, used = set(), set()
    for val in values:
        sizes = (*val._shape, *val.stride()) if isinstance(val, Tensor) else (val,)
        for size in sizes:
            if size.__class__ is SymInt:
                used.update(size.expr.symbols())
                symbol = size.expr.as_symbol()
                if symbol is not None:
                    read.add(symbol)
    return read, used


def _saved_symbols(joint: Graph, primals: list, backward_inputs: list) -> list:
    """Size nodes the backward must receive as ints: a symbol its inputs hold only inside an
    expression (the saved ``x.view(-1, 784)`` is ``(s0*s1*s1)//784`` rows long) cannot be
    read off them, so its value is saved like an activation (an int), from a node of the joint
    graph that is that symbol or, failing one, a new ``x.size(d)`` of the primal holding it."""
    read, used = _symbols_of(n.meta.get("val") for n in backward_inputs)
    missing = {s for s in used - read if not s.unbacked}
    if not missing:
        return []
    found: dict = {}
    for n in joint.nodes:
        val = n.meta.get("val")
        if n.op != "output" and val.__class__ is SymInt and n.meta.get("aot_role") != "tangent":
            symbol = val.expr.as_symbol()
            if symbol in missing and symbol not in found:
                found[symbol] = n
    for symbol in missing - found.keys():
        for primal in primals:
            val = primal.meta.get("val")
            if not isinstance(val, Tensor):
                continue
            dims = [d for d, size in enumerate(val._shape) if size.__class__ is SymInt]
            dim = next((d for d in dims if val._shape[d].expr.as_symbol() is symbol), None)
            if dim is not None:
                with joint.inserting_after(joint.find_nodes(op="placeholder")[-1]):
                    node = joint.call_function(sym_size, (primal, dim))
                node.meta["val"] = val._shape[dim]
                found[symbol] = node
                break
    return [found[s] for s in sorted(found, key=lambda s: s.key)]


def _forward_computed_grads(grads, backward_nodes) -> set:
    """Gradients that do not depend on any tangent (``x * 0``): the backward must receive them."""
    return {g for g in grads if isinstance(g, Node) and g not in backward_nodes}


def default_partition(joint: Graph, num_fwd_outputs: int) -> Partition:
    """Compute everything that does not need the tangents in the forward; save what backward reads."""
    _, tangents = _roles(joint)
    backward_nodes = _tangent_dependent(joint, tangents)
    _, grads = _outputs(joint, num_fwd_outputs)
    needed_by_backward = _ancestors(grads, set())
    direct = _forward_computed_grads(grads, backward_nodes)
    saved = []
    for n in joint.nodes:
        if n in backward_nodes or n not in needed_by_backward or n.op == "output":
            continue
        if n in direct or any(u in backward_nodes for u in n.users):
            saved.append(n)
    return _build(joint, saved, num_fwd_outputs, "default_partition")


def _recomputable(node: Node) -> bool:
    if node.op != "call_function":
        return False
    target = node.target
    if not isinstance(target, Op):
        return False
    if target.recomputable is not None:  # the op's record says (seeded draws, copies, cat)
        return target.recomputable
    if target.nondeterministic_seeded or target.inplace:
        return False
    return target.kind in _RECOMPUTABLE_KINDS


def _save_cost(node: Node) -> int:
    """Bytes that saving ``node`` keeps alive: a view holds its base's whole storage, so a view
    is never cheaper to save than its base (the cut then saves the base and replays the view).
    One more per tensor breaks ties toward saving fewer tensors: a value saved once, with its
    reshapes replayed in the backward, rather than each reshape (a copy the forward would make
    and, for attention's heads, a copy the compiler can otherwise avoid)."""
    return max(tensor_bytes(node), tensor_bytes(storage_root(node)), 1) + 1


def min_cut_partition(joint: Graph, num_fwd_outputs: int) -> Partition:
    """Save the cheapest set of tensors from which the backward can recompute what it needs."""
    _, tangents = _roles(joint)
    backward_nodes = _tangent_dependent(joint, tangents)
    _, grads = _outputs(joint, num_fwd_outputs)
    needed_by_backward = _ancestors(grads, set())
    direct = _forward_computed_grads(grads, backward_nodes)
    forward_nodes = [
        n
        for n in joint.nodes
        if n.op in ("placeholder", "call_function", "get_attr") and n not in backward_nodes
    ]
    flow = FlowGraph()  # an edge without a capacity cannot be cut
    for n in forward_nodes:
        val = n.meta.get("val")
        read_by_backward = n in direct or (
            n in needed_by_backward and any(u in backward_nodes for u in n.users)
        )
        if n.meta.get("mutated_input") and not read_by_backward:
            # an input the forward writes (its new value is copied in after the graph): saved,
            # the backward would read the new value; what is computed from it is saved instead
            flow.add_edge(("in", n), ("out", n))
        elif isinstance(val, Tensor):
            flow.add_edge(("in", n), ("out", n), capacity=_save_cost(n))
        elif isinstance(val, INT_LIKE) and not isinstance(val, bool):
            flow.add_edge(("in", n), ("out", n), capacity=8)  # a size: an int to save
        else:  # a tuple of results or a scalar cannot be saved as such
            flow.add_edge(("in", n), ("out", n))
        if not _recomputable(n):
            flow.add_edge("source", ("in", n))
        if read_by_backward:
            flow.add_edge(("out", n), "sink")
        for user in n.users:
            if user not in backward_nodes and user.op != "output":
                flow.add_edge(("out", n), ("in", user))
    if "sink" not in flow:
        return _build(joint, [], num_fwd_outputs, "min_cut_partition")
    reachable = flow.source_side("source", "sink")
    saved = [n for n in forward_nodes if ("in", n) in reachable and ("out", n) not in reachable]
    return _build(joint, saved, num_fwd_outputs, "min_cut_partition")
