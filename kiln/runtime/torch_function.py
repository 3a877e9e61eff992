"""PyTorch's ``__torch_function__`` helpers for library code (``kiln.overrides``).

Code written for PyTorch guards its functions with ``if has_torch_function(args): return
handle_torch_function(fn, args, *args, **kwargs)`` so that tensor-like objects of other
libraries can take the call over. These helpers keep that protocol for such objects. kiln's own
ops do not consult ``__torch_function__`` (kiln has no tensor-subclass dispatch), and a plain
``kiln.Tensor`` defines none, so for kiln tensors the guard is simply False.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

__all__ = [
    "has_torch_function",
    "has_torch_function_unary",
    "has_torch_function_variadic",
    "handle_torch_function",
    "is_tensor_like",
]


def _overrides(value: Any) -> bool:
    method = getattr(type(value), "__torch_function__", None)
    return method is not None and not getattr(method, "_kiln_disabled", False)


def has_torch_function(relevant_args: Iterable) -> bool:
    """Whether any argument's type defines ``__torch_function__`` (and so takes the call)."""
    return any(_overrides(a) for a in relevant_args)


def has_torch_function_unary(value: Any) -> bool:
    return _overrides(value)


def has_torch_function_variadic(*args: Any) -> bool:
    return has_torch_function(args)


def is_tensor_like(inp: Any) -> bool:
    """A kiln tensor, or an object whose type defines ``__torch_function__``."""
    from .tensor import Tensor

    return isinstance(inp, Tensor) or hasattr(type(inp), "__torch_function__")


def handle_torch_function(
    public_api: Callable, relevant_args: Iterable, *args: Any, **kwargs: Any
) -> Any:
    """Call the ``__torch_function__`` of the overriding argument types (subclasses before
    their bases, then in argument order) until one does not return ``NotImplemented``."""
    types: list[type] = []
    for arg in relevant_args:
        kind = type(arg)
        if _overrides(arg) and kind not in types:
            index = next((i for i, t in enumerate(types) if issubclass(kind, t)), len(types))
            types.insert(index, kind)
    for kind in types:
        result = kind.__torch_function__(public_api, tuple(types), args, kwargs)
        if result is not NotImplemented:
            return result
    names = ", ".join(str(t) for t in types)
    raise TypeError(
        f"no implementation found for '{getattr(public_api, '__module__', '')}."
        f"{getattr(public_api, '__name__', public_api)}' on types that implement "
        f"__torch_function__: [{names}]"
    )
