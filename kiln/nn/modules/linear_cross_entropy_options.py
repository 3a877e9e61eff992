"""``LinearCrossEntropyOptions``, where PyTorch files it (defined with its functional form)."""

from .._functional.linear_cross_entropy import LinearCrossEntropyOptions

__all__ = ["LinearCrossEntropyOptions"]
