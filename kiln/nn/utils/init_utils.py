"""``skip_init``: build a module without running its parameter initialisation.

The module is constructed on the ``meta`` device (shapes only, so its initialisers do no work)
and its parameters and buffers are then allocated, uninitialised, on the requested device.
"""

from __future__ import annotations

import inspect

from ...ops.public import empty_like
from ..modules.module import Module

__all__ = ["skip_init"]


def skip_init(module_cls: type, *args, **kwargs) -> Module:
    """``module_cls(*args, **kwargs)`` with uninitialised (``empty``) parameters and buffers."""
    if not (isinstance(module_cls, type) and issubclass(module_cls, Module)):
        raise RuntimeError(f"Expected a Module; got {module_cls}")
    if "device" not in inspect.signature(module_cls).parameters:
        raise RuntimeError("Module must support a 'device' arg to skip initialization")
    final_device = kwargs.pop("device", "cpu")
    kwargs["device"] = "meta"
    module = module_cls(*args, **kwargs)
    return module._apply(lambda t: empty_like(t, device=final_device))
