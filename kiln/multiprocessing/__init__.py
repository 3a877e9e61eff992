"""``kiln.multiprocessing``: PyTorch's ``torch.multiprocessing``, Python's ``multiprocessing``
with tensors that cross processes.

Every name of Python's module is here (``Process``, ``Queue``, ``Pool``, ``get_context``,
``set_start_method``, ``cpu_count`` ...), plus PyTorch's ``spawn``. Importing ``kiln`` registers
the tensor reductions with multiprocessing's pickler: a tensor whose storage was shared
(``share_memory_``, ``Module.share_memory``) arrives in the other process as the same memory
(``runtime/shared_memory.py``); others arrive as copies of their values (PyTorch moves them to
shared memory first, so a receiver's in-place change is seen by the sender; kiln's is not).
"""

from __future__ import annotations

import multiprocessing
from multiprocessing import *  # noqa: F403
from multiprocessing.reduction import ForkingPickler

from ..nn.parameter import Parameter
from ..runtime.shared_memory import reduce_shared
from ..runtime.tensor import Tensor
from .spawn import *  # noqa: F403
from .spawn import __all__ as _spawn_names

__all__ = [
    *multiprocessing.__all__,
    *_spawn_names,
    "get_sharing_strategy",
    "set_sharing_strategy",
    "get_all_sharing_strategies",
]

_STRATEGIES = {"file_system"}  # segments are named files in /dev/shm
_strategy = ["file_system"]


def get_all_sharing_strategies() -> set[str]:
    return set(_STRATEGIES)


def get_sharing_strategy() -> str:
    return _strategy[0]


def set_sharing_strategy(new_strategy: str) -> None:
    """Accepts PyTorch's names; kiln shares through named files whichever is chosen."""
    if new_strategy not in ("file_system", "file_descriptor"):
        raise ValueError(f"unknown sharing strategy {new_strategy!r}")
    _strategy[0] = new_strategy


def _init_reductions() -> None:
    for cls in (Tensor, Parameter):
        ForkingPickler.register(cls, reduce_shared)


_init_reductions()
