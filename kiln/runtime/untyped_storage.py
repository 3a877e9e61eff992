"""``UntypedStorage``'s byte-level API, mixed into ``runtime.storage.Storage``.

``Tensor.untyped_storage()`` returns the tensor's ``Storage``: the identity views share, whose
``base`` is the numpy array owning the memory. Libraries that check which tensors share memory
(safetensors, Hugging Face's ``id_tensor_storage``, checkpoint writers) and old code that goes
through storages read and write it as PyTorch's untyped storage: bytes, indexed from the
allocation's start. Everything here works on a flat ``uint8`` view of that memory, so a write
through the storage is a write the tensors see.

A storage that grows (``resize_``) gets a new buffer: kiln's tensors hold numpy arrays over the
old one and keep seeing it, as ``Tensor.resize_`` already does for the views it leaves behind.
"""

from __future__ import annotations

import numpy as np

from .device import cpu, device

__all__ = ["UntypedStorageMethods", "storage_array", "element_index", "spanned_bytes"]


def element_index(idx, size: int) -> int:
    """``idx`` (negative counts from the end) checked against a storage of ``size`` elements."""
    i = int(idx)
    if not -size <= i < size:
        raise IndexError(f"index {i} out of range for storage of size {size}")
    return i + size if i < 0 else i


def storage_array(source) -> np.ndarray | None:
    """The buffer a public ``UntypedStorage(...)`` call allocates: ``n`` bytes for an int,
    the bytes of a sequence (wrapped to 0..255 as PyTorch's conversion does), none for no
    argument."""
    if source is None:
        return None
    if isinstance(source, (int, np.integer)) and not isinstance(source, bool):
        if source < 0:
            raise RuntimeError(f"Storage size must be non-negative, but got {source}")
        return np.zeros(int(source), np.uint8)
    if isinstance(source, (bytes, bytearray)):
        return np.frombuffer(bytes(source), np.uint8).copy()
    try:
        values = np.asarray(list(source), dtype=np.int64)
    except (TypeError, ValueError, OverflowError):
        raise TypeError(
            f"UntypedStorage(): expected a size or a sequence of ints, got {type(source).__name__}"
        ) from None
    return values.astype(np.uint8)


def spanned_bytes(base: np.ndarray) -> int:
    """The bytes from ``base``'s first element to the end of its last (strides non-negative)."""
    if 0 in base.shape:
        return 0
    return base.itemsize + sum((n - 1) * s for n, s in zip(base.shape, base.strides, strict=True))


def _flat_bytes(base: np.ndarray | None) -> np.ndarray:
    """A 1-D ``uint8`` view of the memory ``base`` spans (a contiguous root is the common case;
    a strided one, such as an ``as_strided`` result numpy made, is covered from its first element
    to its last)."""
    if base is None:
        return np.empty(0, np.uint8)
    if base.flags.c_contiguous or base.flags.f_contiguous:
        return base.ravel(order="K").view(np.uint8)
    item = base.itemsize
    flat = np.lib.stride_tricks.as_strided(
        base, shape=(spanned_bytes(base) // item,), strides=(item,)
    )
    return flat.view(np.uint8)


class UntypedStorageMethods:
    """PyTorch's ``UntypedStorage`` methods over ``self.base`` (see the module docstring)."""

    __slots__ = ()
    is_sparse = False
    is_sparse_csr = False

    # ------------------------------------------------------------------ memory
    def _bytes(self) -> np.ndarray:
        """The storage's bytes, as a writable-where-possible flat view (no copy)."""
        self._check_host("read")
        return _flat_bytes(self.base)[: self.nbytes()]

    def _check_host(self, what: str) -> None:
        base = self.base
        if base is not None and not isinstance(base, np.ndarray):
            raise RuntimeError(f"kiln can {what} only CPU storages through the storage API")

    @property
    def device(self) -> device:
        base = self.base
        if base is None or isinstance(base, np.ndarray):
            return cpu
        return device("cuda")

    @property
    def is_cuda(self) -> bool:
        return self.device.type == "cuda"

    def element_size(self) -> int:
        return 1

    def get_device(self) -> int:
        return -1 if self.device.type == "cpu" else 0

    def type(self) -> str:  # noqa: A003 - PyTorch's name
        return "kiln.storage.UntypedStorage"

    def untyped(self):
        return self

    def is_shared(self) -> bool:
        return bool(self.shared)

    def is_pinned(self, device=None) -> bool:
        return False

    def resizable(self) -> bool:
        return True

    # ------------------------------------------------------------------ elements
    def _index(self, idx: int) -> int:
        return element_index(idx, self.nbytes())

    def __getitem__(self, idx):
        """A byte as an int; a slice is a new storage over the same memory (PyTorch's too)."""
        if isinstance(idx, slice):
            start, stop, step = idx.indices(self.nbytes())
            if step != 1:
                raise RuntimeError(
                    f"Trying to slice with a step of {step}, but only a step of 1 is supported"
                )
            return type(self)(self._bytes()[start : max(start, stop)])
        return int(self._bytes()[self._index(idx)])

    def __setitem__(self, idx, value) -> None:
        data = self._bytes()
        if isinstance(idx, slice):
            data[idx] = np.asarray(value, dtype=np.int64).astype(np.uint8)
        else:
            data[self._index(idx)] = np.uint8(int(value) & 0xFF)

    def __iter__(self):
        return iter(self.tolist())

    def tolist(self) -> list:
        return self._bytes().tolist()

    # ------------------------------------------------------------------ whole-storage writes
    def fill_(self, value):
        self._bytes()[:] = np.uint8(int(value) & 0xFF)
        return self

    def copy_(self, source, non_blocking: bool | None = None):
        """Copy ``source``'s bytes (another storage of the same byte size)."""
        other = source.untyped() if hasattr(source, "untyped") else source
        if other.nbytes() != self.nbytes():
            raise RuntimeError(f"size mismatch, {self.nbytes()} bytes != {other.nbytes()} bytes")
        self._bytes()[:] = other._bytes()
        return self

    def clone(self):
        """A storage with a copy of the bytes (new memory)."""
        return type(self)(self._bytes().copy())

    def cpu(self):
        return self

    def resize_(self, size: int):
        """Give the storage ``size`` bytes: the first ones kept, new ones zero. The memory is new:
        tensors made over the old memory keep seeing it (see the module docstring)."""
        size = int(size)
        if size < 0:
            raise RuntimeError(f"Storage size must be non-negative, but got {size}")
        old = self._bytes()
        grown = np.zeros(size, np.uint8)
        kept = min(size, old.size)
        grown[:kept] = old[:kept]
        self.base = grown
        return self

    def _typed_view(self, np_dtype: np.dtype) -> np.ndarray:
        """The bytes read as ``np_dtype`` (as many whole elements as fit)."""
        data = self._bytes()
        itemsize = np.dtype(np_dtype).itemsize
        return data[: data.size - data.size % itemsize].view(np_dtype)

    # ------------------------------------------------------------------ printing
    def __repr__(self) -> str:
        header = f"[kiln.storage.UntypedStorage(device={self.device}) of size {self.nbytes()}]"
        if self.base is not None and not isinstance(self.base, np.ndarray):
            return "...\n" + header
        return " " + "\n ".join(str(v) for v in self.tolist()) + "\n" + header

    __str__ = __repr__
