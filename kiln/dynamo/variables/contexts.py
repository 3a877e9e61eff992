"""``with`` blocks over context managers other than grad mode and autocast.

``BEFORE_WITH`` leaves the bound ``__exit__`` and the result of ``__enter__`` on the stack; the
normal exit of the block calls that ``__exit__`` with three ``None``s. A plain object's
``__enter__``/``__exit__`` are inlined like any method. A ``contextlib.contextmanager`` object
steps its generator instead: to the ``yield`` on entry, to the end on exit (the library's own
methods catch ``StopIteration``, which capture does not model).
"""

from __future__ import annotations

import contextlib

from ..exc import unsupported
from .base import ConstantVariable, VariableTracker
from .lists import IteratorVariable

__all__ = ["enter_context", "NULL_EXIT", "NullExitVariable"]

_GENERATOR_CONTEXT = contextlib._GeneratorContextManager


def enter_context(tx, ctx: VariableTracker) -> tuple[VariableTracker, VariableTracker]:
    """``(exit callable, value of the with target)`` for entering ``ctx``."""
    try:
        kind = ctx.python_type()
    except Exception:
        kind = None
    if kind is contextlib.nullcontext:
        # ``ctx = autocast() if amp else nullcontext()``: nothing to enter or leave, so a
        # graph break inside the block hands the resume function an exit that does nothing
        return NullExitVariable(), tx.getattr(ctx, "__enter__").call_function(tx, [], {})
    if kind is _GENERATOR_CONTEXT:
        gen = tx.getattr(ctx, "gen")
        if not isinstance(gen, IteratorVariable):
            raise unsupported("unsupported_object", f"`with` on a generator context of {gen}")
        value = gen.next(tx)
        if value is None:
            raise unsupported("user_exception", "RuntimeError: generator didn't yield")
        return _GeneratorExit(gen), value
    exit_fn = tx.getattr(ctx, "__exit__")
    value = tx.getattr(ctx, "__enter__").call_function(tx, [], {})
    return _ContextExit(exit_fn), value


class _ContextExit(VariableTracker):
    """The ``__exit__`` a ``with`` block calls on leaving normally."""

    def __init__(self, exit_fn: VariableTracker):
        self.exit_fn = exit_fn

    def call_function(self, tx, args: list, kwargs: dict) -> VariableTracker:
        return self.exit_fn.call_function(tx, args, kwargs)

    def reconstruct(self, cg) -> None:
        raise unsupported("unsupported_bytecode", "a graph break inside a `with` block")


class _GeneratorExit(VariableTracker):
    """Leaving a ``contextlib.contextmanager`` block: its generator must end."""

    def __init__(self, gen: IteratorVariable):
        self.gen = gen

    def call_function(self, tx, args: list, kwargs: dict) -> VariableTracker:
        if self.gen.next(tx) is not None:
            raise unsupported("user_exception", "RuntimeError: generator didn't stop")
        return ConstantVariable(False)

    def reconstruct(self, cg) -> None:
        raise unsupported("unsupported_bytecode", "a graph break inside a `with` block")


def _null_exit(*exc_info) -> bool:
    """At run time, the exit of a ``nullcontext`` block a graph break cut through."""
    return False


NULL_EXIT = _null_exit


class NullExitVariable(VariableTracker):
    """Leaving a ``nullcontext`` block: nothing happens; live at a graph break, the resume
    function gets ``NULL_EXIT``, which capture turns back into this variable."""

    def call_function(self, tx, args: list, kwargs: dict) -> VariableTracker:
        return ConstantVariable(False)

    def reconstruct(self, cg) -> None:
        cg.load_const(NULL_EXIT)
