"""``kiln.func.functional_call`` and ``stack_module_state``: modules as functions of their state.

``functional_call(model, params, x)`` runs ``model`` with ``params`` swapped in, so gradients
(``kiln.func.grad``) and per-example loops (``vmap``) can treat parameters as ordinary inputs;
``stack_module_state`` stacks the states of several same-shaped models for model ensembling.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..nn.utils.stateless import _functional_call
from ..ops.public import stack
from ..runtime.tensor import Tensor

__all__ = ["functional_call", "stack_module_state"]


def functional_call(
    module,
    parameter_and_buffer_dicts: dict[str, Tensor] | Sequence[dict[str, Tensor]],
    args=None,
    kwargs: dict | None = None,
    *,
    tie_weights: bool = True,
    strict: bool = False,
):
    """``module(*args, **kwargs)`` with its parameters/buffers replaced by the given tensors
    (one dict, or several whose keys must not overlap)."""
    if isinstance(parameter_and_buffer_dicts, dict):
        tensors = parameter_and_buffer_dicts
    elif isinstance(parameter_and_buffer_dicts, Sequence):
        if not all(isinstance(d, dict) for d in parameter_and_buffer_dicts):
            raise ValueError(
                "Expected all elements of parameter_and_buffer_dicts to be dictionaries"
            )
        seen: dict[str, int] = {}
        for d in parameter_and_buffer_dicts:
            for k in d:
                seen[k] = seen.get(k, 0) + 1
        repeated = [k for k, n in seen.items() if n > 1]
        if repeated:
            raise ValueError(
                f"{repeated} appeared in multiple dictionaries; behavior of functional call is "
                "ambiguous"
            )
        tensors = {k: v for d in parameter_and_buffer_dicts for k, v in d.items()}
    else:
        raise ValueError(
            "Expected parameter_and_buffer_dicts to be a dict, or a list/tuple of dicts, but got "
            f"{type(parameter_and_buffer_dicts)}"
        )
    return _functional_call(module, tensors, args, kwargs, tie_weights=tie_weights, strict=strict)


def _stack_leaf(tensors: list, name: str) -> Tensor:
    requires = [t.requires_grad for t in tensors]
    if any(requires) and not all(requires):
        raise RuntimeError(f"Expected {name} from each model to have the same .requires_grad")
    stacked = stack(tensors)
    return stacked.detach().requires_grad_() if all(requires) else stacked


def stack_module_state(models) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
    """(params, buffers): each entry stacks that tensor across ``models`` along a new dim 0.
    Stacked parameters are new leaves (they require grad when the originals do)."""
    models = list(models)
    if not models:
        raise RuntimeError("stack_module_state: Expected at least one model, got 0.")
    if len({m.training for m in models}) != 1:
        raise RuntimeError(
            "stack_module_state: Expected all models to have the same training/eval mode."
        )
    if len({type(m) for m in models}) != 1:
        raise RuntimeError("stack_module_state: Expected all models to be of the same class.")
    all_params = [dict(m.named_parameters()) for m in models]
    all_buffers = [dict(m.named_buffers()) for m in models]
    params = {k: _stack_leaf([p[k] for p in all_params], k) for k in all_params[0]}
    buffers = {k: _stack_leaf([b[k] for b in all_buffers], k) for k in all_buffers[0]}
    return params, buffers
