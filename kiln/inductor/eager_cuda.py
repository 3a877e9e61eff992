"""Eager CUDA ops: the kernel provider of ``runtime.devices``.

Elementwise ops, copies and fills run through the eager kernel library (``triton_eager``): one
kernel per op family, whatever the shapes, strides and Python scalars. Other ops are traced to
prims, compiled by the inductor's Triton backend as single-op graphs and cached by (op, argument
dtypes/shapes/strides/devices, non-scalar arguments); their Python floats are 0-d device tensors
(graph inputs), so new values do not compile new kernels there either. The device layer sits
below the compiler, so it reaches this module through ``devices.set_kernel_provider`` (installed
by the facade, loaded on the first CUDA op). Ops whose output shape depends on data run on host
copies.
"""

from __future__ import annotations

import collections
import logging
import warnings

import numpy as np

from ..ir.tracer import trace
from ..ops.core.dispatch import dispatch
from ..runtime import devices
from ..runtime import dtypes as dt
from ..runtime.state import compile_lock
from ..runtime.tensor import Tensor, wrap_array
from ..utils.pytree import tree_unflatten
from .codegen import triton_eager
from .codegen.triton_cuda import CudaKernelRuntime
from .compile_fx import compile_graph
from .specialize import has_unbacked_sizes

__all__ = ["run_op", "run_inplace", "copy", "fill", "clear_cache", "cache_info"]

log = logging.getLogger("kiln.cuda")

_CACHE_SIZE = 4096
_compiled: collections.OrderedDict = collections.OrderedDict()
_stats = {"hits": 0, "misses": 0}


def copy(dev, dst_array, src_array) -> None:
    """Copy one device array into another (same shape and dtype, any strides)."""
    CudaKernelRuntime.for_device(dev).copy(dst_array, src_array)


def fill(dev, dst_array, value) -> None:
    """Write a Python number into every element of a device array."""
    triton_eager.fill(CudaKernelRuntime.for_device(dev), dst_array, value)


def clear_cache() -> None:
    _compiled.clear()
    _stats.update(hits=0, misses=0)
    triton_eager.clear()


def cache_info() -> dict:
    """Hits, misses and size of the single-op graph cache; ``compiles``: kernels compiled by
    eager ops so far (single-op graphs plus the library's family kernels); ``launches``: the
    library's kernel launches."""
    library = triton_eager.stats()
    return {
        **_stats,
        "size": len(_compiled),
        "compiles": _stats["misses"] + library["compiles"],
        "launches": library["launches"],
    }


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


def run_op(op, args: tuple, dev):
    """Run ``op`` on cuda tensors: its family kernel, else its cached single-op graph."""
    rt = CudaKernelRuntime.for_device(dev)
    try:
        return triton_eager.run_pointwise(op, args, rt)
    except triton_eager.NotElementwiseError:
        pass
    return _run_single_op(op, _scalars_as_inputs(op, args, dev), dev)


def run_inplace(op, args: tuple, dev):
    """An in-place op: its family kernel writes into ``args[0]`` when nothing else reads that
    memory through another layout; otherwise the out-of-place op runs and is copied back."""
    target = args[0]
    if _writable_in_place(target, args[1:]):
        try:
            return triton_eager.run_pointwise(
                op.functional, args, CudaKernelRuntime.for_device(dev), out=target
            )
        except triton_eager.NotElementwiseError:
            pass
    result = devices.run_kernel(dev, op.functional, args)
    copy(dev, target._data, result._data)
    return target


def _writable_in_place(target, others) -> bool:
    a = target._data
    if any(st == 0 and n > 1 for n, st in zip(a.shape, a.strides)):
        return False  # one element behind several indices
    for o in others:
        for t in o if isinstance(o, (list, tuple)) else (o,):
            if isinstance(t, Tensor) and t._data.buffer is a.buffer:
                b = t._data
                if (b.offset, b.shape, b.strides) != (a.offset, a.shape, a.strides):
                    return False
    return True


def _scalars_as_inputs(op, args: tuple, dev) -> tuple:
    """Python floats in tensor-or-scalar positions become 0-d device tensors (graph inputs).

    Otherwise each new value (a learning-rate schedule) would be a new constant, a new cache key
    and a new compiled graph. The 0-d tensor has the dtype that keeps PyTorch's promotion:
    float64 next to float64 tensors (full precision), else the default dtype (a Python float
    never raises an integer or half tensor's category beyond the default float, and neither does
    a 0-d tensor of that dtype).
    """
    floats = [p for p in op.tensor_positions if type(args[p]) is float]
    if not floats:
        return args
    out = list(args)
    wide = any(isinstance(a, Tensor) and a._dtype is dt.float64 for a in args)
    d = dt.float64 if wide else dt.get_default_dtype()
    for p in floats:
        out[p] = devices.transfer(wrap_array(np.array(out[p], d.np), d), dev)
    return tuple(out)


def _run_single_op(op, args: tuple, dev):
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
        return devices.run_on_host(op, args, dev)
    compiled, spec = entry
    return tree_unflatten(list(compiled(*tensors)), spec)


def _fill(template, tensors):
    if isinstance(template, tuple) and len(template) == 2 and template[0] == "__tensor__":
        return tensors[template[1]]
    if isinstance(template, (list, tuple)):
        return type(template)(_fill(v, tensors) for v in template)
    return template


def _compile_single_op(op, template: tuple, tensors: list):
    """Trace ``op`` alone to prims and compile it; "host" when it cannot be one graph."""

    def single_op(*ts):
        return dispatch(op, _fill(template, ts))

    single_op.__name__ = op.name
    try:
        gm = trace(single_op, *tensors, decompositions="prims")
    except (RuntimeError, NotImplementedError) as e:  # data-dependent output shapes
        log.info("cuda: %s runs on host copies (%s)", op.name, e)
        return "host"
    if has_unbacked_sizes(gm):  # sizes known only when it runs: no kernel sizes its output
        log.info("cuda: %s runs on host copies (data-dependent output size)", op.name)
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
