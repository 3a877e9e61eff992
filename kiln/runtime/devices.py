"""Non-CPU devices: creation, transfers and eager ops on the CUDA device.

Eager ops on cuda tensors run as *single-op graphs*: the op is traced to prims, compiled by
inductor's Triton backend and cached by (op, argument dtypes/shapes/strides/devices, scalar
values), so eager and compiled code share one kernel generator. View ops only compute new
metadata over the same device buffer; in-place ops compute their out-of-place twin and copy the
result back. Ops whose output shape depends on data run their CPU kernel on host copies.

Without a usable CUDA driver every cuda request fails with a ``RuntimeError`` naming the reason.
"""

from __future__ import annotations

import collections
import logging
import warnings

import numpy as np

from . import cuda
from . import dtypes as dt
from .device import as_device, cpu
from .state import compile_lock
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
]

log = logging.getLogger("kiln.cuda")

_CACHE_SIZE = 4096
_compiled: collections.OrderedDict = collections.OrderedDict()
_stats = {"hits": 0, "misses": 0}


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
    if fill_value == 0 and not (isinstance(fill_value, float) and np.signbit(fill_value)):
        t = empty(size, dtype, dev)
        a = t._data
        if a.extent():
            a.buffer.driver.activate(a.buffer.index)
            a.buffer.driver.memset(a.data_ptr(), 0, a.extent() * dtype.itemsize)
        return t
    from ..ops.registry import OPS

    return _compiled_op(OPS["full"], (list(size), fill_value, dtype, dev), dev)


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
    _runtime(dst._device).copy(a, staged._data)
    return dst


def _runtime(dev):
    from ..inductor.codegen.triton_cuda import CudaKernelRuntime

    return CudaKernelRuntime.for_device(dev)


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
        _runtime(dst._device).copy(dst._data, src._data)
        return dst
    if op.inplace and op.functional is not None:
        result = run_kernel(dev, op.functional, args)
        _runtime(dev).copy(args[0]._data, result._data)
        return args[0]
    return _compiled_op(op, args, dev)


def _stage_arguments(op, args: tuple, dev) -> tuple:
    """Check devices; 0-dim CPU tensors (PyTorch lets them act as scalars) move to ``dev``."""

    def fix(a):
        if isinstance(a, Tensor) and a._device != dev:
            if a._device.type == "cpu" and a.ndim == 0:
                return transfer(a, dev)
            raise RuntimeError(
                "Expected all tensors to be on the same device, but found at least two "
                f"devices, {dev} and {a._device}! (while running {op.name})"
            )
        return a

    out = list(args)
    for p in op.tensor_positions:
        out[p] = fix(out[p])
    for p in op.list_positions:
        out[p] = type(out[p])(fix(a) for a in out[p])
    _scalars_as_inputs(op, out, dev)
    if op.name in ("philox_rand", "philox_randn"):
        # seeds and offsets change every call: make them graph inputs, not baked constants
        for p in (1, 2):
            if not isinstance(out[p], Tensor):
                value = int(out[p]) & ((1 << 64) - 1)
                out[p] = wrap_array(np.array(value, np.uint64).view(np.int64), dt.int64)
    return tuple(out)


def _scalars_as_inputs(op, out: list, dev) -> None:
    """Python floats in tensor-or-scalar positions become 0-d device tensors (graph inputs).

    Otherwise each new value (an optimizer's bias correction, a learning-rate schedule) would be
    a new constant, a new cache key and a new compiled kernel on every step. The 0-d tensor has
    the dtype that keeps PyTorch's promotion: float64 next to float64 tensors (full precision),
    else the default dtype (a Python float never raises an integer or half tensor's category
    beyond the default float, and neither does a 0-d tensor of that dtype).
    """
    floats = [p for p in op.tensor_positions if type(out[p]) is float]
    if not floats:
        return
    wide = any(
        isinstance(out[p], Tensor) and out[p]._dtype is dt.float64 for p in op.tensor_positions
    )
    d = dt.float64 if wide else dt.get_default_dtype()
    for p in floats:
        out[p] = transfer(wrap_array(np.array(out[p], d.np), d), dev)


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


def _key(a):
    if isinstance(a, Tensor):
        return ("T", a._dtype.name, a._shape, a.stride(), str(a._device))
    if isinstance(a, (list, tuple)):
        return (type(a).__name__,) + tuple(_key(v) for v in a)
    if isinstance(a, float):
        return ("f", repr(a))
    if a is None or isinstance(a, (bool, int, str)):
        return (type(a).__name__, a)
    return (type(a).__name__, str(a))


def clear_cache() -> None:
    _compiled.clear()
    _stats.update(hits=0, misses=0)


def op_cache_info() -> dict:
    """Hits, misses and size of the single-op graph cache."""
    return {**_stats, "size": len(_compiled)}


def _compiled_op(op, args: tuple, dev):
    tensors: list = []

    def collect(a):
        if isinstance(a, Tensor):
            tensors.append(a)
            return ("__tensor__", len(tensors) - 1)
        if isinstance(a, (list, tuple)):
            return type(a)(collect(v) for v in a)
        return a

    template = tuple(collect(a) for a in args)
    key = (op.name, _key(args))
    entry = _compiled.get(key)
    if entry is None:
        with compile_lock:  # threads missing on one op compile it once
            entry = _compiled.get(key)
            if entry is None:
                _stats["misses"] += 1
                entry = _compile_single_op(op, template, tensors)
                _compiled[key] = entry
                if len(_compiled) > _CACHE_SIZE:
                    _compiled.popitem(last=False)
    else:
        _stats["hits"] += 1
        try:
            _compiled.move_to_end(key)
        except KeyError:  # evicted by another thread's miss meanwhile: the entry still works
            pass
    if entry == "host":
        return _on_host(op, args, dev)
    compiled, spec = entry
    from ..aot.pytree import tree_unflatten

    return tree_unflatten(list(compiled(*tensors)), spec)


def _fill(template, tensors):
    if isinstance(template, tuple) and len(template) == 2 and template[0] == "__tensor__":
        return tensors[template[1]]
    if isinstance(template, (list, tuple)):
        return type(template)(_fill(v, tensors) for v in template)
    return template


def _compile_single_op(op, template: tuple, tensors: list):
    """Trace ``op`` alone to prims and compile it; "host" when it cannot be one graph."""
    from ..inductor.compile_fx import compile_graph
    from ..ir.tracer import trace
    from ..ops.dispatch import dispatch

    def single_op(*ts):
        return dispatch(op, _fill(template, ts))

    single_op.__name__ = op.name
    try:
        gm = trace(single_op, *tensors, decompositions="prims")
    except (RuntimeError, NotImplementedError) as e:  # data-dependent output shapes
        log.info("cuda: %s runs on host copies (%s)", op.name, e)
        return "host"
    try:
        compiled = compile_graph(gm, tensors, {})
    except Exception as e:  # noqa: BLE001 - a codegen gap must not break eager code
        warnings.warn(
            f"kiln: no CUDA kernel for {op.name} ({type(e).__name__}: {e}); running it on host "
            "copies of its inputs",
            stacklevel=4,
        )
        return "host"
    return compiled, compiled.schedule.lowered.output_spec


def _on_host(op, args: tuple, dev):
    """Run the CPU kernel on host copies (data-dependent shapes), move results back."""
    from ..ops.dispatch import dispatch

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
