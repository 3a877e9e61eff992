"""``cond``: the conditional node of exported graphs (PyTorch's ``higher_order.cond``).

``kiln.cond(pred, true_fn, false_fn, operands)`` with a tensor predicate is captured for export as
one node whose branches are graphs (callables taking the operands and returning a tuple of
tensors), so a deployed program keeps both branches and picks one per call — and an ONNX file
gets an ``If``. The op is composite: run eagerly (or under autograd) it calls the chosen branch,
whose own ops record gradients; a tracer records it whole, its result metadata coming from the
true branch run on fake tensors. Compilers that want straight-line code replace it with
``select_both_branches`` (both branches, then ``where``): equal to picking one because captured
branches are pure.
"""

from __future__ import annotations

from collections.abc import Callable

from ...autograd.grad_mode import is_grad_enabled
from ...runtime import dtypes as dt
from ..core.common import Tensor, TensorList
from ..core.registry import OPS, defop

__all__ = ["select_both_branches"]


@defop(kind="control_flow")
def cond(pred: Tensor, true_branch: Callable, false_branch: Callable, operands: TensorList): ...


cond.doc = (
    "The branch ``pred`` (a one-element tensor) selects, called with ``operands``: a tuple of "
    "tensors, alike in shapes and dtypes for both branches."
)


@cond.register_meta
def _cond_meta(pred, true_branch, false_branch, operands):
    return tuple(true_branch(*operands))


@cond.register_decomposition
def _cond_chosen_branch(pred, true_branch, false_branch, operands):
    if pred.numel() != 1:
        raise RuntimeError(
            f"cond: the predicate must have one element, got shape {list(pred.shape)}"
        )
    if pred._data is None:  # shapes only (fake tensors): both branches give the same metadata
        if is_grad_enabled() and any(t.requires_grad for t in operands):
            raise NotImplementedError(
                "cond: tracing gradients through a conditional node is not supported; trace it "
                "under kiln.no_grad() or call kiln.cond in the traced code instead"
            )
        return _cond_meta(pred, true_branch, false_branch, operands)
    return tuple((true_branch if bool(pred) else false_branch)(*operands))


def select_both_branches(pred, true_branch, false_branch, operands) -> tuple:
    """``cond`` as straight-line code: both branches, each output ``where(pred, t, f)``."""
    flag = pred.reshape(())
    if flag.dtype is not dt.bool_:
        flag = flag != 0
    taken = true_branch(*operands)
    other = false_branch(*operands)
    return tuple(OPS["where"](flag, t, f) for t, f in zip(taken, other))
