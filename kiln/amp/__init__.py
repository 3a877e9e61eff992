"""``kiln.amp``: automatic mixed precision (``autocast``) and loss scaling (``GradScaler``).

``autocast_mode`` holds the autocast state and the per-op casting the dispatcher applies (each
op declares its policy where it is defined); ``grad_scaler`` the scaler.
``kiln.cuda.amp`` and ``kiln.cpu.amp`` are PyTorch's deprecated device-specific spellings.
"""

from __future__ import annotations

from . import autocast_mode, grad_scaler
from .autocast_mode import autocast, custom_bwd, custom_fwd, is_autocast_available
from .grad_scaler import GradScaler

__all__ = [
    "autocast",
    "custom_fwd",
    "custom_bwd",
    "is_autocast_available",
    "GradScaler",
    "autocast_mode",
    "grad_scaler",
]
