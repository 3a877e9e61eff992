"""Lowerings of indexing: gathers and advanced indexing as indirect loads, ``cat`` as a
select between its parts, scatters as ``Scatter`` buffers written in index order."""

from __future__ import annotations

from ...runtime import dtypes as dt
from .. import sym
from ..ir import ComputedBuffer, Layout, Scatter, TensorBox
from ..virtualized import ops
from .framework import _box, _ctx, _meta_like, _meta_like_shape, register_lowering

# ------------------------------------------------------------------------------ indirect indexing


def _indirect(box: TensorBox, index, size: int):
    """An index atom for the runtime value ``box[index]`` (negative values wrap, as in PyTorch)."""
    v = box.loader(index)
    return ops.indirect_indexing(v, size)


@register_lowering("_checked_index")
def _checked_index(out_meta, index, size, error="RuntimeError"):
    """The index itself, each value passed through ``indirect_indexing`` without counting
    negatives from the end: the kernel that computes it (or a consumer it is fused into) flags
    a value outside ``[0, size)`` as it flags a gather's, and the wrapper raises ``error``."""
    loader = index.loader

    def load(i):
        checked = ops.indirect_indexing(loader(list(i)), size, False, error=error)
        return ops.index_expr(checked, index.dtype)

    box = _box(_ctx(index), out_meta.shape, index.dtype, load, index)
    box.realize()  # checked once per index, not again in every consumer's loop (a loss's classes)
    return box


@register_lowering("gather")
def _gather(out_meta, x, dim, index, sparse_grad=False):
    nd = len(x.shape)
    d = dim % max(nd, 1)
    idx_loader = index.loader
    inner = x.loader
    size = x.shape[d] if nd else 1

    def loader(out_index):
        target = list(out_index)
        if nd:  # PyTorch's gather refuses negative indices (no counting from the end)
            target[d] = ops.indirect_indexing(idx_loader(list(out_index)), size, False)
        return inner(target)

    return _box(_ctx(x, index), out_meta.shape, x.dtype, loader, x, index)


@register_lowering("index")
def _index(out_meta, x, indices):
    for t in indices:
        if t is not None and t.dtype in (dt.bool_, dt.uint8):
            raise NotImplementedError("boolean-mask indexing has a data-dependent shape")
    nd = len(x.shape)
    positions = [i for i, t in enumerate(indices) if t is not None]
    idx_shapes = [tuple(indices[i].shape) for i in positions]
    nb = max((len(s) for s in idx_shapes), default=0)
    adjacent = positions == list(range(positions[0], positions[-1] + 1)) if positions else True
    rest_dims = [i for i in range(nd) if i >= len(indices) or indices[i] is None]
    inner = x.loader
    loaders = {i: indices[i].loader for i in positions}
    shapes = {i: tuple(indices[i].shape) for i in positions}
    start = positions[0] if adjacent and positions else 0
    broadcast_shape = tuple(out_meta.shape)[start : start + nb]

    def loader(out_index):
        out_index = list(out_index)
        if adjacent and positions:
            before = out_index[: positions[0]]
            bidx = out_index[positions[0] : positions[0] + nb]
            after = out_index[positions[0] + nb :]
            rest = before + after
        else:
            bidx = out_index[:nb]
            rest = out_index[nb:]
        target = [None] * nd
        rest_iter = iter(rest)
        for d in range(nd):
            if d in loaders:
                s = shapes[d]
                lead = nb - len(s)
                sub = [
                    sym.ZERO if sym.broadcasts(sz, broadcast_shape[lead + k]) else bidx[lead + k]
                    for k, sz in enumerate(s)
                ]
                # eager x[idx] (and take, index_put) raise IndexError, as PyTorch's
                target[d] = ops.indirect_indexing(loaders[d](sub), x.shape[d], error="IndexError")
            else:
                target[d] = next(rest_iter)
        return inner(target)

    del rest_dims
    return _box(_ctx(x, *[t for t in indices if t is not None]), out_meta.shape, x.dtype, loader, x)


@register_lowering("cat")
def _cat(out_meta, tensors, dim=0):
    out_shape = tuple(out_meta.shape)
    nd = len(out_shape)
    d = dim % max(nd, 1)
    # PyTorch's legacy rule skips 1-d empty parts; a symbolic size is not asked whether it is 0
    parts = [
        t for t in tensors if not (nd > 1 and len(t.shape) == 1 and sym.same_size(t.shape[0], 0))
    ]
    if len(parts) > 8:
        raise NotImplementedError("cat of many tensors uses the fallback")
    out_dtype = out_meta.dtype
    c = out_dtype
    offsets = []
    acc = 0
    for t in parts:
        offsets.append(acc)
        acc += t.shape[d]
    loaders = [_broadcast_cast(t, c) for t in parts]

    def loader(index):
        pos = ops.index_expr(sym.as_expr(index[d]), dt.int64)
        value = None
        for t_loader, off, t in reversed(list(zip(loaders, offsets, parts))):
            shifted = list(index)
            length = t.shape[d]
            shifted[d] = sym.as_expr(index[d]) - off
            if len(parts) > 1 and length.__class__ is int and length > 0:
                # every part is read at every position and the where chain keeps one: wrapped
                # into [0, length) the index stays inside the part where it is not kept, and
                # the simplifier knows its range where it is (a reshaped part's divisions by
                # symbolic sizes then fold away instead of costing a division per lane)
                shifted[d] = shifted[d] % length
            v = t_loader(shifted)
            if value is None:
                value = v
            else:
                value = ops.where(ops.lt(pos, ops.constant(off + t.shape[d], dt.int64)), v, value)
        return value

    return _box(_ctx(*parts), out_shape, out_dtype, loader, *parts)


def _broadcast_cast(box: TensorBox, to: dt.dtype):
    inner = box.loader
    src = box.dtype

    def load(index):
        v = inner(index)
        return v if src is to else ops.to_dtype(v, to)

    return load


# ------------------------------------------------------------------------------ scatters


def _scatter_buffer(out_meta, base: TensorBox, ranges, index_fn, value_fn, mode: str) -> TensorBox:
    ctx = base.ctx
    layout = Layout.contiguous(tuple(out_meta.shape), out_meta.dtype)
    base_loader = _broadcast_cast(base, out_meta.dtype)
    data = Scatter(
        tuple(ranges), out_meta.dtype, tuple(out_meta.shape), base_loader, index_fn, value_fn, mode
    )
    buf = ComputedBuffer(ctx.new_name(), layout, data)
    ctx.buffers.append(buf)
    return TensorBox.of_buffer(buf, ctx)


@register_lowering("scatter_add")
def _scatter_add(out_meta, x, dim, index, src):
    nd = len(x.shape)
    d = dim % max(nd, 1)
    idx_loader = index.loader
    src_loader = _broadcast_cast(src, out_meta.dtype)
    size = x.shape[d] if nd else 1

    def index_fn(i):
        target = list(i)
        if nd:  # as gather: negative indices are out of range
            target[d] = ops.indirect_indexing(idx_loader(list(i)), size, False)
        return target

    return _scatter_buffer(out_meta, x, index.shape, index_fn, lambda i: src_loader(list(i)), "add")


@register_lowering("index_put")
def _index_put(out_meta, x, indices, values, accumulate=False):
    for t in indices:
        if t is not None and t.dtype in (dt.bool_, dt.uint8):
            raise NotImplementedError("index_put with a boolean mask uses the fallback")
    from ...ops.indexing.subscript import index as index_op

    fake_x = _meta_like(x)
    fake_idx = [None if t is None else _meta_like(t) for t in indices]
    sub_shape = tuple(index_op.meta(fake_x, fake_idx).shape)
    selector = _index(_meta_like_shape(sub_shape, x.dtype), _IndexRecorder(x), indices)
    value_box = values
    vshape = tuple(value_box.shape)
    lead = len(sub_shape) - len(vshape)
    v_loader = value_box.loader
    v_dtype = value_box.dtype
    out_dtype = out_meta.dtype

    def value_fn(i):
        sub = [
            sym.ZERO if sym.broadcasts(s, sub_shape[lead + k]) else i[lead + k]
            for k, s in enumerate(vshape)
        ]
        v = v_loader(sub)
        return v if v_dtype is out_dtype else ops.to_dtype(v, out_dtype)

    def index_fn(i):
        return selector.loader(list(i))

    return _scatter_buffer(
        out_meta, x, sub_shape, index_fn, value_fn, "add" if accumulate else "set"
    )


class _IndexRecorder(TensorBox):
    """A stand-in for the scattered-into tensor: its "loader" returns the index it is asked for."""

    def __init__(self, like: TensorBox):
        super().__init__(tuple(like.shape), like.dtype, lambda index: list(index), like.ctx)
