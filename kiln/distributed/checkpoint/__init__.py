"""``kiln.distributed.checkpoint``: full and sharded state dicts of ``fully_shard`` models
(``kiln.distributed.checkpoint.state_dict``, PyTorch's module of the same name)."""

from . import state_dict
from .state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)

__all__ = [
    "state_dict",
    "StateDictOptions",
    "get_model_state_dict",
    "set_model_state_dict",
    "get_optimizer_state_dict",
    "set_optimizer_state_dict",
]
