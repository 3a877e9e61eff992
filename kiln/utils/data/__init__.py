"""``kiln.utils.data``: datasets, samplers and the ``DataLoader`` (as ``torch.utils.data``)."""

from . import _utils, dataset, sampler  # noqa: F401 - _utils: the torch.utils.data._utils paths
from ._collate import default_collate, default_convert
from .dataloader import DataLoader, get_worker_info
from .dataset import *  # noqa: F403  (the names in dataset.__all__)
from .distributed import DistributedSampler
from .sampler import *  # noqa: F403  (the names in sampler.__all__)

__all__ = [
    *dataset.__all__,
    *sampler.__all__,
    "DistributedSampler",
    "DataLoader",
    "get_worker_info",
    "default_collate",
    "default_convert",
]
