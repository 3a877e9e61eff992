"""The zip container of PyTorch checkpoints: named records under one folder, stored uncompressed.

``torch.save`` writes ``<folder>/data.pkl``, ``byteorder``, ``data/<key>`` for each storage,
``version`` and a few bookkeeping records, each record's bytes starting at a multiple of 64 so a
loader may map the file and view the storages in place (``mmap=True``). ``ArchiveWriter`` lays
records out the same way with the standard ``zipfile`` module (the padding goes in each local
header's extra field); ``ArchiveReader`` finds the folder, reads records and, for ``mmap``, the
byte offset of a record's data in the file.
"""

from __future__ import annotations

import io
import os
import struct
import uuid
import zipfile

__all__ = ["ArchiveWriter", "ArchiveReader", "DamagedArchiveError"]

ALIGNMENT = 64
FILE_FORMAT_VERSION = "3\n"  # what PyTorch's reader checks for in ``<folder>/version``
_LOCAL_HEADER = struct.Struct("<4s2B4HL2L2H")  # zipfile's local file header layout (30 bytes)
_PADDING_ID = b"FB"  # the extra-field id PyTorch's writer uses for its alignment padding
_ZIP64_LOCAL_EXTRA = 20  # bytes zipfile adds to a local header for a zip64 record
_FIXED_TIME = (1980, 1, 1, 0, 0, 0)  # same bytes for the same checkpoint


class DamagedArchiveError(RuntimeError):
    """A zip archive that is truncated, corrupt or lacks a record a checkpoint needs."""


class ArchiveWriter:
    """Writes ``<folder>/<name>`` records, each record's data aligned to 64 bytes.

    ``target`` is a path or a binary file object; an unseekable stream gets the archive in one
    write at ``close`` (zipfile needs to seek back to fill in sizes).
    """

    def __init__(self, target, folder: str = "archive"):
        self._folder = folder
        self._final = self._buffer = None
        if not isinstance(target, (str, os.PathLike)) and not _seekable(target):
            self._final, self._buffer = target, io.BytesIO()
            target = self._buffer
        self._zip = zipfile.ZipFile(
            os.fspath(target) if isinstance(target, os.PathLike) else target,
            "w",
            compression=zipfile.ZIP_STORED,
            allowZip64=True,
        )

    def write_record(self, name: str, data) -> None:
        """Store ``data`` (bytes, a str, or a 1-D uint8 buffer) as ``<folder>/<name>``."""
        if isinstance(data, str):
            data = data.encode("utf-8")
        data = memoryview(data).cast("B")
        info = zipfile.ZipInfo(f"{self._folder}/{name}", date_time=_FIXED_TIME)
        info.compress_type = zipfile.ZIP_STORED
        info.external_attr = 0o600 << 16
        zip64 = data.nbytes * 1.05 > zipfile.ZIP64_LIMIT  # zipfile's own test for a record
        header = _LOCAL_HEADER.size + len(info.filename.encode("utf-8")) + 4
        header += _ZIP64_LOCAL_EXTRA if zip64 else 0
        pad = -(self._zip.fp.tell() + header) % ALIGNMENT
        info.extra = _PADDING_ID + struct.pack("<H", pad) + b"Z" * pad
        self._zip.writestr(info, data)

    def close(self) -> None:
        self.write_record("version", FILE_FORMAT_VERSION)
        self.write_record(".data/serialization_id", _serialization_id())
        self._zip.close()
        if self._final is not None:
            self._final.write(self._buffer.getvalue())

    def abort(self) -> None:
        self._zip.close()

    def __enter__(self) -> ArchiveWriter:
        return self

    def __exit__(self, exc_type, *rest) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


def _seekable(f) -> bool:
    try:
        return bool(f.seekable()) and f.tell() >= 0
    except (AttributeError, OSError):
        return False


def _serialization_id() -> str:
    """40 decimal digits, like PyTorch's record (an identifier of this save, nothing more)."""
    return str(uuid.uuid4().int).rjust(40, "0")[:40]


class ArchiveReader:
    """The records of a checkpoint's zip archive, addressed without their folder prefix."""

    def __init__(self, source, name: str):
        self.name = name
        try:
            self._zip = zipfile.ZipFile(source, "r")
        except zipfile.BadZipFile as error:
            raise DamagedArchiveError(
                f"{name} is a damaged or truncated zip archive ({error}): the checkpoint was not "
                "completely written or copied"
            ) from None
        self._source = source
        self._infos: dict[str, zipfile.ZipInfo] = {}
        self.folder = ""
        for info in self._zip.infolist():
            folder, _, record = info.filename.partition("/")
            if record:
                if not self.folder:
                    self.folder = folder
                if folder == self.folder:
                    self._infos[record] = info

    def has_record(self, record: str) -> bool:
        return record in self._infos

    def records(self) -> list[str]:
        return list(self._infos)

    def read(self, record: str) -> bytes:
        info = self._info(record)
        try:
            return self._zip.read(info)
        except (zipfile.BadZipFile, EOFError, OSError, ValueError) as error:
            raise DamagedArchiveError(
                f"{self.name}: record {info.filename!r} cannot be read ({error}): the checkpoint "
                "is damaged"
            ) from None

    def data_offset(self, record: str) -> int | None:
        """Where ``record``'s bytes start in the file, or None if they are compressed."""
        info = self._info(record)
        if info.compress_type != zipfile.ZIP_STORED:
            return None
        fp = self._zip.fp
        fp.seek(info.header_offset)
        header = fp.read(_LOCAL_HEADER.size)
        if len(header) != _LOCAL_HEADER.size or header[:4] != b"PK\x03\x04":
            raise DamagedArchiveError(f"{self.name}: bad local header for {info.filename!r}")
        name_length, extra_length = struct.unpack("<HH", header[26:30])
        return info.header_offset + _LOCAL_HEADER.size + name_length + extra_length

    def size(self, record: str) -> int:
        return self._info(record).file_size

    def _info(self, record: str) -> zipfile.ZipInfo:
        info = self._infos.get(record)
        if info is None:
            raise DamagedArchiveError(
                f"{self.name} has no record {self.folder}/{record}: the checkpoint is damaged or "
                "was not written by torch.save / kiln.save"
            )
        return info

    def close(self) -> None:
        self._zip.close()

    def __enter__(self) -> ArchiveReader:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
