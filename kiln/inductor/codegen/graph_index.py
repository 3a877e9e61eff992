"""The compiled-graph index: which objects, kernel functions and numpy fallbacks a lowered graph
compiled to, so that compiling it again loads the object without emitting LLVM IR.

Entries live in memory (least recently used first out once they hold more than
``kiln.inductor.config.compiled_graph_cache_bytes``, machine code counted) and on disk under
``$KILN_CACHE_DIR/llvm/graphs`` as ``cache_records`` records: an entry (and its IR, kept for
dumps) is read only for the graph key it was written for, and its object only for the object key
they name, so a swapped, stale or damaged file is a miss and the graph is compiled again. Dropping
an entry never frees code in use: each compiled kernel holds its ``CompiledModule``.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import threading
from collections import OrderedDict
from pathlib import Path

from ...runtime import cache_records
from . import kernel_structure
from .llvm import jit as llvm_jit

__all__ = [
    "GraphEntry",
    "clear_memory_cache",
    "expect",
    "memory_cache_bytes",
    "recall",
    "remember",
]

# what an entry costs beside its machine code: the record, dicts, strings
_ENTRY_BYTES = 1024


@dataclasses.dataclass(frozen=True)
class GraphEntry:
    """What a graph compiled to: each LLVM step's kernel as (compiled module, function name) —
    kernels the graph repeats, or shares with other graphs, share one — and the steps that run in
    numpy with the reason."""

    key: str
    kernels: dict[int, tuple[llvm_jit.CompiledModule, str]]
    numpy_steps: dict[int, str]
    ir_path: Path | None  # where the kernels' LLVM IR is stored for dumps (None: it is not)

    @property
    def nbytes(self) -> int:
        text = sum(len(f) for _, f in self.kernels.values()) + sum(
            map(len, self.numpy_steps.values())
        )
        modules = {id(m): m for m, _ in self.kernels.values()}
        return _ENTRY_BYTES + text + sum(m.nbytes for m in modules.values())

    def stored_ir(self) -> list | None:
        """The kernels' ``(function, IR)`` as stored on disk, or None when they are not there."""
        if self.ir_path is None:
            return None
        payload = cache_records.read_record(self.ir_path, self.key)
        if payload is None:
            return None
        try:
            return [(str(name), str(text)) for name, text in json.loads(payload)]
        except (ValueError, TypeError):
            return None


class _MemoryIndex:
    """Entries by (cache directory, key), least recently used first, within a byte budget."""

    def __init__(self):
        self._entries: OrderedDict[str, GraphEntry] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, key: str) -> GraphEntry | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
            return entry

    def put(self, key: str, entry: GraphEntry) -> None:
        from .. import config

        budget = config.compiled_graph_cache_bytes
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._bytes -= old.nbytes
            self._entries[key] = entry
            self._bytes += entry.nbytes
            while self._entries and self._bytes > budget:
                _, evicted = self._entries.popitem(last=False)
                self._bytes -= evicted.nbytes

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._bytes = 0

    @property
    def nbytes(self) -> int:
        return self._bytes


_MEMORY = _MemoryIndex()


def clear_memory_cache() -> None:
    """Forget the graphs (and kernels) compiled in this process; the next compile of one reads
    the disk."""
    llvm_jit.wait_for_background()
    _MEMORY.clear()
    llvm_jit.clear_kernel_memory()
    kernel_structure.EMITTED.clear()


def memory_cache_bytes() -> int:
    """What the in-memory index holds now, by its own count (machine code included)."""
    llvm_jit.wait_for_background()
    return _MEMORY.nbytes


def _memory_key(key: str) -> str:
    # a new cache directory starts cold, in memory too (benchmarks time cold compiles that way)
    return f"{llvm_jit.cache_dir()}:{key}"


def _entry_path(key: str) -> Path:
    return llvm_jit.cache_dir() / "graphs" / key[:2] / f"{key}.index"


def _ir_path(key: str) -> Path:
    return _entry_path(key).with_suffix(".ll")


def remember(
    key: str,
    kernels: dict[int, tuple[llvm_jit.CompiledModule, str]],
    numpy_steps: dict[int, str],
    kernel_ir: list,
) -> GraphEntry:
    """Record what the graph under ``key`` compiled to, in memory and on disk. The entry names
    where its kernels' IR (``(function, IR)`` pairs) went, so the caller need not keep it for
    dumps."""
    ir_path = _ir_path(key)
    if not (kernel_ir and cache_records.write_record(ir_path, key, json.dumps(kernel_ir).encode())):
        ir_path = None
    entry = GraphEntry(key, dict(kernels), dict(numpy_steps), ir_path)
    _MEMORY.put(_memory_key(key), entry)
    stored = {
        "kernels": [[i, module.key, name] for i, (module, name) in sorted(entry.kernels.items())],
        "numpy_steps": {str(i): why for i, why in entry.numpy_steps.items()},
    }
    cache_records.write_record(_entry_path(key), key, json.dumps(stored).encode())
    return entry


# memory key -> the background compile that will remember that graph (``expect``)
_EXPECTED: dict[str, concurrent.futures.Future] = {}


def expect(key: str, job: concurrent.futures.Future) -> None:
    """Note that ``job`` (compiling on the JIT's background thread) will remember the graph
    under ``key``: until it has, :func:`recall` waits for it instead of missing."""
    memory_key = _memory_key(key)
    _EXPECTED[memory_key] = job

    def done(_job):
        if _EXPECTED.get(memory_key) is job:
            del _EXPECTED[memory_key]

    job.add_done_callback(done)


def recall(key: str) -> GraphEntry | None:
    """The entry :func:`remember` made for ``key``, from memory or disk; None if there is none,
    or its file or object is not the one written for it."""
    memory_key = _memory_key(key)
    job = _EXPECTED.get(memory_key)
    if job is not None:
        concurrent.futures.wait([job])  # a failed compile remembered nothing: a miss
    entry = _MEMORY.get(memory_key)
    if entry is not None:
        return entry
    entry = _read_entry(key)
    if entry is not None:
        _MEMORY.put(memory_key, entry)
    return entry


def _read_entry(key: str) -> GraphEntry | None:
    payload = cache_records.read_record(_entry_path(key), key)
    if payload is None:
        return None
    try:
        stored = json.loads(payload)
        listed = [(int(i), str(obj), str(name)) for i, obj, name in stored["kernels"]]
        numpy_steps = {int(i): str(why) for i, why in stored["numpy_steps"].items()}
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
    by_object: dict[str, list[str]] = {}
    for _, obj, name in listed:
        by_object.setdefault(obj, []).append(name)
    modules = {}
    for obj, names in by_object.items():
        module = llvm_jit.shared_object(obj, tuple(dict.fromkeys(names)))
        if module is None:
            return None
        try:
            for name in names:
                module.address(name)
        except KeyError:
            return None
        modules[obj] = module
    kernels = {i: (modules[obj], name) for i, obj, name in listed}
    return GraphEntry(key, kernels, numpy_steps, _ir_path(key))
