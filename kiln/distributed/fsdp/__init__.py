"""``kiln.distributed.fsdp``: ``fully_shard`` (PyTorch's FSDP2 API) and ``FSDPModule``."""

from .fully_shard import FSDPModule, fully_shard

__all__ = ["FSDPModule", "fully_shard"]
