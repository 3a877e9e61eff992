"""A loop body recorded once as the ``ops`` calls it makes, then replayed on any ops handler.

The LLVM emitter runs a kernel's bodies once per loop it emits (a wide loop, split reduction
parts, the vector loop, the scalar tail, a chunked kernel's full and partial chunks): up to a
dozen times, each time redoing the lowering's index arithmetic through every view (``sym``
expressions built, simplified and hashed), which took about half of a kernel's emission.
Recording the calls once, with their index expressions already built, and replaying them on
each loop's handler does that arithmetic once. The same record is the kernel's description for
``kernel_structure``.

A body is a function of its loop index that calls ``ops`` with the values ``ops`` gave it (the
protocol every handler relies on: the dependency recorder returns opaque tokens too), so its
calls, recorded over the plan's index expressions, are the calls it makes under any handler. An
index read from memory (``indirect_indexing``) is a placeholder atom in the record, replaced in
later calls by the expression the replaying handler returns for it. A body that looks inside its
values cannot be recorded (``record`` raises ``NotRecordable``): it is run directly instead.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import sym
from ..ir import Pointwise
from ..virtualized import set_ops_handler

__all__ = ["Token", "BodyTrace", "NotRecordable", "record", "replay"]


class Token:
    """The value of the ``position``-th recorded call."""

    __slots__ = ("position",)

    def __init__(self, position: int):
        self.position = position


class NotRecordable(Exception):  # noqa: N818 - a condition, not a failure: the body runs directly
    """The body did something with its values besides handing them to ``ops``."""


@dataclass(frozen=True)
class BodyTrace:
    """``calls``: ``(op, args, kwargs, indirect atom or None)`` in order; ``result``: what the
    body returned (tokens for values)."""

    calls: tuple
    result: object


class _Recorder:
    def __init__(self):
        self.calls: list = []

    def _call(self, op: str, args: tuple, kwargs: dict, atom=None) -> Token:
        self.calls.append((op, args, kwargs, atom))
        return Token(len(self.calls) - 1)

    def indirect_indexing(self, value, size, wrap_negative=True, error="RuntimeError"):
        # ``error`` is the wrapper's business (the kernel sets the same flag for any): not recorded
        atom = sym.Indirect(f"_recorded{len(self.calls)}", size)
        self._call("indirect_indexing", (value, size, wrap_negative), {}, atom)
        return sym.as_expr(atom)

    def __getattr__(self, op: str):
        if op.startswith("_"):
            raise AttributeError(op)
        return lambda *args, **kwargs: self._call(op, args, kwargs)


def record(node, index, rindex) -> BodyTrace:
    """The calls ``node``'s body makes over ``index`` (and ``rindex`` for a reduction)."""
    recorder = _Recorder()
    try:
        with set_ops_handler(recorder):
            if isinstance(node.data, Pointwise):
                result = node.data.inner_fn(index)
            else:
                result = node.data.inner_fn(index, rindex)
    except (TypeError, AttributeError, ValueError) as e:
        raise NotRecordable(f"{node.name}: {e}") from e
    if not _holds_only_tokens(result):
        raise NotRecordable(f"{node.name} returned {type(result).__name__}")
    return BodyTrace(tuple(recorder.calls), result)


def _holds_only_tokens(result) -> bool:
    if isinstance(result, (tuple, list)):
        return all(_holds_only_tokens(r) for r in result)
    return isinstance(result, Token)


def replay(trace: BodyTrace, handler):
    """Make ``trace``'s calls on ``handler``; what the body returns under it."""
    values: list = []
    atoms: dict = {}  # recorded indirect atom -> the handler's expression for it
    for op, args, kwargs, atom in trace.calls:
        args = tuple(_resolved(a, values, atoms) for a in args)
        if kwargs:
            kwargs = {k: _resolved(v, values, atoms) for k, v in kwargs.items()}
        out = getattr(handler, op)(*args, **kwargs)
        if atom is not None:
            atoms[atom] = out
        values.append(out)
    return _resolved(trace.result, values, atoms)


def _resolved(value, values: list, atoms: dict):
    cls = value.__class__
    if cls is Token:
        return values[value.position]
    if cls is tuple or cls is list:
        return cls(_resolved(v, values, atoms) for v in value)
    if atoms and isinstance(value, (sym.Expr, sym.Atom)):
        return sym.as_expr(value).subs(atoms)
    return value
