"""``kiln.save`` / ``kiln.load``: PyTorch's checkpoint format, written and read without torch.

A checkpoint is PyTorch's zip archive: ``data.pkl`` (the object tree, pickled under PyTorch's
names -- ``pickler``), a ``data/<key>`` record of raw bytes for each storage (views saved
together share one), ``byteorder`` and ``version``. ``torch.load`` reads what ``kiln.save``
writes and ``kiln.load`` reads what ``torch.save`` writes: state dicts, optimizer states, nested
containers, whole objects. By default (``weights_only=True``, PyTorch's default since 2.6) the
pickle runs in a restricted interpreter that resolves only allowlisted globals
(``unpicklers``), so loading an untrusted file never runs its code. Checkpoints in kiln's first
format (``kiln_archive/data.json``) still load. Safetensors files: ``kiln.serialization.safetensors``.
"""

from __future__ import annotations

import io
import mmap as _mmap
import os
import pickle
import sys

import numpy as np

from ..runtime import cuda as _cuda
from ..runtime.device import as_device, cpu
from ..runtime.tensor import Tensor
from ..runtime.typed_storage import TypedStorage
from .legacy_kiln import is_legacy_kiln, load_legacy_kiln
from .pickled_names import LoadedStorage, StorageType
from .pickler import pickle_checkpoint
from .safe_globals import (
    add_safe_globals,
    clear_safe_globals,
    get_safe_globals,
    safe_globals,
    unsafe_globals_in,
)
from .unpicklers import TrustedUnpickler, WeightsOnlyUnpickler
from .zip_records import ArchiveReader, ArchiveWriter, DamagedArchiveError

__all__ = [
    "save",
    "load",
    "add_safe_globals",
    "clear_safe_globals",
    "get_safe_globals",
    "safe_globals",
    "get_unsafe_globals_in_checkpoint",
    "DEFAULT_PROTOCOL",
]

DEFAULT_PROTOCOL = 2  # PyTorch's: its weights-only unpickler expects protocol-2 opcodes
_LEGACY_TORCH_MAGIC = b"\x80\x02\x8a\x0al\xfc\x9cF\xf9 j\xa8P\x19"  # pickled 0x1950a86a20f9469cfc6c


def save(
    obj,
    f,
    pickle_module=None,
    pickle_protocol: int = DEFAULT_PROTOCOL,
    _use_new_zipfile_serialization: bool = True,
    _disable_byteorder_record: bool = False,
) -> None:
    """Write ``obj`` to ``f`` (a path or a binary file object) as ``torch.save`` would.

    Tensors, Parameters, dtypes, devices and ``Size`` are pickled under PyTorch's names, so the
    file loads with ``torch.load(f, weights_only=True)``; other objects pickle by their own
    class (loading them needs ``weights_only=False`` or ``add_safe_globals``, as in PyTorch).
    ``pickle_module`` is ignored: kiln's pickler writes the names.
    """
    data, plan = pickle_checkpoint(obj, pickle_protocol)
    with ArchiveWriter(f) as archive:
        archive.write_record("data.pkl", data)
        archive.write_record(".format_version", "1")
        archive.write_record(".storage_alignment", "64")
        if not _disable_byteorder_record:
            archive.write_record("byteorder", sys.byteorder)
        for key, record in plan.records():
            archive.write_record(f"data/{key}", record)


# ---------------------------------------------------------------------------- load


def _source_of(f) -> tuple[object, str, str | None]:
    """(what zipfile can read, a name for messages, the file's path if it has one)."""
    if isinstance(f, (str, os.PathLike)):
        path = os.fspath(f)
        return path, path, path
    name = getattr(f, "name", None)
    path = name if isinstance(name, str) and os.path.isfile(name) else None
    if not (hasattr(f, "seekable") and f.seekable()):
        return io.BytesIO(f.read()), str(name or type(f).__name__), None
    return f, str(name or type(f).__name__), path


def _peek(source, size: int = 16) -> bytes:
    if isinstance(source, str):
        with open(source, "rb") as fh:
            return fh.read(size)
    start = source.tell()
    head = source.read(size)
    source.seek(start)
    return head


def _not_a_checkpoint(name: str, head: bytes) -> Exception:
    if not head:
        return EOFError(f"kiln.load: {name} is empty (Ran out of input)")
    if head.startswith(_LEGACY_TORCH_MAGIC):
        return RuntimeError(
            f"kiln.load: {name} is in PyTorch's legacy format (torch.save with "
            "_use_new_zipfile_serialization=False, or PyTorch before 1.6), which kiln does not "
            "read; load and save it once with torch.save to get the zip format"
        )
    if len(head) >= 9 and head[8:9] == b"{":
        return pickle.UnpicklingError(
            f"kiln.load: {name} looks like a safetensors file: read it with "
            "kiln.serialization.safetensors.load_file"
        )
    return pickle.UnpicklingError(
        f"kiln.load: {name} is not a checkpoint: it does not start like a zip archive (the format "
        f"of torch.save and kiln.save), it starts with {head[:8]!r}"
    )


def _restore_location(location: str, map_location) -> str:
    """Where ``map_location`` (None, a device, a string or a dict) sends a saved location."""
    if map_location is None:
        return location
    if isinstance(map_location, dict):
        return map_location.get(location, location)
    return map_location


def _checked_device(target):
    dev = as_device(target)
    if dev.type == "cuda":
        if not _cuda.is_available():
            raise RuntimeError(
                "Attempting to deserialize object on a CUDA device but kiln.cuda.is_available() "
                "is False. If you are running on a CPU-only machine, please use kiln.load with "
                "map_location=kiln.device('cpu') to map your storages to the CPU."
            )
        count = _cuda.device_count()
        if dev.index is not None and dev.index >= count:
            raise RuntimeError(
                f"Attempting to deserialize object on CUDA device {dev.index} but "
                f"kiln.cuda.device_count() is {count}. Please use kiln.load with map_location "
                "to map your storages to an existing device."
            )
    return dev


class _StorageLoader:
    """``persistent_load`` for PyTorch archives: each storage record read (or mapped) once."""

    def __init__(self, archive: ArchiveReader, map_location, mapped: np.ndarray | None):
        self.archive = archive
        self.map_location = map_location
        self.mapped = mapped
        self.swap = False
        if archive.has_record("byteorder"):
            order = archive.read("byteorder").decode("ascii", "replace")
            if order not in ("little", "big"):
                raise RuntimeError(f"kiln.load: {archive.name}: unknown byte order {order!r}")
            self.swap = order != sys.byteorder
        self.loaded: dict[str, TypedStorage] = {}

    def __call__(self, pid) -> TypedStorage:
        if not isinstance(pid, tuple) or len(pid) != 5 or _ascii(pid[0]) != "storage":
            raise pickle.UnpicklingError(f"Only persistent_load of storage is allowed, got {pid!r}")
        _, storage_type, key, location, numel = pid
        if not isinstance(storage_type, StorageType):
            raise pickle.UnpicklingError(f"unknown storage type {storage_type!r}")
        key, location = _ascii(key), _ascii(location)
        storage = self.loaded.get(key)
        if storage is None:
            storage = self._read(key, storage_type, location, numel).as_typed()
            self.loaded[key] = storage
        return storage

    def _read(self, key: str, storage_type: StorageType, location: str, numel) -> LoadedStorage:
        record = f"data/{key}"
        dtype = storage_type.dtype
        expected = numel * (1 if storage_type.untyped else dtype.itemsize)
        size = self.archive.size(record)
        if size != expected:
            raise RuntimeError(
                f"kiln.load: {self.archive.name}: storage {key!r} should hold {expected} bytes "
                f"({numel} x {storage_type}) but its record has {size}: the checkpoint is damaged"
            )
        offset = self.archive.data_offset(record) if self.mapped is not None else None
        if offset is not None:
            raw = self.mapped[offset : offset + size]
        else:
            raw = np.frombuffer(bytearray(self.archive.read(record)), np.uint8)
        if self.swap and dtype.itemsize > 1:
            part = dtype.itemsize // (2 if dtype.is_complex else 1)
            raw.view(f"u{part}").byteswap(inplace=True)
        storage = LoadedStorage(raw, dtype, key, location)
        if callable(self.map_location):
            moved = self.map_location(storage, location)
            if moved is not None:
                if not isinstance(moved, LoadedStorage):
                    raise TypeError(
                        "kiln.load: map_location must return a storage (the one it was given, "
                        f"or its .cpu() / .cuda() / .to()), or None; it returned {type(moved)}"
                    )
                moved.device = _checked_device(moved.device)
                return moved
            target = location
        else:
            target = _restore_location(location, self.map_location)
        storage.device = _checked_device(target)
        return storage


def _ascii(value) -> str:
    return value.decode("ascii") if isinstance(value, bytes) else str(value)


def _place_legacy(map_location):
    """``place(tensor, saved_device)`` for kiln's first format."""

    def place(t: Tensor, saved: str) -> Tensor:
        if callable(map_location):
            moved = map_location(LoadedStorage(np.zeros(0, np.uint8), t.dtype, "", saved), saved)
            target = saved if moved is None else moved.device
        else:
            target = _restore_location(saved, map_location)
        dev = _checked_device(target)
        return t if dev is cpu else t.to(dev)

    return place


def _memory_map(path: str | None, name: str) -> np.ndarray:
    if path is None:
        raise ValueError(
            f"kiln.load: mmap=True needs a file path (or a file object with a name), got {name}"
        )
    with open(path, "rb") as fh:
        if os.fstat(fh.fileno()).st_size == 0:
            return np.zeros(0, np.uint8)
        return np.frombuffer(_mmap.mmap(fh.fileno(), 0, access=_mmap.ACCESS_COPY), np.uint8)


def load(
    f,
    map_location=None,
    pickle_module=None,
    *,
    weights_only: bool | None = None,
    mmap: bool | None = None,
    **pickle_load_args,
):
    """Read what ``kiln.save`` or ``torch.save`` wrote (a path or a binary file object).

    ``weights_only`` (default True, as in PyTorch 2.6+) loads tensors, containers, numbers,
    strings, dtypes, devices and sizes, plus classes allowlisted with ``add_safe_globals``, and
    never runs code from the file; ``weights_only=False`` unpickles anything (trust the
    source). ``map_location`` is a device, a string, a ``{saved: target}`` dict or
    ``fn(storage, saved_location)`` returning a storage (moved with ``.cuda()`` / ``.cpu()``)
    or None. ``mmap=True`` maps the file instead of reading it (copy-on-write).
    """
    if pickle_module is not None and weights_only:
        raise RuntimeError("Can not safely load weights when explicit pickle_module is specified")
    if weights_only is None:
        weights_only = pickle_module is None
    encoding = pickle_load_args.pop("encoding", "utf-8")
    if pickle_load_args:
        raise TypeError(f"kiln.load() got unexpected keyword arguments {sorted(pickle_load_args)}")
    source, name, path = _source_of(f)
    head = _peek(source)
    if not head.startswith((b"PK\x03\x04", b"PK\x05\x06")):
        raise _not_a_checkpoint(name, head)
    try:
        with ArchiveReader(source, name) as archive:
            if is_legacy_kiln(archive):
                return load_legacy_kiln(archive, _place_legacy(map_location), weights_only)
            return _load_archive(archive, map_location, weights_only, mmap, path, encoding)
    except DamagedArchiveError as error:
        raise RuntimeError(f"kiln.load: {error}") from None


def _load_archive(archive: ArchiveReader, map_location, weights_only, mmap, path, encoding):
    if archive.has_record("constants.pkl") or any(
        record.startswith("code/") for record in archive.records()
    ):
        raise RuntimeError(
            f"kiln.load: {archive.name} is a TorchScript archive (torch.jit.save): kiln cannot "
            "run TorchScript; save the model's state_dict with torch.save instead"
        )
    for record in ("data.pkl", "version"):
        if not archive.has_record(record):
            raise RuntimeError(
                f"kiln.load: {archive.name} is a zip archive but not a checkpoint: it has no "
                f"{record} record (torch.save and kiln.save write data.pkl, version, data/...)"
            )
    mapped = _memory_map(path, archive.name) if mmap else None
    storages = _StorageLoader(archive, map_location, mapped)
    data = archive.read("data.pkl")
    if weights_only:
        return WeightsOnlyUnpickler(data, storages, encoding).load()
    return TrustedUnpickler(io.BytesIO(data), storages, encoding).load()


def get_unsafe_globals_in_checkpoint(f) -> list[str]:
    """The ``module.name`` globals in a checkpoint that a ``weights_only`` load would refuse."""
    source, name, _ = _source_of(f)
    head = _peek(source)
    if not head.startswith((b"PK\x03\x04", b"PK\x05\x06")):
        raise _not_a_checkpoint(name, head)
    with ArchiveReader(source, name) as archive:
        return unsafe_globals_in(archive.read("data.pkl")) if archive.has_record("data.pkl") else []
