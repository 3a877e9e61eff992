"""Capture of ``kiln.cond`` (``torch.cond``) with a tensor predicate, without a graph break.

Both branches are evaluated into the graph and each output becomes ``where(pred, t, f)``. That
equals running the chosen branch only when the branches are pure, which PyTorch requires of
``cond`` too (in-place ops on tensors a branch made itself are fine). A branch that mutates a
tensor from outside it or Python state, or branches whose outputs differ in structure, shape or
dtype, make the call a graph break instead (it runs eagerly and picks one branch). A constant
predicate just inlines the chosen branch.

Captured for ``kiln.export`` (``CompileContext.export``), the call is one ``cond`` node instead
(``kiln/ops/control_flow.py``): the nodes each branch recorded move into a graph of their own,
whose inputs are the tensors from outside the branch it read (operands, parameters), so the
exported program keeps the choice (an ONNX ``If``)."""

from __future__ import annotations

import operator

from ...ir import Graph, GraphModule
from ...ops import public
from ...ops.core.registry import OPS
from ...ops.public import ne, reshape, where
from ..control_flow import _OPERANDS_ERROR, _assert, cond
from ..exc import unsupported
from .base import ConstantVariable, VariableTracker
from .builtins import _handles
from .dicts import DictVariable
from .lists import BaseListVariable, ListVariable, NamedTupleVariable, TupleVariable
from .tensor import TensorVariable, call_kiln, make_fake_like

__all__: list[str] = []

_PARAMS = ("pred", "true_fn", "false_fn", "operands")


def _user_error(message: str):
    return unsupported("user_exception", f"RuntimeError: {message}")


def _operand_list(tx, operands: VariableTracker) -> list:
    if not isinstance(operands, (TupleVariable, ListVariable)) or not _tensor_leaves(operands):
        raise _user_error(_OPERANDS_ERROR.format(operands))
    return operands.unpack(tx)


def _tensor_leaves(vt: VariableTracker) -> bool:
    if isinstance(vt, TensorVariable):
        return True
    if isinstance(vt, BaseListVariable):
        return all(_tensor_leaves(v) for v in vt.items)
    if isinstance(vt, DictVariable):
        return all(_tensor_leaves(v) for v in vt.items.values())
    return False


def _state(tx) -> tuple:
    """What a branch must leave unchanged: pending Python mutations, and the graph's nodes."""
    effects = tx.output.side_effects
    pending = (effects.containers, effects.attrs, effects.globals, effects.cells)
    return tuple(dict(d) for d in pending), len(tx.output.graph.nodes)


def _check_pure(tx, before: tuple, which: str) -> None:
    pending, n_nodes = before
    effects = tx.output.side_effects
    now = (effects.containers, effects.attrs, effects.globals, effects.cells)
    for old, new in zip(pending, now):
        if old.keys() != new.keys() or any(new[k] is not v for k, v in old.items()):
            raise unsupported("side_effect", f"the {which} branch of kiln.cond has side effects")
    made = list(tx.output.graph.nodes)[n_nodes:]
    fresh = set(made)
    for node in made:
        if getattr(node.target, "inplace", False) and _base(node.args[0]) not in fresh:
            # a tensor from outside the branch (or a view of one): both branches run here
            raise unsupported("side_effect", f"the {which} branch of kiln.cond mutates a tensor")


def _base(node):
    """The node whose storage ``node`` shares (through views, in-place results, getitem)."""
    while getattr(node, "op", None) == "call_function" and node.args:
        target = node.target
        if not (getattr(target, "is_view", False) or getattr(target, "inplace", False)
                or getattr(target, "__name__", "") == "getitem"):  # fmt: skip
            break
        node = node.args[0]
    return node


def _merge(tx, a: VariableTracker, b: VariableTracker, combine) -> VariableTracker:
    """One output of both branches: ``combine(a, b)`` for tensors, the shared value otherwise."""
    if isinstance(a, TensorVariable) and isinstance(b, TensorVariable):
        pa, pb = a.proxy, b.proxy
        if tuple(pa.shape) != tuple(pb.shape) or pa.dtype != pb.dtype:
            raise _user_error(
                "the branches of kiln.cond return tensors of different metadata: "
                f"{pa.dtype}{list(pa.shape)} and {pb.dtype}{list(pb.shape)}"
            )
        return combine(a, b)
    if isinstance(a, BaseListVariable) and isinstance(b, BaseListVariable):
        if a.python_type() is not b.python_type() or len(a.items) != len(b.items):
            raise _user_error("the branches of kiln.cond return different structures")
        items = [_merge(tx, x, y, combine) for x, y in zip(a.items, b.items)]
        if isinstance(a, NamedTupleVariable):
            return NamedTupleVariable(items, a.cls)
        return ListVariable(items) if isinstance(a, ListVariable) else TupleVariable(items)
    if isinstance(a, DictVariable) and isinstance(b, DictVariable):
        if list(a.items) != list(b.items):
            raise _user_error("the branches of kiln.cond return dicts with different keys")
        merged = {k: _merge(tx, v, b.items[k], combine) for k, v in a.items.items()}
        return DictVariable(merged, None, a.python_type())
    if a.is_python_constant() and b.is_python_constant():
        if a.as_python_constant() == b.as_python_constant():
            return a
    raise _user_error("the branches of kiln.cond return different values")


@_handles(cond)
def _cond(tx, fn, args, kwargs):
    if len(args) + len(kwargs) not in (3, 4) or any(k not in _PARAMS for k in kwargs):
        raise unsupported("user_exception", "TypeError: cond() got unexpected arguments")
    params = dict(zip(_PARAMS, args), **kwargs)
    pred, true_fn, false_fn = params["pred"], params["true_fn"], params["false_fn"]
    operands = params.get("operands", TupleVariable([]))
    if pred.is_python_constant():  # picks the branch, unchecked (PyTorch's eager path)
        chosen = true_fn if pred.as_python_constant() else false_fn
        return chosen.call_function(tx, operands.unpack(tx), {})
    if not isinstance(pred, TensorVariable):
        raise _user_error(f"Expected pred to be bool or tensor, but got {pred}.")
    if pred.proxy.numel() != 1:
        raise _user_error("Expected pred to be bool or single-element tensor")
    operands = _operand_list(tx, operands)
    flag = call_kiln(tx, reshape, [pred, ConstantVariable(())], {})
    if flag.proxy.dtype != public.bool:
        flag = call_kiln(tx, ne, [flag, ConstantVariable(0)], {})
    if tx.output.ctx.export:
        return _conditional_node(tx, flag, true_fn, false_fn, operands)
    taken = _branch(tx, true_fn, operands, "true")[0]
    other = _branch(tx, false_fn, operands, "false")[0]
    return _merge(tx, taken, other, lambda a, b: call_kiln(tx, where, [flag, a, b], {}))


def _branch(tx, fn: VariableTracker, operands: list, which: str) -> tuple:
    """Evaluate one branch into the graph: (its result, the nodes it recorded)."""
    graph = tx.output.graph
    existing = set(graph.nodes)
    before = _state(tx)
    result = fn.call_function(tx, list(operands), {})
    _check_pure(tx, before, which)
    return result, [n for n in graph.nodes if n not in existing]


def _conditional_node(tx, flag: TensorVariable, true_fn, false_fn, operands: list):
    """``kiln.cond`` as one ``cond`` node whose branches are graphs (see the module docstring)."""
    taken, true_nodes = _branch(tx, true_fn, operands, "true")
    other, false_nodes = _branch(tx, false_fn, operands, "false")
    pairs: list = []
    structure = _merge(tx, taken, other, lambda a, b: pairs.append((a, b)) or a)
    node_of = tx.output.mode.node_of
    outputs = [[node_of(a.proxy) for a, _ in pairs], [node_of(b.proxy) for _, b in pairs]]
    # graph inputs the branches read first (parameters) and constants stay in the outer graph
    moved = [
        [n for n in made if n.op not in ("placeholder", "get_attr")]
        for made in (true_nodes, false_nodes)
    ]
    inputs: list = []
    for nodes, outs in zip(moved, outputs):
        inside = set(nodes)
        for n in nodes:
            for arg in n.all_input_nodes:
                if arg not in inside and arg not in inputs:
                    inputs.append(arg)
        inputs += [o for o in outs if o not in inside and o not in inputs]
    branches = [
        _branch_module(nodes, outs, inputs, f"cond_{which}_branch")
        for nodes, outs, which in zip(moved, outputs, ("true", "false"))
    ]
    graph = tx.output.graph
    for node in reversed(moved[0] + moved[1]):
        graph.erase_node(node)
    source, text = tx.source_location()
    node = graph.call_function(OPS["cond"], (node_of(flag.proxy), *branches, list(inputs)))
    node.meta.update(source=source, source_text=text)
    node.meta["val"] = tuple(make_fake_like(a.proxy) for a, _ in pairs)
    results = {}
    for i, (a, _) in enumerate(pairs):
        part = graph.call_function(operator.getitem, (node, i))
        proxy = make_fake_like(a.proxy)
        part.meta.update(node.meta, val=make_fake_like(a.proxy))
        tx.output.bind_proxy(proxy, part)
        results[id(a)] = TensorVariable(proxy)
    return _replace_leaves(structure, results)


def _branch_module(nodes: list, outputs: list, inputs: list, name: str) -> GraphModule:
    """The nodes of one branch as a graph of their own, taking ``inputs`` and returning a tuple."""
    graph = Graph()
    env = {}
    for n in inputs:
        env[n] = graph.placeholder(n.name)
        env[n].meta["val"] = n.meta.get("val")
    for n in nodes:
        env[n] = graph.node_copy(n, lambda a: env[a])
    graph.output(tuple(env[o] for o in outputs))
    return GraphModule({}, graph, class_name=name)


def _replace_leaves(vt: VariableTracker, results: dict) -> VariableTracker:
    """``vt`` (the true branch's structure) with its tensors swapped for the node's outputs."""
    if isinstance(vt, TensorVariable):
        return results[id(vt)]
    if isinstance(vt, BaseListVariable):
        items = [_replace_leaves(v, results) for v in vt.items]
        if isinstance(vt, NamedTupleVariable):
            return NamedTupleVariable(items, vt.cls)
        return ListVariable(items) if isinstance(vt, ListVariable) else TupleVariable(items)
    if isinstance(vt, DictVariable):
        items = {k: _replace_leaves(v, results) for k, v in vt.items.items()}
        return DictVariable(items, None, vt.python_type())
    return vt


@_handles(_assert)
def _assert_handler(tx, fn, args, kwargs):
    """A constant condition is checked now (a failure raises where the code runs eagerly); a
    tensor one needs its value: a graph break, as ``assert`` on a tensor is."""
    params = dict(zip(("condition", "message"), args), **kwargs)
    condition = params["condition"]
    if condition.is_python_constant():
        if condition.as_python_constant():
            return ConstantVariable(None)
        message = params["message"].as_python_constant()
        raise unsupported("user_exception", f"AssertionError: {message}")
    return ConstantVariable(condition.truth(tx) and None)
