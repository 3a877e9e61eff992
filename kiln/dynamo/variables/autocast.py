"""``with kiln.autocast(...)`` in captured code: the region is traced, not a graph break.

Entering switches the autocast configuration the evaluator runs kiln functions under
(``OutputGraph.autocast``); the dispatcher then records each cast as an ordinary graph node, so
the graph carries the region's dtypes explicitly and runs with autocast off (see
``OutputGraph.compile``). Leaving restores the previous configuration. The autocast object itself
is built for real at capture time from constant arguments (its warnings are raised then).
"""

from __future__ import annotations

from ...amp import autocast_mode
from ..exc import Unsupported, unsupported
from .base import ConstantVariable, VariableTracker
from .misc import ClassVariable

__all__ = ["AutocastClassVariable", "AutocastVariable", "AutocastExit", "is_autocast_class"]


def is_autocast_class(value) -> bool:
    """``kiln.autocast`` and its device-specific subclasses (``kiln.cuda.amp.autocast``)."""
    return isinstance(value, type) and issubclass(value, autocast_mode.autocast)


class AutocastClassVariable(ClassVariable):
    """``kiln.autocast`` (or a subclass): calling it with constants makes an ``AutocastVariable``."""

    def call_function(self, tx, args: list, kwargs: dict) -> VariableTracker:
        if not all(a.is_python_constant() for a in [*args, *kwargs.values()]):
            raise unsupported("unsupported_object", "autocast() with non-constant arguments")
        try:
            ctx = self.cls(
                *[a.as_python_constant() for a in args],
                **{k: v.as_python_constant() for k, v in kwargs.items()},
            )
        except Unsupported:
            raise
        except Exception as e:
            raise unsupported("user_exception", f"{type(e).__name__}: {e}") from None
        return AutocastVariable(ctx)


class AutocastVariable(VariableTracker):
    """A ``kiln.autocast`` object used as a context manager inside captured code."""

    def __init__(self, ctx: autocast_mode.autocast, source=None):
        self.ctx = ctx
        self.source = source

    @staticmethod
    def autocast_type() -> type:
        return autocast_mode.autocast

    def python_type(self) -> type:
        return type(self.ctx)

    def enter(self, tx) -> VariableTracker:
        previous = tx.output.autocast
        ctx = self.ctx
        tx.output.set_autocast(
            autocast_mode.derive_config(previous, ctx._kind, bool(ctx._enabled), ctx.fast_dtype)
        )
        return AutocastExitVariable(previous, ctx)

    def var_getattr(self, tx, name: str) -> VariableTracker:
        if name in ("device", "fast_dtype"):
            return ConstantVariable(getattr(self.ctx, name))
        raise unsupported("unsupported_object", f"autocast.{name}")

    def reconstruct(self, cg) -> None:
        if self.source is None:
            raise unsupported("unsupported_bytecode", "an autocast object made inside the graph")
        self.source.reconstruct(cg)


class AutocastExitVariable(VariableTracker):
    """The ``__exit__`` that ``BEFORE_WITH`` leaves on the stack: restores the configuration.
    Live at a graph break, it enters the autocast object for real where the graph ends (the
    graph ran with autocast off) and hands the resume function an ``AutocastExit``, which
    capture of the resume function turns back into this variable."""

    def __init__(self, previous, ctx: autocast_mode.autocast, live: AutocastExit | None = None):
        self.previous = previous
        self.ctx = ctx
        self.live = live  # the run-time exit of a block entered before this capture began

    def call_function(self, tx, args: list, kwargs: dict) -> VariableTracker:
        tx.output.set_autocast(self.previous)
        if self.live is not None:
            tx.output.autocast_exits.append(self.live)
        return ConstantVariable(None)

    def reconstruct(self, cg) -> None:
        if self.live is not None:  # entered at run time already, by an earlier break
            cg.load_const(self.live)
            return
        cg.load_callable(AutocastExit.of(self.ctx).enter)
        cg.call(0)


class AutocastExit:
    """At run time, the ``__exit__`` of a ``with autocast`` block a graph break cut through:
    ``enter`` enters the block's autocast object where the break runs eagerly and returns this
    exit, which the resume function calls where the block ends (or on an exception). One per
    autocast object, so the resume function's guard on it holds from call to call."""

    def __init__(self, ctx: autocast_mode.autocast):
        self.ctx = ctx

    @staticmethod
    def of(ctx: autocast_mode.autocast) -> AutocastExit:
        exit_ = ctx.__dict__.get("_resume_exit")
        if exit_ is None:
            exit_ = ctx.__dict__["_resume_exit"] = AutocastExit(ctx)
        return exit_

    def enter(self) -> AutocastExit:
        self.ctx.__enter__()
        return self

    def __call__(self, *exc_info) -> bool:
        return self.ctx.__exit__(*(exc_info or (None, None, None)))

    def restores(self):
        """The configuration the block's exit goes back to (the block's entry saved it)."""
        return self.ctx._saved[-1][1]
