"""``KILN_LOGS`` and ``KILN_DEBUG_DIR``: what the compiler tells the user, and where it dumps files.

``KILN_LOGS=graph,graph_breaks,recompiles,guards,bytecode`` (read at import; ``set_logs`` changes
it at run time) prints those stages to stderr through the ``kiln.<artifact>`` loggers.
``KILN_DEBUG_DIR=dir`` writes each captured graph, its guards and the transformed bytecode to
numbered files there. Nothing here runs on a cache hit.

Each compiler stage also reports its time through ``compile_stage(name)``; while a
``recording_compile_stages()`` block is open (the bench opens one around a compile) the seconds
are summed per stage, each second charged to the innermost stage only. With no recorder open a
stage costs one list check.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import sys
import threading
import time
from collections.abc import Iterator

__all__ = [
    "ARTIFACTS",
    "COMPILE_STAGES",
    "set_logs",
    "enabled",
    "log",
    "debug_dir",
    "dump",
    "compile_stage",
    "recording_compile_stages",
]

ARTIFACTS = (
    "graph",
    "graph_breaks",
    "recompiles",
    "guards",
    "bytecode",
    "aot",
    "inductor",
    "output_code",
    "cudagraphs",
)

_enabled: set[str] = set()
_dump_counter = itertools.count()


class _StderrHandler(logging.Handler):
    """Writes to whatever ``sys.stderr`` is at the time (so test capture sees it)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            sys.stderr.write(self.format(record) + "\n")
        except Exception:  # logging must never break compiled code
            self.handleError(record)


_handler = _StderrHandler()
_handler.setFormatter(logging.Formatter("[%(name)s] %(message)s"))
_root = logging.getLogger("kiln")
_root.addHandler(_handler)
_root.propagate = False


def set_logs(spec: str | None = None, **artifacts: bool) -> None:
    """Enable log artifacts: ``set_logs("graph,recompiles")`` or ``set_logs(graph=True)``;
    ``set_logs("")`` turns everything off."""
    # check every name before changing anything: a rejected spec must leave the switches as they were
    chosen = None
    if spec is not None:
        chosen = {name.strip() for name in spec.replace("+", "").split(",")} - {""}
        for name in sorted(chosen):
            if name not in ARTIFACTS:
                raise ValueError(
                    f"unknown KILN_LOGS artifact {name!r}; known: {', '.join(ARTIFACTS)}"
                )
    for name in artifacts:
        if name not in ARTIFACTS:
            raise ValueError(f"unknown log artifact {name!r}; known: {', '.join(ARTIFACTS)}")
    if chosen is not None:
        _enabled.clear()
        _enabled.update(chosen)
    for name, on in artifacts.items():
        (_enabled.add if on else _enabled.discard)(name)
    for name in ARTIFACTS:
        logging.getLogger(f"kiln.{name}").setLevel(
            logging.INFO if name in _enabled else logging.WARNING
        )


def enabled(artifact: str) -> bool:
    return artifact in _enabled


def log(artifact: str, message: str) -> None:
    """Print ``message`` under ``[kiln.<artifact>]`` if that artifact is on."""
    if artifact in _enabled:
        logging.getLogger(f"kiln.{artifact}").info(message)


def debug_dir() -> str | None:
    return os.environ.get("KILN_DEBUG_DIR") or None


def dump(name: str, suffix: str, text: str) -> str | None:
    """Write ``text`` to ``$KILN_DEBUG_DIR/<n>_<name>.<suffix>``; returns the path (or None)."""
    root = debug_dir()
    if root is None:
        return None
    os.makedirs(root, exist_ok=True)
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in name)
    path = os.path.join(root, f"{next(_dump_counter):04d}_{safe}.{suffix}")
    with open(path, "w") as f:
        f.write(text)
    return path


# the stages a compile goes through, outermost first: bytecode capture and guards; AOT autograd
# (functionalize, trace the joint graph, partition); inductor (lowering, scheduling, writing kernel
# source); codegen (LLVM optimization and machine code, Triton compiles)
COMPILE_STAGES = ("dynamo", "aot", "inductor", "codegen")

_stage_recorders: list[dict[str, float]] = []
_stage_lock = threading.Lock()
_stage_stack = threading.local()  # [name, time the name last started being charged] per thread
# per stage, the spans charged while recorders are open (disjoint, in order): a stage that
# several threads run at once (LLVM on the JIT's thread and for its helper process) is charged
# its wall time once
_charged_spans: dict[str, list[list[float]]] = {}


def _charge(stage: str, start: float, end: float) -> None:
    with _stage_lock:
        spans = _charged_spans.setdefault(stage, [])
        seconds = end - start
        for span in spans:  # take out what another thread's span of this stage covered
            seconds -= max(0.0, min(end, span[1]) - max(start, span[0]))
        spans.append([start, end])
        spans.sort()
        merged = [spans[0]]
        for span in spans[1:]:
            if span[0] <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], span[1])
            else:
                merged.append(span)
        _charged_spans[stage] = merged
        for totals in _stage_recorders:
            totals[stage] = totals.get(stage, 0.0) + max(0.0, seconds)


@contextlib.contextmanager
def compile_stage(name: str) -> Iterator[None]:
    """Time the enclosed work as compiler stage ``name`` (one of ``COMPILE_STAGES``) for any
    open recorder; a nested stage's time is taken out of the enclosing one, and a stage run by
    several threads at once is charged its wall time once."""
    if not _stage_recorders:
        yield
        return
    stack = _stage_stack.__dict__.setdefault("frames", [])
    now = time.perf_counter()
    if stack:
        outer = stack[-1]
        _charge(outer[0], outer[1], now)
    frame = [name, now]
    stack.append(frame)
    try:
        yield
    finally:
        end = time.perf_counter()
        stack.pop()
        _charge(name, frame[1], end)
        if stack:
            stack[-1][1] = end


@contextlib.contextmanager
def recording_compile_stages() -> Iterator[dict[str, float]]:
    """Sum the seconds spent in each compile stage (in every thread) while the block runs; the
    yielded dict fills in as stages finish."""
    totals: dict[str, float] = {}
    with _stage_lock:
        if not _stage_recorders:
            _charged_spans.clear()
        _stage_recorders.append(totals)
    try:
        yield totals
    finally:
        with _stage_lock:
            _stage_recorders.remove(totals)


try:
    set_logs(os.environ.get("KILN_LOGS", ""))
except ValueError as _error:  # a typo in the environment must not break ``import kiln``
    import warnings

    warnings.warn(f"KILN_LOGS ignored: {_error}", RuntimeWarning, stacklevel=1)
