"""Lowerings of ops that make values from nothing but their arguments: fills, ranges, random."""

from __future__ import annotations

from ...ops.core.registry import OPS
from ...runtime import dtypes as dt
from ...runtime.symbolic import SymInt
from ...runtime.tensor import Tensor
from .. import sym
from ..ir import Layout, TensorBox
from ..virtualized import ops
from .framework import LOWERINGS, _ctx, register_lowering


@register_lowering("full")
def _full(out_meta, size, fill_value, dtype=None, device=None):
    d = out_meta.dtype
    v = fill_value

    def loader(index):
        return ops.constant(v, d)

    return TensorBox(tuple(out_meta.shape), d, loader, None)


@register_lowering("empty", "empty_strided")
def _empty(out_meta, *args, **kwargs):
    d = out_meta.dtype
    return TensorBox(tuple(out_meta.shape), d, lambda index: ops.constant(0, d), None)


@register_lowering("arange")
def _arange(out_meta, start, end, step=1, dtype=None, device=None):
    d = out_meta.dtype
    start_v = start.item() if isinstance(start, Tensor) else start
    step_v = step.item() if isinstance(step, Tensor) else step
    if d.is_floating_point:

        def loader(index):
            i = ops.index_expr(index[0], dt.float64)
            v = ops.add(ops.mul(i, _float_bound(step_v)), _float_bound(start_v))
            return ops.to_dtype(v, d) if d is not dt.float64 else v

        return TensorBox(tuple(out_meta.shape), d, loader, None)
    # a start or step that is a size (``flip``'s ``arange(s0 - 1, -1, -1)``) stays an expression
    start_e, step_e = (_int_bound(v) for v in (start_v, step_v))
    if start_e is None or step_e is None:
        raise NotImplementedError("integer arange with fractional bounds uses the fallback")

    def int_loader(index):
        return ops.index_expr(sym.as_expr(index[0]) * step_e + start_e, d)

    return TensorBox(tuple(out_meta.shape), d, int_loader, None)


def _float_bound(value):
    """A floating ``arange`` bound as a float64 value in the loop body."""
    if isinstance(value, SymInt):
        return ops.index_expr(sym.as_expr(value), dt.float64)
    return ops.constant(float(value), dt.float64)


def _int_bound(value):
    """An integer ``arange`` bound as an index expression, None for a fractional one."""
    if isinstance(value, SymInt):
        return sym.as_expr(value)
    return int(value) if float(value).is_integer() else None


def _philox(which):
    def lower(out_meta, size, seed, offset, dtype=None, device=None):
        return _philox_box(which, out_meta, seed, offset)

    return lower


def _philox_box(which, out_meta, seed, offset):
    d = out_meta.dtype
    shape = tuple(out_meta.shape)
    strides = Layout.contiguous(shape, d).stride
    seed_ld = _scalar_loader(seed)
    offset_ld = _scalar_loader(offset)

    def loader(index):
        linear = sym.ZERO
        for i, st in zip(index, strides):
            linear = linear + sym.as_expr(i) * st
        off = ops.add(offset_ld(), ops.index_expr(linear, dt.int64))
        v = getattr(ops, which)(seed_ld(), off)
        return v if d is dt.float32 else ops.to_dtype(v, d)

    return TensorBox(shape, d, loader, _ctx(seed, offset), size_hint=8)


LOWERINGS[OPS["philox_rand"]] = _philox("rand")
LOWERINGS[OPS["philox_randn"]] = _philox("randn")


def _scalar_loader(x):
    if isinstance(x, TensorBox):
        ld = x.loader

        def load():
            v = ld([sym.ZERO] * len(x.shape))
            return v if x.dtype is dt.int64 else ops.to_dtype(v, dt.int64)

        return load
    value = int(x)
    return lambda: ops.constant(value, dt.int64)
