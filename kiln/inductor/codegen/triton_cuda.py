"""The runtime generated Triton modules use on a CUDA device.

It allocates buffers from kiln's caching allocator, hands kernels device pointers (objects with
``data_ptr()`` and a ``dtype`` name, all Triton's launcher reads), autotunes the matmul
template's block sizes once per kernel by timing each candidate, copies between layouts with a
generated strided-copy kernel, and runs extern calls without a GPU kernel (eager fallbacks) on
the host. With the host-memory driver (tests) the same module runs under Triton's interpreter.
"""

from __future__ import annotations

import time

import numpy as np

from ...runtime import cuda, cuda_streams
from ...runtime import dtypes as dt
from .. import wrapper_runtime
from ..ir import Layout
from . import triton_eager
from .triton import storage_dtype_name
from .triton_interpret import HostBuffer

__all__ = ["CudaKernelRuntime", "DevicePointer"]


class DevicePointer:
    """A kernel argument: a device address and its element type's name."""

    __slots__ = ("ptr", "dtype", "owner")

    def __init__(self, ptr: int, dtype: str, owner: cuda.DeviceBuffer):
        self.ptr, self.dtype, self.owner = ptr, dtype, owner

    def data_ptr(self) -> int:
        return self.ptr


def _owner(arg) -> cuda.DeviceBuffer:
    return arg.owner if isinstance(arg, DevicePointer) else arg.untyped_storage().owner


def _launch_on_current_streams() -> None:
    """Make Triton launch on kiln's current stream of the device (without PyTorch, Triton's
    launcher would use the default stream)."""
    from triton.runtime import driver

    active = driver.active
    if getattr(active, "kiln_streams", False):
        return
    active.get_current_stream = lambda device=None: (
        cuda_streams.current_stream(
            cuda.current_device() if device is None else int(device)
        ).cuda_stream
    )
    active.kiln_streams = True


class CudaKernelRuntime:
    """``rt`` of generated modules on one CUDA device (see the module docstring)."""

    _instances: dict = {}

    def __init__(self, index: int):
        self.index = index
        self.driver = cuda.require(index)
        self.interpret = bool(self.driver.emulated)
        self._tuned: dict = {}
        if not self.interpret:
            _launch_on_current_streams()

    @classmethod
    def for_device(cls, dev) -> CudaKernelRuntime:
        index = cuda.device_index(dev)
        driver = cuda.require(index)
        rt = cls._instances.get(index)
        if rt is None or rt.driver is not driver:
            rt = cls._instances[index] = cls(index)
        return rt

    def activate(self) -> None:
        self.driver.activate(self.index)

    # ---------------------------------------------------------------- buffers
    def pointer(self, buffer: cuda.DeviceBuffer, ptr: int, d: dt.dtype):
        name = storage_dtype_name(d)
        if self.interpret:
            size = buffer.nbytes - (ptr - buffer.ptr)
            return HostBuffer.of_address(ptr, size, name, d.itemsize, owner=buffer)
        return DevicePointer(ptr, name, buffer)

    def empty(self, numel: int, dtype_name: str):
        d = dt._dtype_by_name(dtype_name)
        buf = cuda.allocator(self.index).malloc(numel * d.itemsize)
        return self.pointer(buf, buf.ptr, d)

    def input(self, t, layout: Layout):
        """A graph input in the compiled layout (restrided on the device if it differs)."""
        if t.device.type != "cuda":  # a CPU scalar tensor or constant: upload it
            host = wrapper_runtime.input_storage(t, layout)
            a = cuda.from_numpy(host, t.dtype, self.index)
            return self.pointer(a.buffer, a.buffer.ptr, t.dtype)
        a = t._data
        if tuple(t.stride()) == tuple(layout.stride) or t.numel() <= 1:
            return self.pointer(a.buffer, a.data_ptr(), t.dtype)
        out = cuda.empty(layout.shape, t.dtype, self.index, strides=layout.stride)
        self.copy(out, a)
        return self.pointer(out.buffer, out.buffer.ptr, t.dtype)

    def constant(self, t):
        if t.device.type != "cuda":
            a = cuda.from_numpy(wrapper_runtime.storage_of_tensor(t), t.dtype, self.index)
            return self.pointer(a.buffer, a.buffer.ptr, t.dtype)
        return self.pointer(t._data.buffer, t._data.data_ptr(), t.dtype)

    def output(self, arg, layout: Layout):
        owner = _owner(arg)
        base = (arg.data_ptr() - owner.ptr) // layout.dtype.itemsize
        array = cuda.CudaArray(
            owner, base + layout.offset, layout.shape, layout.stride, layout.dtype
        )
        return cuda.wrap(array)

    def index_flags(self, count: int) -> list:
        """``count`` int32 error flags in one zeroed allocation, as kernel arguments."""
        buf = cuda.allocator(self.index).malloc(4 * count)
        self.driver.memset(buf.ptr, 0, 4 * count)
        return [self.pointer(buf, buf.ptr + 4 * i, dt.int32) for i in range(count)]

    def read_index_flags(self, flags: list) -> list:
        """The flags' values (waits for the kernels that set them)."""
        return self._download(flags[0], dt.int32)[: len(flags)].tolist()

    # ---------------------------------------------------------------- calls
    def extern(self, ext, out, inputs: list, layouts=None, values: dict | None = None) -> None:
        """An extern call (eager fallback, float64 matmul) on host copies of its inputs;
        ``layouts``/``values``: a call's concrete layouts and size values (kernels for every
        size; ``wrapper_runtime.run_extern``)."""
        self.activate()
        storages = {}
        tensors = [item for item in ext.inputs if isinstance(item, tuple)]
        for (src, _layout), arg in zip(tensors, inputs):
            storages[src.name] = self._download(arg, src.dtype)
        layout = ext.layout if layouts is None else layouts[-1]
        result = np.empty(max(layout.storage_size(), 1), ext.dtype.np)
        storages[ext.name] = result
        wrapper_runtime.run_extern(ext, storages, layouts, values)
        self.driver.htod(out.data_ptr(), result.__array_interface__["data"][0], result.nbytes)

    def _download(self, arg, d: dt.dtype) -> np.ndarray:
        owner = _owner(arg)
        nbytes = owner.nbytes - (arg.data_ptr() - owner.ptr)
        host = np.empty(nbytes // d.itemsize, d.np)
        if host.nbytes:
            self.driver.dtoh(host.__array_interface__["data"][0], arg.data_ptr(), host.nbytes)
        return host

    def launch_tuned(self, kernel, configs: list, grid, *args) -> None:
        """Launch with the fastest of ``configs`` (timed on first use, then remembered)."""
        if self.interpret:
            kernel[grid(configs[0])](*args, UPCAST=True, **configs[0])
            return
        best = self._tuned.get(id(kernel))
        if best is None:
            best = self._tuned[id(kernel)] = self._tune(kernel, configs, grid, args)
        kernel[grid(best)](*args, UPCAST=False, **best)

    def _tune(self, kernel, configs, grid, args) -> dict:
        if len(configs) == 1:
            return configs[0]
        timings = []
        error = None
        for c in configs:
            try:
                kernel[grid(c)](*args, UPCAST=False, **c)  # compiles
                self.driver.synchronize()
                start = time.perf_counter()
                for _ in range(3):
                    kernel[grid(c)](*args, UPCAST=False, **c)
                self.driver.synchronize()
                timings.append((time.perf_counter() - start, len(timings), c))
            except Exception as e:  # a config can exceed the device's resources
                error = e
        if not timings:
            raise error
        return min(timings)[2]

    # ---------------------------------------------------------------- copies
    def copy(self, dst: cuda.CudaArray, src: cuda.CudaArray) -> None:
        """``dst[...] = src`` for any strides, with broadcasting and dtype conversion."""
        if (
            dst.dtype is src.dtype
            and dst.shape == src.shape
            and dst.is_contiguous()
            and src.is_contiguous()
        ):
            cuda.copy_device_to_device(dst, src)
            return
        triton_eager.copy(self, dst, src)
