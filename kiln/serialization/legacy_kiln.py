"""Reading checkpoints in kiln's first format (before ``kiln.save`` wrote PyTorch's).

That format is a zip holding ``kiln_archive/data.json`` -- a JSON tree with typed records
(``{"$type": "tensor", "index": 0}``, tuples, dtypes, ...) -- raw little-endian buffers under
``kiln_archive/tensors/<n>``, and, for objects that are not a plain tree, ``data.pkl`` whose
persistent ids ``("tensor", n)`` name those buffers. Files written that way still load; a damaged
header is reported as such instead of surfacing as a KeyError deep in the reader.
"""

from __future__ import annotations

import base64
import io
import json
import pickle
import sys
from collections import Counter, OrderedDict
from collections.abc import Callable

import numpy as np

from ..runtime import dtypes as dt
from ..runtime.device import device
from ..runtime.tensor import Size, Tensor, wrap_array
from .unpicklers import TrustedUnpickler, WeightsOnlyUnpickler
from .zip_records import ArchiveReader

__all__ = ["is_legacy_kiln", "load_legacy_kiln"]

FOLDER = "kiln_archive"
_HEADER = "data.json"
_VERSION = 2  # 2: tensors name a storage span, byte offset and strides


# what a malformed header surfaces as while it is decoded
_DAMAGE = (KeyError, IndexError, TypeError, ValueError, AttributeError, RecursionError)


def is_legacy_kiln(archive: ArchiveReader) -> bool:
    return archive.folder == FOLDER and archive.has_record(_HEADER)


def _damaged(name: str, why: str) -> RuntimeError:
    return RuntimeError(f"kiln.load: {name} is a damaged kiln checkpoint: {why}")


class _Reader:
    def __init__(self, archive: ArchiveReader, header: dict, place: Callable):
        self.archive = archive
        self.records = header["tensors"]
        self.swap = header.get("byteorder", "little") != sys.byteorder
        self.place = place
        self.tensors: dict[int, Tensor] = {}
        self.spans: dict[int, np.ndarray] = {}

    def decode(self, value):
        if isinstance(value, list):
            return [self.decode(v) for v in value]
        if not isinstance(value, dict):
            return value
        kind = value.get("$type")
        if kind == "tensor":
            return self.tensor(value["index"])
        if kind == "float":
            return float(value["value"])
        if kind == "tuple":
            return tuple(self.decode(v) for v in value["items"])
        if kind in ("dict", "odict", "counter"):
            cls = {"dict": dict, "odict": OrderedDict, "counter": Counter}[kind]
            result = cls(dict((self.decode(k), self.decode(v)) for k, v in value["items"]))
            if "metadata" in value:
                result._metadata = self.decode(value["metadata"])
            return result
        if kind == "size":
            return Size(value["items"])
        if kind == "dtype":
            return dt._dtype_by_name(value["name"])
        if kind == "device":
            return device(value["name"])
        if kind == "bytes":
            return base64.b64decode(value["base64"])
        if kind == "complex":
            return complex(self.decode(value["real"]), self.decode(value["imag"]))
        if kind in ("set", "frozenset"):
            cls = set if kind == "set" else frozenset
            return cls(self.decode(v) for v in value["items"])
        raise ValueError(f"unknown record type {kind!r}")

    def tensor(self, index: int) -> Tensor:
        cached = self.tensors.get(index)
        if cached is not None:
            return cached
        rec = self.records[index]
        dtype = dt._dtype_by_name(rec["dtype"])
        if "storage" in rec:  # a view into a shared span
            array = np.ndarray(
                tuple(rec["shape"]),
                dtype.np,
                buffer=self._span(rec["storage"]),
                offset=rec["offset"],
                strides=tuple(rec["strides"]),
            )
        else:  # format 1: one contiguous buffer per tensor
            array = np.frombuffer(self._span(index), dtype.np).reshape(rec["shape"])
        if self.swap:
            array = array.byteswap()
        t = self.place(wrap_array(array, dtype), rec["device"])
        if rec["parameter"]:
            from ..nn.parameter import Parameter

            t = Parameter(t, requires_grad=rec["requires_grad"])
        elif rec["requires_grad"]:
            t.requires_grad_(True)
        self.tensors[index] = t
        return t

    def _span(self, index: int) -> np.ndarray:
        """The writable bytes of stored buffer ``index``, read once and shared by its views."""
        span = self.spans.get(index)
        if span is None:
            span = np.frombuffer(bytearray(self.archive.read(f"tensors/{index}")), np.uint8)
            self.spans[index] = span
        return span

    def persistent_load(self, pid):
        if not (isinstance(pid, tuple) and len(pid) == 2 and pid[0] == "tensor"):
            raise pickle.UnpicklingError(f"kiln.load: unknown persistent id {pid!r}")
        try:
            return self.tensor(pid[1])
        except _DAMAGE as error:
            raise _damaged(self.archive.name, f"{type(error).__name__}: {error}") from None


def load_legacy_kiln(archive: ArchiveReader, place: Callable, weights_only: bool):
    """The object stored in a kiln-format archive; ``place(tensor, saved_device)`` moves each
    tensor where ``map_location`` says."""
    name = archive.name
    try:
        header = json.loads(archive.read(_HEADER))
    except (ValueError, RecursionError) as error:
        raise _damaged(name, f"its header is not valid JSON ({error})") from None
    if not isinstance(header, dict) or header.get("format") != "kiln":
        raise _damaged(name, "its header does not describe a kiln checkpoint")
    if not isinstance(header.get("version"), int) or header["version"] > _VERSION:
        raise RuntimeError(
            f"kiln.load: {name} has kiln format version {header.get('version')!r}; this kiln "
            f"reads versions up to {_VERSION}"
        )
    if not isinstance(header.get("tensors"), list) or "root" not in header:
        raise _damaged(name, "its header lacks the tensor list or the root record")
    reader = _Reader(archive, header, place)
    root = header["root"]
    if isinstance(root, dict) and root.get("$type") == "pickle":
        data = archive.read("data.pkl")
        if weights_only:
            return WeightsOnlyUnpickler(data, reader.persistent_load).load()
        return TrustedUnpickler(io.BytesIO(data), reader.persistent_load).load()
    try:
        return reader.decode(root)
    except _DAMAGE as error:
        raise _damaged(name, f"{type(error).__name__}: {error}") from None
