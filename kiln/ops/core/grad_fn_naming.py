"""PyTorch's names for ``grad_fn`` nodes, which tensor reprs print (``grad_fn=<MmBackward0>``).

A node is named after its op (``ExpBackward0``) unless the op's record gives a ``grad_fn_name``
(``defop(grad_fn_name=...)``): a string, or a function of the call's arguments, since PyTorch's
name often reflects the overload or the kernel its implementation lands on (``x.sum(0)`` is
``SumBackward1``, ``x @ w`` of matrices ``MmBackward0``, ``F.linear`` with a bias
``AddmmBackward0``). A composite op records no node of its own: its ``grad_fn_name`` renames the
node of its result (the registry wraps its decomposition with ``renaming``). Python-level
functions and methods (``x.t()``, ``torch.split``) do the same with ``renames_grad_fn``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from ...autograd.graph import OpBackward, SavedMeta
from ...runtime.tensor import Tensor

__all__ = ["overload_name", "is_tensor_arg", "rename_grad_fn", "renaming", "renames_grad_fn"]

_OVERLOADS = 8  # more overloads of one name than PyTorch has for any op


def overload_name(name: str, chosen: Callable[[tuple], int]) -> Callable[[tuple], str]:
    """``<name>Backward<n>`` with the overload number ``chosen(args)`` (run for every node the
    op records: the names are made once)."""
    names = tuple(f"{name}Backward{n}" for n in range(_OVERLOADS))
    return lambda args: names[chosen(args)]


def is_tensor_arg(x) -> bool:
    """A tensor argument, or the metadata a node keeps of one its derivative does not need."""
    return isinstance(x, (Tensor, SavedMeta))


# PyTorch's functions returning several views (split, chunk, unbind): their outputs may not be
# modified in place while they have history (``dispatch._inplace_autograd``)
_MULTI_OUTPUT_VIEWS = {"SplitBackward0", "SplitWithSizesBackward0", "UnbindBackward0"}


def rename_grad_fn(result, inputs: tuple, name: str) -> None:
    """Name the nodes this call made (not nodes the result shares with an input); mark the
    outputs of a multi-output view function with ``(output index, function name)``."""
    if result.__class__ is Tensor:  # one result (a transpose, a view): no generators
        node = result.grad_fn
        if node is None or not isinstance(node, OpBackward):
            return
        for a in inputs:
            if node is getattr(a, "grad_fn", None):
                return
        node.rename(name)
        return
    multi = name in _MULTI_OUTPUT_VIEWS and isinstance(result, (list, tuple))
    for i, out in enumerate(result if isinstance(result, (list, tuple)) else (result,)):
        node = getattr(out, "grad_fn", None)
        if not isinstance(node, OpBackward):
            continue
        if not any(node is getattr(a, "grad_fn", None) for a in inputs):
            node.rename(name)
            if multi:
                out._multi_output_view = (i, name[: -len("Backward0")])


def renaming(fn: Callable, name: str | Callable) -> Callable:
    """Wrap ``fn`` so the nodes of its result carry ``name`` (or ``name(args, kwargs)``)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        result = fn(*args, **kwargs)
        if (result.__class__ is Tensor and result.grad_fn is None) or not args:
            return result  # the common case, no graph: nothing to name
        first = args[0]
        inputs = tuple(first) if isinstance(first, (list, tuple)) else args
        rename_grad_fn(result, inputs, name(args, kwargs) if callable(name) else name)
        return result

    return wrapper


def renames_grad_fn(name: str | Callable) -> Callable:
    """Decorator form of ``renaming``, for Python-level functions and methods; put it below
    ``torch_function``/``tensor_method`` so they register the renaming function."""
    return lambda fn: renaming(fn, name)
