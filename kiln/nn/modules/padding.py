"""Padding modules: constant, zero, reflection, replication and circular padding in 1-3d.

Each stores ``padding`` as PyTorch does (an int becomes the same amount on every side, in
``F.pad`` order: last dim first, left then right) and calls ``F.pad``.
"""

from __future__ import annotations

from ...runtime.tensor import Tensor
from .. import functional as F
from .module import Module
from .spatial_variants import mixed_variants, spatial_variants

__all__ = [
    "CircularPad1d",
    "CircularPad2d",
    "CircularPad3d",
    "ConstantPad1d",
    "ConstantPad2d",
    "ConstantPad3d",
    "ReflectionPad1d",
    "ReflectionPad2d",
    "ReflectionPad3d",
    "ReplicationPad1d",
    "ReplicationPad2d",
    "ReplicationPad3d",
    "ZeroPad1d",
    "ZeroPad2d",
    "ZeroPad3d",
]


def _amounts(padding, dims: int) -> tuple:
    """``padding`` as the 2*dims amounts F.pad takes; an int pads every side equally."""
    if isinstance(padding, (tuple, list)):
        return tuple(padding)
    return (padding,) * (2 * dims)


class _PadNd(Module):
    """A padding module with ``dims`` padded dims; ``_mode`` is F.pad's mode."""

    _dims = 0
    _mode = ""

    def __init__(self, padding) -> None:
        super().__init__()
        self.padding = _amounts(padding, self._dims)

    def forward(self, input: Tensor) -> Tensor:
        return F.pad(input, self.padding, self._mode)

    def extra_repr(self) -> str:
        return f"{self.padding}"


class _CircularPadNd(_PadNd):
    """Circular padding checks the input rank itself (F.pad would accept more dims)."""

    _variant_doc = "Pads the last {n} dims by wrapping the input around."

    _mode = "circular"

    def forward(self, input: Tensor) -> Tensor:
        allowed = (self._dims + 1, self._dims + 2)
        if input.dim() not in allowed:
            raise ValueError(
                f"expected {allowed[0]}D or {allowed[1]}D input (got {input.dim()}D input)"
            )
        return super().forward(input)


CircularPad1d, CircularPad2d, CircularPad3d = spatial_variants(_CircularPadNd, "CircularPad{n}d")


class _ReflectionPadNd(_PadNd):
    _variant_doc = "Pads the last {n} dims with their mirror image."
    _mode = "reflect"


ReflectionPad1d, ReflectionPad2d, ReflectionPad3d = spatial_variants(
    _ReflectionPadNd, "ReflectionPad{n}d"
)


class _ReplicationPadNd(_PadNd):
    _variant_doc = "Pads the last {n} dims by repeating their edges."
    _mode = "replicate"


ReplicationPad1d, ReplicationPad2d, ReplicationPad3d = spatial_variants(
    _ReplicationPadNd, "ReplicationPad{n}d"
)


class _ConstantPadNd(_PadNd):
    """Pads with ``value``."""

    _variant_doc = "Pads the last {n} dims with ``value``."

    _mode = "constant"

    def __init__(self, padding, value: float) -> None:
        super().__init__(padding)
        self.value = value

    def forward(self, input: Tensor) -> Tensor:
        return F.pad(input, self.padding, "constant", self.value)

    def extra_repr(self) -> str:
        return f"padding={self.padding}, value={self.value}"


ConstantPad1d, ConstantPad2d, ConstantPad3d = spatial_variants(_ConstantPadNd, "ConstantPad{n}d")


class _ZeroPad:
    """Constant padding with 0.0, printed as the bare amounts."""

    def __init__(self, padding) -> None:
        super().__init__(padding, 0.0)

    def extra_repr(self) -> str:
        return f"{self.padding}"


ZeroPad1d, ZeroPad2d, ZeroPad3d = mixed_variants(
    _ZeroPad, (ConstantPad1d, ConstantPad2d, ConstantPad3d), "ZeroPad{n}d"
)
