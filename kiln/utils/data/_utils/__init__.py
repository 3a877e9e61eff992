"""``torch.utils.data._utils``'s import paths, which programs extending collation use."""

from . import collate

__all__ = ["collate"]
