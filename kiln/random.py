"""``kiln.random``: PyTorch's ``torch.random`` module (seeding, RNG state, ``fork_rng``)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from .runtime.random import (
    Generator,
    default_generator,
    get_rng_state,
    initial_seed,
    manual_seed,
    seed,
    set_rng_state,
)

__all__ = [
    "Generator",
    "default_generator",
    "fork_rng",
    "get_rng_state",
    "initial_seed",
    "manual_seed",
    "seed",
    "set_rng_state",
]


@contextlib.contextmanager
def fork_rng(
    devices=None, enabled: bool = True, _caller: str = "fork_rng", _devices_kw: str = "devices",
    device_type: str | None = None,
) -> Iterator[None]:  # fmt: skip
    """Restore the random state on exit: random calls inside the block do not change what
    follows it. The CUDA generator shares the CPU one in kiln, so ``devices`` needs no work."""
    if not enabled:
        yield
        return
    state = get_rng_state()
    try:
        yield
    finally:
        set_rng_state(state)
