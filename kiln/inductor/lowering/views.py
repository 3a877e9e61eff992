"""Lowerings of views (remapped indices, and the layout a stored value is viewed with),
copies that can stay views, and ``*_scatter`` ops that write through a view."""

from __future__ import annotations

from collections.abc import Callable

from ...ops.core.registry import OPS
from ...runtime import dtypes as dt
from ...runtime.symbolic import (
    SizeDependentError,
    known_same_shape,
    statically_known_true,
    sym_max,
)
from .. import sym
from ..ir import InputBuffer, Layout, TensorBox
from ..virtualized import ops
from .framework import CURRENT, LOWERINGS, _box, _ctx, _meta_like, input_meta, register_lowering


def _view_box(x: TensorBox, shape, index_map: Callable, strided=None) -> TensorBox:
    """A box reading ``x`` at ``index_map(index)``; ``strided(layout)`` gives the view's layout
    when ``x`` is a buffer (so externs and outputs can use the view without a copy)."""
    inner = x.loader
    box = TensorBox(
        tuple(shape), x.dtype, lambda index: inner(index_map(index)), x.ctx, size_hint=x.size_hint
    )
    box.is_view = True
    base = getattr(x, "view_of", None)
    if base is None and x.buffer is not None:
        base = (x.buffer, x.buffer.layout)
    if base is not None and strided is not None:
        buffer, layout = base
        new_layout = strided(layout)
        if new_layout is not None:
            box.view_of = (buffer, new_layout)
    elif base is None and strided is not None and sym.same_size(_numel(shape), x.numel()):
        # a view of a value not computed yet: remember how to view it once it is stored
        # (an extern kernel then takes the view instead of a copy in the view's order)
        root, to_root = getattr(x, "lazy_view", None) or (x, None)
        box.lazy_view = (root, _compose(to_root, strided))
    return box


def _numel(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def _compose(first, then):
    if first is None:
        return then

    def strided(layout):
        inner = first(layout)
        return None if inner is None else then(inner)

    return strided


@register_lowering("permute")
def _permute(out_meta, x, dims):
    nd = len(x.shape)
    dims = [d % nd for d in dims] if nd else []
    inverse = [0] * nd
    for i, d in enumerate(dims):
        inverse[d] = i

    def strided(layout):
        return Layout(
            tuple(layout.shape[d] for d in dims),
            tuple(layout.stride[d] for d in dims),
            layout.dtype,
            layout.offset,
        )

    return _view_box(
        x, out_meta.shape, lambda index: [index[inverse[i]] for i in range(nd)], strided
    )


@register_lowering("expand")
def _expand(out_meta, x, size):
    out_shape = tuple(out_meta.shape)
    lead = len(out_shape) - len(x.shape)
    broadcast = [sym.broadcasts(s, out_shape[lead + i]) for i, s in enumerate(x.shape)]

    def index_map(index):
        return [sym.ZERO if b else index[lead + i] for i, b in enumerate(broadcast)]

    def strided(layout):
        st = [0] * lead + [0 if b else s for b, s in zip(broadcast, layout.stride)]
        return Layout(out_shape, tuple(st), layout.dtype, layout.offset)

    return _view_box(x, out_shape, index_map, strided)


def _slice_start(size, start):
    """Where a slice starts reading (its length comes from the node's shape). A start past the
    end leaves the slice empty and nothing is read, so with symbolic sizes it is not clamped
    (which would ask whether ``s0 // 3`` may be 0); a negative one counts from the end, at 0
    at the least."""
    if start is None:
        return 0
    if start.__class__ is int and size.__class__ is int:
        if start < 0:
            start += size
        return min(max(start, 0), size)
    if sym.known(">=", start, 0):
        return start
    if sym.known("<", start, 0):
        start = start + size
        return start if sym.known(">=", start, 0) else sym_max(start, 0)
    if start < 0:  # a start of unknown sign is decided (a guard, or per size in a kernel scope)
        start = start + size
    return min(max(start, 0), size)


@register_lowering("slice")
def _slice(out_meta, x, dim=0, start=None, end=None, step=1):
    nd = len(x.shape)
    d = dim % nd
    s, st = _slice_start(x.shape[d], start), step

    def index_map(index):
        idx = list(index)
        idx[d] = sym.as_expr(idx[d]) * st + s
        return idx

    def strided(layout):
        stride = list(layout.stride)
        shape = list(out_meta.shape)
        off = layout.offset + s * stride[d]
        stride[d] *= st
        return Layout(tuple(shape), tuple(stride), layout.dtype, off)

    return _view_box(x, out_meta.shape, index_map, strided)


@register_lowering("select")
def _select(out_meta, x, dim, index):
    nd = len(x.shape)
    d = dim % nd
    i = index % x.shape[d] if x.shape[d] else index

    def index_map(idx):
        idx = list(idx)
        idx.insert(d, sym.as_expr(i))  # a SymInt index stays symbolic
        return idx

    def strided(layout):
        stride = list(layout.stride)
        off = layout.offset + i * stride[d]
        del stride[d]
        return Layout(tuple(out_meta.shape), tuple(stride), layout.dtype, off)

    return _view_box(x, out_meta.shape, index_map, strided)


@register_lowering("unsqueeze")
def _unsqueeze(out_meta, x, dim):
    d = dim % (len(x.shape) + 1)

    def index_map(index):
        idx = list(index)
        del idx[d]
        return idx

    def strided(layout):
        stride = list(layout.stride)
        stride.insert(d, 0)
        return Layout(tuple(out_meta.shape), tuple(stride), layout.dtype, layout.offset)

    return _view_box(x, out_meta.shape, index_map, strided)


@register_lowering("squeeze")
def _squeeze(out_meta, x, dim=None):
    out_shape = tuple(out_meta.shape)
    if dim is None:
        candidates = range(len(x.shape))
    else:
        dims = (dim,) if isinstance(dim, int) else tuple(dim)
        nd = max(len(x.shape), 1)
        candidates = sorted({d % nd for d in dims if x.shape})
    # the meta decided at capture which dims go (a symbolic size that was 1 there is pinned to
    # 1): the sizes 1 for every size are those, so a kernel for every size need not ask whether
    # ``s0 // 3`` is 1 (prototypical networks' ``squeeze()`` of n_query); the values decide
    # only if that misses one
    removed = [i for i in candidates if sym.known("==", x.shape[i], 1)]
    if len(x.shape) - len(removed) != len(out_shape):
        removed = [i for i in candidates if x.shape[i] == 1]
    kept = [i for i in range(len(x.shape)) if i not in removed]

    def index_map(index):
        idx = [sym.ZERO] * len(x.shape)
        for j, i in enumerate(kept):
            idx[i] = index[j]
        return idx

    def strided(layout):
        return Layout(out_shape, tuple(layout.stride[i] for i in kept), layout.dtype, layout.offset)

    return _view_box(x, out_shape, index_map, strided)


def _contiguous_strides(shape):
    return Layout.contiguous(shape, dt.float32).stride


@register_lowering("view", "reshape")
def _view(out_meta, x, size):
    out_shape = tuple(out_meta.shape)
    in_shape = tuple(x.shape)
    back = getattr(x, "reshape_of", None)
    # (shapes equal for every size: a tuple ``==`` would ask ``s0 == s0*s1`` of symbolic ones)
    if back is not None and known_same_shape(tuple(back.shape), out_shape):
        return back  # a reshape undone: the original (and whatever buffer view it has)
    in_strides = _contiguous_strides(in_shape)
    out_strides = _contiguous_strides(out_shape)

    def index_map(index):
        # nothing is ever loaded from an empty tensor (a symbolic size that is 0 only for some
        # values leaves the loops empty then, so the general form below serves it too)
        if any(sym.known("==", s, 0) for s in (*in_shape, *out_shape)):
            return [sym.ZERO] * len(in_shape)
        # a dim of size 1 adds nothing and reads index 0; one that is 1 only for some sizes
        # ((s + 1) // 2) takes the general form, which is also right when it is 1
        linear = sym.ZERO
        for i, st, s in zip(index, out_strides, out_shape):
            if not sym.known("==", s, 1):
                linear = linear + sym.as_expr(i) * st
        return [
            sym.ZERO if sym.known("==", s, 1) else (linear // st) % s
            for st, s in zip(in_strides, in_shape)
        ]

    def strided(layout):
        from ...ops.shape.views import view_strides

        # a view only where it serves every size (else the loads index through the reshape,
        # which serves every size too: so does a comparison no range decides)
        try:
            st = view_strides(layout.shape, layout.stride, out_shape, guard=False)
        except SizeDependentError:
            return None
        return None if st is None else Layout(out_shape, tuple(st), layout.dtype, layout.offset)

    box = _view_box(x, out_shape, index_map, strided)
    box.reshape_of = x  # a batched matmul may take ``x`` itself (see ``_batched_operands``)
    return box


@register_lowering("diagonal")
def _diagonal(out_meta, x, offset=0, dim1=0, dim2=1):
    nd = len(x.shape)
    d1, d2 = dim1 % nd, dim2 % nd
    rest = [i for i in range(nd) if i not in (d1, d2)]

    def index_map(index):
        idx = [sym.ZERO] * nd
        for j, i in enumerate(rest):
            idx[i] = index[j]
        k = sym.as_expr(index[-1])
        idx[d1] = k + max(-offset, 0)
        idx[d2] = k + max(offset, 0)
        return idx

    return _view_box(x, out_meta.shape, index_map)


@register_lowering("as_strided")
def _as_strided(out_meta, x, size, stride, storage_offset=None):
    """as_strided reads the input's *storage*: use the buffer a view box looks into, or store the
    value with exactly the layout eager would have given it (the node's recorded strides)."""
    view = getattr(x, "view_of", None)
    if view is not None:
        buffer, base = view
    else:
        arg_meta = input_meta(0)
        layout = None
        if arg_meta is not None:
            layout = Layout(tuple(arg_meta.shape), tuple(arg_meta.stride()), x.dtype, 0)
        buffer = x.realize(layout)
        base = buffer.layout
    off = base.offset if storage_offset is None else storage_offset
    name = buffer.name
    layout = Layout(tuple(size), tuple(stride), x.dtype, off)

    def loader(index):
        return ops.load(name, layout.offset_expr(index))

    box = TensorBox(tuple(size), x.dtype, loader, x.ctx)
    box.view_of = (buffer, layout)
    return box


# ------------------------------------------------------------------------------ scatters of views


def _scatter_of(view_lowering):
    """``*_scatter(base, src, ...)``: base everywhere except where the view lands, src there."""

    def lower(out_meta, base, src, *params):
        shape = tuple(base.shape)
        marker = _IndexProbe(shape)
        view = view_lowering(_meta_like(src), marker.box(), *params)
        src_ld = src.loader
        base_ld = base.loader
        # the view maps a src index to a base index; invert it per dimension where possible
        inverse = marker.invert(view, tuple(src.shape))
        d = base.dtype

        def loader(index):
            cond, src_index = inverse(index)
            if cond is None:
                return src_ld(src_index)
            return ops.where(cond, src_ld(src_index), base_ld(index))

        del d
        return _box(_ctx(base, src), shape, base.dtype, loader, base, src)

    return lower


class _IndexProbe:
    """Discovers how a view maps indices, by running its loader with symbolic variables."""

    def __init__(self, shape):
        self.shape = shape
        self.seen = None

    def box(self) -> TensorBox:
        probe = self

        def loader(index):
            probe.seen = [sym.as_expr(i) for i in index]
            return None

        return TensorBox(self.shape, dt.float32, loader, None)

    def invert(self, view: TensorBox, view_shape):
        """From a base index, (condition, view index) such that view[view index] is base[index]."""
        vars_ = [sym.Var(f"_v{i}", s) for i, s in enumerate(view_shape)]
        view.loader(vars_)
        seen = self.seen  # base index as a function of the view's variables
        uses: dict = {}  # view var -> [(base dim, coeff, offset)]
        fixed = []  # base dims pinned to a constant
        for dim, e in enumerate(seen):
            if not e.terms:
                fixed.append((dim, e.const))
                continue
            if len(e.terms) != 1:
                raise NotImplementedError("scatter into a view with mixed index expressions")
            ((atom, coeff),) = e.terms.items()
            if not isinstance(atom, sym.Var) or coeff <= 0:
                raise NotImplementedError("scatter into a view with a non-affine index")
            uses.setdefault(atom, []).append((dim, coeff, e.const))
        for v in vars_:
            if v not in uses and v.size != 1:
                raise NotImplementedError("scatter into a view that drops a dimension")

        def inverse(index):
            conds = []
            view_index = []
            for v in vars_:
                if v not in uses:
                    view_index.append(sym.ZERO)
                    continue
                (dim, coeff, offset), *others = uses[v]
                rel = sym.as_expr(index[dim]) - offset
                value = rel // coeff if coeff != 1 else rel
                if _wrap(v.size, offset, self.shape[dim]):
                    # read where the condition fails too: wrapped into [0, size) the index stays
                    # inside the view there, and the simplifier knows its range where it holds
                    # (a reshaped source's divisions by symbolic sizes fold away)
                    value = value % v.size
                view_index.append(value)
                conds.append(_in_range(index[dim], offset, coeff, v.size))
                for odim, ocoeff, ooffset in others:  # e.g. a diagonal: both dims move together
                    lhs = ops.index_expr(sym.as_expr(index[odim]), dt.int64)
                    rhs = ops.index_expr(value * ocoeff + ooffset, dt.int64)
                    conds.append(ops.eq(lhs, rhs))
            for dim, const_value in fixed:
                iv = ops.index_expr(sym.as_expr(index[dim]), dt.int64)
                conds.append(ops.eq(iv, ops.constant(const_value, dt.int64)))
            cond = None
            for c in conds:
                cond = c if cond is None else ops.logical_and(cond, c)
            return cond, view_index

        return inverse


def _wrap(size, offset, extent) -> bool:
    """Whether a scatter's source is read at its index wrapped into ``[0, size)``: where the
    base is parts of that size (a ``cat`` or ``split`` of equal parts), ``(x - 2*256) % 256`` is
    ``x % 256``, which the loop planner splits into affine pieces. Elsewhere (a padding's
    ``x - 1``, or a whole dim) the raw index is affine along the loop, and a vector load reads
    it (a masked one where it may leave the buffer); wrapped, every lane would be a gather."""
    if size.__class__ is not int or size <= 0:
        return False
    if offset.__class__ is not int or extent.__class__ is not int:
        return True
    return offset % size == 0 and extent % size == 0 and extent > size


def _in_range(i, offset, coeff, size):
    """offset <= i < offset + coeff*size and (i - offset) % coeff == 0, as an ops bool value."""
    iv = ops.index_expr(sym.as_expr(i), dt.int64)
    lo = ops.ge(iv, ops.constant(offset, dt.int64))
    hi = ops.lt(iv, ops.constant(offset + coeff * size, dt.int64))
    cond = ops.logical_and(lo, hi)
    if coeff != 1:
        shifted = ops.sub(iv, ops.constant(offset, dt.int64))
        on_grid = ops.eq(
            ops.remainder(shifted, ops.constant(coeff, dt.int64)), ops.constant(0, dt.int64)
        )
        cond = ops.logical_and(cond, on_grid)
    return cond


LOWERINGS[OPS["slice_scatter"]] = _scatter_of(_slice)
LOWERINGS[OPS["select_scatter"]] = _scatter_of(_select)
LOWERINGS[OPS["diagonal_scatter"]] = _scatter_of(_diagonal)


@register_lowering("clone", "alias")
def _clone(out_meta, x, memory_format=None):
    # a copy is the same values; whether they end up in new memory is the scheduler's business
    same = clone_without_copy(x, CURRENT.node)
    if same is not None:
        return same
    box = _box(x.ctx, x.shape, x.dtype, x.loader, x)
    box.clone_of = x  # a matmul reading the copy may read the original (``_batched_operands``)
    return box


@register_lowering("to_device")
def _to_device(out_meta, x, device):
    if out_meta.device.type != "cpu":
        raise NotImplementedError("inductor CPU graphs cannot move tensors to other devices")
    return _clone(out_meta, x)


def clone_without_copy(box: TensorBox, node) -> TensorBox | None:
    """``clone`` of a view that already lies contiguous in a buffer the graph computed (a
    product written in its consumer's order): the same box, when no two outputs would then
    share memory (nothing returns the clone, or nothing but the clone returns the buffer: a
    weight gradient's product written in the weight's order); None otherwise."""
    view = getattr(box, "view_of", None)
    if view is None:
        return None
    buf, layout = view
    if isinstance(buf, InputBuffer) or not layout.is_contiguous():
        return None
    if layout.numel() != buf.layout.numel():
        return None
    if _reaches_output(node) and (
        _returned_besides(node, buf) or not _strides_as_returned(layout, node)
    ):
        return None
    return box


def _strides_as_returned(layout: Layout, node) -> bool:
    """Whether the output the clone is has ``layout``'s strides exactly: a size-1 dim's stride
    too (a channels-last 1x1 weight's gradient is (C, 1, C, C), where the view's is (C, 1, 1,
    1)); the output is a copy otherwise, as before the alias."""
    meta = node.meta.get("val")
    stride = getattr(meta, "stride", None)
    if stride is None or len(stride()) != len(layout.stride):
        return False
    return all(statically_known_true("==", a, b) for a, b in zip(stride(), layout.stride))


_VIEWS = frozenset(
    {"view", "reshape", "permute", "expand", "slice", "select", "unsqueeze", "squeeze", "alias"}
)


def _reaches_output(node, depth: int = 16) -> bool:
    """Whether the graph returns ``node`` or a view of it (True when unsure)."""
    if node is None:
        return True
    stack = [(node, 0)]
    while stack:
        n, d = stack.pop()
        for user in n.users:
            if user.op == "output":
                return True
            if _name(user) in _VIEWS:
                if d >= depth:
                    return True
                stack.append((user, d + 1))
    return False


# ops whose result may be their input's storage (a clone that stayed a view, as here)
_ALIASING = _VIEWS | {"clone", "to_device"}


def _returned_besides(node, buf) -> bool:
    """Whether the graph returns ``buf``'s storage other than through ``node`` (True when
    unsure): ``node`` is a clone of a chain of views of the node that computed ``buf``, and
    anything else aliasing that node's result (a view, another clone) reaching the output
    would share memory with the clone."""
    root = node
    for _ in range(16):
        if root is not node and _name(root) not in _VIEWS:
            break
        args = getattr(root, "args", ())
        if not args or not hasattr(args[0], "users"):
            return True
        root = args[0]
    else:
        return True
    if root not in getattr(buf, "origins", ()):
        return True  # the buffer is another node's (a lowering that returned its input)
    stack, seen = [root], {root}
    while stack:
        current = stack.pop()
        for user in current.users:
            if user is node or user in seen:
                continue
            if user.op == "output" or len(seen) > 64:
                return True
            if _name(user) in _ALIASING:
                seen.add(user)
                stack.append(user)
    return False


def _name(node) -> str | None:
    return getattr(getattr(node, "target", None), "name", None)
