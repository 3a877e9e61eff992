"""Capture of ``kiln.cond`` (``torch.cond``) with a tensor predicate, without a graph break.

Both branches are evaluated into the graph and each output becomes ``where(pred, t, f)``. That
equals running the chosen branch only when the branches are pure, which PyTorch requires of
``cond`` too (in-place ops on tensors a branch made itself are fine). A branch that mutates a
tensor from outside it or Python state, or branches whose outputs differ in structure, shape or
dtype, make the call a graph break instead (it runs eagerly and picks one branch). A constant
predicate just inlines the chosen branch."""

from __future__ import annotations

from ...ops import public
from ...ops.public import ne, reshape, where
from ..control_flow import _OPERANDS_ERROR, _assert, cond
from ..exc import unsupported
from .base import ConstantVariable, VariableTracker
from .builtins import _handles
from .dicts import DictVariable
from .lists import BaseListVariable, ListVariable, NamedTupleVariable, TupleVariable
from .tensor import TensorVariable, call_kiln

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


def _merge(tx, pred: TensorVariable, a: VariableTracker, b: VariableTracker) -> VariableTracker:
    """One output of both branches: ``where`` for tensors, the shared value otherwise."""
    if isinstance(a, TensorVariable) and isinstance(b, TensorVariable):
        pa, pb = a.proxy, b.proxy
        if tuple(pa.shape) != tuple(pb.shape) or pa.dtype != pb.dtype:
            raise _user_error(
                "the branches of kiln.cond return tensors of different metadata: "
                f"{pa.dtype}{list(pa.shape)} and {pb.dtype}{list(pb.shape)}"
            )
        return call_kiln(tx, where, [pred, a, b], {})
    if isinstance(a, BaseListVariable) and isinstance(b, BaseListVariable):
        if a.python_type() is not b.python_type() or len(a.items) != len(b.items):
            raise _user_error("the branches of kiln.cond return different structures")
        items = [_merge(tx, pred, x, y) for x, y in zip(a.items, b.items)]
        if isinstance(a, NamedTupleVariable):
            return NamedTupleVariable(items, a.cls)
        return ListVariable(items) if isinstance(a, ListVariable) else TupleVariable(items)
    if isinstance(a, DictVariable) and isinstance(b, DictVariable):
        if list(a.items) != list(b.items):
            raise _user_error("the branches of kiln.cond return dicts with different keys")
        merged = {k: _merge(tx, pred, v, b.items[k]) for k, v in a.items.items()}
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
    before = _state(tx)
    taken = true_fn.call_function(tx, list(operands), {})
    _check_pure(tx, before, "true")
    before = _state(tx)
    other = false_fn.call_function(tx, list(operands), {})
    _check_pure(tx, before, "false")
    return _merge(tx, flag, taken, other)


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
