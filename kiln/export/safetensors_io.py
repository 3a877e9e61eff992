"""A minimal reader and writer of the safetensors layout (weights of exported programs and packages).

The layout: an 8-byte little-endian header length, a JSON header mapping each tensor name to its
dtype, shape and byte range (plus an optional ``__metadata__`` of strings), then the tensors'
bytes, contiguous and little-endian. Reading never executes anything from the file and checks
every range (inside the data, no overlaps, the size its dtype and shape need).

kiln has no other safetensors code yet; when ``kiln`` gains a general one (a PyTorch-compat
``safetensors`` helper), this module should become a thin user of it.
"""

from __future__ import annotations

import json
import struct
import sys

import numpy as np

from ..runtime import dtypes as dt
from ..runtime.tensor import Tensor, wrap_array

__all__ = ["SafetensorsError", "to_bytes", "from_bytes"]

_CODES = {
    dt.float64: "F64",
    dt.float32: "F32",
    dt.float16: "F16",
    dt.bfloat16: "BF16",
    dt.int64: "I64",
    dt.int32: "I32",
    dt.int16: "I16",
    dt.int8: "I8",
    dt.uint8: "U8",
    dt.bool_: "BOOL",
}
_DTYPES = {code: d for d, code in _CODES.items()}
_MAX_HEADER = 100 * 1024 * 1024
_BIG_ENDIAN = sys.byteorder == "big"


class SafetensorsError(ValueError):
    """The bytes are not a well-formed safetensors blob."""


def to_bytes(tensors: dict[str, Tensor], metadata: dict[str, str] | None = None) -> bytes:
    """The safetensors encoding of ``tensors`` (names in order; data copied contiguous)."""
    header: dict = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    chunks, offset = [], 0
    for name, t in tensors.items():
        code = _CODES.get(t.dtype)
        if code is None:
            raise TypeError(f"cannot store {name!r}: dtype {t.dtype} has no safetensors code")
        array = np.ascontiguousarray(t.detach().cpu().numpy())
        data = (array.byteswap() if _BIG_ENDIAN else array).tobytes()
        header[name] = {"dtype": code, "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}  # fmt: skip
        chunks.append(data)
        offset += len(data)
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)  # the data starts 8-byte aligned
    return struct.pack("<Q", len(encoded)) + encoded + b"".join(chunks)


def from_bytes(blob: bytes) -> tuple[dict[str, Tensor], dict[str, str]]:
    """``(tensors by name, metadata)`` from a safetensors blob; ``SafetensorsError`` if it is
    malformed in any way."""
    if len(blob) < 8:
        raise SafetensorsError("safetensors data is shorter than its 8-byte header length")
    (size,) = struct.unpack("<Q", blob[:8])
    if size > min(len(blob) - 8, _MAX_HEADER):
        raise SafetensorsError(f"safetensors header length {size} exceeds the data")
    try:
        header = json.loads(blob[8 : 8 + size])
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise SafetensorsError(f"safetensors header is not JSON: {e}") from None
    if not isinstance(header, dict):
        raise SafetensorsError("safetensors header is not a JSON object")
    metadata = header.pop("__metadata__", {}) or {}
    data = memoryview(blob)[8 + size :]
    spans = []
    tensors = {}
    for name, entry in header.items():
        try:
            dtype = _DTYPES[entry["dtype"]]
            shape = [int(s) for s in entry["shape"]]
            begin, end = (int(o) for o in entry["data_offsets"])
        except (KeyError, TypeError, ValueError):
            raise SafetensorsError(f"safetensors entry {name!r} is malformed: {entry!r}") from None
        count = int(np.prod(shape)) if shape else 1
        itemsize = np.dtype(dtype.np).itemsize
        if min(shape, default=0) < 0 or not 0 <= begin <= end <= len(data):
            raise SafetensorsError(f"safetensors entry {name!r} lies outside the data")
        if end - begin != count * itemsize:
            raise SafetensorsError(
                f"safetensors entry {name!r} holds {end - begin} bytes; shape {shape} of "
                f"{dtype} needs {count * itemsize}"
            )
        spans.append((begin, end, name))
        array = np.frombuffer(data[begin:end], dtype=dtype.np).copy()  # owned and writable
        if _BIG_ENDIAN:
            array = array.byteswap()
        tensors[name] = wrap_array(array.reshape(shape), dtype)
    spans.sort()
    for (_, end, a), (begin, _, b) in zip(spans, spans[1:]):
        if begin < end:
            raise SafetensorsError(f"safetensors entries {a!r} and {b!r} overlap")
    return tensors, metadata
