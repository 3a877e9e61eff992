"""``kiln.signal``: PyTorch's ``torch.signal`` (its ``windows`` namespace)."""

from . import windows

__all__ = ["windows"]
