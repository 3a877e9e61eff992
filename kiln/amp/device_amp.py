"""PyTorch's deprecated ``torch.cuda.amp`` / ``torch.cpu.amp`` spellings of autocast and GradScaler.

Each constructor warns (``FutureWarning``, as PyTorch) and builds the ``kiln.amp`` object for
its device type; ``namespace(device_type)`` is the ``kiln.<device_type>.amp`` module.
"""

from __future__ import annotations

import functools
import types
import warnings

from ..runtime import dtypes as _dt
from . import autocast_mode as _autocast_mode
from . import grad_scaler as _grad_scaler

__all__ = ["namespace"]

_DEFAULT_DTYPES = {"cuda": _dt.float16, "cpu": _dt.bfloat16}


def _deprecated(old: str, new: str) -> None:
    warnings.warn(
        f"`{old}(args...)` is deprecated. Please use `{new}` instead.",
        FutureWarning,
        stacklevel=3,
    )


def _legacy_autocast(device_type: str) -> type:
    """``torch.<device>.amp.autocast(enabled=True, dtype=<default>, cache_enabled=True)``."""
    default_dtype = _DEFAULT_DTYPES[device_type]

    class autocast(_autocast_mode.autocast):  # noqa: N801 - PyTorch's spelling
        def __init__(self, enabled: bool = True, dtype=default_dtype, cache_enabled: bool = True):
            _deprecated(
                f"torch.{device_type}.amp.autocast", f"torch.amp.autocast('{device_type}', args...)"
            )
            super().__init__(device_type, enabled=enabled, dtype=dtype, cache_enabled=cache_enabled)

    return autocast


def _legacy_grad_scaler(device_type: str) -> type:
    """``torch.<device>.amp.GradScaler(init_scale, growth_factor, backoff_factor, ...)``."""

    class GradScaler(_grad_scaler.GradScaler):
        def __init__(
            self,
            init_scale: float = 2.0**16,
            growth_factor: float = 2.0,
            backoff_factor: float = 0.5,
            growth_interval: int = 2000,
            enabled: bool = True,
        ) -> None:
            _deprecated(
                f"torch.{device_type}.amp.GradScaler",
                f"torch.amp.GradScaler('{device_type}', args...)",
            )
            super().__init__(
                device_type, init_scale, growth_factor, backoff_factor, growth_interval, enabled
            )

    return GradScaler


def _device_custom(decorator, device_type: str):
    """``torch.<device>.amp.custom_fwd``: the ``kiln.amp`` decorator with the device type bound."""

    @functools.wraps(decorator)
    def bound(fn=None, **kwargs):
        return decorator(fn, device_type=device_type, **kwargs)

    return bound


def namespace(device_type: str) -> types.ModuleType:
    """The ``kiln.<device_type>.amp`` module (its classes pickle by that module's name)."""
    name = f"kiln.{device_type}.amp"
    module = types.ModuleType(name, f"Deprecated ``torch.{device_type}.amp`` names.")
    for cls in (_legacy_autocast(device_type), _legacy_grad_scaler(device_type)):
        cls.__module__ = name
        cls.__qualname__ = cls.__name__
        setattr(module, cls.__name__, cls)
    module.custom_fwd = _device_custom(_autocast_mode.custom_fwd, device_type)
    module.custom_bwd = _device_custom(_autocast_mode.custom_bwd, device_type)
    module.__all__ = ["autocast", "GradScaler", "custom_fwd", "custom_bwd"]
    return module
