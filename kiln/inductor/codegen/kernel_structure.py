"""Kernels equal up to buffer names, recognized before their LLVM IR is emitted.

A transformer's blocks lower to the same kernels once per block (a 12-layer GPT training step
schedules 302 kernels, 82 of them distinct), and emitting LLVM IR for a kernel and printing it is
the largest part of a cold compile. ``structure_key`` describes everything the emitter reads — the
loop plan, each node's body as the ``ops`` calls it makes over the plan's index expressions (its
``body_trace`` record, which the emitter then replays instead of running the body again), its
store offsets, dtypes, storage sizes, which buffers stay in registers — with every buffer named by
its argument position, the way ``cpu._canonical_names`` names them in the IR. Two kernels with the
same key emit the same (canonically named) IR, so the second takes the first's (``EmittedKernels``)
instead of emitting it again.

A description is rendered, never guessed: an argument of a type it does not know, or a body that
does something other than call ``ops`` with its values, gives no key, and the kernel is emitted as
before. ``KILN_VERIFY_KERNEL_REUSE=1`` (the test suite sets it) emits every reused kernel anyway
and raises if its IR differs from the one reused.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import threading
from collections import OrderedDict

from ...runtime import dtypes as dt
from ...runtime.symbolic import SymInt, fold_pinned
from .. import sym
from ..ir import ComputedBuffer, Pointwise, Reduction
from .body_trace import BodyTrace, NotRecordable, Token, record

__all__ = ["structure_key", "kernel_shape", "EmittedKernels", "EMITTED", "verify_reuse"]


def verify_reuse() -> bool:
    """Whether a reused kernel is emitted anyway and compared (``KILN_VERIFY_KERNEL_REUSE``)."""
    return os.environ.get("KILN_VERIFY_KERNEL_REUSE", "") not in ("", "0")


class _UndescribableError(Exception):
    """Something in a kernel the description cannot render: no key, emit it."""


def _render(value) -> str:
    """Text that tells apart every value a body passes to ``ops`` (``repr`` of a float keeps
    -0.0, nan and every bit of precision; sizes of loop variables are in the plan's text)."""
    cls = value.__class__
    if cls is Token:
        return f"t{value.position}"
    if cls in (int, float, bool, str) or value is None:
        return repr(value)
    if cls is SymInt:
        # the emitter writes a symbol a guard pinned as its constant (``fold_pinned``), and the
        # pin can come between two compiles of one graph: key what it will write
        value = fold_pinned(value)
        if value.__class__ is int:
            return repr(value)
    if cls in (tuple, list):
        return "(" + ",".join(_render(v) for v in value) + ")"
    if isinstance(value, (sym.Expr, sym.Atom, SymInt)):
        return f"<{value!r}>"
    if isinstance(value, dt.dtype):
        return value.name
    raise _UndescribableError(cls.__name__)


def _render_plan(value, label) -> str:
    """The loop plan's fields, with buffers (objects or names) by label and variables with their
    sizes; ``kernel`` is left out (its nodes are described one by one)."""
    if isinstance(value, ComputedBuffer):
        return label(value.name)
    if isinstance(value, str):
        return label(value)
    if isinstance(value, sym.Var):
        return f"{value.name}:{_render(value.size)}"
    if isinstance(value, (list, tuple)):
        return "(" + ",".join(_render_plan(v, label) for v in value) + ")"
    if isinstance(value, (set, frozenset)):
        return "{" + ",".join(sorted(_render_plan(v, label) for v in value)) + "}"
    if isinstance(value, dict):
        items = sorted((_render_plan(k, label), _render_plan(v, label)) for k, v in value.items())
        return "{" + ",".join(f"{k}:{v}" for k, v in items) + "}"
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = (
            f"{f.name}={_render_plan(getattr(value, f.name), label)}"
            for f in dataclasses.fields(value)
            if f.name != "kernel"
        )
        return f"{type(value).__name__}(" + ",".join(fields) + ")"
    return _render(value)


def structure_key(
    plan, names: list, local: list, locals_: set, dtypes: dict, sizes: dict, symbols
) -> tuple[str | None, dict]:
    """A digest of what the LLVM emitter reads for ``plan``'s kernel over buffers ``names``
    (arguments, in order) and ``local`` (its buffers that are not arguments), or None when some
    part of it cannot be described; and the bodies' records (``body_trace``, by node name),
    which the emitter replays rather than running the bodies again."""
    positions: dict[str, int] = {}
    for position, name in enumerate([*names, *local]):
        positions.setdefault(name, position)

    def label(name: str) -> str:
        position = positions.get(name)
        return repr(name) if position is None else f"#{position}"

    traces: dict = {}
    try:
        parts = [
            _render_plan(plan, label),
            ",".join(f"{getattr(dtypes.get(n), 'name', None)}:{sizes.get(n)}" for n in names),
            ",".join(f"{s.name}[{s.lower},{s.upper}]" for s in symbols),
        ]
        for node in plan.kernel.nodes:
            index, rindex = plan.node_index[node.name]
            traces[node.name] = trace = record(node, index, rindex)
            parts.append(_describe_node(node, index, trace, label, locals_))
    except (_UndescribableError, NotRecordable):
        return None, traces
    return hashlib.sha256("\n".join(parts).encode()).hexdigest(), traces


def _render_calls(trace: BodyTrace, label) -> list[str]:
    """Each call a body made to ``ops``, a loaded buffer by its label (argument position)."""
    calls = []
    for op, args, kwargs, _ in trace.calls:
        if op == "load":
            rendered = f"({label(args[0])},{_render(args[1:])})"
        else:
            rendered = _render(args)
        if kwargs:
            rendered += _render(sorted(kwargs.items()))
        calls.append(op + rendered)
    return calls


def _describe_node(node, index, trace: BodyTrace, label, locals_: set) -> str:
    data = node.data
    fields = [
        label(node.name),
        type(data).__name__,
        node.dtype.name,
        "local" if node.name in locals_ else "stored",
        _render(node.layout.offset_expr(index)),
        _render(tuple(data.ranges)),
    ]
    if not isinstance(data, (Pointwise, Reduction)):
        raise _UndescribableError(type(data).__name__)
    if isinstance(data, Reduction):
        fields += [
            _render(tuple(data.reduction_ranges)),
            data.reduction_type,
            data.src_dtype.name,
        ]
    calls = [f"t{position}={call}" for position, call in enumerate(_render_calls(trace, label))]
    return " ".join(fields) + "\n" + "\n".join(calls) + f"\n->{_render(trace.result)}"


def kernel_shape(kernel, dtypes: dict, sizes: dict, symbols) -> tuple[str, list] | None:
    """A digest of a scheduled kernel as the loop planner, the argument list and the emitter see
    it, before any of them runs, and the buffer names it was taken over (in order of first
    appearance: that order labels them in the digest); None when some part of it cannot be
    described.

    The digest holds the kernel's loops and, per node, its kind, dtype, loops, store offset,
    whether it stays local or internal (or writes into another node's memory), and its body's
    ``ops`` calls recorded over the kernel's own loop variables, plus every buffer's dtype and
    storage size. Planning, naming the arguments and describing a kernel cost about what
    emitting it does, and GPT-2 small's step schedules 573 kernels of which ~100 differ up to
    buffer names: two kernels with the same digest plan, take their arguments and emit alike
    up to the renaming of one's names to the other's, so only the first is worked out."""
    seen: list = []
    positions: dict = {}

    def label(name: str) -> str:
        position = positions.get(name)
        if position is None:
            position = positions[name] = len(seen)
            seen.append(name)
        return f"#{position}"

    outer, inner = tuple(kernel.outer), tuple(kernel.inner)
    outer_vars = [sym.Var(f"o{i}", s) for i, s in enumerate(outer)]
    inner_vars = [sym.Var(f"i{i}", s) for i, s in enumerate(inner)]
    try:
        parts = [f"{_render(outer)} {_render(inner)}"]
        for node in kernel.nodes:
            data = node.data
            if not isinstance(data, (Pointwise, Reduction)):
                return None
            index, rindex = kernel.node_vars(node, outer_vars, inner_vars)
            trace = record(node, index, rindex)
            name = node.name
            fields = [
                label(name),
                type(data).__name__,
                node.dtype.name,
                "local" if name in kernel.locals else "",
                "internal" if name in kernel.internal else "",
                label(kernel.aliases[name]) if name in kernel.aliases else "",
                _render(node.layout.offset_expr(index)),
                _render(tuple(data.ranges)),
            ]
            if isinstance(data, Reduction):
                fields += [
                    _render(tuple(data.reduction_ranges)),
                    data.reduction_type,
                    data.src_dtype.name,
                ]
            calls = _render_calls(trace, label)
            parts.append(
                " ".join(fields) + "\n" + "\n".join(calls) + f"\n->{_render(trace.result)}"
            )
        parts.append(
            ",".join(f"{getattr(dtypes.get(n), 'name', None)}:{sizes.get(n)}" for n in seen)
        )
        parts.append(",".join(f"{s.name}[{s.lower},{s.upper}]" for s in symbols))
    except (_UndescribableError, NotRecordable):
        return None
    return hashlib.sha256("\n".join(parts).encode()).hexdigest(), seen


class EmittedKernels:
    """Canonical IR by structure key, most recently used last, at most ``max_bytes`` of it
    (one per process: graphs compiled later reuse earlier graphs' kernels too)."""

    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self._texts: OrderedDict[str, tuple[str, str]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, key: str) -> tuple[str, str] | None:
        """``(kernel key, IR)`` emitted before under ``key``, or None."""
        with self._lock:
            found = self._texts.get(key)
            if found is not None:
                self._texts.move_to_end(key)
            return found

    def clear(self) -> None:
        with self._lock:
            self._texts.clear()
            self._bytes = 0

    def put(self, key: str, kernel_key: str, text: str) -> None:
        with self._lock:
            if key in self._texts:
                return
            self._texts[key] = (kernel_key, text)
            self._bytes += len(text)
            while self._bytes > self.max_bytes and len(self._texts) > 1:
                _, (_, dropped) = self._texts.popitem(last=False)
                self._bytes -= len(dropped)


# the process's kernels by structure key (``graph_index.clear_memory_cache`` forgets them too)
EMITTED = EmittedKernels(max_bytes=32 * 2**20)
