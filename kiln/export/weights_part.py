"""The weights part of saved programs and packages, in safetensors layout.

Both file kinds store their parameters, buffers and constants with ``kiln.utils.safetensors``
(the same reader and writer as ``kiln.serialization.safetensors``), so the part opens in any
safetensors tool. Tied weights are stored under each name they are read by: the safetensors
writer refuses tensors that share memory, and a program reads each name as its own input.
"""

from __future__ import annotations

from ..runtime.tensor import Tensor
from ..utils import safetensors

__all__ = ["WeightsError", "weights_to_bytes", "weights_from_bytes"]

WeightsError = safetensors.SafetensorError


def weights_to_bytes(tensors: dict[str, Tensor]) -> bytes:
    """The safetensors bytes of ``tensors`` (each one a contiguous copy of its own)."""
    return safetensors.save({name: t.detach().contiguous().clone() for name, t in tensors.items()})


def weights_from_bytes(blob: bytes) -> dict[str, Tensor]:
    """The tensors of a weights part; ``WeightsError`` if it is not valid safetensors."""
    return safetensors.load(blob)
