"""``kiln.nn.parallel``: ``DataParallel`` (see ``data_parallel``)."""

from .data_parallel import DataParallel, data_parallel

__all__ = ["DataParallel", "data_parallel"]
