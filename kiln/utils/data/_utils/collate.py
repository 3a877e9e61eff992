"""``torch.utils.data._utils.collate``: the collation table and its per-type functions."""

from .. import _collate
from .._collate import *  # noqa: F403  (the names in _collate.__all__)

__all__ = list(_collate.__all__)
