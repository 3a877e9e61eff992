"""``kiln.cpu``: PyTorch's ``torch.cpu`` namespace (device queries and ``torch.cpu.amp``).

The CPU is always there and has one device; synchronizing is a no-op since CPU kernels finish
before they return.
"""

from __future__ import annotations

import sys as _sys

from ..amp.device_amp import namespace as _amp_namespace

__all__ = ["is_available", "device_count", "current_device", "synchronize", "set_device", "amp"]


def is_available() -> bool:
    return True


def device_count() -> int:
    return 1


def current_device() -> str:
    return "cpu"


def synchronize(device=None) -> None:
    """CPU work is done when the call returns: nothing to wait for."""


def set_device(device) -> None:
    """There is one CPU device: nothing to select."""


amp = _amp_namespace("cpu")
_sys.modules[__name__ + ".amp"] = amp
