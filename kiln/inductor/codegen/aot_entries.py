"""Where the inductor keeps AOT autograd cache entries (``kiln/aot/cache.py``): checksummed
``cache_records`` files under ``$KILN_CACHE_DIR/aot``, one per key. A file that is missing,
written for another key, truncated or damaged reads as a miss; the compile that follows rewrites
it. A directory that cannot be written keeps nothing, quietly (``cache_records``)."""

from __future__ import annotations

from pathlib import Path

from ...runtime import cache_records
from .llvm import jit as llvm_jit

__all__ = ["AOTEntryStore"]


class AOTEntryStore:
    """The entries of one backend configuration (``tag``: the backend's name and options)."""

    def __init__(self, tag: str):
        self.tag = tag

    def read(self, key: str) -> bytes | None:
        return cache_records.read_record(_entry_path(key), key)

    def write(self, key: str, payload: bytes) -> None:
        cache_records.write_record(_entry_path(key), key, payload)


def _entry_path(key: str) -> Path:
    # next to the kernels' folder, so one KILN_CACHE_DIR holds (and clears) every cache
    return llvm_jit.cache_dir().parent / "aot" / key[:2] / f"{key}.entry"
