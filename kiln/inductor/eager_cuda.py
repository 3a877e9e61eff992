"""Eager CUDA ops as single-op compiled graphs: the kernel provider of ``runtime.devices``.

An op on cuda tensors is traced to prims, compiled by the inductor's Triton backend and cached
by (op, argument dtypes/shapes/strides/devices, scalar values). The device layer sits below the
compiler, so it reaches this module through ``devices.set_kernel_provider`` (installed by the
facade, loaded on the first CUDA op). Ops whose output shape depends on data run on host copies.
"""

from __future__ import annotations

import collections
import logging
import warnings

from ..ir.tracer import trace
from ..ops.core.dispatch import dispatch
from ..runtime import devices
from ..runtime.state import compile_lock
from ..runtime.tensor import Tensor
from ..utils.pytree import tree_unflatten
from .codegen.triton_cuda import CudaKernelRuntime
from .compile_fx import compile_graph

__all__ = ["run_op", "copy", "clear_cache", "cache_info"]

log = logging.getLogger("kiln.cuda")

_CACHE_SIZE = 4096
_compiled: collections.OrderedDict = collections.OrderedDict()
_stats = {"hits": 0, "misses": 0}


def copy(dev, dst_array, src_array) -> None:
    """Copy one device array into another (same shape and dtype, any strides)."""
    CudaKernelRuntime.for_device(dev).copy(dst_array, src_array)


def clear_cache() -> None:
    _compiled.clear()
    _stats.update(hits=0, misses=0)


def cache_info() -> dict:
    """Hits, misses and size of the single-op graph cache."""
    return {**_stats, "size": len(_compiled)}


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
    """Run ``op`` on cuda tensors through its cached single-op kernel."""
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
