"""``optim.swap_in_optimizer_params_and_state``: run an optimizer's methods on other parameters
and another ``state_dict()``'s state for the length of a ``with`` block, then put its own back.

The swap-in state is the ``state_dict()`` form (per-parameter state keyed by packed integer
ids, groups listing those ids); the swap-in parameters come in the order of the optimizer's
groups. Inside the block ``optimizer.state`` is keyed by the swap-in tensors, holding shallow
copies of the given per-parameter dicts: in-place updates of their tensors reach the caller's
dict, new entries do not.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

from ..runtime.tensor import Tensor
from .optimizer import Optimizer

__all__ = ["swap_in_optimizer_params_and_state"]

_NAME = "swap_in_optimizer_params_and_state"


def _checked_state(state: Any) -> dict:
    if not isinstance(state, dict):
        raise RuntimeError(
            f"{_NAME} requires swapin_optim_state['state'] to be a dict mapping packed "
            f"parameter ids to per-param state dicts, got {type(state).__name__}."
        )
    if any(isinstance(key, Tensor) for key in state):
        raise RuntimeError(
            f"{_NAME} requires optimizer.state_dict()-style state keyed by packed parameter ids."
        )
    if any(isinstance(key, int) and not isinstance(entry, dict) for key, entry in state.items()):
        raise RuntimeError(
            f"{_NAME} requires per-parameter optimizer state entries to be dictionaries."
        )
    return state


def _checked_group_ids(index: int, live: dict, group: Any) -> list:
    """The packed ids of swap-in group ``index`` after checking it mirrors the live group."""
    if not isinstance(group, dict):
        raise RuntimeError(f"{_NAME} requires each optimizer param group to be a dictionary.")
    ids = group.get("params")
    if not isinstance(ids, list) or not all(isinstance(i, int) for i in ids):
        raise RuntimeError(
            f"{_NAME} requires optimizer.state_dict()-style param_groups[*]['params'] entries "
            "keyed by packed parameter ids."
        )
    if len(ids) != len(live["params"]):
        raise RuntimeError(
            f"swapin_optim_state param group {index} has a different number of params than "
            "the live optimizer param group."
        )
    only_swap_in = [key for key in group if key not in live]
    only_live = [key for key in live if key not in group]
    if only_swap_in or only_live:
        raise RuntimeError(
            f"{_NAME} requires optimizer.state_dict()-style param group keys to exactly match "
            f"the live optimizer group keys for group {index}. Keys only in swap-in: "
            f"{only_swap_in}. Keys only in live: {only_live}."
        )
    return ids


def _plan(optimizer: Optimizer, parameters: dict, optim_state: Any) -> tuple[dict, list]:
    """(the swap-in per-id state, [(live group, swap-in group, its parameters)]) once every
    check PyTorch makes has passed."""
    if not optimizer.state:
        raise RuntimeError(f"{_NAME} requires initialized optimizer state.")
    if not isinstance(optim_state, dict):
        raise RuntimeError(f"{_NAME} requires a DCP-style optimizer state_dict.")
    state = _checked_state(optim_state.get("state"))
    groups = optim_state.get("param_groups")
    if not isinstance(groups, list):
        raise RuntimeError(
            f"{_NAME} requires swapin_optim_state['param_groups'] to be a list of param-group "
            f"dicts, got {type(groups).__name__}."
        )
    if len(groups) != len(optimizer.param_groups):
        raise RuntimeError(
            "swapin_optim_state has a different number of parameter groups than the live optimizer."
        )
    tensors = list(parameters.values())
    plan, used, seen = [], 0, set()
    for index, (live, group) in enumerate(zip(optimizer.param_groups, groups)):
        ids = _checked_group_ids(index, live, group)
        seen.update(ids)
        if used + len(ids) > len(tensors):
            raise RuntimeError(
                f"{_NAME} requires the explicit parameter state to match optimizer.param_groups "
                "ordering."
            )
        plan.append((live, group, tensors[used : used + len(ids)]))
        used += len(ids)
    extra = [key for key in state if key not in seen]
    if extra:
        raise RuntimeError(
            f"{_NAME} requires swapin_optim_state['state'] to be keyed only by packed parameter "
            f"ids from param_groups[*]['params']; got extra keys {extra!r}."
        )
    return state, plan


@contextlib.contextmanager
def swap_in_optimizer_params_and_state(
    optimizer: Optimizer, swapin_parameters: dict[str, Tensor], swapin_optim_state: dict
) -> Iterator[None]:
    """Within the block, ``optimizer`` steps (and every other method) act on
    ``swapin_parameters`` (in ``param_groups`` order, e.g. ``model.named_parameters()``'s) with
    ``swapin_optim_state`` (a ``state_dict()``-shaped dict) as state and hyperparameters; its
    own parameters, groups and state are back on exit, even after an error."""
    state, plan = _plan(optimizer, swapin_parameters, swapin_optim_state)
    own_state = optimizer.state
    own_groups = [dict(group) for group in optimizer.param_groups]  # the params lists kept
    try:
        swapped: defaultdict = defaultdict(dict)
        for live, group, tensors in plan:
            live.update(group)
            live["params"] = tensors
            for tensor, packed_id in zip(tensors, group["params"]):
                swapped[tensor] = dict(state.get(packed_id, {}))
        optimizer.state = swapped
        yield
    finally:
        for live, own in zip(optimizer.param_groups, own_groups):
            live.clear()
            live.update(own)
        optimizer.state = own_state
