"""``kiln.overrides``: PyTorch's ``torch.overrides`` helpers for the ``__torch_function__``
protocol (``runtime/torch_function.py`` says what kiln does and does not do with it)."""

from __future__ import annotations

from .runtime.torch_function import (
    handle_torch_function,
    has_torch_function,
    has_torch_function_unary,
    has_torch_function_variadic,
    is_tensor_like,
)

__all__ = [
    "handle_torch_function",
    "has_torch_function",
    "has_torch_function_unary",
    "has_torch_function_variadic",
    "is_tensor_like",
]
