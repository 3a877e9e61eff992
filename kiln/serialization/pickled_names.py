"""PyTorch's names in checkpoint pickles and the kiln objects they stand for.

A ``torch.save`` pickle rebuilds tensors by calling ``torch._utils._rebuild_tensor_v2`` on a
storage named by a persistent id ``('storage', torch.FloatStorage, key, location, numel)``, spells
dtypes ``torch.float32``, sizes ``torch.Size`` and so on. ``kiln.save`` writes the same names
(``TorchName``) and ``kiln.load`` reads them through ``torch_global`` -- so files go both ways
without importing torch. Names kiln cannot honour (quantized or sparse tensors, dtypes it lacks)
resolve to an error that says so, never to a wrong value.
"""

from __future__ import annotations

import builtins
import codecs
import functools
import weakref
from collections import Counter, OrderedDict

import numpy as np

from ..runtime import dtypes as dt
from ..runtime import layouts, legacy_types
from ..runtime.device import as_device, cpu, device, meta
from ..runtime.storage import Storage
from ..runtime.tensor import Size, Tensor, make_fake, wrap_array
from ..runtime.typed_storage import TypedStorage

__all__ = [
    "TorchName",
    "StorageType",
    "LoadedStorage",
    "Unsupported",
    "STORAGE_NAME",
    "torch_global",
    "weights_only_defaults",
]


class TorchName:
    """A global as PyTorch names it (``torch._utils._rebuild_tensor_v2``): the pickler writes
    it as a GLOBAL opcode without importing the module."""

    __slots__ = ("module", "name")

    def __init__(self, module: str, name: str):
        self.module = module
        self.name = name

    def __repr__(self) -> str:
        return f"{self.module}.{self.name}"

    def __call__(self, *args):  # the pickler saves only callables as reduce functions
        raise TypeError(f"{self!r} is PyTorch's name, written into pickles; kiln never calls it")


class Unsupported:
    """A PyTorch global kiln recognises but cannot load (the reason is the error's text)."""

    __slots__ = ("reason",)

    def __init__(self, reason: str):
        self.reason = reason


class StorageType:
    """What ``torch.FloatStorage`` / ``torch.UntypedStorage`` in a persistent id stands for."""

    __slots__ = ("name", "dtype", "untyped")

    def __init__(self, name: str, dtype: dt.dtype, untyped: bool = False):
        self.name = name
        self.dtype = dtype
        self.untyped = untyped

    def __repr__(self) -> str:
        return f"torch.{self.name}"


# PyTorch's typed-storage class for each kiln dtype (the second item of a storage's persistent id)
STORAGE_NAME = {
    dt.float32: "FloatStorage",
    dt.float64: "DoubleStorage",
    dt.float16: "HalfStorage",
    dt.bfloat16: "BFloat16Storage",
    dt.int64: "LongStorage",
    dt.int32: "IntStorage",
    dt.int16: "ShortStorage",
    dt.int8: "CharStorage",
    dt.uint8: "ByteStorage",
    dt.bool_: "BoolStorage",
    dt.complex64: "ComplexFloatStorage",
    dt.complex128: "ComplexDoubleStorage",
}

_QUANTIZED = "quantized tensors (kiln has no quantization)"
_MISSING_DTYPES = (
    "complex32 chalf float8_e4m3fn float8_e4m3fnuz float8_e5m2 float8_e5m2fnuz float8_e8m0fnu "
    "float4_e2m1fn_x2 uint16 uint32 uint64 int1 int2 int3 int4 int5 int6 int7 uint1 uint2 uint3 "
    "uint4 uint5 uint6 uint7 bits1x8 bits2x4 bits4x2 bits8 bits16"
).split()
_QUANTIZED_NAMES = (
    "qint8 quint8 qint32 quint4x2 quint2x4 per_tensor_affine per_tensor_symmetric "
    "per_channel_affine per_channel_symmetric per_channel_affine_float_qparams "
    "QInt8Storage QUInt8Storage QInt32Storage QUInt4x2Storage QUInt2x4Storage"
).split()


class LoadedStorage:
    """A storage record of a checkpoint: its bytes, its dtype, its saved location and the
    device its tensors go to. ``map_location`` callables receive one (as PyTorch's receive a
    storage) and may return it moved with ``cpu()`` / ``cuda()`` / ``to()``."""

    def __init__(self, raw: np.ndarray, dtype: dt.dtype, key: str, location: str, target=cpu):
        self.raw = raw  # 1-D uint8, shared by every tensor viewing this storage
        self.dtype = dtype
        self.key = key
        self.location = location
        self.device = as_device(target)
        self.identity = Storage(raw)  # one version counter for all the views

    def nbytes(self) -> int:
        return int(self.raw.nbytes)

    def size(self) -> int:
        return self.nbytes() // self.dtype.itemsize

    __len__ = size

    def _moved(self, target) -> LoadedStorage:
        moved = LoadedStorage.__new__(LoadedStorage)
        moved.__dict__.update(self.__dict__)
        moved.device = as_device(target)
        return moved

    def cpu(self) -> LoadedStorage:
        return self._moved(cpu)

    def cuda(self, device=None, non_blocking: bool = False) -> LoadedStorage:
        index = device.index if isinstance(device, type(cpu)) else device
        return self._moved("cuda" if index is None else f"cuda:{index}")

    def to(self, device=None, non_blocking: bool = False) -> LoadedStorage:
        return self._moved(device)

    @property
    def is_cuda(self) -> bool:
        return self.device.type == "cuda"

    def __repr__(self) -> str:
        return f"<storage {self.key!r}: {self.size()} x {self.dtype} from {self.location}>"

    def as_typed(self) -> TypedStorage:
        """What the pickle receives for this record, as in PyTorch: a ``TypedStorage`` (of
        uint8 for an ``UntypedStorage`` record) over the bytes the tensors rebuilt from it
        view, so a storage saved beside its tensors still shares their memory. The rebuild
        functions find the record (its target device) again through it."""
        typed = TypedStorage(wrap_storage=self.identity, dtype=self.dtype, _internal=True)
        _RECORD_OF[typed] = self
        return typed


# the record behind each storage a load handed to the pickle (dropped with the storage)
_RECORD_OF: weakref.WeakKeyDictionary[TypedStorage, LoadedStorage] = weakref.WeakKeyDictionary()


# ---------------------------------------------------------------------------- rebuild functions


def _check_ints(what: str, values) -> tuple:
    if not isinstance(values, (tuple, list)) or not all(
        isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in values
    ):
        raise RuntimeError(f"kiln.load: a tensor's {what} is {values!r}, not non-negative ints")
    return tuple(values)


def _tensor_from_storage(typed, storage_offset, size, stride, dtype=None) -> Tensor:
    storage = _RECORD_OF.get(typed) if isinstance(typed, TypedStorage) else None
    if storage is None:
        raise RuntimeError(
            f"kiln.load: a tensor is rebuilt from {type(typed).__name__}, not a storage record"
        )
    dtype = storage.dtype if dtype is None or storage.dtype is not dt.uint8 else dtype
    if not isinstance(dtype, dt.dtype):
        raise RuntimeError(f"kiln.load: a tensor's dtype is {dtype!r}")
    (offset,) = _check_ints("storage offset", (storage_offset,))
    size = _check_ints("size", size)
    stride = _check_ints("stride", stride)
    if len(size) != len(stride):
        raise RuntimeError(f"kiln.load: a tensor has size {list(size)} but strides {list(stride)}")
    item = dtype.itemsize
    if 0 in size:
        array = np.empty(size, dtype.np)
    else:
        needed = (offset + 1 + sum((n - 1) * s for n, s in zip(size, stride))) * item
        if needed > storage.nbytes():
            raise RuntimeError(
                f"kiln.load: a tensor of shape {list(size)} with strides {list(stride)} at offset "
                f"{offset} needs {needed} bytes of {dtype}, but storage {storage.key!r} holds "
                f"{storage.nbytes()}: the checkpoint is damaged"
            )
        array = np.ndarray(
            size,
            dtype.np,
            buffer=storage.raw,
            offset=offset * item,
            strides=tuple(s * item for s in stride),
        )
    t = wrap_array(array, dtype, storage.identity)
    if storage.device.type == "meta":
        return make_fake(size, dtype, meta, stride)
    return t if storage.device is cpu else t.to(storage.device)


def _with_grad(t: Tensor, requires_grad) -> Tensor:
    if requires_grad:
        t.requires_grad_(True)
    return t


def rebuild_tensor(storage, storage_offset, size, stride) -> Tensor:
    """``torch._utils._rebuild_tensor``"""
    return _tensor_from_storage(storage, storage_offset, size, stride)


def rebuild_tensor_v2(
    storage, storage_offset, size, stride, requires_grad, backward_hooks, metadata=None
) -> Tensor:
    """``torch._utils._rebuild_tensor_v2``: what ``torch.save`` writes for every tensor."""
    return _with_grad(_tensor_from_storage(storage, storage_offset, size, stride), requires_grad)


def rebuild_tensor_v3(
    storage, storage_offset, size, stride, requires_grad, backward_hooks, dtype, metadata=None
) -> Tensor:
    """``torch._utils._rebuild_tensor_v3``: a tensor over an untyped storage, dtype given."""
    t = _tensor_from_storage(storage, storage_offset, size, stride, dtype)
    return _with_grad(t, requires_grad)


def _set_state(obj, state) -> None:
    """Python attributes saved with a tensor (``torch._utils._set_obj_state``)."""
    slots = None
    if isinstance(state, tuple) and len(state) == 2:
        state, slots = state
    for name, value in {**(state or {}), **(slots or {})}.items():
        setattr(obj, name, value)


def _parameter_class():
    from ..nn.parameter import Parameter

    return Parameter


def rebuild_parameter(data, requires_grad, backward_hooks):
    """``torch._utils._rebuild_parameter``"""
    return _parameter_class()(data, requires_grad)


def rebuild_parameter_with_state(data, requires_grad, backward_hooks, state):
    """``torch._utils._rebuild_parameter_with_state``"""
    param = _parameter_class()(data, requires_grad)
    _set_state(param, state)
    return param


def rebuild_from_type_v2(func, new_type, args, state):
    """``torch._tensor._rebuild_from_type_v2``: a tensor saved with its class and Python state
    (kiln rebuilds ``Tensor`` and ``Parameter``; other subclasses are PyTorch's own)."""
    result = func(*args)
    if new_type is _parameter_class() and type(result) is not new_type:
        result = new_type(result, result.requires_grad)
    elif new_type is not type(result):
        raise RuntimeError(f"kiln.load: cannot rebuild a tensor as an instance of {new_type!r}")
    if state:
        _set_state(result, state)
    return result


def rebuild_meta_tensor_no_storage(dtype, size, stride, requires_grad):
    """``torch._utils._rebuild_meta_tensor_no_storage``: a saved ``meta`` tensor."""
    return make_fake(_check_ints("size", size), dtype, meta, _check_ints("stride", stride))


def rebuild_device_tensor(data, dtype, device_name, requires_grad):
    """``_rebuild_device_tensor_from_cpu_tensor`` / ``..._from_numpy``: values saved on the
    host for a device kiln may not have (XLA, MTIA ...)."""
    if isinstance(data, np.ndarray):
        from ..ops.creation.api import from_numpy

        data = from_numpy(data.copy())
    target = as_device(str(device_name))
    return _with_grad(data.to(dtype=dtype).to(target), requires_grad)


def rebuild_sparse_tensor(layout, data):
    """``torch._utils._rebuild_sparse_tensor``: a COO tensor from (indices, values, size[,
    is_coalesced]); the compressed layouts kiln lacks are an error."""
    if layout is not layouts.sparse_coo:
        raise RuntimeError(f"kiln.load: sparse layout {layout} is not supported (COO only)")
    from ..ops.sparse.construction import sparse_coo_tensor

    indices, values, size, *rest = data
    return sparse_coo_tensor(indices, values, size, is_coalesced=rest[0] if rest else None)


def get_layout(name: str):
    """``torch.serialization._get_layout``: ``'torch.strided'`` to the layout object."""
    found = getattr(layouts, str(name).rpartition(".")[2], None)
    if not isinstance(found, layouts.layout):
        raise RuntimeError(f"kiln.load: unknown layout {name!r}")
    return found


# ---------------------------------------------------------------------------- the name table


@functools.lru_cache(maxsize=1)
def _table() -> dict[str, object]:
    """Every global name a checkpoint may use that kiln maps to an object of its own."""
    table: dict[str, object] = {
        "collections.OrderedDict": OrderedDict,
        "collections.Counter": Counter,
        "_codecs.encode": codecs.encode,
        "builtins.bytearray": builtins.bytearray,
        "builtins.set": builtins.set,
        "builtins.complex": builtins.complex,
        "torch.Size": Size,
        "torch.Tensor": Tensor,
        "torch.device": device,
        "torch.nn.parameter.Parameter": _parameter_class(),
        "torch.serialization._get_layout": get_layout,
        "torch._utils._rebuild_tensor": rebuild_tensor,
        "torch._utils._rebuild_tensor_v2": rebuild_tensor_v2,
        "torch._utils._rebuild_tensor_v3": rebuild_tensor_v3,
        "torch._utils._rebuild_parameter": rebuild_parameter,
        "torch._utils._rebuild_parameter_with_state": rebuild_parameter_with_state,
        "torch._utils._rebuild_meta_tensor_no_storage": rebuild_meta_tensor_no_storage,
        "torch._utils._rebuild_device_tensor_from_cpu_tensor": rebuild_device_tensor,
        "torch._utils._rebuild_device_tensor_from_numpy": rebuild_device_tensor,
        "torch._tensor._rebuild_from_type_v2": rebuild_from_type_v2,
        "torch._utils._rebuild_qtensor": Unsupported(_QUANTIZED),
        "torch._utils._rebuild_sparse_tensor": rebuild_sparse_tensor,
        "torch._utils._rebuild_nested_tensor": Unsupported("nested tensors"),
        "torch._utils._rebuild_wrapper_subclass": Unsupported("wrapper tensor subclasses"),
        # kiln's own names, in checkpoints written by kiln before it wrote PyTorch's format
        "kiln.runtime.dtypes._dtype_by_name": dt._dtype_by_name,
        "kiln.device": device,
        "kiln.runtime.device.device": device,
        "kiln.Size": Size,
        "kiln.runtime.tensor.Size": Size,
    }
    for d in dt.all_dtypes:
        table[f"torch.{d.name}"] = d
    for name in _MISSING_DTYPES:
        table[f"torch.{name}"] = Unsupported(f"tensors of dtype torch.{name}, which kiln lacks")
    for name in _QUANTIZED_NAMES:
        table[f"torch.{name}"] = Unsupported(_QUANTIZED)
    for d, name in STORAGE_NAME.items():
        table[f"torch.{name}"] = table[f"torch.cuda.{name}"] = StorageType(name, d)
    for name in ("torch.UntypedStorage", "torch.storage.UntypedStorage"):
        table[name] = StorageType("UntypedStorage", dt.uint8, untyped=True)
    for name in legacy_types.__all__:
        if name.endswith("Tensor"):  # the legacy constructors (torch.FloatTensor ...)
            table[f"torch.{name}"] = getattr(legacy_types, name)
    return table


def torch_global(full_name: str):
    """The kiln object for a global a checkpoint names, or None if the name is not PyTorch's."""
    return _table().get(full_name)


def weights_only_defaults() -> frozenset[str]:
    """The names a ``weights_only`` load accepts without ``add_safe_globals`` (PyTorch's set)."""
    return frozenset(_table())
