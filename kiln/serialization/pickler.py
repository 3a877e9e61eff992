"""The pickle half of ``kiln.save``: an object tree pickled under PyTorch's names.

Tensors become ``torch._utils._rebuild_tensor_v2(storage, offset, size, stride, requires_grad,
hooks)`` calls whose storage is a persistent id ``('storage', torch.FloatStorage, key, location,
numel)``; Parameters ``_rebuild_parameter``; dtypes ``torch.float32``; ``Size``, ``device`` and
layouts as PyTorch pickles them -- so ``torch.load`` reads the file. Anything else pickles as
usual (by its own class), as with ``torch.save``.

Views of one buffer share one storage record. ``StoragePlan`` decides the records in a first,
discarded pickling pass, because a record's extent (and so each tensor's offset in it) is known
only once every tensor viewing the buffer has been seen. A storage pickled by itself
(``t.untyped_storage()``, ``t.storage()``) is a persistent id too, as in PyTorch, naming a record
that holds exactly its bytes (the id has no offset); tensors over it share that record.
"""

from __future__ import annotations

import io
import pickle
from collections import OrderedDict

import numpy as np

from ..runtime import dtypes as dt
from ..runtime import layouts
from ..runtime.device import device
from ..runtime.storage import Storage, storage_of
from ..runtime.tensor import Size, Tensor
from ..runtime.typed_storage import TypedStorage
from .pickled_names import STORAGE_NAME, TorchName

__all__ = ["StoragePlan", "CheckpointPickler", "pickle_checkpoint"]

_REBUILD_TENSOR = TorchName("torch._utils", "_rebuild_tensor_v2")
_REBUILD_PARAMETER = TorchName("torch._utils", "_rebuild_parameter")
_REBUILD_META = TorchName("torch._utils", "_rebuild_meta_tensor_no_storage")
_REBUILD_SPARSE = TorchName("torch._utils", "_rebuild_sparse_tensor")
_TORCH_SIZE = TorchName("torch", "Size")
_TORCH_DEVICE = TorchName("torch", "device")
_GET_LAYOUT = TorchName("torch.serialization", "_get_layout")
_STORAGE_TYPES = {d: TorchName("torch", name) for d, name in STORAGE_NAME.items()}
_UNTYPED_STORAGE = TorchName("torch.storage", "UntypedStorage")


def _host_array(t: Tensor) -> np.ndarray:
    """The memory a tensor's values live in, on the host (a device tensor is copied)."""
    if t.is_fake:
        raise RuntimeError(
            f"kiln.save cannot store a tensor without data (shape {list(t.shape)} on {t.device}): "
            "fake tensors being captured into a graph have no values"
        )
    host = t if t.device.type == "cpu" else t.detach().cpu()
    array = host.numpy(force=True)
    return array if isinstance(array, np.ndarray) else np.array(array)


def _extent(array: np.ndarray) -> tuple[int, int]:
    """The [first, end) byte addresses an array's elements occupy (strides are non-negative)."""
    lo = array.__array_interface__["data"][0]
    return lo, lo + sum((n - 1) * s for n, s in zip(array.shape, array.strides)) + array.itemsize


def _location(dev: device) -> str:
    return str(dev) if dev.type != "cuda" else f"cuda:{dev.index or 0}"


def _storage_elements(storage, dtype: dt.dtype) -> np.ndarray:
    """A saved storage's bytes read as ``dtype``: its memory, from the start of its buffer."""
    untyped = storage.untyped()
    root = untyped.base
    if untyped.nbytes() and not isinstance(root, np.ndarray):
        raise RuntimeError(
            f"kiln.save: a storage on {untyped.device} cannot be saved; save a tensor over it"
        )
    whole = _flat_bytes(root) if untyped.nbytes() else None
    if whole is None:  # empty, or memory numpy spans with gaps: its bytes, copied
        whole = np.frombuffer(bytes(untyped.tolist()), np.uint8)
    count = untyped.nbytes() // dtype.itemsize
    return whole[: count * dtype.itemsize].view(dtype.np)


def _flat_bytes(root: np.ndarray) -> np.ndarray | None:
    """All of ``root``'s memory as one uint8 array, or None if it is not one block."""
    if root.flags.c_contiguous:
        return root.reshape(-1).view(np.uint8)
    if root.flags.f_contiguous:
        return root.T.reshape(-1).view(np.uint8)
    return None


class _Record:
    """One storage record: its bytes come from ``root`` (a buffer several tensors may view)."""

    def __init__(self, root: np.ndarray, dtype: dt.dtype, location: str):
        self.root = root
        self.dtype = dtype
        self.location = location
        self.members: list[np.ndarray] = []
        self.saves_storage = False  # a storage object names it: its bytes are the storage's
        self.key = ""
        self.start = 0
        self.data: np.ndarray | None = None  # uint8 bytes, set by ``StoragePlan.finish``

    def settle(self, whole: np.ndarray | None) -> None:
        """Choose the bytes: the whole buffer when it holds this dtype (PyTorch's storage of a
        view is its base's), else just the span the tensors cover (a pooled byte buffer, or
        a saved storage's own bytes)."""
        root_start = self.root.__array_interface__["data"][0]
        if whole is not None and self.root.dtype == self.dtype.np and not self.saves_storage:
            self.start, self.data = root_start, whole
            return
        extents = [_extent(a) for a in self.members]
        self.start = min(lo for lo, _ in extents)
        end = max(hi for _, hi in extents)
        self.data = whole[self.start - root_start : end - root_start]


class StoragePlan:
    """Which storage record, element offset and strides each saved tensor gets."""

    def __init__(self):
        self._records: list[_Record] = []
        self._by_root: dict[tuple, _Record] = {}
        # id(tensor or storage) -> (its record, its memory, whether it is a storage)
        self._of_tensor: dict[int, tuple[_Record, np.ndarray, bool]] = {}
        self._keepalive: list = []  # ids stay unique while the plan is in use

    def note(self, t: Tensor) -> None:
        """First pass: remember the tensor and the buffer it views."""
        if id(t) in self._of_tensor or t.is_meta:
            return
        self._note_array(t, _host_array(t), t.dtype, _location(t.device), False)

    def note_storage(self, storage: Storage | TypedStorage) -> None:
        """First pass: remember a storage pickled by itself (as uint8 when untyped)."""
        if id(storage) not in self._of_tensor:
            dtype = storage.dtype if isinstance(storage, TypedStorage) else dt.uint8
            array = _storage_elements(storage, dtype)
            self._note_array(storage, array, dtype, _location(storage.device), True)

    def _note_array(self, owner, array: np.ndarray, dtype: dt.dtype, location: str, whole: bool):
        """Place ``owner`` (a tensor, or a storage when ``whole``) whose memory is ``array``."""
        self._keepalive.append((owner, array))
        root = storage_of(array)
        whole_bytes = _flat_bytes(root)
        item = dtype.itemsize
        alone = (
            whole_bytes is None
            or array.size == 0
            or any(s % item for s in array.strides)
            or not self._inside(array, root, whole_bytes)
        )
        if alone:
            array = array.copy(order="C")  # (ascontiguousarray would make a 0-d array 1-d)
            root = array
            record = self._add(_Record(root, dtype, location))
        else:
            key = (id(root), dtype, location)
            record = self._by_root.get(key)
            if record is None:
                record = self._add(_Record(root, dtype, location))
                self._by_root[key] = record
        record.members.append(array)
        record.saves_storage |= whole
        self._of_tensor[id(owner)] = (record, array, whole)

    @staticmethod
    def _inside(array: np.ndarray, root: np.ndarray, whole: np.ndarray) -> bool:
        start = root.__array_interface__["data"][0]
        lo, hi = _extent(array)
        return start <= lo and hi <= start + whole.size

    def finish(self) -> None:
        """Settle each record's bytes; a tensor misaligned in a shared span gets its own, and
        so does a storage whose record does not hold exactly its bytes (a storage sliced from
        a bigger one, saved beside tensors over the rest)."""
        for record in self._records:
            record.settle(_flat_bytes(record.root))
        for key, (record, array, whole) in list(self._of_tensor.items()):
            start = array.__array_interface__["data"][0]
            misplaced = (
                (start, start + array.nbytes) != (record.start, record.start + record.data.size)
                if whole
                else (start - record.start) % record.dtype.itemsize
            )
            if misplaced:
                copy = array.copy(order="C")
                alone = self._add(_Record(copy, record.dtype, record.location))
                alone.members.append(copy)
                alone.saves_storage = whole
                alone.settle(_flat_bytes(copy))
                self._of_tensor[key] = (alone, copy, whole)

    def storage_placement(self, storage: Storage | TypedStorage) -> tuple:
        """The persistent id of a storage pickled by itself: its record holds exactly it."""
        if id(storage) not in self._of_tensor:  # made while pickling
            self.note_storage(storage)
            record = self._of_tensor[id(storage)][0]
            record.settle(_flat_bytes(record.root))
        record = self._of_tensor[id(storage)][0]
        numel = record.data.size // record.dtype.itemsize
        kind = _STORAGE_TYPES[record.dtype] if isinstance(storage, TypedStorage) else None
        return ("storage", kind or _UNTYPED_STORAGE, record.key, record.location, numel)

    def placement(self, t: Tensor) -> tuple[str, TorchName, str, int, int, tuple]:
        """(key, storage type, location, numel, element offset, element strides) of ``t``."""
        if id(t) not in self._of_tensor:  # made while pickling (a __reduce__ built it anew)
            self.note(t)
            record = self._of_tensor[id(t)][0]
            record.settle(_flat_bytes(record.root))
        record, array, _ = self._of_tensor[id(t)]
        item = record.dtype.itemsize
        offset = (array.__array_interface__["data"][0] - record.start) // item
        strides = tuple(s // item for s in array.strides)
        if array.size == 0:
            strides = tuple(t.stride())
        numel = record.data.size // item
        key = record.key
        return key, _STORAGE_TYPES[record.dtype], record.location, numel, offset, strides

    def _add(self, record: _Record) -> _Record:
        record.key = str(len(self._records))
        self._records.append(record)
        return record

    def records(self) -> list[tuple[str, np.ndarray]]:
        """(key, bytes) of every storage record, in key order."""
        return [(record.key, record.data) for record in self._records]


class _StorageRef:
    """Stands for a tensor's storage in the pickle (written as a persistent id)."""

    __slots__ = ("pid",)

    def __init__(self, pid: tuple):
        self.pid = pid


class _TensorData:
    """A Parameter's values pickled as a plain tensor (``param.data`` in PyTorch's pickle)."""

    __slots__ = ("tensor",)

    def __init__(self, tensor: Tensor):
        self.tensor = tensor


def _write_global(pickler: CheckpointPickler, obj, module: str, name: str) -> None:
    if pickler.proto >= 4:
        pickler.save(module)
        pickler.save(name)
        pickler.write(pickle.STACK_GLOBAL)
    else:
        pickler.write(pickle.GLOBAL + f"{module}\n{name}\n".encode())
    pickler.memoize(obj)


class CheckpointPickler(pickle._Pickler):  # the Python pickler: its dispatch table is extensible
    """Pickles an object tree with kiln's tensors, dtypes, sizes and devices under PyTorch's
    names; ``plan`` places tensors in storage records (``note`` only, on the first pass)."""

    dispatch = pickle._Pickler.dispatch.copy()
    dispatch[TorchName] = lambda self, obj: _write_global(self, obj, obj.module, obj.name)
    dispatch[dt.dtype] = lambda self, obj: _write_global(self, obj, "torch", obj.name)

    def __init__(self, file, protocol: int, plan: StoragePlan, planning: bool):
        super().__init__(file, protocol=protocol)
        self._plan = plan
        self._planning = planning

    def persistent_id(self, obj):
        if type(obj) is _StorageRef:
            return obj.pid
        if isinstance(obj, (Storage, TypedStorage)):  # a storage saved by itself
            if self._planning:
                self._plan.note_storage(obj)
                return ("storage",)
            return self._plan.storage_placement(obj)
        return None

    def reducer_override(self, obj):
        cls = type(obj)
        if cls is _TensorData:
            return self._reduce_tensor(obj.tensor, False)
        if isinstance(obj, Tensor):
            if obj.is_sparse:  # PyTorch's record: (layout, (indices, values, size, coalesced))
                parts = (obj._indices(), obj._values().detach(), obj.shape, obj.is_coalesced())
                return (_REBUILD_SPARSE, (obj.layout, parts))
            if getattr(obj, "_is_param", False):
                hooks = OrderedDict()
                return (_REBUILD_PARAMETER, (_TensorData(obj), obj.requires_grad, hooks))
            return self._reduce_tensor(obj, obj.requires_grad)
        if cls is Size:
            return (_TORCH_SIZE, (tuple(obj),))
        if cls is device:
            return (_TORCH_DEVICE, (obj.type,) if obj.index is None else (obj.type, obj.index))
        if cls is layouts.layout:
            return (_GET_LAYOUT, (f"torch.{obj.name}",))
        return NotImplemented

    def _reduce_tensor(self, t: Tensor, requires_grad: bool):
        if t.is_meta:
            return (_REBUILD_META, (t.dtype, tuple(t.shape), t.stride(), requires_grad))
        if self._planning:
            self._plan.note(t)
            key, storage_type, location, numel, offset, strides = "0", None, "cpu", 0, 0, ()
        else:
            key, storage_type, location, numel, offset, strides = self._plan.placement(t)
        storage = _StorageRef(("storage", storage_type, key, location, numel))
        hooks = OrderedDict()
        return (_REBUILD_TENSOR, (storage, offset, tuple(t.shape), strides, requires_grad, hooks))


class _Discard:
    def write(self, data) -> int:
        return len(data)


def pickle_checkpoint(obj, protocol: int) -> tuple[bytes, StoragePlan]:
    """``obj``'s ``data.pkl`` bytes and the storage records they name."""
    plan = StoragePlan()
    CheckpointPickler(_Discard(), protocol, plan, planning=True).dump(obj)
    plan.finish()
    stream = io.BytesIO()
    CheckpointPickler(stream, protocol, plan, planning=False).dump(obj)
    return stream.getvalue(), plan
