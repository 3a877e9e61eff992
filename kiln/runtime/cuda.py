"""The CUDA device: device memory through the CUDA driver API (libcuda via ctypes).

No PyTorch, CuPy or runtime library underneath: kiln loads ``libcuda.so.1``, makes each device's
*primary* context current (the context Triton's launcher uses when PyTorch is absent), and
allocates memory through a caching allocator (freed blocks are kept per size and reused, as
``cuMemAlloc`` is slow and synchronizing). All work runs on the default stream, so a block freed
after a kernel was queued can be handed to the next kernel safely.

A cuda tensor is a kiln ``Tensor`` whose ``_data`` is a ``CudaArray``: a strided view (offset,
shape, strides in elements) of a ``DeviceBuffer``. Views share the buffer like CPU views share a
numpy base. Kernels come from inductor (see ``kiln.runtime.devices``).

When no driver or device is present, ``is_available()`` is False and every request for a cuda
device raises a ``RuntimeError`` that says why. ``HostMemoryDriver`` is a stand-in for libcuda
backed by host memory, for tests on machines without a GPU (kernels then run in Triton's
interpreter): ``use_driver(HostMemoryDriver())``.
"""

from __future__ import annotations

import ctypes
import threading
import time

import numpy as np

from . import dtypes as dt
from .cuda_allocator import CachingAllocator, DeviceBuffer, OutOfMemoryError
from .device import device as Device
from .storage import Storage

__all__ = [
    "CudaDriver",
    "HostMemoryDriver",
    "CachingAllocator",
    "DeviceBuffer",
    "OutOfMemoryError",
    "CudaArray",
    "is_available",
    "device_count",
    "require",
    "use_driver",
    "allocator",
    "is_initialized",
    "empty",
    "from_numpy",
    "to_numpy",
    "wrap",
    "unavailable_reason",
    "device_index",
    "current_device",
    "set_current_device",
]

_CUDA_ERROR_OUT_OF_MEMORY = 2
_CUDA_ERROR_NOT_READY = 600
_EVENT_DISABLE_TIMING = 2
_ATTR_CC_MAJOR = 75
_ATTR_CC_MINOR = 76


def _driver_error(code: int, message: str) -> RuntimeError:
    """A driver error carrying its CUDA error code (``cuda_error``)."""
    err = RuntimeError(message)
    err.cuda_error = code
    return err


class CudaDriver:
    """The few libcuda entry points kiln uses, with errors turned into ``RuntimeError``."""

    emulated = False

    def __init__(self, lib=None):
        self.lib = lib if lib is not None else ctypes.CDLL("libcuda.so.1")
        c = ctypes
        sigs = {
            "cuInit": [c.c_uint],
            "cuDeviceGetCount": [c.POINTER(c.c_int)],
            "cuDeviceGet": [c.POINTER(c.c_int), c.c_int],
            "cuDeviceGetName": [c.c_char_p, c.c_int, c.c_int],
            "cuDeviceGetAttribute": [c.POINTER(c.c_int), c.c_int, c.c_int],
            "cuDeviceTotalMem_v2": [c.POINTER(c.c_size_t), c.c_int],
            "cuDevicePrimaryCtxRetain": [c.POINTER(c.c_void_p), c.c_int],
            "cuCtxSetCurrent": [c.c_void_p],
            "cuCtxSynchronize": [],
            "cuMemAlloc_v2": [c.POINTER(c.c_uint64), c.c_size_t],
            "cuMemFree_v2": [c.c_uint64],
            "cuMemcpyHtoD_v2": [c.c_uint64, c.c_void_p, c.c_size_t],
            "cuMemcpyDtoH_v2": [c.c_void_p, c.c_uint64, c.c_size_t],
            "cuMemcpyDtoD_v2": [c.c_uint64, c.c_uint64, c.c_size_t],
            "cuMemsetD8_v2": [c.c_uint64, c.c_ubyte, c.c_size_t],
            "cuMemGetInfo_v2": [c.POINTER(c.c_size_t), c.POINTER(c.c_size_t)],
            "cuGetErrorString": [c.c_int, c.POINTER(c.c_char_p)],
            "cuStreamCreateWithPriority": [c.POINTER(c.c_void_p), c.c_uint, c.c_int],
            "cuStreamDestroy_v2": [c.c_void_p],
            "cuStreamSynchronize": [c.c_void_p],
            "cuStreamQuery": [c.c_void_p],
            "cuStreamWaitEvent": [c.c_void_p, c.c_void_p, c.c_uint],
            "cuEventCreate": [c.POINTER(c.c_void_p), c.c_uint],
            "cuEventRecord": [c.c_void_p, c.c_void_p],
            "cuEventSynchronize": [c.c_void_p],
            "cuEventQuery": [c.c_void_p],
            "cuEventElapsedTime": [c.POINTER(c.c_float), c.c_void_p, c.c_void_p],
            "cuEventDestroy_v2": [c.c_void_p],
        }
        for name, args in sigs.items():
            fn = getattr(self.lib, name)
            fn.argtypes = args
            fn.restype = c.c_int
        self._contexts: dict[int, int] = {}
        self._check(self.lib.cuInit(0), "cuInit")

    def _check(self, result: int, what: str) -> None:
        if result != 0:
            # built by a helper and raised without a local name: a frame holding its own
            # exception is a reference cycle that keeps every caller's tensors alive until gc
            raise self._error(result, what)

    def _error(self, result: int, what: str) -> RuntimeError:
        msg = ctypes.c_char_p()
        self.lib.cuGetErrorString(result, ctypes.byref(msg))
        text = msg.value.decode() if msg.value else "unknown error"
        return _driver_error(result, f"CUDA driver error {result} in {what}: {text}")

    def device_count(self) -> int:
        n = ctypes.c_int()
        self._check(self.lib.cuDeviceGetCount(ctypes.byref(n)), "cuDeviceGetCount")
        return n.value

    def _device(self, ordinal: int) -> int:
        d = ctypes.c_int()
        self._check(self.lib.cuDeviceGet(ctypes.byref(d), ordinal), "cuDeviceGet")
        return d.value

    def name(self, ordinal: int) -> str:
        buf = ctypes.create_string_buffer(256)
        self._check(self.lib.cuDeviceGetName(buf, 256, self._device(ordinal)), "cuDeviceGetName")
        return buf.value.decode()

    def capability(self, ordinal: int) -> tuple[int, int]:
        out = []
        for attr in (_ATTR_CC_MAJOR, _ATTR_CC_MINOR):
            v = ctypes.c_int()
            self._check(
                self.lib.cuDeviceGetAttribute(ctypes.byref(v), attr, self._device(ordinal)),
                "cuDeviceGetAttribute",
            )
            out.append(v.value)
        return out[0], out[1]

    def total_memory(self, ordinal: int) -> int:
        v = ctypes.c_size_t()
        self._check(
            self.lib.cuDeviceTotalMem_v2(ctypes.byref(v), self._device(ordinal)), "cuDeviceTotalMem"
        )
        return v.value

    def activate(self, ordinal: int) -> None:
        """Make the device's primary context current on this thread (retained once)."""
        ctx = self._contexts.get(ordinal)
        if ctx is None:
            handle = ctypes.c_void_p()
            self._check(
                self.lib.cuDevicePrimaryCtxRetain(ctypes.byref(handle), self._device(ordinal)),
                "cuDevicePrimaryCtxRetain",
            )
            ctx = self._contexts[ordinal] = handle.value
        self._check(self.lib.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")

    def alloc(self, nbytes: int) -> int:
        ptr = ctypes.c_uint64()
        self._check(self.lib.cuMemAlloc_v2(ctypes.byref(ptr), nbytes), f"cuMemAlloc({nbytes})")
        return ptr.value

    def free(self, ptr: int) -> None:
        self._check(self.lib.cuMemFree_v2(ptr), "cuMemFree")

    def htod(self, dst: int, src: int, nbytes: int) -> None:
        self._check(self.lib.cuMemcpyHtoD_v2(dst, src, nbytes), "cuMemcpyHtoD")

    def dtoh(self, dst: int, src: int, nbytes: int) -> None:
        self._check(self.lib.cuMemcpyDtoH_v2(dst, src, nbytes), "cuMemcpyDtoH")

    def dtod(self, dst: int, src: int, nbytes: int) -> None:
        self._check(self.lib.cuMemcpyDtoD_v2(dst, src, nbytes), "cuMemcpyDtoD")

    def memset(self, ptr: int, byte: int, nbytes: int) -> None:
        self._check(self.lib.cuMemsetD8_v2(ptr, byte, nbytes), "cuMemsetD8")

    def synchronize(self) -> None:
        self._check(self.lib.cuCtxSynchronize(), "cuCtxSynchronize")

    def memory_info(self) -> tuple[int, int]:
        free, total = ctypes.c_size_t(), ctypes.c_size_t()
        self._check(
            self.lib.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)), "cuMemGetInfo"
        )
        return free.value, total.value

    # streams and events (handles are plain integers; 0 is the legacy default stream)
    def stream_create(self, priority: int = 0) -> int:
        h = ctypes.c_void_p()
        self._check(
            self.lib.cuStreamCreateWithPriority(ctypes.byref(h), 0, priority), "cuStreamCreate"
        )
        return h.value or 0

    def stream_destroy(self, stream: int) -> None:
        self._check(self.lib.cuStreamDestroy_v2(stream), "cuStreamDestroy")

    def stream_synchronize(self, stream: int) -> None:
        self._check(self.lib.cuStreamSynchronize(stream), "cuStreamSynchronize")

    def stream_query(self, stream: int) -> bool:
        return self._ready(self.lib.cuStreamQuery(stream), "cuStreamQuery")

    def stream_wait_event(self, stream: int, event: int) -> None:
        self._check(self.lib.cuStreamWaitEvent(stream, event, 0), "cuStreamWaitEvent")

    def event_create(self, timing: bool) -> int:
        h = ctypes.c_void_p()
        flags = 0 if timing else _EVENT_DISABLE_TIMING
        self._check(self.lib.cuEventCreate(ctypes.byref(h), flags), "cuEventCreate")
        return h.value

    def event_record(self, event: int, stream: int) -> None:
        self._check(self.lib.cuEventRecord(event, stream), "cuEventRecord")

    def event_synchronize(self, event: int) -> None:
        self._check(self.lib.cuEventSynchronize(event), "cuEventSynchronize")

    def event_query(self, event: int) -> bool:
        return self._ready(self.lib.cuEventQuery(event), "cuEventQuery")

    def event_elapsed_ms(self, start: int, end: int) -> float:
        ms = ctypes.c_float()
        self._check(self.lib.cuEventElapsedTime(ctypes.byref(ms), start, end), "cuEventElapsedTime")
        return ms.value

    def event_destroy(self, event: int) -> None:
        self._check(self.lib.cuEventDestroy_v2(event), "cuEventDestroy")

    def _ready(self, result: int, what: str) -> bool:
        if result == _CUDA_ERROR_NOT_READY:
            return False
        self._check(result, what)
        return True


class HostMemoryDriver:
    """libcuda's interface over host memory: a test stand-in where no GPU exists.

    "Device" addresses are host addresses, so Triton's interpreter can run kernels on them;
    ``emulated`` tells kiln to do that instead of launching compiled kernels."""

    emulated = True

    def __init__(self, devices: int = 1, memory: int = 1 << 30):
        self._devices = devices
        self._memory = memory
        self._blocks: dict[int, np.ndarray] = {}
        self.allocations = 0  # how many times memory was really allocated (allocator tests)
        self._handles = 0  # stream and event handles
        self._event_times: dict[int, float | None] = {}

    def device_count(self) -> int:
        return self._devices

    def name(self, ordinal: int) -> str:
        return f"kiln host-memory CUDA stand-in {ordinal}"

    def capability(self, ordinal: int) -> tuple[int, int]:
        return (9, 0)

    def total_memory(self, ordinal: int) -> int:
        return self._memory

    def activate(self, ordinal: int) -> None:
        pass

    def alloc(self, nbytes: int) -> int:
        used = sum(b.nbytes for b in self._blocks.values())
        if used + nbytes > self._memory:
            raise _driver_error(
                _CUDA_ERROR_OUT_OF_MEMORY,
                f"CUDA driver error 2 in cuMemAlloc({nbytes}): out of memory",
            )
        block = np.empty(max(nbytes, 1), np.uint8)
        ptr = block.__array_interface__["data"][0]
        self._blocks[ptr] = block
        self.allocations += 1
        return ptr

    def free(self, ptr: int) -> None:
        del self._blocks[ptr]

    def htod(self, dst: int, src: int, nbytes: int) -> None:
        ctypes.memmove(dst, src, nbytes)

    dtoh = dtod = htod

    def memset(self, ptr: int, byte: int, nbytes: int) -> None:
        ctypes.memset(ptr, byte, nbytes)

    def synchronize(self) -> None:
        pass

    def memory_info(self) -> tuple[int, int]:
        used = sum(b.nbytes for b in self._blocks.values())
        return self._memory - used, self._memory

    # streams and events: work runs when it is queued, so streams are always idle and an event
    # completes when it is recorded (it keeps the host time for elapsed_time)
    def stream_create(self, priority: int = 0) -> int:
        self._handles += 1
        return self._handles

    def stream_destroy(self, stream: int) -> None:
        pass

    def stream_synchronize(self, stream: int) -> None:
        pass

    def stream_query(self, stream: int) -> bool:
        return True

    def stream_wait_event(self, stream: int, event: int) -> None:
        pass

    def event_create(self, timing: bool) -> int:
        self._handles += 1
        self._event_times[self._handles] = None
        return self._handles

    def event_record(self, event: int, stream: int) -> None:
        self._event_times[event] = time.perf_counter()

    def event_synchronize(self, event: int) -> None:
        pass

    def event_query(self, event: int) -> bool:
        return True

    def event_elapsed_ms(self, start: int, end: int) -> float:
        return (self._event_times[end] - self._event_times[start]) * 1000.0

    def event_destroy(self, event: int) -> None:
        self._event_times.pop(event, None)


# ------------------------------------------------------------------------------ driver state

_lock = threading.Lock()
_state = {"driver": None, "reason": None, "loaded": False}


def _load() -> None:
    try:
        driver = CudaDriver()
        if driver.device_count() == 0:
            _state["reason"] = "the CUDA driver reports no devices"
        else:
            _state["driver"] = driver
    except OSError as e:
        _state["reason"] = f"libcuda.so.1 could not be loaded ({e})"
    except RuntimeError as e:
        _state["reason"] = f"the CUDA driver failed to initialize ({e})"
    _state["loaded"] = True


def _driver():
    if not _state["loaded"]:
        with _lock:
            if not _state["loaded"]:
                _load()
    return _state["driver"]


def use_driver(driver) -> None:
    """Install a driver (a ``HostMemoryDriver`` in tests; ``None`` to reload libcuda lazily)."""
    with _lock:
        _state.update(driver=driver, reason=None, loaded=driver is not None)
        _allocators.clear()
        _current_device[0] = 0
    from . import devices

    devices.clear_cache()  # compiled kernels belong to the previous driver's runtime


def loaded_driver():
    """The installed driver, or None; never loads libcuda (safe in finalizers)."""
    return _state["driver"]


def unavailable_reason() -> str | None:
    return None if _driver() is not None else _state["reason"]


def is_available() -> bool:
    """True when a CUDA driver with at least one device is usable; never raises."""
    return _driver() is not None


def device_count() -> int:
    d = _driver()
    return d.device_count() if d is not None else 0


def require(index: int | None = None):
    """The driver, or a ``RuntimeError`` saying why CUDA (device ``index``) is unusable."""
    d = _driver()
    if d is None:
        raise RuntimeError(
            f"kiln: CUDA is not available: {_state['reason']} (kiln.cuda.is_available() is "
            "False); use device='cpu'"
        )
    if index is not None and not 0 <= index < d.device_count():
        raise RuntimeError(
            f"kiln: CUDA error: invalid device ordinal cuda:{index} "
            f"({d.device_count()} device(s) available)"
        )
    return d


_current_device = [0]  # what "cuda" without an index means (kiln.cuda.set_device)


def device_index(dev) -> int:
    return _current_device[0] if dev.index is None else dev.index


def set_current_device(index: int) -> None:
    require(index).activate(index)
    _current_device[0] = index


def current_device() -> int:
    return _current_device[0]


# ------------------------------------------------------------------------------ memory


def allocator(index: int = 0) -> CachingAllocator:
    a = _allocators.get(index)
    if a is None:
        from .cuda_streams import current_stream_for_allocator

        a = _allocators[index] = CachingAllocator(
            require(index), index, current_stream_for_allocator
        )
    return a


_allocators: dict[int, CachingAllocator] = {}


def is_initialized() -> bool:
    """Whether this process has set CUDA up: the first cuda tensor makes a device's allocator
    (PyTorch's lazy initialization; before it, its memory counters read zero)."""
    return bool(_allocators)


class CudaArray:
    """A cuda tensor's data: a strided view (elements) of a ``DeviceBuffer``."""

    __slots__ = ("buffer", "offset", "shape", "strides", "dtype")
    base = None  # never a numpy array: keeps numpy-oriented storage walks away

    def __init__(self, buffer: DeviceBuffer, offset: int, shape, strides, dtype: dt.dtype):
        self.buffer = buffer
        self.offset = int(offset)
        self.shape = tuple(int(s) for s in shape)
        self.strides = tuple(int(s) for s in strides)
        self.dtype = dtype

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    def data_ptr(self) -> int:
        return self.buffer.ptr + self.offset * self.dtype.itemsize

    def extent(self) -> int:
        """Elements from the first one to the last one this view can reach."""
        if any(s == 0 for s in self.shape):
            return 0
        return 1 + sum((s - 1) * st for s, st in zip(self.shape, self.strides))

    def is_contiguous(self) -> bool:
        from .tensor import contiguous_strides

        expected = contiguous_strides(self.shape)
        return all(n == 1 or a == b for n, a, b in zip(self.shape, self.strides, expected))

    def __repr__(self) -> str:
        return (
            f"CudaArray({self.dtype.name}{list(self.shape)}, strides={list(self.strides)}, "
            f"at {self.data_ptr():#x} on cuda:{self.buffer.index})"
        )


class CudaStorage(Storage):
    """Storage identity of a cuda tensor and its views (version counter for autograd)."""

    __slots__ = ()

    def data_ptr(self) -> int:
        return self.base.ptr

    def nbytes(self) -> int:
        return self.base.nbytes


def wrap(array: CudaArray, storage: CudaStorage | None = None):
    """A kiln Tensor around ``array`` (no copy); views pass their base's storage."""
    from .tensor import Tensor

    t = object.__new__(Tensor)
    t._data = array
    t._shape = array.shape
    t._dtype = array.dtype
    t._device = Device("cuda", array.buffer.index)
    t._storage = storage if storage is not None else CudaStorage(array.buffer)
    t._stride = array.strides
    t._base = None
    t._view_src = None
    return t


def empty(shape, dtype: dt.dtype, index: int = 0, strides=None) -> CudaArray:
    from .tensor import contiguous_strides

    shape = tuple(int(s) for s in shape)
    strides = contiguous_strides(shape) if strides is None else tuple(strides)
    array = CudaArray(None, 0, shape, strides, dtype)
    nbytes = max(array.extent(), 1) * dtype.itemsize
    array.buffer = allocator(index).malloc(nbytes)
    return array


def from_numpy(a: np.ndarray, dtype: dt.dtype, index: int = 0) -> CudaArray:
    """Copy a host array to a new contiguous device array."""
    shape = np.shape(a)  # ascontiguousarray makes 0-d arrays 1-d
    a = np.ascontiguousarray(a)
    out = empty(shape, dtype, index)
    if a.nbytes:
        d = out.buffer.driver
        d.activate(index)
        d.htod(out.buffer.ptr, a.__array_interface__["data"][0], a.nbytes)
    return out


def to_numpy(array: CudaArray) -> np.ndarray:
    """Copy a device array (any strides) to a new C-contiguous host array."""
    n = array.extent()
    host = np.empty(max(n, 1), array.dtype.np)
    if n:
        d = array.buffer.driver
        d.activate(array.buffer.index)
        d.dtoh(host.__array_interface__["data"][0], array.data_ptr(), n * array.itemsize)
    item = array.itemsize
    view = np.lib.stride_tricks.as_strided(
        host, shape=array.shape, strides=tuple(s * item for s in array.strides)
    )
    return np.array(view, copy=True, order="C")


def copy_device_to_device(dst: CudaArray, src: CudaArray) -> None:
    """Byte copy between contiguous arrays of the same size (on one device or across two)."""
    nbytes = src.extent() * src.itemsize
    if nbytes == 0:
        return
    if dst.buffer.index == src.buffer.index:
        d = dst.buffer.driver
        d.activate(dst.buffer.index)
        d.dtod(dst.data_ptr(), src.data_ptr(), nbytes)
        return
    host = to_numpy(src)
    d = dst.buffer.driver
    d.activate(dst.buffer.index)
    d.htod(dst.data_ptr(), host.__array_interface__["data"][0], nbytes)
