"""Python code objects of generated sources (guards, wrappers, graph modules), compiled once.

Every compile generates Python source — a frame's guard function, the inductor's wrapper that
calls the kernels, the graph modules — and ``compile()`` of it is a visible share of a warm
compile: nanoGPT's training step makes 190 KB of it, whose compiling took 35 ms of a 325 ms warm
compile, while loading the same code marshalled takes well under a millisecond. So a source is
compiled once per process (``_MEMORY``) and once per cache directory: its code object is stored
marshalled under ``$KILN_CACHE_DIR/python`` (default ``~/.cache/kiln/python``) as a
``cache_records`` record, keyed by the source, the file name given and the interpreter's bytecode
magic number (marshal's format and the bytecode differ between Python versions). A record that
is absent, damaged or written for another key is a miss: the source is compiled again and the
record rewritten; a directory that cannot be written only costs the speed.
"""

from __future__ import annotations

import hashlib
import importlib.util
import marshal
import threading
import types
from collections import OrderedDict
from pathlib import Path

from . import cache_records

__all__ = ["compile_source", "clear_memory"]

_MEMORY_ENTRIES = 256  # code objects kept in memory (generated sources run to ~0.5 MB)
_MEMORY: OrderedDict[str, types.CodeType] = OrderedDict()
_LOCK = threading.Lock()


def _key(source: str, filename: str) -> str:
    digest = hashlib.sha256(importlib.util.MAGIC_NUMBER)
    digest.update(filename.encode())
    digest.update(b"\0")
    digest.update(source.encode())
    return digest.hexdigest()


def compile_source(source: str, filename: str) -> types.CodeType:
    """``compile(source, filename, "exec")``, from memory or the disk cache when this source was
    compiled before (by this interpreter's version)."""
    key = _key(source, filename)
    with _LOCK:
        code = _MEMORY.get(key)
        if code is not None:
            _MEMORY.move_to_end(key)
            return code
    path = cache_records.cache_root() / "python" / key[:2] / key
    code = _load(path, key, filename)
    if code is None:
        code = compile(source, filename, "exec")
        cache_records.write_record(path, key, marshal.dumps(code))
    with _LOCK:
        _MEMORY[key] = code
        while len(_MEMORY) > _MEMORY_ENTRIES:
            _MEMORY.popitem(last=False)
    return code


def _load(path: Path, key: str, filename: str) -> types.CodeType | None:
    payload = cache_records.read_record(path, key)
    if payload is None:
        return None
    try:
        code = marshal.loads(payload)
    except (EOFError, ValueError, TypeError):
        return None
    if not isinstance(code, types.CodeType) or code.co_filename != filename:
        return None
    return code


def clear_memory() -> None:
    """Forget the code objects held in memory (the next compile of a source reads the disk)."""
    with _LOCK:
        _MEMORY.clear()
