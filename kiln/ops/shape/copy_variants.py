"""PyTorch's ``*_copy`` functions: each view op's twin that returns a fresh contiguous tensor
instead of a view (``transpose_copy``, ``split_copy`` ...), as functionalized programs use them.
Each is the view followed by a contiguous ``clone``, so gradients are the view's."""

from __future__ import annotations

from collections.abc import Callable

from ...runtime.memory_format import contiguous_format
from ..core.common import Tensor
from ..core.registry import OPS, torch_function

__all__: list[str] = []


def _slice(input: Tensor, dim: int = 0, start=None, end=None, step: int = 1) -> Tensor:  # noqa: A002
    return OPS["slice"](input, dim, start, end, step)


_VIEWS: dict[str, Callable] = {
    "alias_copy": lambda x: OPS["alias"](x),
    "as_strided_copy": lambda x, *a, **k: x.as_strided(*a, **k),
    "detach_copy": lambda x: x.detach(),
    "diagonal_copy": lambda x, *a, **k: x.diagonal(*a, **k),
    "expand_copy": lambda x, *a, **k: x.expand(*a, **k),
    "permute_copy": lambda x, *a, **k: x.permute(*a, **k),
    "select_copy": lambda x, *a, **k: x.select(*a, **k),
    "slice_copy": _slice,
    "split_copy": lambda x, *a, **k: x.split(*a, **k),
    "split_with_sizes_copy": lambda x, *a, **k: x.split_with_sizes(*a, **k),
    "squeeze_copy": lambda x, *a, **k: x.squeeze(*a, **k),
    "t_copy": lambda x: x.t(),
    "transpose_copy": lambda x, *a, **k: x.transpose(*a, **k),
    "unbind_copy": lambda x, *a, **k: x.unbind(*a, **k),
    "unfold_copy": lambda x, *a, **k: x.unfold(*a, **k),
    "unsqueeze_copy": lambda x, *a, **k: x.unsqueeze(*a, **k),
    "view_copy": lambda x, *a, **k: x.view(*a, **k),
    "view_as_real_copy": lambda x: OPS["view_as_real"](x),
    "view_as_complex_copy": lambda x: OPS["view_as_complex"](x),
}


def _copying(name: str, view: Callable) -> Callable:
    def function(input: Tensor, *args, **kwargs):  # noqa: A002 - PyTorch's name
        out = view(input, *args, **kwargs)
        if isinstance(out, (tuple, list)):
            return tuple(o.clone(memory_format=contiguous_format) for o in out)
        return out.clone(memory_format=contiguous_format)

    function.__name__ = function.__qualname__ = name
    function.__doc__ = f"``{name[:-5]}`` as a new contiguous tensor (not a view)."
    return function


for _name, _view in _VIEWS.items():
    torch_function(_name)(_copying(_name, _view))
