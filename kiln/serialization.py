"""``kiln.save`` / ``kiln.load``: a checkpoint format whose common case runs no code on load.

A checkpoint is an uncompressed zip archive holding ``kiln_archive/data.json`` (the object tree)
and raw little-endian memory buffers under ``kiln_archive/tensors/``. The tree may hold
dicts (any JSON-representable keys: strings, ints, floats, bools, None, tuples), OrderedDicts,
Counters, lists, tuples, sets, numbers (inf, nan and complex included), strings, bytes, None,
dtypes, devices, ``Size`` and tensors (``Parameter``\\s come back as Parameters) -- enough for
model, optimizer and scheduler state dicts. Each memory buffer is stored once, whole, and its
tensors as views into it (offset, strides), so views saved together load as views of one buffer.

Like PyTorch, ``kiln.save`` also stores any other picklable object (a whole ``nn.Module``, a
dataclass of settings, numpy values): the tree then goes to ``kiln_archive/data.pkl`` with its
tensors still in the raw buffers. Unpickling can run code, so by default (``weights_only=True``,
PyTorch's default since 2.6) ``kiln.load`` imports only allowlisted globals (``_weights_only``):
harmless builtins, kiln's value types and what the user adds with ``add_safe_globals``.
"""

from __future__ import annotations

import base64
import io
import json
import math
import os
import pickle
import sys
import zipfile
from collections import Counter, OrderedDict

import numpy as np

from ._weights_only import (
    WeightsOnlyUnpickler,
    add_safe_globals,
    clear_safe_globals,
    get_safe_globals,
    safe_globals,
    unsafe_globals_in,
)
from .runtime import dtypes as dt
from .runtime.device import as_device, device
from .runtime.storage import storage_of
from .runtime.tensor import Size, Tensor, wrap_array

__all__ = [
    "save",
    "load",
    "add_safe_globals",
    "clear_safe_globals",
    "get_safe_globals",
    "safe_globals",
    "get_unsafe_globals_in_checkpoint",
]

_ROOT = "kiln_archive/"
_HEADER = _ROOT + "data.json"
_PICKLE = _ROOT + "data.pkl"
_FORMAT_VERSION = 2  # 2: tensors name a storage span, byte offset and strides


def _unsupported(value) -> TypeError:
    return TypeError(
        f"kiln.save cannot store an object of type {type(value).__module__}."
        f"{type(value).__qualname__}: checkpoints hold tensors, numbers, strings, bytes, None, "
        "dtypes, devices and dicts/lists/tuples of them (no pickled objects)"
    )


def _byte_extent(array: np.ndarray) -> tuple[int, int]:
    """The [first, end) byte addresses an array's elements occupy."""
    lo = hi = array.__array_interface__["data"][0]
    if array.size == 0:
        return lo, hi
    for n, stride in zip(array.shape, array.strides):
        if stride < 0:
            lo += (n - 1) * stride
        else:
            hi += (n - 1) * stride
    return lo, hi + array.itemsize


def _bytes_of(root: np.ndarray) -> tuple[int, np.ndarray] | None:
    """A byte view over all of ``root``'s memory and its start address (None if not one block)."""
    if root.flags.c_contiguous:
        flat = root
    elif root.flags.f_contiguous:
        flat = root.T
    else:
        return None
    return root.__array_interface__["data"][0], flat.reshape(-1).view(np.uint8)


class _Storages:
    """Groups saved tensors by the memory they view, so views of one buffer stay views.

    Each buffer is written once, whole; a tensor's record names its buffer, its byte offset in
    it and its byte strides (PyTorch likewise saves a storage once and restores views of it).
    """

    def __init__(self):
        self._by_root: dict[int, dict] = {}
        self._order: list[dict] = []

    def place(self, array: np.ndarray, record: dict) -> None:
        if not isinstance(array, np.ndarray):  # a 0-d tensor may hold a numpy scalar
            array = np.array(array)
        root = storage_of(array)
        whole = _bytes_of(root)
        lo, hi = _byte_extent(array)
        shared = whole is not None and whole[0] <= lo and hi <= whole[0] + whole[1].size
        group = self._by_root.get(id(root)) if shared else None
        if not shared:  # memory we cannot address as one block: store these values on their own
            array = array.copy(order="C")  # (ascontiguousarray would make a 0-d array 1-d)
            root, whole = array, _bytes_of(array)
        if group is None:
            group = {"index": len(self._order), "root": root, "whole": whole, "members": []}
            self._order.append(group)
            if shared:
                self._by_root[id(root)] = group
        group["members"].append((record, array.__array_interface__["data"][0]))
        record["storage"] = group["index"]
        record["strides"] = list(array.strides)

    def buffers(self) -> list[np.ndarray]:
        """Each group's bytes; fills in the members' offsets into them."""
        spans = []
        for group in self._order:
            start, whole = group["whole"]
            for record, address in group["members"]:
                record["offset"] = address - start
            spans.append(whole)
        return spans


class _Writer:
    """Turns an object tree into JSON-able records, collecting tensor buffers on the way."""

    def __init__(self):
        self.storages = _Storages()
        self.records: list[dict] = []
        self._by_identity: dict[int, int] = {}
        self._by_layout: dict[tuple, int] = {}
        self._keepalive: list = []

    def encode(self, value):
        if isinstance(value, np.generic):  # pickled, so it loads as the numpy type it was
            raise _unsupported(value)
        if value is None or isinstance(value, (bool, str)):
            return value
        if isinstance(value, int):
            return value
        if isinstance(value, float):
            return value if math.isfinite(value) else {"$type": "float", "value": repr(value)}
        if isinstance(value, Tensor):
            return {"$type": "tensor", "index": self._tensor(value)}
        if isinstance(value, Size):
            return {"$type": "size", "items": list(value)}
        if isinstance(value, dt.dtype):
            return {"$type": "dtype", "name": value.name}
        if isinstance(value, device):
            return {"$type": "device", "name": str(value)}
        if isinstance(value, bytes):
            return {"$type": "bytes", "base64": base64.b64encode(value).decode("ascii")}
        if isinstance(value, complex):
            return {
                "$type": "complex",
                "real": self.encode(value.real),
                "imag": self.encode(value.imag),
            }
        if isinstance(value, (set, frozenset)):
            kind = "set" if isinstance(value, set) else "frozenset"
            return {"$type": kind, "items": [self.encode(v) for v in value]}
        if isinstance(value, list):
            return [self.encode(v) for v in value]
        if isinstance(value, tuple):
            return {"$type": "tuple", "items": [self.encode(v) for v in value]}
        if isinstance(value, dict) and type(value) in (dict, OrderedDict, Counter):
            kind = (
                "counter"
                if isinstance(value, Counter)
                else "odict"
                if isinstance(value, OrderedDict)
                else "dict"
            )
            items = [[self.encode(k), self.encode(v)] for k, v in value.items()]
            record = {"$type": kind, "items": items}
            if isinstance(getattr(value, "_metadata", None), dict):  # a module state dict's
                record["metadata"] = self.encode(value._metadata)
            return record
        raise _unsupported(value)

    def _tensor(self, t: Tensor) -> int:
        index = self._by_identity.get(id(t))
        if index is not None:
            return index
        if t._data is None:
            raise RuntimeError(
                f"kiln.save cannot store a tensor without data (shape {list(t.shape)} on "
                f"{t.device}): meta and fake tensors have no values"
            )
        host = t.detach()
        if host.device.type != "cpu":
            host = host.cpu()
        array = host._data
        layout = (
            array.__array_interface__["data"][0],
            array.shape,
            array.strides,
            t.dtype.name,
        )
        index = self._by_layout.get(layout)
        if index is None:
            index = len(self.records)
            record = {
                "dtype": t.dtype.name,
                "shape": list(t.shape),
                "device": str(t.device),
                "requires_grad": bool(t.requires_grad),
                "parameter": bool(getattr(t, "_is_param", False)),
            }
            self.storages.place(array, record)
            self.records.append(record)
            self._by_layout[layout] = index
        # keep the object alive so its id cannot be reused by another tensor during this save
        self._keepalive.append(t)
        self._by_identity[id(t)] = index
        return index


class _Pickler(pickle.Pickler):
    """Pickles arbitrary objects, sending every tensor to the archive's raw buffers."""

    def __init__(self, file, protocol: int, writer: _Writer):
        super().__init__(file, protocol=protocol)
        self._writer = writer

    def persistent_id(self, obj):
        if isinstance(obj, Tensor):
            return ("tensor", self._writer._tensor(obj))
        return None


def save(obj, f, pickle_module=None, pickle_protocol: int = 2, _use_new_zipfile_serialization=True):
    """Write ``obj`` to ``f`` (a path or a binary file object) in kiln's checkpoint format."""
    writer = _Writer()
    pickled = None
    try:
        root = writer.encode(obj)
    except TypeError:
        root = None
    if root is None and obj is not None:
        # not a plain tree: pickle it, tensors still going to raw buffers
        writer = _Writer()
        stream = io.BytesIO()
        _Pickler(stream, max(pickle_protocol, 2), writer).dump(obj)
        pickled = stream.getvalue()
        root = {"$type": "pickle"}
    buffers = writer.storages.buffers()
    header = {
        "format": "kiln",
        "version": _FORMAT_VERSION,
        "byteorder": sys.byteorder,
        "tensors": writer.records,
        "root": root,
    }
    target = os.fspath(f) if isinstance(f, (str, os.PathLike)) else f
    with zipfile.ZipFile(target, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf:
        zf.writestr(_HEADER, json.dumps(header, allow_nan=False))
        if pickled is not None:
            zf.writestr(_PICKLE, pickled)
        for i, span in enumerate(buffers):
            with zf.open(f"{_ROOT}tensors/{i}", "w", force_zip64=True) as out:
                if span.size:
                    out.write(memoryview(span))


class _TensorLoading:
    """Resolves the archive's tensor references while unpickling."""

    def __init__(self, file, reader: _Reader):
        super().__init__(file)
        self._reader = reader

    def persistent_load(self, pid):
        kind, index = pid
        if kind != "tensor":
            raise pickle.UnpicklingError(f"kiln.load: unknown persistent id {pid!r}")
        return self._reader._tensor(index)


class _Unpickler(_TensorLoading, pickle.Unpickler):
    pass


class _SafeUnpickler(_TensorLoading, WeightsOnlyUnpickler):
    pass


class _Reader:
    def __init__(self, zf: zipfile.ZipFile, header: dict, map_location):
        self.zf = zf
        self.records = header["tensors"]
        self.swap = header.get("byteorder", "little") != sys.byteorder
        self.map_location = map_location
        self.tensors: dict[int, Tensor] = {}
        self.spans: dict[int, np.ndarray] = {}

    def decode(self, value):
        if isinstance(value, list):
            return [self.decode(v) for v in value]
        if not isinstance(value, dict):
            return value
        kind = value.get("$type")
        if kind == "tensor":
            return self._tensor(value["index"])
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
        raise RuntimeError(f"kiln.load: unknown record type {kind!r} in the checkpoint")

    def _tensor(self, index: int) -> Tensor:
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
        t = wrap_array(array, dtype)
        t = self._place(t, rec["device"])
        if rec["parameter"]:
            from .nn.parameter import Parameter

            t = Parameter(t, requires_grad=rec["requires_grad"])
        elif rec["requires_grad"]:
            t.requires_grad_(True)
        self.tensors[index] = t
        return t

    def _span(self, index: int) -> np.ndarray:
        """The writable bytes of stored buffer ``index``, read once and shared by its views."""
        span = self.spans.get(index)
        if span is None:
            span = np.frombuffer(bytearray(self.zf.read(f"{_ROOT}tensors/{index}")), np.uint8)
            self.spans[index] = span
        return span

    def _place(self, t: Tensor, saved_device: str) -> Tensor:
        loc = self.map_location
        if loc is None:
            target = saved_device
        elif callable(loc):
            result = loc(t, saved_device)
            return result if isinstance(result, Tensor) else t
        elif isinstance(loc, dict):
            target = loc.get(saved_device, saved_device)
        else:
            target = loc
        target = as_device(target)
        return t if target.type == "cpu" else t.to(target)


def _open_archive(f) -> tuple[zipfile.ZipFile, dict]:
    """The checkpoint's zip and its JSON header, or an error saying what ``f`` is instead."""
    if isinstance(f, (str, os.PathLike)):
        source = os.fspath(f)
        name = source
    else:
        source = f if f.seekable() else io.BytesIO(f.read())
        name = getattr(f, "name", type(f).__name__)
    try:
        zf = zipfile.ZipFile(source, "r")
    except zipfile.BadZipFile:
        raise RuntimeError(
            f"kiln.load: {name} is not a kiln checkpoint (not a zip archive); PyTorch .pt files "
            "must be converted (load with torch, turn tensors into numpy arrays, kiln.save them)"
        ) from None
    if _HEADER not in zf.namelist():
        zf.close()
        raise RuntimeError(
            f"kiln.load: {name} is a zip archive but not a kiln checkpoint (no {_HEADER}); "
            "PyTorch checkpoints must be converted first"
        )
    header = json.loads(zf.read(_HEADER))
    if header.get("format") != "kiln" or header.get("version", 0) > _FORMAT_VERSION:
        zf.close()
        raise RuntimeError(
            f"kiln.load: {name} has format {header.get('format')!r} version "
            f"{header.get('version')}; this kiln reads version {_FORMAT_VERSION}"
        )
    return zf, header


def _is_pickled(header: dict) -> bool:
    root = header["root"]
    return isinstance(root, dict) and root.get("$type") == "pickle"


def load(
    f, map_location=None, pickle_module=None, *, weights_only: bool | None = None, mmap=None, **kw
):
    """Read a checkpoint written by ``kiln.save`` (a path or a binary file object).

    Plain trees (state dicts) load without running code. A checkpoint holding pickled objects
    loads with ``weights_only=True`` (the default) only if every global it names is allowlisted
    (``add_safe_globals``); ``weights_only=False`` unpickles anything, so trust the source.
    ``map_location`` may be a device, a string, a ``{saved: target}`` dict or a
    ``fn(tensor, saved_device)`` callable.
    """
    zf, header = _open_archive(f)
    with zf:
        reader = _Reader(zf, header, map_location)
        if not _is_pickled(header):
            return reader.decode(header["root"])
        unpickler = _Unpickler if weights_only is False else _SafeUnpickler
        return unpickler(io.BytesIO(zf.read(_PICKLE)), reader).load()


def get_unsafe_globals_in_checkpoint(f) -> list[str]:
    """The ``module.name`` globals in a checkpoint that a ``weights_only`` load would refuse."""
    zf, header = _open_archive(f)
    with zf:
        return unsafe_globals_in(zf.read(_PICKLE)) if _is_pickled(header) else []
