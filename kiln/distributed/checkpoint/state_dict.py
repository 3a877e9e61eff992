"""Full and sharded state dicts of models (and their optimizers) built with ``fully_shard``.

A ``fully_shard`` module's own ``state_dict()`` holds each rank's shards (what a sharded
checkpoint saves, one file per rank). ``get_model_state_dict(model,
StateDictOptions(full_state_dict=True))`` all-gathers them into whole tensors -- what a
single-process model loads -- on every rank, or only on rank 0 with ``cpu_offload=True`` (the
other ranks get an empty dict); ``set_model_state_dict`` takes either kind back. The optimizer
versions do the same for per-parameter state shaped like the shard (Adam's moments); scalar
state (``step``) is the same on every rank and is kept as it is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ...autograd.grad_mode import no_grad
from ...nn.modules.module import Module
from ...runtime.tensor import Tensor, wrap_array
from ..fsdp.fully_shard import FSDPModule, ShardedParameter

__all__ = [
    "StateDictOptions",
    "get_model_state_dict",
    "set_model_state_dict",
    "get_optimizer_state_dict",
    "set_optimizer_state_dict",
]


@dataclass
class StateDictOptions:
    """PyTorch's options; kiln reads ``full_state_dict``, ``cpu_offload`` and ``strict``."""

    full_state_dict: bool = False
    cpu_offload: bool = False
    ignore_frozen_params: bool = False
    keep_submodule_prefixes: bool = True
    strict: bool = True
    broadcast_from_rank0: bool = False
    flatten_optimizer_state_dict: bool = False


def _sharded_parameters(model: Module) -> dict[int, tuple[ShardedParameter, object]]:
    """id(shard) -> (its ShardedParameter, the group it is sharded over)."""
    found = {}
    for m in model.modules():
        if isinstance(m, FSDPModule):
            group = m._fsdp_group
            for p in group.params:
                found[id(p.sharded)] = (p, group.group)
    return found


def _keeps_result(options: StateDictOptions, group) -> bool:
    return not (options.full_state_dict and options.cpu_offload) or group.rank() == 0


def get_model_state_dict(model: Module, *, submodules=None, options=None) -> dict[str, Any]:
    """The model's state dict: shards by default, whole tensors with ``full_state_dict``."""
    options = options or StateDictOptions()
    if not options.full_state_dict:
        return model.state_dict()
    sharded = _sharded_parameters(model)
    result, keep = {}, True
    for key, value in model.state_dict(keep_vars=True).items():
        entry = sharded.get(id(value)) if isinstance(value, Tensor) else None
        if entry is None:
            result[key] = value.detach() if isinstance(value, Tensor) else value
            continue
        param, group = entry
        result[key] = param.gather_full(value.detach(), group)
        keep = _keeps_result(options, group)
    return result if keep else {}


def set_model_state_dict(model: Module, model_state_dict: dict, *, options=None):
    """Load a full or sharded state dict into a ``fully_shard`` model (each rank keeps the rows
    of a full tensor that its shard holds)."""
    options = options or StateDictOptions()
    by_key = {}
    sharded = _sharded_parameters(model)
    for key, value in model.state_dict(keep_vars=True).items():
        if isinstance(value, Tensor) and id(value) in sharded:
            by_key[key] = sharded[id(value)]
    converted = {}
    for key, value in model_state_dict.items():
        entry = by_key.get(key)
        if entry is not None and tuple(value.shape) == entry[0].shape:
            param, group = entry
            rows = param.local_rows(value.detach().numpy(), group)
            converted[key] = wrap_array(np.ascontiguousarray(rows), value.dtype)
        else:
            converted[key] = value
    return model.load_state_dict(converted, strict=options.strict)


def _optimizer_parameters(optimizer) -> list[Tensor]:
    seen, params = set(), []
    for group in optimizer.param_groups:
        for p in group["params"]:
            if id(p) not in seen:
                seen.add(id(p))
                params.append(p)
    return params


def _convert_state(model: Module, optimizer, state: dict, convert) -> tuple[dict, object]:
    """Per-parameter optimizer state with ``convert(value, param, group)`` applied to the state
    of sharded parameters; also the last group met (None if none)."""
    sharded = _sharded_parameters(model)
    params = _optimizer_parameters(optimizer)
    converted, last_group = {}, None
    for index, values in state.items():
        entry = sharded.get(id(params[index])) if isinstance(index, int) else None
        if entry is None:
            converted[index] = values
            continue
        param, last_group = entry
        converted[index] = {k: convert(v, param, last_group) for k, v in values.items()}
    return converted, last_group


def get_optimizer_state_dict(model: Module, optimizers, *, submodules=None, options=None):
    """The optimizer's state dict, with shard-shaped state gathered whole if asked."""
    options = options or StateDictOptions()
    state_dict = optimizers.state_dict()
    if not options.full_state_dict:
        return state_dict

    def gather(value, param, group):
        return param.gather_full(value, group) if _shard_shaped(value, param) else value

    state, group = _convert_state(model, optimizers, state_dict["state"], gather)
    if group is not None and not _keeps_result(options, group):
        return {}
    return {"state": state, "param_groups": state_dict["param_groups"]}


def set_optimizer_state_dict(model: Module, optimizers, optim_state_dict: dict, *, options=None):
    """Load a full or sharded optimizer state dict (full state is cut to this rank's rows)."""

    def cut(value, param, group):
        if isinstance(value, Tensor) and tuple(value.shape) == param.shape:
            return _local(value, param, group)
        return value

    state, _ = _convert_state(model, optimizers, optim_state_dict["state"], cut)
    with no_grad():
        optimizers.load_state_dict(
            {"state": state, "param_groups": optim_state_dict["param_groups"]}
        )


def _shard_shaped(value, param: ShardedParameter) -> bool:
    return isinstance(value, Tensor) and tuple(value.shape) == tuple(param.sharded.shape)


def _local(value: Tensor, param: ShardedParameter, group) -> Tensor:
    rows = param.local_rows(value.detach().numpy(), group)
    return wrap_array(np.ascontiguousarray(rows), value.dtype)
