"""The one-file container of exported programs and compiled packages: a zip with a manifest.

``MANIFEST.json`` names the kind of file, its format version and, for every other part, its size
and SHA-256. Reading checks the kind, refuses versions newer than this kiln reads, and checks
every part against the manifest (and zip's own CRCs), so a truncated, damaged or edited file is
an ``ExportFileError`` saying which part is wrong — never a silently different model. Parts are
stored uncompressed: weights do not compress, and loading then costs one read per part.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import zipfile
from typing import IO

__all__ = ["ExportFileError", "PackageError", "write_container", "read_container"]

MANIFEST = "MANIFEST.json"


class ExportFileError(RuntimeError):
    """A saved program or package cannot be loaded as it is: truncated, damaged, edited, of
    another kind, or of a format newer than this kiln reads."""


class PackageError(ExportFileError):
    """A compiled package cannot run here (a CPU without the features it was built for)."""


def _describe(f) -> str:
    return repr(os.fspath(f)) if isinstance(f, (str, os.PathLike)) else "the file object"


def write_container(f, kind: str, version: int, parts: dict[str, bytes], info: dict) -> None:
    """Write ``parts`` and a manifest (``kind``, ``version``, checksums, ``info``) to ``f``."""
    manifest = {
        "format": kind,
        "version": version,
        "parts": {
            name: {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
            for name, data in parts.items()
        },
        **info,
    }
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr(MANIFEST, json.dumps(manifest, indent=1, sort_keys=True))
        for name, data in parts.items():
            archive.writestr(name, data)
    data = buffer.getvalue()
    if isinstance(f, (str, os.PathLike)):
        path = os.fspath(f)
        tmp = f"{path}.tmp{os.getpid()}"
        with open(tmp, "wb") as out:
            out.write(data)
        os.replace(tmp, path)  # a reader never sees half a file
    else:
        f.write(data)


def read_container(f, kind: str, max_version: int, other_kinds: dict[str, str]) -> tuple:
    """``(manifest, {part name: bytes})`` of a container of ``kind``, every part verified.

    ``other_kinds``: for files of a different kind, what to use instead (named in the error).
    """
    where = _describe(f)
    try:
        data = _read_all(f)
        archive = zipfile.ZipFile(io.BytesIO(data))
        manifest = json.loads(archive.read(MANIFEST))
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError) as e:
        raise ExportFileError(
            f"{where} is not a complete kiln file (truncated or not a kiln file): {e}"
        ) from None
    except KeyError:
        raise ExportFileError(f"{where} has no {MANIFEST}: it is not a kiln file") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise ExportFileError(f"{where}: its {MANIFEST} is damaged: {e}") from None
    if not isinstance(manifest, dict) or "format" not in manifest or "version" not in manifest:
        raise ExportFileError(f"{where}: its {MANIFEST} is not a kiln manifest")
    found = manifest["format"]
    if found != kind:
        instead = other_kinds.get(found)
        hint = f"; {instead}" if instead else ""
        raise ExportFileError(f"{where} is a {found!r} file, not a {kind!r} file{hint}")
    version = manifest["version"]
    if not isinstance(version, int) or version > max_version:
        raise ExportFileError(
            f"{where} has {kind} format version {version}, newer than the {max_version} this "
            "kiln reads: load it with a newer kiln"
        )
    listed = manifest.get("parts")
    if not isinstance(listed, dict):
        raise ExportFileError(f"{where}: its {MANIFEST} lists no parts")
    present = set(archive.namelist()) - {MANIFEST}
    if present != set(listed):
        extra, missing = sorted(present - set(listed)), sorted(set(listed) - present)
        raise ExportFileError(
            f"{where} was modified: parts missing {missing}, parts not in the manifest {extra}"
        )
    parts = {}
    for name, record in listed.items():
        try:
            blob = archive.read(name)
        except (zipfile.BadZipFile, EOFError, OSError) as e:
            raise ExportFileError(f"{where}: part {name} is damaged: {e}") from None
        if len(blob) != record.get("size") or hashlib.sha256(blob).hexdigest() != record.get(
            "sha256"
        ):
            raise ExportFileError(
                f"{where}: the checksum of part {name} does not match its manifest: the file "
                "was modified or damaged after it was written"
            )
        parts[name] = blob
    return manifest, parts


def _read_all(f: str | os.PathLike | IO[bytes]) -> bytes:
    if isinstance(f, (str, os.PathLike)):
        with open(f, "rb") as src:
            return src.read()
    return f.read()
