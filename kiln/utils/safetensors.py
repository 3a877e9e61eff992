"""Safetensors files (the format Hugging Face weights ship in), read and written by kiln.

A file is an 8-byte little-endian header length, a JSON header naming each tensor's dtype
(``"F32"``, ``"BF16"`` ...), shape and ``data_offsets`` into the byte buffer that follows, and
optional ``__metadata__`` (str -> str). No code, no pickle. The functions follow the
``safetensors.torch`` API -- ``save_file`` / ``load_file`` / ``save`` / ``load`` /
``safe_open`` / ``save_model`` / ``load_model`` -- with its checks: only contiguous tensors that
share no memory, headers validated before any tensor is read. Loading maps the file
(copy-on-write), so ``safe_open`` reads only the tensors asked for.
"""

from __future__ import annotations

import json
import mmap
import os
import struct
import sys
from collections.abc import Iterator

import numpy as np

from ..runtime import dtypes as dt
from ..runtime.device import as_device, cpu
from ..runtime.storage import storage_of
from ..runtime.tensor import Tensor, wrap_array

__all__ = [
    "SafetensorError",
    "save",
    "save_file",
    "load",
    "load_file",
    "safe_open",
    "save_model",
    "load_model",
]

_CODES = {
    dt.bool_: "BOOL",
    dt.uint8: "U8",
    dt.int8: "I8",
    dt.int16: "I16",
    dt.int32: "I32",
    dt.int64: "I64",
    dt.float16: "F16",
    dt.bfloat16: "BF16",
    dt.float32: "F32",
    dt.float64: "F64",
    dt.complex64: "C64",
}
_DTYPES = {code: d for d, code in _CODES.items()}
_FOREIGN = {"U16", "U32", "U64", "F8_E4M3", "F8_E5M2", "F8_E8M0", "F6_E2M3", "F6_E3M2", "F4"}
_MAX_HEADER = 100_000_000  # the safetensors package's limit
_SWAP = sys.byteorder == "big"  # the format is little-endian


class SafetensorError(RuntimeError):
    """A file that is not valid safetensors (named like the safetensors package's error)."""


# ---------------------------------------------------------------------------- writing


def _contiguous_bytes(name: str, t: Tensor) -> np.ndarray:
    if not isinstance(t, Tensor):
        raise ValueError(f"Key `{name}` is invalid, expected kiln.Tensor but received {type(t)}")
    if t.dtype not in _CODES:
        raise ValueError(f"Key `{name}`: safetensors has no code for dtype {t.dtype}")
    if not t.is_contiguous():
        raise ValueError(
            f"You are trying to save a non contiguous tensor: `{name}` which is not allowed. It "
            "either means you are trying to save tensors which are reference of each other in "
            "which case it's recommended to save only the full tensors, and reslice at load time, "
            "or simply call `.contiguous()` on your tensor to pack it before saving."
        )
    host = t.detach() if t.device.type == "cpu" else t.detach().cpu()
    array = np.ascontiguousarray(host.numpy()).reshape(-1)
    if _SWAP:
        array = array.byteswap()
    return array.view(np.uint8)


def _shared_groups(tensors: dict) -> list[list[str]]:
    """Names of tensors whose bytes overlap (safetensors refuses to save them together)."""
    spans = []
    for name, t in tensors.items():
        if isinstance(t, Tensor) and t.device.type == "cpu" and t.numel():
            array = t.detach().numpy()
            lo = array.__array_interface__["data"][0]
            hi = lo + sum((n - 1) * s for n, s in zip(array.shape, array.strides))
            spans.append((id(storage_of(array)), lo, hi + array.itemsize, name))
    spans.sort()
    groups: list[list[str]] = []
    end = None
    for root, lo, hi, name in spans:
        if end is not None and root == end[0] and lo < end[1]:
            groups[-1].append(name)
            end = (root, max(end[1], hi))
        else:
            groups.append([name])
            end = (root, hi)
    return [sorted(g) for g in groups if len(g) > 1]


def save(tensors: dict[str, Tensor], metadata: dict[str, str] | None = None) -> bytes:
    """The safetensors bytes of ``tensors`` (with optional string ``metadata``)."""
    header, buffers = _layout(tensors, metadata)
    return b"".join([struct.pack("<Q", len(header)), header, *map(bytes, buffers)])


def save_file(
    tensors: dict[str, Tensor], filename: str | os.PathLike, metadata: dict[str, str] | None = None
) -> None:
    """Write ``tensors`` to ``filename`` in safetensors format."""
    header, buffers = _layout(tensors, metadata)
    with open(filename, "wb") as fh:
        fh.write(struct.pack("<Q", len(header)))
        fh.write(header)
        for data in buffers:
            fh.write(memoryview(data))


def _layout(tensors: dict, metadata: dict | None) -> tuple[bytes, list[np.ndarray]]:
    if not isinstance(tensors, dict):
        raise ValueError(f"Expected a dict of [str, kiln.Tensor] but received {type(tensors)}")
    if metadata is not None and not (
        isinstance(metadata, dict)
        and all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items())
    ):
        raise ValueError(f"metadata must be a dict of str to str, got {metadata!r}")
    shared = _shared_groups(tensors)
    if shared:
        raise RuntimeError(
            "Some tensors share memory, this will lead to duplicate memory on disk and potential "
            f"differences when loading them again: {shared}. A potential way to correctly save "
            "your model is to use `save_model`."
        )
    data = {name: _contiguous_bytes(name, t) for name, t in tensors.items()}
    # widest dtypes first, then by name (the safetensors writer's order: every tensor aligned)
    order = sorted(tensors, key=lambda n: (-tensors[n].dtype.itemsize, n))
    header: dict = {} if metadata is None else {"__metadata__": metadata}
    offset = 0
    for name in order:
        t = tensors[name]
        end = offset + data[name].size
        header[name] = {"dtype": _CODES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, end]}  # fmt: skip
        offset = end
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)  # pad so the byte buffer starts 8-aligned
    return text, [data[name] for name in order]


# ---------------------------------------------------------------------------- reading


class _File:
    """A validated header and the byte buffer after it (a copy-on-write map of the file)."""

    def __init__(self, buffer: np.ndarray, name: str):
        self.name = name
        if buffer.size < 8:
            raise SafetensorError(f"{name}: header too small ({buffer.size} bytes)")
        (length,) = struct.unpack("<Q", buffer[:8].tobytes())
        if length > _MAX_HEADER:
            raise SafetensorError(f"{name}: header too large ({length} bytes)")
        if 8 + length > buffer.size:
            raise SafetensorError(
                f"{name}: invalid header length {length}: the file has only {buffer.size} bytes"
            )
        raw = buffer[8 : 8 + length].tobytes()
        if not raw.startswith(b"{"):
            raise SafetensorError(f"{name}: invalid header start (not a JSON object)")
        try:
            header = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError) as error:
            raise SafetensorError(f"{name}: invalid header deserialization: {error}") from None
        if not isinstance(header, dict):
            raise SafetensorError(f"{name}: the header is not a JSON object")
        meta = header.pop("__metadata__", None)
        if meta is not None and not (
            isinstance(meta, dict) and all(isinstance(v, str) for v in meta.values())
        ):
            raise SafetensorError(f"{name}: __metadata__ must map strings to strings")
        self.meta = meta
        self.data = buffer[8 + length :]
        self.entries = {key: self._entry(key, value) for key, value in header.items()}
        self._check_coverage()

    def _entry(self, key: str, value) -> tuple[str, tuple, int, int]:
        try:
            code, shape, (begin, end) = value["dtype"], value["shape"], value["data_offsets"]
        except (TypeError, KeyError, ValueError) as error:
            raise SafetensorError(f"{self.name}: tensor {key!r} has a bad entry: {error}") from None
        ints = [*shape, begin, end] if isinstance(shape, list) else None
        if ints is None or not all(isinstance(v, int) and v >= 0 for v in ints):
            raise SafetensorError(f"{self.name}: tensor {key!r} has a bad shape or offsets")
        if code not in _DTYPES and code not in _FOREIGN:
            raise SafetensorError(f"{self.name}: tensor {key!r} has unknown dtype {code!r}")
        itemsize = _DTYPES[code].itemsize if code in _DTYPES else None
        if itemsize is not None and int(np.prod(shape, dtype=np.int64)) * itemsize != end - begin:
            raise SafetensorError(
                f"{self.name}: tensor {key!r} of shape {shape} and dtype {code} should span "
                f"{int(np.prod(shape, dtype=np.int64)) * itemsize} bytes, its offsets span "
                f"{end - begin} (TensorInvalidInfo)"
            )
        return code, tuple(shape), begin, end

    def _check_coverage(self) -> None:
        """The tensors must tile the byte buffer exactly (no gaps, no overlaps)."""
        position = 0
        for key, (_, _, begin, end) in sorted(self.entries.items(), key=lambda kv: kv[1][2:]):
            if begin != position:
                raise SafetensorError(
                    f"{self.name}: tensor {key!r} starts at byte {begin}, expected {position} "
                    "(metadata incomplete buffer)"
                )
            position = end
        if position != self.data.size:
            raise SafetensorError(
                f"{self.name}: the tensors cover {position} bytes of a {self.data.size}-byte "
                "buffer (metadata incomplete buffer)"
            )

    def array(self, key: str) -> np.ndarray:
        entry = self.entries.get(key)
        if entry is None:
            raise SafetensorError(f"{self.name}: no tensor named {key!r}")
        code, shape, begin, end = entry
        if code not in _DTYPES:
            raise SafetensorError(f"{self.name}: tensor {key!r} has dtype {code}, which kiln lacks")
        array = self.data[begin:end].view(_DTYPES[code].np).reshape(shape)
        return array.byteswap() if _SWAP else array


def _map(filename) -> np.ndarray:
    with open(filename, "rb") as fh:
        if os.fstat(fh.fileno()).st_size == 0:
            return np.zeros(0, np.uint8)
        return np.frombuffer(mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_COPY), np.uint8)


def _tensor(file: _File, key: str, device) -> Tensor:
    code = file.entries[key][0] if key in file.entries else None
    t = wrap_array(file.array(key), _DTYPES.get(code, dt.uint8))
    target = as_device(device if not isinstance(device, int) else f"cuda:{device}")
    return t if target is cpu else t.to(target)


def load(data: bytes) -> dict[str, Tensor]:
    """The tensors in safetensors ``data`` (bytes), views of one private copy of it."""
    file = _File(np.frombuffer(bytearray(data), np.uint8), "<bytes>")
    return {key: _tensor(file, key, "cpu") for key in file.entries}


def load_file(filename: str | os.PathLike, device="cpu") -> dict[str, Tensor]:
    """The tensors in a safetensors file, on ``device``."""
    file = _File(_map(filename), os.fspath(filename))
    return {key: _tensor(file, key, device) for key in file.entries}


class _Slice:
    """``safe_open(...).get_slice(name)``: shape and dtype first, values by indexing."""

    def __init__(self, file: _File, key: str, device):
        self._file, self._key, self._device = file, key, device

    def get_shape(self) -> list[int]:
        return list(self._file.entries[self._key][1])

    def get_dtype(self) -> str:
        return self._file.entries[self._key][0]

    def __getitem__(self, index) -> Tensor:
        return _tensor(self._file, self._key, self._device)[index].clone()


class safe_open:  # noqa: N801 - the safetensors package's name
    """Open a safetensors file lazily: ``keys()``, ``get_tensor(name)``, ``get_slice(name)``,
    ``metadata()``; ``framework`` is ``"pt"`` (kiln tensors) or ``"numpy"``."""

    def __init__(self, filename: str | os.PathLike, framework: str = "pt", device="cpu"):
        if framework not in ("pt", "torch", "kiln", "np", "numpy"):
            raise ValueError(f"safe_open: framework {framework!r} is not 'pt' or 'numpy'")
        self._numpy = framework in ("np", "numpy")
        self._device = device
        self._file = _File(_map(filename), os.fspath(filename))

    def keys(self) -> list[str]:
        return sorted(self._file.entries)

    def offset_keys(self) -> list[str]:
        return sorted(self._file.entries, key=lambda k: self._file.entries[k][2])

    def metadata(self) -> dict[str, str] | None:
        return self._file.meta

    def get_tensor(self, name: str):
        if self._numpy:
            return self._file.array(name).copy()
        return _tensor(self._file, name, self._device)

    def get_slice(self, name: str) -> _Slice:
        if name not in self._file.entries:
            raise SafetensorError(f"{self._file.name}: no tensor named {name!r}")
        return _Slice(self._file, name, self._device)

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def __enter__(self) -> safe_open:
        return self

    def __exit__(self, *exc) -> None:
        self._file = None


# ---------------------------------------------------------------------------- whole models


def _duplicates(state: dict, preferred=()) -> dict[str, list[str]]:
    """For each group of state-dict entries sharing memory (tied weights): the name kept and
    the names dropped (a name in ``preferred`` is kept, else the first in order)."""
    kept: dict[str, list[str]] = {}
    for group in _shared_groups(state):
        keep = next((n for n in group if n in preferred), group[0])
        kept[keep] = [n for n in group if n != keep]
    return kept


def save_model(model, filename, metadata: dict[str, str] | None = None, force_contiguous=True):
    """Save ``model.state_dict()``, dropping duplicates of tied weights (recorded in metadata)."""
    state = model.state_dict()
    for keep, dropped in _duplicates(state).items():
        for name in dropped:
            metadata = {} if metadata is None else metadata
            metadata.setdefault(name, keep)
            del state[name]
    if force_contiguous:
        state = {k: v.contiguous() for k, v in state.items()}
    save_file(state, filename, metadata=metadata)


def load_model(model, filename, strict: bool = True, device="cpu") -> tuple[list[str], list[str]]:
    """Load a file written by ``save_model`` into ``model`` (tied weights come back tied)."""
    state = load_file(filename, device=device)
    dropped = {n for names in _duplicates(model.state_dict(), state).values() for n in names}
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [n for n in missing if n not in dropped]
    if strict and (missing or unexpected):
        error = f"Error(s) in loading state_dict for {type(model).__name__}:"
        if missing:
            error += "\n    Missing key(s) in state_dict: " + ", ".join(f'"{k}"' for k in missing)
        if unexpected:
            names = ", ".join(f'"{k}"' for k in unexpected)
            error += f"\n    Unexpected key(s) in state_dict: {names}"
        raise RuntimeError(error)
    return missing, list(unexpected)
