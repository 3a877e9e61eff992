"""Where in the user's code a graph node comes from.

The tracer asks ``user_source()`` for each node it records. The answer is, in order: a source
pushed by whoever is replaying an existing graph (``Interpreter`` pushes each node's own
source), else the innermost stack frame outside the ``kiln`` package — except that a frame in a
``GraphModule``'s generated code maps back to the source of the node on that line, so tracing a
traced graph again keeps pointing at the user's code, and a frame running an autograd node's
backward (``apply``) answers the source of the forward op that made it (the tracer leaves it in
the autograd node's ``metadata["source"]``), so backward nodes point at the forward line.
"""

from __future__ import annotations

import bisect
import contextlib
import linecache
import os
import sys
import types

from ..autograd.graph import Node as BackwardNode
from ..runtime.state import per_thread

__all__ = ["user_source", "node_source", "register_generated", "forget_generated"]

_KILN_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep

# generated file name -> {line number: (source, source_text)}
_GENERATED: dict[str, dict[int, tuple[str, str | None]]] = {}


# generated file name -> (code object, instruction offsets where a line starts, their lines)
_LINE_TABLES: dict[str, tuple[types.CodeType, list[int], list[int | None]]] = {}


def register_generated(filename: str, lines: dict[int, tuple[str, str | None]]) -> None:
    """Record which user source each line of a generated file stands for."""
    _GENERATED[filename] = lines


def forget_generated(filename: str) -> None:
    _GENERATED.pop(filename, None)
    _LINE_TABLES.pop(filename, None)


def _generated_line(frame: types.FrameType) -> int | None:
    """``frame.f_lineno`` of a frame in generated code, by a bisection of the code's line table.
    ``f_lineno`` walks the table from the start: a traced graph of thousands of lines (GPT-2's
    optimizer step) made each of its nodes' lookups cost up to ~30 us, 0.3 s of a compile."""
    code = frame.f_code
    offset = frame.f_lasti
    table = _LINE_TABLES.get(code.co_filename)
    if table is None or table[0] is not code:
        starts, numbers = [], []
        for start, _, line in code.co_lines():
            starts.append(start)
            numbers.append(line)
        table = _LINE_TABLES[code.co_filename] = (code, starts, numbers)
    i = bisect.bisect_right(table[1], offset) - 1
    if offset < 0 or i < 0:
        return frame.f_lineno
    return table[2][i]


def _is_internal(filename: str) -> bool:
    return filename.startswith(_KILN_DIR) or filename.startswith("<kiln")


def user_source() -> tuple[str | None, str | None]:
    """``("path/file.py:LINE", "the line's text")`` of the code being traced, or ``(None, None)``."""
    pushed = per_thread.state.source_stack  # what this thread's replay pushed
    if pushed:
        return pushed[-1]
    frame = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        generated = _GENERATED.get(filename)
        if generated is not None:
            hit = generated.get(_generated_line(frame))
            if hit is not None:
                return hit
        elif not _is_internal(filename):
            text = linecache.getline(filename, frame.f_lineno).strip() or None
            return f"{filename}:{frame.f_lineno}", text
        elif frame.f_code.co_name == "apply":
            owner = frame.f_locals.get("self")
            if isinstance(owner, BackwardNode) and owner.metadata_ and "source" in owner.metadata_:
                return owner.metadata_["source"]
        frame = frame.f_back
    return None, None


@contextlib.contextmanager
def node_source(source: str | None, text: str | None = None):
    """Within the block, ``user_source()`` answers ``(source, text)`` (no-op when None)."""
    if source is None:
        yield
        return
    pushed = per_thread.state.source_stack
    pushed.append((source, text))
    try:
        yield
    finally:
        pushed.pop()
