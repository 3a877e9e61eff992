"""``torch.nn.modules.utils``: the argument helpers layer code imports from PyTorch.

Third-party layers (deformable convolutions, custom pooling, timm's helpers) write
``from torch.nn.modules.utils import _pair``, and loaders of DataParallel/DDP checkpoints call
``consume_prefix_in_state_dict_if_present(state_dict, "module.")``; both work as in PyTorch.
"""

from __future__ import annotations

import collections.abc
from itertools import repeat
from typing import Any

__all__ = ["consume_prefix_in_state_dict_if_present"]


def _ntuple(n: int, name: str = "parse"):
    """A parser: an iterable becomes a tuple of its items, anything else ``n`` copies of it."""

    def parse(x):
        if isinstance(x, collections.abc.Iterable):
            return tuple(x)
        return tuple(repeat(x, n))

    parse.__name__ = name
    return parse


_single = _ntuple(1, "_single")
_pair = _ntuple(2, "_pair")
_triple = _ntuple(3, "_triple")
_quadruple = _ntuple(4, "_quadruple")


def _reverse_repeat_tuple(t, n: int) -> tuple:
    """``t`` reversed with each item repeated ``n`` times: a convolution's padding as ``F.pad``
    takes it (last dim first, both sides)."""
    return tuple(x for x in reversed(t) for _ in range(n))


def _list_with_default(out_size, defaults: list[int]):
    """An adaptive pooling's output size with ``None`` entries filled from the input's sizes."""
    if isinstance(out_size, int):
        return out_size
    if len(defaults) <= len(out_size):
        raise ValueError(f"Input dimension should be at least {len(out_size) + 1}")
    return [v if v is not None else d for v, d in zip(out_size, defaults[-len(out_size) :])]


def consume_prefix_in_state_dict_if_present(state_dict: dict[str, Any], prefix: str) -> None:
    """Strip ``prefix`` (``"module."`` of a DataParallel/DDP model) from the keys of
    ``state_dict`` and of its ``_metadata``, in place."""
    for key in list(state_dict.keys()):
        if key.startswith(prefix):
            state_dict[key[len(prefix) :]] = state_dict.pop(key)
    metadata = getattr(state_dict, "_metadata", None)
    if metadata is None:
        return
    for key in list(metadata.keys()):
        # "" is the wrapper's own entry, kept; "module" (the prefix without its dot) and
        # "module.*" are the model's
        if key and (key == prefix.replace(".", "") or key.startswith(prefix)):
            metadata[key[len(prefix) :]] = metadata.pop(key)
