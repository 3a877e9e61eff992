"""``kiln.nn.attention``: PyTorch's attention-backend selection. kiln has one implementation of
``scaled_dot_product_attention`` (the math one, or a fused kernel when compiled), so choosing a
backend records the choice (``current_backends``) and changes no result."""

from __future__ import annotations

import contextlib
import enum
from collections.abc import Iterable, Iterator

__all__ = ["SDPBackend", "sdpa_kernel", "current_backends"]


class SDPBackend(enum.IntEnum):
    ERROR = -1
    MATH = 0
    FLASH_ATTENTION = 1
    EFFICIENT_ATTENTION = 2
    CUDNN_ATTENTION = 3
    OVERRIDEABLE = 4


_ENABLED: list[set] = [
    {
        SDPBackend.MATH,
        SDPBackend.FLASH_ATTENTION,
        SDPBackend.EFFICIENT_ATTENTION,
        SDPBackend.CUDNN_ATTENTION,
        SDPBackend.OVERRIDEABLE,
    }
]


def current_backends() -> frozenset:
    """The backends the innermost ``sdpa_kernel`` block allows."""
    return frozenset(_ENABLED[-1])


@contextlib.contextmanager
def sdpa_kernel(
    backends: Iterable[SDPBackend] | SDPBackend, set_priority: bool = False
) -> Iterator[None]:
    """Allow only ``backends`` inside the block (PyTorch's spelling; see the module docstring)."""
    chosen = [backends] if isinstance(backends, SDPBackend) else list(backends)
    for b in chosen:
        if not isinstance(b, SDPBackend):
            raise AssertionError("Backend must be an instance of SDPBackend")
    _ENABLED.append(set(chosen))
    try:
        yield
    finally:
        _ENABLED.pop()
