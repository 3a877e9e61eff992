"""``ReduceOp``: how a reduction combines the ranks' values (PyTorch's names and printing)."""

from __future__ import annotations

import enum

__all__ = ["ReduceOp", "RedOpType", "reduce_op"]


class RedOpType(enum.IntEnum):
    """The reduction kinds; PyTorch prints them as ``RedOpType.SUM``."""

    SUM = 0
    AVG = 1
    PRODUCT = 2
    MIN = 3
    MAX = 4
    BAND = 5
    BOR = 6
    BXOR = 7
    PREMUL_SUM = 8

    def __str__(self) -> str:
        return f"RedOpType.{self.name}"

    __repr__ = __str__


class ReduceOp:
    """``dist.ReduceOp.SUM`` etc.: namespaces the ``RedOpType`` members as PyTorch does."""

    RedOpType = RedOpType
    SUM = RedOpType.SUM
    AVG = RedOpType.AVG
    PRODUCT = RedOpType.PRODUCT
    MIN = RedOpType.MIN
    MAX = RedOpType.MAX
    BAND = RedOpType.BAND
    BOR = RedOpType.BOR
    BXOR = RedOpType.BXOR
    PREMUL_SUM = RedOpType.PREMUL_SUM


# the deprecated ``dist.reduce_op`` spelling
reduce_op = ReduceOp


def as_red_op(op) -> RedOpType:
    """The ``RedOpType`` of ``op`` (a member, or its name); a TypeError for anything else."""
    if isinstance(op, RedOpType):
        return op
    if isinstance(op, str) and op.upper() in RedOpType.__members__:
        return RedOpType[op.upper()]
    raise TypeError(f"op must be a dist.ReduceOp member (e.g. ReduceOp.SUM), got {op!r}")
