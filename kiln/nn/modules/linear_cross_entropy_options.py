"""``LinearCrossEntropyOptions``, where PyTorch files it (defined with its functional form)."""

from .._functional.losses_extra import LinearCrossEntropyOptions

__all__ = ["LinearCrossEntropyOptions"]
