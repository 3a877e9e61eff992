"""``kiln.cond``: PyTorch's structured if-statement (``torch.cond``); ``kiln._assert``.

Eagerly it is the plain ``if``: validate the predicate and the operands as PyTorch does, then
call the chosen branch. Under ``kiln.compile`` a predicate that is a tensor does not break the
graph: both branches are captured and each output is ``where(pred, true_out, false_out)``
(``variables/control_flow.py``), which is why PyTorch requires branches without side effects
whose outputs agree in structure, shape and dtype.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..runtime.tensor import Tensor

__all__ = ["cond", "_assert"]

_OPERANDS_ERROR = (
    "Expect operands to be a tuple of possibly nested dict/list/tuple that only consists of "
    "tensor leaves, but got {}."
)


def _tensor_leaves_only(value: Any) -> bool:
    if isinstance(value, Tensor):
        return True
    if isinstance(value, (tuple, list)):
        return all(_tensor_leaves_only(v) for v in value)
    if isinstance(value, dict):
        return all(_tensor_leaves_only(v) for v in value.values())
    return False


def cond(
    pred: bool | Tensor,
    true_fn: Callable,
    false_fn: Callable,
    operands: tuple | list = (),
) -> Any:
    """``true_fn(*operands)`` if ``pred`` else ``false_fn(*operands)``. A Python ``pred`` just
    picks the branch (as PyTorch's eager path does, without checks); a tensor ``pred`` must
    have one element and ``operands`` be a (nested) tuple/list/dict of tensors."""
    if isinstance(pred, (bool, int, float)):
        return (true_fn if pred else false_fn)(*operands)
    if not isinstance(pred, Tensor):
        raise RuntimeError(f"Expected pred to be bool or tensor, but got {pred}.")
    if pred.numel() != 1:
        raise RuntimeError(f"Expected pred to be bool or single-element tensor, but got {pred}.")
    if not (callable(true_fn) and callable(false_fn)):
        raise RuntimeError("Expect both branches to be callable.")
    if not isinstance(operands, (tuple, list)) or not _tensor_leaves_only(operands):
        raise RuntimeError(_OPERANDS_ERROR.format(operands))
    return (true_fn if bool(pred) else false_fn)(*operands)


def _assert(condition: Any, message: str) -> None:
    """``torch._assert``: Python's ``assert`` as a function (also under ``python -O``)."""
    if not condition:
        raise AssertionError(message)
