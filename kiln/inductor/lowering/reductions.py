"""Lowerings of reductions: a ``Reduction`` buffer per reduction, split in two passes when
one output would leave the other threads idle."""

from __future__ import annotations

from ...ops.core.registry import OPS
from ...runtime import dtypes as dt
from ...runtime.symbolic import SymInt
from .. import sym
from ..ir import ComputedBuffer, Layout, Reduction, TensorBox
from ..virtualized import ops
from .framework import (
    LOWERINGS,
    _cast,
    _elementwise,
    _meta_like_shape,
    compute_dtype,
    register_lowering,
)
from .views import _view

# ------------------------------------------------------------------------------ reductions


def _reduction_dims(x, dim):
    nd = len(x.shape)
    if dim is None or (not isinstance(dim, int) and len(dim) == 0):
        return tuple(range(nd))
    dims = (dim,) if isinstance(dim, int) else tuple(dim)
    return tuple(sorted({d % max(nd, 1) for d in dims})) if nd else ()


def make_reduction(
    x: TensorBox, dims, keepdim: bool, rtype: str, out_dtype: dt.dtype, value_fn=None
) -> TensorBox:
    """Realize a reduction of ``x`` over ``dims``; ``value_fn(v, index)`` transforms loaded values."""
    nd = len(x.shape)
    kept = [i for i in range(nd) if i not in dims]
    ranges = tuple(x.shape[i] for i in kept)
    rranges = tuple(x.shape[i] for i in dims)
    src = compute_dtype(x.dtype) if rtype not in ("argmax", "argmin", "any", "all") else x.dtype
    if rtype in ("argmax", "argmin"):
        src = compute_dtype(x.dtype)
    ld = x.loader
    src_dtype = x.dtype

    def inner_fn(index, rindex):
        full = [None] * nd
        for j, i in enumerate(kept):
            full[i] = index[j]
        for j, i in enumerate(dims):
            full[i] = rindex[j]
        v = ld(full)
        if src_dtype is not src:
            v = ops.to_dtype(v, src)
        return value_fn(v, rindex) if value_fn is not None else v

    ctx = x.ctx
    out_shape = tuple(1 if i in dims else s for i, s in enumerate(x.shape)) if keepdim else ranges
    result_dtype = out_dtype
    acc_dtype = (
        compute_dtype(out_dtype) if rtype not in ("argmax", "argmin", "any", "all") else out_dtype
    )
    lead = _split_point(ranges, rranges, rtype)
    if lead:
        # two passes: partial results per leading reduction index (rows that threads share),
        # then one small reduction of the partials
        parts = ComputedBuffer(
            ctx.new_name(),
            Layout.contiguous(rranges[:lead], acc_dtype),
            Reduction(
                rranges[:lead],
                rranges[lead:],
                rtype,
                acc_dtype,
                src,
                lambda index, rindex: inner_fn([], list(index) + list(rindex)),
            ),
        )
        ctx.buffers.append(parts)
        parts_loader = parts.make_loader()
        buf = ComputedBuffer(
            ctx.new_name(),
            Layout.contiguous(ranges, acc_dtype),
            Reduction(
                (), rranges[:lead], rtype, acc_dtype, acc_dtype, lambda i, r: parts_loader(r)
            ),
        )
    else:
        buf = ComputedBuffer(
            ctx.new_name(),
            Layout.contiguous(ranges, acc_dtype),
            Reduction(ranges, rranges, rtype, acc_dtype, src, inner_fn),
        )
    ctx.buffers.append(buf)
    box = TensorBox.of_buffer(buf, ctx)
    if acc_dtype is not result_dtype:
        box = _cast(None, box, result_dtype)
    if keepdim and dims:  # (comparing the shapes would guard on symbolic sizes)
        inner = box.loader
        box = TensorBox(out_shape, result_dtype, lambda index: inner([index[i] for i in kept]), ctx)
    return box


# a reduction to one value over at least this many elements runs in two passes (see below)
SPLIT_REDUCTION_NUMEL = 1 << 16


def _split_point(ranges, rranges, rtype: str) -> int:
    """How many leading reduction dims a reduction to one value takes as the rows of a first
    pass (0: one pass). One value is one row, which one thread computes; partial results over
    the leading dims let the threads share the work (an MSE loss over a batch of activations).
    Only where the order of combination may change: sums (float rounding differs by a few ulp,
    as it does between any two summation orders), min and max."""
    if ranges or rtype not in ("sum", "max", "min") or len(rranges) < 2:
        return 0
    if sym.is_symbolic(tuple(rranges)):  # kernels for every size: one pass, whatever the size
        return 0
    total = 1
    for s in rranges:
        total *= s
    if total < SPLIT_REDUCTION_NUMEL:
        return 0
    rows = 1
    for k, s in enumerate(rranges[:-1]):
        rows *= s
        if rows >= 8:
            return k + 1 if total // rows >= 1024 else 0
    return 0


@register_lowering("sum")
def _sum(out_meta, x, dim=None, keepdim=False, dtype=None):
    dims = _reduction_dims(x, dim)
    out_dtype = out_meta.dtype
    acc = compute_dtype(out_dtype)
    fn = None if x.dtype is acc else (lambda v, r: v)
    if x.dtype is not acc:
        x = _cast(None, x, acc)
    return make_reduction(x, dims, keepdim, "sum", out_dtype, fn)


@register_lowering("prod")
def _prod(out_meta, x, dim=None, keepdim=False, dtype=None):
    dims = _reduction_dims(x, dim)
    acc = compute_dtype(out_meta.dtype)
    if x.dtype is not acc:
        x = _cast(None, x, acc)
    return make_reduction(x, dims, keepdim, "prod", out_meta.dtype)


def _minmax(rtype):
    def lower(out_meta, x, dim=None, keepdim=False):
        return make_reduction(x, _reduction_dims(x, dim), keepdim, rtype, out_meta.dtype)

    return lower


LOWERINGS[OPS["amax"]] = _minmax("max")
LOWERINGS[OPS["amin"]] = _minmax("min")


def _arg_reduction(rtype):
    def lower(out_meta, x, dim=None, keepdim=False):
        return _argmax(rtype, out_meta, x, dim, keepdim)

    return lower


def _argmax(rtype, out_meta, x, dim=None, keepdim=False):
    if dim is None:
        x = _view(_meta_like_shape((x.numel(),), x.dtype), x, (x.numel(),))
        box = make_reduction(x, (0,), False, rtype, dt.int64)
        if keepdim:
            inner = box.loader
            return TensorBox(tuple(out_meta.shape), dt.int64, lambda index: inner([]), box.ctx)
        return box
    return make_reduction(x, _reduction_dims(x, dim), keepdim, rtype, dt.int64)


LOWERINGS[OPS["argmax"]] = _arg_reduction("argmax")
LOWERINGS[OPS["argmin"]] = _arg_reduction("argmin")


@register_lowering("var")
def _var(out_meta, x, dim=None, correction=1, keepdim=False):
    """Single-pass variance: Welford's running sum of squared deviations, divided at the end."""
    dims = _reduction_dims(x, dim)
    acc = compute_dtype(out_meta.dtype)
    if x.dtype is not acc:
        x = _cast(None, x, acc)
    m2 = make_reduction(x, dims, keepdim, "welford_m2", acc)  # m2 in float32 for half types
    n = 1
    for d in dims:
        n *= x.shape[d]
    divisor = max(n - (correction if correction is not None else 1), 0)
    if divisor.__class__ is not SymInt:  # a symbolic count is emitted as a size (per call)
        divisor = float(divisor)
    return _elementwise(
        out_meta,
        [m2],
        lambda v: ops.truediv(v, ops.constant(divisor, compute_dtype(out_meta.dtype))),
    )
