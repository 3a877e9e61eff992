"""``kiln.save`` / ``kiln.load``: a checkpoint format whose common case runs no code on load.

A checkpoint is an uncompressed zip archive holding ``kiln_archive/data.json`` (the object tree)
and one raw little-endian buffer per tensor under ``kiln_archive/tensors/``. The tree may hold
dicts (any JSON-representable keys: strings, ints, floats, bools, None, tuples), OrderedDicts,
Counters, lists, tuples, sets, numbers (inf, nan and complex included), strings, bytes, None,
dtypes, devices, ``Size`` and tensors (``Parameter``\\s come back as Parameters) -- enough for
model, optimizer and scheduler state dicts. Tensors sharing memory with the same layout are
stored once; other views are stored as copies.

Like PyTorch, ``kiln.save`` also stores any other picklable object (a whole ``nn.Module``, a
dataclass of settings): the tree then goes to ``kiln_archive/data.pkl`` with its tensors still in
the raw buffers. Unpickling can run code, so ``kiln.load`` reads such a file only with
``weights_only=False`` (PyTorch's default since 2.6 is the same refusal).
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

from .runtime import dtypes as dt
from .runtime.device import as_device, device
from .runtime.tensor import Size, Tensor, wrap_array

__all__ = ["save", "load"]

_ROOT = "kiln_archive/"
_HEADER = _ROOT + "data.json"
_PICKLE = _ROOT + "data.pkl"
_FORMAT_VERSION = 1


def _unsupported(value) -> TypeError:
    return TypeError(
        f"kiln.save cannot store an object of type {type(value).__module__}."
        f"{type(value).__qualname__}: checkpoints hold tensors, numbers, strings, bytes, None, "
        "dtypes, devices and dicts/lists/tuples of them (no pickled objects)"
    )


class _Writer:
    """Turns an object tree into JSON-able records, collecting tensor buffers on the way."""

    def __init__(self):
        self.buffers: list[np.ndarray] = []
        self.records: list[dict] = []
        self._by_identity: dict[int, int] = {}
        self._by_layout: dict[tuple, int] = {}
        self._keepalive: list = []

    def encode(self, value):
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
        if isinstance(value, np.generic):
            return self.encode(value.item())
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
            self.buffers.append(np.ascontiguousarray(array))
            self.records.append(
                {
                    "dtype": t.dtype.name,
                    "shape": list(t.shape),
                    "device": str(t.device),
                    "requires_grad": bool(t.requires_grad),
                    "parameter": bool(getattr(t, "_is_param", False)),
                }
            )
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
        for i, array in enumerate(writer.buffers):
            with zf.open(f"{_ROOT}tensors/{i}", "w", force_zip64=True) as out:
                if array.size:
                    out.write(memoryview(array.reshape(-1).view(np.uint8)))


class _Unpickler(pickle.Unpickler):
    def __init__(self, file, reader: _Reader):
        super().__init__(file)
        self._reader = reader

    def persistent_load(self, pid):
        kind, index = pid
        if kind != "tensor":
            raise pickle.UnpicklingError(f"kiln.load: unknown persistent id {pid!r}")
        return self._reader._tensor(index)


class _Reader:
    def __init__(self, zf: zipfile.ZipFile, header: dict, map_location):
        self.zf = zf
        self.records = header["tensors"]
        self.swap = header.get("byteorder", "little") != sys.byteorder
        self.map_location = map_location
        self.tensors: dict[int, Tensor] = {}

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
        raw = bytearray(self.zf.read(f"{_ROOT}tensors/{index}"))
        array = np.frombuffer(raw, dtype=dtype.np) if raw else np.empty(0, dtype.np)
        if self.swap:
            array = array.byteswap()
        t = wrap_array(array.reshape(rec["shape"]), dtype)
        t = self._place(t, rec["device"])
        if rec["parameter"]:
            from .nn.parameter import Parameter

            t = Parameter(t, requires_grad=rec["requires_grad"])
        elif rec["requires_grad"]:
            t.requires_grad_(True)
        self.tensors[index] = t
        return t

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


def load(
    f, map_location=None, pickle_module=None, *, weights_only: bool | None = None, mmap=None, **kw
):
    """Read a checkpoint written by ``kiln.save`` (a path or a binary file object).

    Plain trees (state dicts) load without running code. A checkpoint holding pickled objects
    loads only with ``weights_only=False``, because unpickling can execute code.
    ``map_location`` may be a device, a string, a ``{saved: target}`` dict or a
    ``fn(tensor, saved_device)`` callable.
    """
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
    with zf:
        if _HEADER not in zf.namelist():
            raise RuntimeError(
                f"kiln.load: {name} is a zip archive but not a kiln checkpoint (no {_HEADER}); "
                "PyTorch checkpoints must be converted first"
            )
        header = json.loads(zf.read(_HEADER))
        if header.get("format") != "kiln" or header.get("version", 0) > _FORMAT_VERSION:
            raise RuntimeError(
                f"kiln.load: {name} has format {header.get('format')!r} version "
                f"{header.get('version')}; this kiln reads version {_FORMAT_VERSION}"
            )
        reader = _Reader(zf, header, map_location)
        root = header["root"]
        if isinstance(root, dict) and root.get("$type") == "pickle":
            if weights_only is None or weights_only:
                raise pickle.UnpicklingError(
                    f"kiln.load: {name} holds pickled Python objects (saved from something other "
                    "than tensors, numbers, strings and containers, such as a whole nn.Module); "
                    "unpickling can run arbitrary code, so weights_only=True refuses it. Pass "
                    "weights_only=False if you trust the file's source, or save state_dict()s."
                )
            return _Unpickler(io.BytesIO(zf.read(_PICKLE)), reader).load()
        return reader.decode(root)
