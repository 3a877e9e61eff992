"""``kiln.optim.lr_scheduler``: learning-rate schedulers with PyTorch's formulas.

Each ``get_lr`` computes the next rates from the optimizer's *current* rates exactly as PyTorch
does (``lr * gamma``, the cosine recurrence ...), so sequences agree bit for bit in float64;
``step(epoch)`` uses the closed forms, as in PyTorch.
"""

from . import schedules
from .base import EPOCH_DEPRECATION_WARNING, LRScheduler, _LRScheduler  # noqa: F401  (old name)
from .composite import ChainedScheduler, SequentialLR
from .cyclic import CyclicLR
from .one_cycle import OneCycleLR
from .plateau import ReduceLROnPlateau
from .schedules import *  # noqa: F403  (the names in schedules.__all__)

__all__ = [
    "EPOCH_DEPRECATION_WARNING",
    "LRScheduler",
    *schedules.__all__,
    "OneCycleLR",
    "SequentialLR",
    "ChainedScheduler",
    "ReduceLROnPlateau",
    "CyclicLR",
]
