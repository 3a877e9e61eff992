"""Files of the on-disk compile caches: each one names the key it was written for.

Compiled objects and compiled-graph index entries are found by a key in the file's name, but a
name proves nothing: files get swapped, copied, truncated or bit-flipped, and loading the machine
code of another graph into this one corrupts memory. So every file is a record — one header line
``KILNREC 1 <key> <sha256 of payload> <payload bytes>`` and the payload — and a reader gets the
payload only for the key it asks for with a matching checksum; anything else is a miss that the
caller recompiles (rewriting the file when it can). A cache directory that cannot be written costs
speed, never correctness: writes fail quietly, and ``KILN_LOGS=inductor`` says why, once per
directory.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
import threading
from pathlib import Path

__all__ = ["cache_root", "pack", "read_record", "unpack", "write_record"]

# the compilers' caches report here (``KILN_LOGS=inductor`` shows why a file was ignored)
log = logging.getLogger("kiln.inductor")

_MAGIC = b"KILNREC"
_VERSION = b"1"
_MAX_HEADER = 512  # a header longer than this is not one of ours

_unwritable_reported: set[str] = set()
_report_lock = threading.Lock()


def cache_root() -> Path:
    """The folder every compile cache lives under, each in its own subfolder (``llvm``,
    ``triton``, ``python`` ...): ``$KILN_CACHE_DIR``, else ``~/.cache/kiln``."""
    root = os.environ.get("KILN_CACHE_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "kiln"
    )
    return Path(root)


def pack(key: str, payload: bytes) -> bytes:
    """The bytes of a record holding ``payload`` for ``key``."""
    if not key or any(c.isspace() for c in key):
        raise ValueError(f"a cache key is a non-empty word, got {key!r}")
    digest = hashlib.sha256(payload).hexdigest()
    header = b" ".join([_MAGIC, _VERSION, key.encode(), digest.encode(), b"%d" % len(payload)])
    return header + b"\n" + payload


def unpack(blob: bytes, key: str) -> tuple[bytes | None, str]:
    """``(payload, "")`` when ``blob`` is a sound record written for ``key``, else
    ``(None, why not)``."""
    end = blob.find(b"\n", 0, _MAX_HEADER)
    if end < 0:
        return None, "no record header"
    fields = blob[:end].split(b" ")
    if len(fields) != 5 or fields[0] != _MAGIC:
        return None, "no record header"
    if fields[1] != _VERSION:
        return None, f"record format {fields[1].decode(errors='replace')!r}"
    if fields[2] != key.encode():
        return None, f"written for another key ({fields[2][:16].decode(errors='replace')}...)"
    payload = blob[end + 1 :]
    if not fields[4].isdigit() or int(fields[4]) != len(payload):
        return None, f"truncated or padded ({len(payload)} payload bytes, header says {fields[4]})"
    if hashlib.sha256(payload).hexdigest().encode() != fields[3]:
        return None, "checksum mismatch (damaged)"
    return payload, ""


def read_record(path: Path, key: str) -> bytes | None:
    """The payload stored at ``path`` for ``key``; None when the file is absent or is not a sound
    record for ``key`` (swapped, stale, truncated or damaged: logged, left for the caller's
    rewrite to replace)."""
    try:
        blob = path.read_bytes()
    except OSError:
        return None
    payload, why = unpack(blob, key)
    if payload is None:
        log.info("inductor: ignoring cache file %s: %s; recompiling", path, why)
    return payload


def write_record(path: Path, key: str, payload: bytes) -> bool:
    """Store ``payload`` for ``key`` at ``path`` atomically (a reader never sees half a record);
    False when the directory cannot be written (then the caller's result lives in memory only)."""
    blob = pack(key, payload)
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=path.suffix)
        with os.fdopen(fd, "wb") as handle:
            handle.write(blob)
        os.replace(tmp, path)
        return True
    except OSError as error:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
        _report_unwritable(path, error)
        return False


def _report_unwritable(path: Path, error: OSError) -> None:
    root = str(path.parent.parent)
    with _report_lock:
        if root in _unwritable_reported:
            return
        _unwritable_reported.add(root)
    log.info(
        "inductor: cannot write the compile cache under %s (%s: %s); compiled code is kept in "
        "memory only",
        root,
        type(error).__name__,
        error,
    )
