"""Dependency analysis: run a loop body with a recording handler to see what it reads.

The recorder returns opaque tokens for every op, so any body runs on it; ``load`` calls are
collected as (buffer name, index expression) pairs in terms of the variables the body was given.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import sym
from .ir import Buffer, ComputedBuffer, Pointwise, Reduction
from .virtualized import set_ops_handler

__all__ = [
    "MemoryRead",
    "RecordingHandler",
    "reads_of",
    "read_names",
    "iteration_vars",
    "index_error_type",
]


@dataclass(frozen=True)
class MemoryRead:
    name: str
    index: sym.Expr


class _Token:
    __slots__ = ()


_TOKEN = _Token()


class RecordingHandler:
    """An ops handler that records loads and otherwise does nothing."""

    def __init__(self):
        self.reads: list[MemoryRead] = []
        self.indirect = 0
        self.errors: set[str] = set()

    def load(self, name, index):
        self.reads.append(MemoryRead(name, sym.as_expr(index)))
        return _TOKEN

    def indirect_indexing(self, value, size, wrap_negative=True, error="RuntimeError"):
        self.indirect += 1
        self.errors.add(error)
        return sym.Indirect(f"_ind{self.indirect}", size)

    def __getattr__(self, name):
        return lambda *args, **kwargs: _TOKEN


def iteration_vars(buf: ComputedBuffer, prefix: str = "x", rprefix: str = "r"):
    """Fresh loop variables for a buffer's loop nest: (index vars, reduction vars)."""
    data = buf.data
    index = [sym.Var(f"{prefix}{i}", s) for i, s in enumerate(data.ranges)]
    rindex = []
    if isinstance(data, Reduction):
        rindex = [sym.Var(f"{rprefix}{i}", s) for i, s in enumerate(data.reduction_ranges)]
    return index, rindex


def reads_of(buf: Buffer, index=None, rindex=None) -> list[MemoryRead]:
    """The loads of ``buf``'s body with the given (or fresh) loop variables.

    Remembered per buffer for loop variables of known sizes: the scheduler, the in-place pass
    and the code generators ask again and again with variables of the same names and sizes (a
    GPT training step's compile ran ~3400 bodies for ~740 distinct questions). A body's loads
    depend only on its variables: its loaders are closures fixed when it was built."""
    return list(_recorded(buf, index, rindex)[0])


def uses_indirect(buf: Buffer, index=None, rindex=None) -> bool:
    """Whether ``buf``'s body turns a loaded value into an index (a gather's address, or an
    index checked and used as a value): its kernel then gets the out-of-range flag."""
    return _recorded(buf, index, rindex)[1] > 0


def _recorded(buf: Buffer, index, rindex) -> tuple:
    """``(loads, indirect indexings, their exception names)`` of ``buf``'s body, remembered as
    ``reads_of`` says."""
    if not isinstance(buf, ComputedBuffer):
        return (), 0, frozenset()
    if index is None:
        index, rindex = iteration_vars(buf)
    data = buf.data
    key = sym.index_key(index, rindex)
    memo = buf.__dict__.get("_reads_memo")
    if memo is None or memo[0] is not data:
        memo = buf._reads_memo = (data, {})
    if key is not None:
        known = memo[1].get(key)
        if known is not None:
            return known
    handler = RecordingHandler()
    with set_ops_handler(handler):
        if isinstance(data, Pointwise):
            data.inner_fn(index)
        else:
            data.inner_fn(index, rindex)
    result = (tuple(handler.reads), handler.indirect, frozenset(handler.errors))
    if key is not None:
        memo[1][key] = result
    return result


def index_error_type(bufs) -> type[Exception]:
    """The exception a kernel computing ``bufs`` raises for an index out of range: the type the
    ops it gathers for raise eagerly, as PyTorch's (``IndexError`` for ``x[idx]``, ``take``,
    ``embedding``; ``RuntimeError`` for ``gather``, ``scatter``), which each lowering names in
    its ``indirect_indexing`` calls. A kernel mixing both cannot tell which of its indices was
    out of range, and raises ``RuntimeError``."""
    from .ir import Scatter

    errors: set[str] = set()
    for buf in bufs:
        data = getattr(buf, "data", None)
        if isinstance(data, Scatter):
            handler = RecordingHandler()
            with set_ops_handler(handler):
                data.index_fn([sym.Var(f"x{i}", s) for i, s in enumerate(data.ranges)])
            errors |= handler.errors
        elif isinstance(buf, ComputedBuffer):
            errors |= _recorded(buf, None, None)[2]
    return IndexError if errors == {"IndexError"} else RuntimeError


def read_names(buf: Buffer) -> list[str]:
    from .ir import ExternBuffer

    if isinstance(buf, ExternBuffer):
        return [b.name for b, _ in (x for x in buf.inputs if isinstance(x, tuple))]
    seen = []
    for r in reads_of(buf):
        if r.name not in seen:
            seen.append(r.name)
    return seen
