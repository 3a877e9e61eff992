"""PyTorch's ``TypedStorage`` and the legacy ``FloatStorage``/``LongStorage``/... classes.

PyTorch deprecated typed storages but keeps them for old checkpoint code and libraries that
still call ``tensor.storage()``: a ``TypedStorage`` is an untyped storage (here ``Storage``, the
identity a tensor and its views share) read as elements of one dtype. Reads and writes go through
a numpy view of the untyped storage's bytes, so tensors over the same storage see them.

The legacy classes are PyTorch's too: ``FloatStorage(3)`` returns a ``TypedStorage`` of float32,
and ``isinstance(s, FloatStorage)`` holds for any float32 ``TypedStorage``.
"""

from __future__ import annotations

import copy
import warnings

import numpy as np

from . import dtypes as dt
from .device import device
from .storage import Storage, UntypedStorage
from .untyped_storage import element_index

__all__ = [
    "TypedStorage",
    "LEGACY_STORAGE_CLASSES",
    "legacy_storage_class",
    "warn_typed_storage_removal",
    "set_always_warn_typed_storage_removal",
    "get_always_warn_typed_storage_removal",
]

_REMOVAL_MESSAGE = (
    "TypedStorage is deprecated. It will be removed in the future and UntypedStorage will be the "
    "only storage class. This should only matter to you if you are using storages directly.  To "
    "access UntypedStorage directly, use tensor.untyped_storage() instead of tensor.storage()"
)
_warning_state = {"always": False, "warned": False}


def set_always_warn_typed_storage_removal(always: bool) -> None:
    """Warn on every typed-storage use instead of once per process (PyTorch's test switch)."""
    _warning_state["always"] = bool(always)


def get_always_warn_typed_storage_removal() -> bool:
    return _warning_state["always"]


def warn_typed_storage_removal(stacklevel: int = 2) -> None:
    """PyTorch's deprecation warning, once per process unless always-warn is on."""
    if _warning_state["always"] or not _warning_state["warned"]:
        warnings.warn(_REMOVAL_MESSAGE, UserWarning, stacklevel=stacklevel + 1)
        _warning_state["warned"] = True


def _python_values(array: np.ndarray) -> list:
    """Elements as PyTorch's ``tolist`` gives them (bfloat16 as Python floats)."""
    if array.dtype.kind == "V" or array.dtype.name == "bfloat16":
        return array.astype(np.float32).tolist()
    return array.tolist()


def _storage_bytes_for(values, dtype: dt.dtype) -> np.ndarray:
    """A fresh byte buffer holding ``values`` converted to ``dtype`` (rounded through float32
    for the half types, as PyTorch converts)."""
    if hasattr(values, "numpy"):  # a kiln tensor
        values = values.detach().numpy()
    array = np.asarray(list(values) if not isinstance(values, np.ndarray) else values)
    if array.ndim != 1:
        raise TypeError(f"TypedStorage(): expected a flat sequence, got shape {array.shape}")
    data = dt.through_float32(array, dtype.np).astype(dtype.np)
    return np.ascontiguousarray(data).view(np.uint8).copy()


class TypedStorage:
    """An untyped storage read as elements of ``dtype`` (see the module docstring)."""

    __module__ = "kiln.storage"
    is_sparse = False

    def __init__(
        self,
        *args,
        wrap_storage: Storage | None = None,
        dtype: dt.dtype | None = None,
        device=None,
        _internal: bool = False,
    ):
        if not _internal:
            warn_typed_storage_removal(stacklevel=2)
        if dtype is None:
            dtype = dt.get_default_dtype()
        if device is not None and str(device) != "cpu":
            raise RuntimeError(f"TypedStorage(device={device!r}): kiln's storages are CPU only")
        self.dtype = dtype
        if wrap_storage is not None:
            if args:
                raise RuntimeError("TypedStorage(): no positional arguments with wrap_storage")
            if not isinstance(wrap_storage, Storage):
                raise TypeError(
                    "TypedStorage(): argument 'wrap_storage' must be UntypedStorage, not "
                    f"{type(wrap_storage).__name__}"
                )
            self._untyped_storage = wrap_storage
            return
        if len(args) > 1:
            raise TypeError(f"TypedStorage(): too many arguments ({len(args)})")
        source = args[0] if args else 0
        if isinstance(source, (int, np.integer)) and not isinstance(source, bool):
            self._untyped_storage = UntypedStorage(int(source) * dtype.itemsize)
        else:
            self._untyped_storage = UntypedStorage(_storage_bytes_for(source, dtype))

    # ------------------------------------------------------------------ metadata
    @property
    def device(self) -> device:
        return self._untyped_storage.device

    @property
    def is_cuda(self) -> bool:
        return self.device.type == "cuda"

    def untyped(self) -> Storage:
        return self._untyped_storage

    def size(self) -> int:
        return self._untyped_storage.nbytes() // self.dtype.itemsize

    def __len__(self) -> int:
        return self.size()

    def nbytes(self) -> int:
        return self._untyped_storage.nbytes()

    def element_size(self) -> int:
        return self.dtype.itemsize

    def data_ptr(self) -> int:
        return self._untyped_storage.data_ptr()

    def get_device(self) -> int:
        return self._untyped_storage.get_device()

    def is_shared(self) -> bool:
        return self._untyped_storage.is_shared()

    def is_pinned(self, device=None) -> bool:
        return False

    def resizable(self) -> bool:
        return True

    def pickle_storage_type(self) -> str:
        return legacy_storage_class(self.dtype).__name__

    def type(self, dtype=None, non_blocking: bool = False):  # noqa: A003 - PyTorch's name
        """The legacy class's name (``kiln.FloatStorage``), or a copy as ``dtype`` when given."""
        if dtype is None:
            return f"kiln.{legacy_storage_class(self.dtype).__name__}"
        if isinstance(dtype, str):
            dtype = _legacy_dtype_by_name(dtype)
        elif isinstance(dtype, type) and issubclass(dtype, _LegacyStorage):
            dtype = dtype.dtype
        return self._to(dtype)

    # ------------------------------------------------------------------ elements
    def _array(self) -> np.ndarray:
        """The elements as a flat numpy view of the untyped storage's bytes."""
        return self._untyped_storage._typed_view(self.dtype.np)

    def _index(self, idx) -> int:
        if isinstance(idx, slice):
            raise RuntimeError("slices are only supported in UntypedStorage.__getitem__")
        return element_index(idx, self.size())

    def __getitem__(self, idx):
        i = self._index(idx)
        return _python_values(self._array()[i : i + 1])[0]

    def __setitem__(self, idx, value) -> None:
        if not isinstance(idx, (int, np.integer, slice)):
            raise RuntimeError(f"can't index a {type(self)} with {type(idx)}")
        data = self._array()
        where = idx if isinstance(idx, slice) else self._index(idx)
        if hasattr(value, "numpy"):  # a kiln tensor
            value = value.detach().numpy()
        data[where] = np.asarray(value).astype(data.dtype)

    def __iter__(self):
        return iter(self.tolist())

    def tolist(self) -> list:
        return _python_values(self._array())

    # ------------------------------------------------------------------ whole-storage ops
    def fill_(self, value):
        self._array()[:] = np.asarray(value).astype(self.dtype.np)
        return self

    def copy_(self, source, non_blocking: bool | None = None):
        """Copy ``source``'s bytes (a storage of the same byte size), as PyTorch's does."""
        other = source._untyped_storage if isinstance(source, TypedStorage) else source
        self._untyped_storage.copy_(other)
        return self

    def _new_wrapped_storage(self, untyped: Storage) -> TypedStorage:
        return TypedStorage(wrap_storage=untyped, dtype=self.dtype, _internal=True)

    def clone(self) -> TypedStorage:
        return self._new_wrapped_storage(self._untyped_storage.clone())

    def cpu(self) -> TypedStorage:
        return self._new_wrapped_storage(self._untyped_storage.cpu())

    def resize_(self, size: int) -> TypedStorage:
        self._untyped_storage.resize_(int(size) * self.dtype.itemsize)
        return self

    def share_memory_(self) -> TypedStorage:
        self._untyped_storage.shared = True
        return self

    def _to(self, dtype: dt.dtype) -> TypedStorage:
        """A new storage with the elements converted to ``dtype`` (a copy even for the same
        dtype, as PyTorch's ``.float()`` of a float storage)."""
        values = self._array()
        converted = dt.through_float32(values, dtype.np).astype(dtype.np)
        untyped = Storage(np.ascontiguousarray(converted).view(np.uint8).copy())
        return TypedStorage(wrap_storage=untyped, dtype=dtype, _internal=True)

    def bool(self) -> TypedStorage:  # noqa: A003 - PyTorch's conversion names
        return self._to(dt.bool_)

    def byte(self) -> TypedStorage:
        return self._to(dt.uint8)

    def char(self) -> TypedStorage:
        return self._to(dt.int8)

    def short(self) -> TypedStorage:
        return self._to(dt.int16)

    def int(self) -> TypedStorage:  # noqa: A003
        return self._to(dt.int32)

    def long(self) -> TypedStorage:
        return self._to(dt.int64)

    def half(self) -> TypedStorage:
        return self._to(dt.float16)

    def bfloat16(self) -> TypedStorage:
        return self._to(dt.bfloat16)

    def float(self) -> TypedStorage:  # noqa: A003
        return self._to(dt.float32)

    def double(self) -> TypedStorage:
        return self._to(dt.float64)

    def complex_float(self) -> TypedStorage:
        return self._to(dt.complex64)

    def complex_double(self) -> TypedStorage:
        return self._to(dt.complex128)

    # ------------------------------------------------------------------ Python protocol
    def __repr__(self) -> str:
        header = (
            f"[kiln.storage.TypedStorage(dtype={self.dtype}, device={self.device}) "
            f"of size {self.size()}]"
        )
        return " " + "\n ".join(str(v) for v in self.tolist()) + "\n" + header

    __str__ = __repr__

    def __copy__(self) -> TypedStorage:
        return self._new_wrapped_storage(self._untyped_storage)

    def __deepcopy__(self, memo) -> TypedStorage:
        if id(self) in memo:
            return memo[id(self)]
        untyped = memo.get(id(self._untyped_storage))
        if untyped is None:
            untyped = copy.copy(self._untyped_storage).clone()
            memo[id(self._untyped_storage)] = untyped
        result = memo[id(self)] = self._new_wrapped_storage(untyped)
        return result

    def __sizeof__(self) -> int:
        return super().__sizeof__() + self.nbytes()


class _LegacyStorageMeta(type):
    """``isinstance(s, FloatStorage)``: any ``TypedStorage`` of float32 (PyTorch's rule)."""

    dtype: dt.dtype

    def __instancecheck__(cls, instance) -> bool:
        if type.__instancecheck__(cls, instance):
            return True
        if cls is _LegacyStorage:
            return False
        return isinstance(instance, TypedStorage) and instance.dtype is cls.dtype


class _LegacyStorage(TypedStorage, metaclass=_LegacyStorageMeta):
    """Base of ``FloatStorage`` and its siblings: constructing one gives a ``TypedStorage`` of
    the class's dtype, as PyTorch's legacy constructors do."""

    def __new__(cls, *args, wrap_storage: Storage | None = None, device=None):
        if cls is _LegacyStorage:
            raise RuntimeError("Only child classes of _LegacyStorage can be instantiated")
        warn_typed_storage_removal(stacklevel=2)
        return TypedStorage(
            *args, wrap_storage=wrap_storage, dtype=cls.dtype, device=device, _internal=True
        )


def _make_legacy_class(dtype: dt.dtype) -> type:
    name = dt.torch_type_name(dtype) + "Storage"
    doc = f"PyTorch's legacy storage of {dtype}: constructs a ``TypedStorage`` of that dtype."
    return _LegacyStorageMeta(
        name, (_LegacyStorage,), {"dtype": dtype, "__module__": "kiln", "__doc__": doc}
    )


LEGACY_STORAGE_CLASSES: dict[dt.dtype, type] = {
    d: _make_legacy_class(d)
    for d in (
        dt.bool_, dt.uint8, dt.int8, dt.int16, dt.int32, dt.int64, dt.float16, dt.bfloat16,
        dt.float32, dt.float64, dt.complex64, dt.complex128,
    )
}  # fmt: skip


def legacy_storage_class(dtype: dt.dtype) -> type:
    """``FloatStorage`` for float32 and so on (``Tensor.storage_type()``)."""
    try:
        return LEGACY_STORAGE_CLASSES[dtype]
    except KeyError:
        raise RuntimeError(f"no legacy storage class for {dtype}") from None


def _legacy_dtype_by_name(name: str) -> dt.dtype:
    short = name.rpartition(".")[2]
    for dtype, cls in LEGACY_STORAGE_CLASSES.items():
        if cls.__name__ == short:
            return dtype
    raise RuntimeError(f"invalid storage type {name!r}")
