"""``kiln.utils``: data loading (``kiln.utils.data``) and hook handles (``kiln.utils.hooks``)."""

from . import data, hooks

__all__ = ["data", "hooks"]
