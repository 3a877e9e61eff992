"""DLPack: sharing tensors with numpy, PyTorch, JAX ... without copying.

``Tensor.__dlpack__`` hands out the tensor's memory (kiln's CPU buffers are numpy arrays, whose
own exporter builds the capsule), so ``numpy.from_dlpack(t)`` and ``torch.from_dlpack(t)``
view kiln's values. ``from_dlpack`` takes any object with ``__dlpack__`` (or a capsule from
``to_dlpack``) and wraps the memory as a kiln tensor; dtypes numpy lacks (bfloat16) are read
from the DLPack struct directly, and the producer's deleter runs when the tensor's memory is
freed.
"""

from __future__ import annotations

import ctypes
import enum
import weakref

import ml_dtypes
import numpy as np

from ..runtime import dtypes as dt
from ..runtime.tensor import Tensor, wrap_array

__all__ = ["DLDeviceType", "to_dlpack", "from_dlpack"]


class DLDeviceType(enum.IntEnum):
    """Device codes of the DLPack standard (``__dlpack_device__()[0]``), by its names."""

    kDLCPU = 1  # noqa: N815
    kDLCUDA = 2  # noqa: N815
    kDLCUDAHost = 3  # noqa: N815
    kDLOpenCL = 4  # noqa: N815
    kDLVulkan = 7  # noqa: N815
    kDLMetal = 8  # noqa: N815
    kDLVPI = 9  # noqa: N815
    kDLROCM = 10  # noqa: N815
    kDLROCMHost = 11  # noqa: N815
    kDLExtDev = 12  # noqa: N815
    kDLCUDAManaged = 13  # noqa: N815
    kDLOneAPI = 14  # noqa: N815
    kDLWebGPU = 15  # noqa: N815
    kDLHexagon = 16  # noqa: N815
    kDLMAIA = 17  # noqa: N815


def to_dlpack(tensor: Tensor):
    """A DLPack capsule of ``tensor``'s memory (the legacy, unversioned kind)."""
    return tensor.__dlpack__()


class _Capsule:
    """Gives a bare capsule the ``__dlpack__`` protocol (it is always a CPU one for kiln)."""

    def __init__(self, capsule):
        self._capsule = capsule

    def __dlpack__(self, **kwargs):
        return self._capsule

    def __dlpack_device__(self):
        return (DLDeviceType.kDLCPU, 0)


def from_dlpack(ext_tensor) -> Tensor:
    """A kiln tensor sharing the memory of ``ext_tensor`` (anything with ``__dlpack__``, or a
    capsule). Only host memory can be shared: kiln's CUDA tensors have no DLPack import."""
    if isinstance(ext_tensor, Tensor):
        return ext_tensor.detach()
    source = ext_tensor if hasattr(ext_tensor, "__dlpack__") else _Capsule(ext_tensor)
    kind, index = source.__dlpack_device__()
    if kind not in (DLDeviceType.kDLCPU, DLDeviceType.kDLCUDAHost):
        raise BufferError(
            f"kiln.from_dlpack: the tensor lives on DLPack device ({int(kind)}, {index}); kiln "
            "imports host memory only (move it to the CPU first)"
        )
    try:
        array = np.from_dlpack(source)
    except (RuntimeError, BufferError, TypeError):  # a dtype numpy has no DLPack code for
        array = _read_struct(source.__dlpack__())
    return wrap_array(array, dt.from_numpy_dtype(array.dtype))


# ---------------------------------------------------------------------------- the C structs


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class _DLManagedTensor(ctypes.Structure):
    pass


_DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(_DLManagedTensor))
_DLManagedTensor._fields_ = [
    ("dl_tensor", _DLTensor),
    ("manager_ctx", ctypes.c_void_p),
    ("deleter", _DELETER),
]

_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_get_pointer.restype = ctypes.c_void_p
_get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_set_name = ctypes.pythonapi.PyCapsule_SetName
_set_name.restype = ctypes.c_int
_set_name.argtypes = [ctypes.py_object, ctypes.c_char_p]
_USED = ctypes.c_char_p(b"used_dltensor")  # kept alive: the capsule keeps the pointer

# (type code, bits) -> numpy dtype; codes: 0 int, 1 uint, 2 float, 4 bfloat, 5 complex, 6 bool
_DTYPES = {
    (0, 8): np.int8, (0, 16): np.int16, (0, 32): np.int32, (0, 64): np.int64, (1, 8): np.uint8,
    (2, 16): np.float16, (2, 32): np.float32, (2, 64): np.float64, (4, 16): ml_dtypes.bfloat16,
    (5, 64): np.complex64, (5, 128): np.complex128, (6, 8): np.bool_,
}  # fmt: skip


def _read_struct(capsule) -> np.ndarray:
    """An array over a legacy ``dltensor`` capsule's memory, owning the capsule's data from now
    on (the producer's deleter runs when the array's buffer is collected)."""
    managed = ctypes.cast(_get_pointer(capsule, b"dltensor"), ctypes.POINTER(_DLManagedTensor))
    t = managed.contents.dl_tensor
    np_dtype = _DTYPES.get((t.dtype.code, t.dtype.bits))
    if np_dtype is None or t.dtype.lanes != 1:
        raise BufferError(
            f"kiln.from_dlpack: DLPack dtype (code {t.dtype.code}, {t.dtype.bits} bits, "
            f"{t.dtype.lanes} lanes) has no kiln dtype"
        )
    shape = tuple(t.shape[i] for i in range(t.ndim))
    item = np.dtype(np_dtype).itemsize
    if t.strides:
        strides = tuple(t.strides[i] for i in range(t.ndim))
    else:
        strides = tuple(int(np.prod(shape[i + 1 :], dtype=np.int64)) for i in range(t.ndim))
    if any(s < 0 for s in strides):
        raise BufferError("kiln.from_dlpack: negative strides cannot be viewed by kiln")
    span = 0 if 0 in shape else (1 + sum((n - 1) * s for n, s in zip(shape, strides))) * item
    buffer = (ctypes.c_ubyte * span).from_address((t.data or 0) + t.byte_offset)
    _set_name(capsule, _USED)
    deleter = managed.contents.deleter
    if deleter:
        weakref.finalize(buffer, deleter, managed)
    return np.ndarray(shape, np_dtype, buffer=buffer, strides=tuple(s * item for s in strides))
