"""Non-CPU devices: creation, transfers and eager ops on the CUDA device.

Eager ops on cuda tensors run as *single-op graphs* compiled by the inductor's Triton backend,
so eager and compiled code share one kernel generator. This layer is below the compiler: the
compiler is reached through a hook (``set_kernel_provider``) that the facade installs, loaded on
the first CUDA op so ``import kiln`` never loads the compiler. View ops only compute new metadata
over the same device buffer; in-place ops compute their out-of-place twin and copy the result
back. Ops whose output shape depends on data run their CPU kernel on host copies.

Without a usable CUDA driver every cuda request fails with a ``RuntimeError`` naming the reason.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np

from . import cuda
from . import dtypes as dt
from .device import as_device, cpu
from .tensor import Tensor, make_fake, wrap_array

__all__ = [
    "cuda_available",
    "require_cuda",
    "run_kernel",
    "transfer",
    "full",
    "empty",
    "copy_between",
    "op_cache_info",
    "clear_cache",
    "set_kernel_provider",
    "run_on_host",
]

log = logging.getLogger("kiln.cuda")

# what compiles eager CUDA ops: a loader (installed by the facade) returning an object with
# ``run_op(op, args, dev)``, ``run_inplace(op, args, dev)``, ``copy(dev, dst_array, src_array)``,
# ``fill(dev, dst_array, value)``, ``clear_cache()``, ``cache_info()``
_provider: list = [None, None]  # [loader, loaded provider]


def set_kernel_provider(loader: Callable | None) -> None:
    """Install the loader of the compiler's eager-op kernels (called when first needed)."""
    _provider[:] = [loader, None]


def _kernels():
    if _provider[1] is None:
        if _provider[0] is None:
            raise RuntimeError(
                "kiln: eager CUDA ops need the compiler's kernel provider, which `import kiln` "
                "installs; import kiln before using kiln.runtime directly"
            )
        _provider[1] = _provider[0]()
    return _provider[1]


def cuda_available() -> bool:
    return cuda.is_available()


def require_cuda(dev) -> None:
    dev = as_device(dev)
    if dev.type != "cuda":
        raise RuntimeError(f"kiln: device {dev} is not supported for this operation")
    cuda.require(cuda.device_index(dev))


# ------------------------------------------------------------------------------ memory


def empty(size, dtype: dt.dtype, dev, stride=None) -> Tensor:
    require_cuda(dev)
    index = cuda.device_index(as_device(dev))
    return cuda.wrap(cuda.empty(tuple(size), dtype, index, stride))


def full(size, fill_value, dtype: dt.dtype, dev) -> Tensor:
    dev = as_device(dev)
    require_cuda(dev)
    t = empty(size, dtype, dev)
    a = t._data
    if fill_value == 0 and not (isinstance(fill_value, float) and np.signbit(fill_value)):
        if a.extent():
            a.buffer.driver.activate(a.buffer.index)
            a.buffer.driver.memset(a.data_ptr(), 0, a.extent() * dtype.itemsize)
        return t
    _kernels().fill(dev, a, fill_value)
    return t


def transfer(t: Tensor, target) -> Tensor:
    """A copy of ``t`` on ``target`` (cpu <-> cuda, or between two cuda devices)."""
    target = as_device(target)
    if target.type == "cuda":
        require_cuda(target)
        index = cuda.device_index(target)
        if t._device.type == "cpu":
            return cuda.wrap(cuda.from_numpy(t._data, t._dtype, index))
        src = t._data
        out = cuda.empty(src.shape, t._dtype, index)
        if src.is_contiguous():
            cuda.copy_device_to_device(out, src)
        else:
            out = cuda.from_numpy(cuda.to_numpy(src), t._dtype, index)
        return cuda.wrap(out)
    if target.type == "cpu":
        return wrap_array(cuda.to_numpy(t._data), t._dtype)
    raise RuntimeError(f"kiln: cannot move a tensor from {t._device} to {target}")


def copy_between(dst: Tensor, src: Tensor) -> Tensor:
    """``dst.copy_(src)`` across devices (dst on cuda; src on the CPU or another GPU)."""
    if dst._device.type != "cuda":
        raise RuntimeError(
            f"kiln: copy_ from {src._device} into a {dst._device} tensor is not supported; "
            "move the source first (src.cpu())"
        )
    a = dst._data
    if src._dtype is dst._dtype and tuple(src._shape) == a.shape and a.is_contiguous():
        if src._device.type == "cpu":
            host = np.ascontiguousarray(src._data)
            if host.nbytes:
                a.buffer.driver.activate(a.buffer.index)
                a.buffer.driver.htod(a.data_ptr(), host.__array_interface__["data"][0], host.nbytes)
            return dst
    staged = transfer(src, dst._device)
    _copy(dst._device, a, staged._data)
    return dst


def _copy(dev, dst_array, src_array) -> None:
    _kernels().copy(dev, dst_array, src_array)


# ------------------------------------------------------------------------------ eager ops


def run_kernel(dev, op, args: tuple):
    """Run ``op`` on cuda tensors (see the module docstring)."""
    require_cuda(dev)
    if op.name == "to_device":
        return transfer(args[0], args[1])
    if op.name != "copy_":
        args = _stage_arguments(op, args, dev)
    if op.is_view:
        return _view(op, args)
    if op.name == "copy_":
        dst, src = args[0], args[1]
        if isinstance(src, Tensor) and src._device is not dst._device:
            return copy_between(dst, src)
        if not isinstance(src, Tensor):
            src = full((), src, dst._dtype, dst._device)
        _copy(dst._device, dst._data, src._data)
        return dst
    if op.inplace and op.functional is not None:
        return _kernels().run_inplace(op, args, dev)
    return _kernels().run_op(op, args, dev)


_CPU_INDEX_OPS = frozenset({"index", "index_put", "index_put_"})


def _stage_arguments(op, args: tuple, dev) -> tuple:
    """Check devices; 0-dim CPU tensors (PyTorch lets them act as scalars) move to ``dev``."""

    def fix(a, index_list=False):
        if isinstance(a, Tensor) and a._device != dev:
            if a._device.type == "cpu" and (a.ndim == 0 or index_list):
                return transfer(a, dev)
            raise RuntimeError(
                "Expected all tensors to be on the same device, but found at least two "
                f"devices, {dev} and {a._device}! (while running {op.name})"
            )
        return a

    out = list(args)
    for p in op.tensor_positions:
        out[p] = fix(out[p])
    # advanced indexing takes index tensors from the CPU for a tensor on any device, as
    # PyTorch's ``x[idx]`` and ``index_put_`` do (they are copied over)
    indices = op.name in _CPU_INDEX_OPS
    for p in op.list_positions:
        out[p] = type(out[p])(fix(a, indices) for a in out[p])
    if op.name in ("philox_rand", "philox_randn"):
        # seeds and offsets change every call: make them graph inputs, not baked constants
        for p in (1, 2):
            if not isinstance(out[p], Tensor):
                value = int(out[p]) & ((1 << 64) - 1)
                out[p] = wrap_array(np.array(value, np.uint64).view(np.int64), dt.int64)
    return tuple(out)


def _view(op, args: tuple):
    x = args[0]
    a = x._data
    fake = make_fake(x._shape, x._dtype, x._device, a.strides, a.offset)
    out = op.meta(fake, *args[1:])

    def real(f):
        return cuda.wrap(
            cuda.CudaArray(a.buffer, f._offset, f._shape, f.stride(), f._dtype), x._get_storage()
        )

    if isinstance(out, (list, tuple)):
        return type(out)(real(f) for f in out)
    return real(out)


def clear_cache() -> None:
    """Forget the compiled single-op kernels (they belong to one driver's runtime)."""
    if _provider[1] is not None:
        _provider[1].clear_cache()


def op_cache_info() -> dict:
    """Hits, misses and size of the single-op graph cache."""
    if _provider[1] is None:
        return {"hits": 0, "misses": 0, "size": 0}
    return _provider[1].cache_info()


def run_on_host(op, args: tuple, dev):
    """Run the CPU kernel on host copies (data-dependent shapes), move results back."""
    from ..ops.core.dispatch import dispatch

    def down(a):
        if isinstance(a, Tensor):
            return transfer(a, cpu)
        if isinstance(a, (list, tuple)):
            return type(a)(down(v) for v in a)
        return a

    out = dispatch(op, tuple(down(a) for a in args))

    def up(o):
        if isinstance(o, Tensor):
            return transfer(o, dev)
        if isinstance(o, (list, tuple)):
            return type(o)(up(v) for v in o)
        return o

    return up(out)
