"""``torch.__future__``: switches for behaviour PyTorch plans to change, here how ``Module.to``
and its kin convert parameters (``nn.modules.module.CONVERSION_FLAGS`` holds them)."""

from __future__ import annotations

from .nn.modules.module import CONVERSION_FLAGS

__all__ = [
    "set_overwrite_module_params_on_conversion",
    "get_overwrite_module_params_on_conversion",
    "set_swap_module_params_on_conversion",
    "get_swap_module_params_on_conversion",
]


def set_overwrite_module_params_on_conversion(value: bool) -> None:
    """True: ``module.to(...)`` gives each parameter a new Parameter object (optimizers built
    before keep the old ones); False (the default): each object keeps its place, new values."""
    CONVERSION_FLAGS["overwrite"] = bool(value)


def get_overwrite_module_params_on_conversion() -> bool:
    return CONVERSION_FLAGS["overwrite"]


def set_swap_module_params_on_conversion(value: bool) -> None:
    """PyTorch's ``swap_tensors`` route: each Parameter object keeps its identity and takes the
    converted values, which is what kiln's conversion does in any case."""
    CONVERSION_FLAGS["swap"] = bool(value)


def get_swap_module_params_on_conversion() -> bool:
    return CONVERSION_FLAGS["swap"]
