"""Generators during capture: a call of a user generator function (or a generator expression).

The generator's frame is a child translator that is not run when the generator is made, but
stepped each time the consumer asks for the next value: it stops after a ``YIELD_VALUE`` (the
yielded value is the result) or at its ``RETURN_VALUE`` (exhausted). So tensor ops of the
generator body enter the graph interleaved with the consumer's, as they run in Python. A
generator still alive when the graph ends cannot be handed back to Python (its frame only exists
symbolically): that is a break the frame cannot take, and it runs eagerly.
"""

from __future__ import annotations

import itertools
import types

from ..exc import unsupported
from .base import ConstantVariable, VariableTracker
from .lists import IteratorVariable

__all__ = ["GeneratorVariable", "CountVariable"]

_NOTHING = object()


class GeneratorVariable(IteratorVariable):
    """A generator object whose frame is the paused translator ``frame`` (see the module doc)."""

    def __init__(self, frame):
        super().__init__([])
        self.frame = frame
        frame.yielded = _NOTHING
        self.return_value: VariableTracker = ConstantVariable(None)

    def python_type(self) -> type:
        return types.GeneratorType

    def next(self, tx) -> VariableTracker | None:
        frame = self.frame
        if frame.done:
            return None
        # the consumer is the generator's caller now (break reasons walk this chain)
        frame.parent = tx
        frame.depth = tx.depth + 1
        frame.yielded = _NOTHING
        while not frame.done:
            frame.step()
            if frame.yielded is not _NOTHING:
                value, frame.yielded = frame.yielded, _NOTHING
                return value
        self.return_value = frame.returned or ConstantVariable(None)
        return None

    def unpack(self, tx) -> list:
        items = []
        while (value := self.next(tx)) is not None:
            items.append(value)
        return items

    def truth(self, tx) -> bool:
        return True

    def reconstruct(self, cg) -> None:
        raise unsupported(
            "unsupported_object", "a generator made while capturing outlives the graph"
        )

    def __repr__(self) -> str:
        return f"GeneratorVariable({self.frame.code.co_name})"


class CountVariable(IteratorVariable):
    """``itertools.count(start, step)``: endless, so it is only ever advanced one value at a time
    (``next``, ``zip`` with finite iterables, ``islice``), never unpacked."""

    def __init__(self, start, step):
        super().__init__([])
        self.current = start
        self.step = step

    def python_type(self) -> type:
        return itertools.count

    def next(self, tx) -> VariableTracker:
        value = self.current
        self.current = value + self.step
        return ConstantVariable(value)

    def unpack(self, tx) -> list:
        raise unsupported("unsupported_object", "unpacking an endless itertools.count()")

    def reconstruct(self, cg) -> None:
        cg.load_callable(itertools.count)
        cg.load_const(self.current)
        cg.load_const(self.step)
        cg.call(2)
