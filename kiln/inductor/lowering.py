"""Lowerings: each prim becomes a lazily indexed ``TensorBox`` (or an extern call).

``LOWERINGS[op]`` takes the node's canonical args with tensors replaced by ``TensorBox``es plus
the node's fake result (``out_meta``) and returns a box. Elementwise ops compose loaders; views
remap indices; reductions, extern kernels and random numbers become buffers or loops of their
own. Ops without a lowering run their eager kernel as an extern call inside the compiled graph
(``fallback``), so one unsupported op never sends the whole graph back to eager.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np

from ..ops.registry import OPS
from ..runtime import dtypes as dt
from ..runtime.tensor import Tensor
from . import sym
from .ir import ComputedBuffer, ExternBuffer, Layout, Reduction, Scatter, TensorBox
from .virtualized import BINARY_OPS, COMPARISONS, PREDICATES, UNARY_OPS, ops

__all__ = ["LOWERINGS", "register_lowering", "fallback", "compute_dtype"]

LOWERINGS: dict = {}


def register_lowering(*names: str):
    def deco(fn):
        for n in names:
            LOWERINGS[OPS[n]] = fn
        return fn

    return deco


def compute_dtype(d: dt.dtype) -> dt.dtype:
    """Arithmetic on half types happens in float32 (as PyTorch's CPU kernels and Inductor do)."""
    return dt.float32 if d in (dt.float16, dt.bfloat16) else d


# ------------------------------------------------------------------------------ helpers


def _broadcast_loader(x, out_shape: tuple, to: dt.dtype) -> Callable:
    """Loader of ``x`` (box or Python scalar) at an index of ``out_shape``, cast to ``to``."""
    if not isinstance(x, TensorBox):
        value = x

        def load_scalar(index):
            return ops.constant(value, to)

        return load_scalar
    inner = x.loader
    lead = len(out_shape) - len(x.shape)
    broadcast = [
        not sym.same_size(s, out_shape[lead + i]) and s == 1 and out_shape[lead + i] != 1
        for i, s in enumerate(x.shape)
    ]
    src = x.dtype

    def load(index):
        idx = [sym.ZERO if b else index[lead + i] for i, b in enumerate(broadcast)]
        v = inner(idx)
        return v if src is to else ops.to_dtype(v, to)

    return load


def _size_hint(*xs) -> int:
    return 1 + sum(x.size_hint for x in xs if isinstance(x, TensorBox))


def _box(ctx, shape, dtype, loader, *inputs) -> TensorBox:
    return TensorBox(tuple(shape), dtype, loader, ctx, size_hint=_size_hint(*inputs))


def _ctx(*xs):
    for x in xs:
        if isinstance(x, TensorBox) and x.ctx is not None:
            return x.ctx
        if isinstance(x, (list, tuple)):
            c = _ctx(*x)
            if c is not None:
                return c
    return CURRENT.ctx  # an op without tensor inputs (randperm) builds in the graph's context


class _Current(threading.local):
    """What this thread is lowering (graphs may be lowered in several threads at once): the
    graph's lowering context (set by ``GraphLowering.run``) and the graph node being lowered
    (lowerings that need their inputs' recorded layouts read it)."""

    def __init__(self):
        self.ctx = None
        self.node = None


CURRENT = _Current()


def _finish(value, computed: dt.dtype, out: dt.dtype):
    return value if computed is out else ops.to_dtype(value, out)


def _elementwise(
    out_meta: Tensor, inputs, fn: Callable, compute: dt.dtype | None = None
) -> TensorBox:
    """A pointwise box computing ``fn(*input values)`` in ``compute`` dtype, stored as out's dtype."""
    out_dtype = out_meta.dtype
    compute = compute or compute_dtype(out_dtype)
    shape = tuple(out_meta.shape)
    loaders = [_broadcast_loader(x, shape, compute) for x in inputs]
    result_is_bool = out_dtype is dt.bool_

    def loader(index):
        v = fn(*[ld(index) for ld in loaders])
        return v if result_is_bool else _finish(v, compute, out_dtype)

    return _box(_ctx(*inputs), shape, out_dtype, loader, *inputs)


# ------------------------------------------------------------------------------ pointwise


def _unary(name):
    def lower(out_meta, x):
        compute = compute_dtype(out_meta.dtype)
        return _elementwise(out_meta, [x], lambda v: getattr(ops, name)(v), compute)

    return lower


for _name in UNARY_OPS:
    if _name in OPS:
        LOWERINGS[OPS[_name]] = _unary(_name)


def _predicate(name):
    def lower(out_meta, x):
        compute = compute_dtype(x.dtype)
        shape = tuple(out_meta.shape)
        ld = _broadcast_loader(x, shape, compute)
        return _box(x.ctx, shape, dt.bool_, lambda index: getattr(ops, name)(ld(index)), x)

    return lower


for _name in PREDICATES:
    if _name in OPS:
        LOWERINGS[OPS[_name]] = _predicate(_name)


@register_lowering("frac")
def _frac(out_meta, x):
    return _elementwise(out_meta, [x], lambda v: ops.sub(v, ops.trunc(v)))


@register_lowering("round")
def _round(out_meta, x, decimals=0):
    if decimals == 0:
        return _elementwise(out_meta, [x], lambda v: ops.round(v))
    c = compute_dtype(out_meta.dtype)
    scale = 10.0**decimals
    return _elementwise(
        out_meta,
        [x],
        lambda v: ops.truediv(
            ops.round(ops.mul(v, ops.constant(scale, c))), ops.constant(scale, c)
        ),
    )


def _binary(name):
    def lower(out_meta, a, b):
        return _elementwise(out_meta, [a, b], lambda x, y: getattr(ops, name)(x, y))

    return lower


for _name in (
    "mul",
    "maximum",
    "minimum",
    "atan2",
    "hypot",
    "copysign",
    "bitwise_and",
    "bitwise_or",
    "bitwise_xor",
    "bitwise_left_shift",
    "bitwise_right_shift",
):
    if _name in OPS and _name in BINARY_OPS:
        LOWERINGS[OPS[_name]] = _binary(_name)


def _check_integer_divisor(out_meta, divisor) -> None:
    """Integer division by zero raises in eager kiln and PyTorch, but a kernel cannot raise:
    divisions of integers by tensors (which may hold zeros), or by 0, run the eager kernel."""
    if out_meta.dtype.is_floating_point:
        return
    if isinstance(divisor, TensorBox):
        raise NotImplementedError("integer division by a tensor (eager checks it for zeros)")
    if divisor == 0:
        raise NotImplementedError("integer division by zero (eager raises ZeroDivisionError)")


def _integer_checked(name):
    def lower(out_meta, a, b):
        _check_integer_divisor(out_meta, b)
        return _elementwise(out_meta, [a, b], lambda x, y: getattr(ops, name)(x, y))

    return lower


LOWERINGS[OPS["remainder"]] = _integer_checked("remainder")
LOWERINGS[OPS["fmod"]] = _integer_checked("fmod")


# PyTorch computes pow(tensor, scalar) of floats with these exponents by their exact forms, not
# by a general pow: special values follow them (sqrt(-inf) is NaN where C's pow(-inf, 0.5) is
# inf; 1 / sqrt(-0.0) is -inf), and they are cheaper
_SCALAR_POWERS = {
    0.5: lambda v: ops.sqrt(v),
    -0.5: lambda v: ops.rsqrt(v),
    2.0: lambda v: ops.mul(v, v),
    3.0: lambda v: ops.mul(ops.mul(v, v), v),
    -1.0: lambda v: ops.reciprocal(v),
    -2.0: lambda v: ops.reciprocal(ops.mul(v, v)),
}


@register_lowering("pow")
def _pow(out_meta, a, b):
    d = out_meta.dtype
    if isinstance(a, TensorBox) and not isinstance(b, TensorBox) and d.is_floating_point:
        # PyTorch's float16 kernel has only the integral forms (float16 ** 0.5 is C's pow)
        if b in _SCALAR_POWERS and not (d is dt.float16 and b in (0.5, -0.5)):
            return _elementwise(out_meta, [a], _SCALAR_POWERS[b])
    return _elementwise(out_meta, [a, b], lambda x, y: ops.pow(x, y))


def _comparison(name):
    def lower(out_meta, a, b):
        from ..ops.common import result_dtype

        operand = compute_dtype(result_dtype(_fake(a), _fake(b)))
        shape = tuple(out_meta.shape)
        la = _broadcast_loader(a, shape, operand)
        lb = _broadcast_loader(b, shape, operand)
        return _box(
            _ctx(a, b),
            shape,
            dt.bool_,
            lambda index: getattr(ops, name)(la(index), lb(index)),
            a,
            b,
        )

    return lower


for _name in COMPARISONS:
    LOWERINGS[OPS[_name]] = _comparison(_name)


def _fake(x):
    """Promotion needs tensors' dtypes and dimensionality: a tiny stand-in for a box."""
    if not isinstance(x, TensorBox):
        return x
    from ..runtime.device import meta
    from ..runtime.tensor import make_fake

    return make_fake(x.shape, x.dtype, meta)


def _alpha_op(name):
    def lower(out_meta, a, b, alpha=1):
        c = compute_dtype(out_meta.dtype)

        def fn(x, y):
            if alpha != 1:
                y = ops.mul(y, ops.constant(alpha, c))
            return getattr(ops, name)(x, y)

        return _elementwise(out_meta, [a, b], fn)

    return lower


LOWERINGS[OPS["add"]] = _alpha_op("add")
LOWERINGS[OPS["sub"]] = _alpha_op("sub")


@register_lowering("div")
def _div(out_meta, a, b, rounding_mode=None):
    c = compute_dtype(out_meta.dtype)
    if rounding_mode is None:
        return _elementwise(out_meta, [a, b], lambda x, y: ops.truediv(x, y), c)
    _check_integer_divisor(out_meta, b)
    name = {"floor": "floordiv", "trunc": "truncdiv"}[rounding_mode]
    return _elementwise(out_meta, [a, b], lambda x, y: getattr(ops, name)(x, y), c)


@register_lowering("where")
def _where(out_meta, cond, a, b):
    shape = tuple(out_meta.shape)
    c = compute_dtype(out_meta.dtype)
    lc = _broadcast_loader(cond, shape, dt.bool_)
    la = _broadcast_loader(a, shape, c)
    lb = _broadcast_loader(b, shape, c)
    out_dtype = out_meta.dtype

    def loader(index):
        return _finish(ops.where(lc(index), la(index), lb(index)), c, out_dtype)

    return _box(_ctx(cond, a, b), shape, out_dtype, loader, cond, a, b)


@register_lowering("convert_element_type")
def _convert(out_meta, x, dtype):
    return _cast(out_meta, x, dtype)


def _cast(out_meta, x, dtype):
    ld = x.loader
    src = x.dtype

    def loader(index):
        v = ld(index)
        return v if src is dtype else ops.to_dtype(v, dtype)

    return _box(x.ctx, x.shape, dtype, loader, x)


@register_lowering("clone", "alias")
def _clone(out_meta, x, memory_format=None):
    # a copy is the same values; whether they end up in new memory is the scheduler's business
    same = lowering_matmul.clone_without_copy(x, CURRENT.node)
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


# ------------------------------------------------------------------------------ creation


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
        c = compute_dtype(d)

        def loader(index):
            i = ops.index_expr(index[0], dt.float64)
            v = ops.add(
                ops.mul(i, ops.constant(float(step_v), dt.float64)),
                ops.constant(float(start_v), dt.float64),
            )
            return ops.to_dtype(v, d) if d is not dt.float64 else v

        del c
        return TensorBox(tuple(out_meta.shape), d, loader, None)
    if not (float(start_v).is_integer() and float(step_v).is_integer()):
        raise NotImplementedError("integer arange with fractional bounds uses the fallback")

    def int_loader(index):
        return ops.index_expr(sym.as_expr(index[0]) * int(step_v) + int(start_v), d)

    return TensorBox(tuple(out_meta.shape), d, int_loader, None)


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


# ------------------------------------------------------------------------------ views


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
    elif base is None and strided is not None and _numel(shape) == x.numel():
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
    broadcast = [
        not sym.same_size(s, out_shape[lead + i]) and s == 1 and out_shape[lead + i] != 1
        for i, s in enumerate(x.shape)
    ]

    def index_map(index):
        return [sym.ZERO if b else index[lead + i] for i, b in enumerate(broadcast)]

    def strided(layout):
        st = [0] * lead + [0 if b else s for b, s in zip(broadcast, layout.stride)]
        return Layout(out_shape, tuple(st), layout.dtype, layout.offset)

    return _view_box(x, out_shape, index_map, strided)


def _norm_slice(size, start, end, step):
    start = 0 if start is None else start
    end = size if end is None else end
    if start < 0:
        start += size
    if end < 0:
        end += size
    start = min(max(start, 0), size)
    end = min(max(end, start), size)
    return start, end, step


@register_lowering("slice")
def _slice(out_meta, x, dim=0, start=None, end=None, step=1):
    nd = len(x.shape)
    d = dim % nd
    s, _, st = _norm_slice(x.shape[d], start, end, step)

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
        idx.insert(d, sym.const(i))
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
        removed = [i for i, s in enumerate(x.shape) if s == 1]
    else:
        dims = (dim,) if isinstance(dim, int) else tuple(dim)
        nd = max(len(x.shape), 1)
        removed = sorted({d % nd for d in dims if x.shape and x.shape[d % nd] == 1})
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
    if back is not None and tuple(back.shape) == out_shape:
        return back  # a reshape undone: the original (and whatever buffer view it has)
    in_strides = _contiguous_strides(in_shape)
    out_strides = _contiguous_strides(out_shape)

    def index_map(index):
        if 0 in in_shape or 0 in out_shape:  # nothing is ever loaded
            return [sym.ZERO] * len(in_shape)
        linear = sym.ZERO
        for i, st, s in zip(index, out_strides, out_shape):
            if s != 1:
                linear = linear + sym.as_expr(i) * st
        return [(linear // st) % s if s != 1 else sym.ZERO for st, s in zip(in_strides, in_shape)]

    def strided(layout):
        from ..ops.views import view_strides

        st = view_strides(layout.shape, layout.stride, out_shape)
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


def input_meta(i: int):
    node = CURRENT.node
    if node is None or i >= len(node.args):
        return None
    arg = node.args[i]
    val = getattr(arg, "meta", {}).get("val") if hasattr(arg, "meta") else None
    return val if isinstance(val, Tensor) else None


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


def _meta_like(box):
    from ..runtime.device import meta
    from ..runtime.tensor import make_fake

    return make_fake(box.shape, box.dtype, meta)


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
    if keepdim and out_shape != ranges:
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


def _meta_like_shape(shape, dtype):
    from ..runtime.device import meta
    from ..runtime.tensor import make_fake

    return make_fake(shape, dtype, meta)


# ------------------------------------------------------------------------------ extern kernels


def _realized_input(box: TensorBox, usable: Callable | None = None):
    """(buffer, layout) to hand an extern kernel: a view of a buffer when possible (and
    ``usable(layout)`` accepts it), else a copy.

    A view (permute, reshape) of a value not stored yet stores the value in its own order and
    hands over the view: a transposed matmul operand costs BLAS nothing, while storing the value
    in the transposed order is a strided pass over memory (and a second copy of it when the value
    feeds another matmul untransposed, as a linear layer's output gradient does).
    """
    ok = usable or (lambda layout: True)
    view = getattr(box, "view_of", None)
    if view is not None and ok(view[1]):
        return view
    lazy = getattr(box, "lazy_view", None)
    if view is None and lazy is not None and not box.is_realized():
        root, strided = lazy
        layout = strided(Layout.contiguous(root.shape, root.dtype))
        if layout is not None and ok(layout):
            buf = root.realize()
            return buf, strided(buf.layout)
    buf = box.realize()
    return buf, buf.layout


def extern(
    out_meta, kernel: Callable, inputs: list, description: str, usable=None, **kwargs
) -> TensorBox:
    ctx = _ctx(*inputs)
    layout = Layout.contiguous(tuple(out_meta.shape), out_meta.dtype)
    ins = [_realized_input(b, usable) if isinstance(b, TensorBox) else b for b in inputs]
    buf = ExternBuffer(ctx.new_name(), layout, kernel, ins, kwargs, description)
    ctx.buffers.append(buf)
    return TensorBox.of_buffer(buf, ctx)


def fallback(op, out_meta, args) -> TensorBox:
    """Run ``op``'s eager kernel as an extern call (logged by the graph lowering)."""
    from ..runtime.tensor import wrap_array

    boxes = []
    positions = []

    def collect(a):
        if isinstance(a, TensorBox):
            positions.append(len(boxes))
            boxes.append(a)
            return ("__box__", len(boxes) - 1)
        if isinstance(a, (list, tuple)):
            return type(a)(collect(x) for x in a)
        return a

    template = tuple(collect(a) for a in args)
    dtypes = [b.dtype for b in boxes]

    def call_kernel(arrays):
        def fill(a):
            if isinstance(a, tuple) and len(a) == 2 and a[0] == "__box__":
                return wrap_array(arrays[a[1]], dtypes[a[1]])
            if isinstance(a, (list, tuple)):
                return type(a)(fill(x) for x in a)
            return a

        return op.kernel(*[fill(a) for a in template])

    if isinstance(out_meta, Tensor):

        def run(out, *arrays):
            np.copyto(out, call_kernel(arrays)._data, casting="unsafe")

        return extern(out_meta, run, boxes, f"fallback:{op.name}")
    if not isinstance(out_meta, (tuple, list)) or not all(isinstance(m, Tensor) for m in out_meta):
        raise NotImplementedError(f"fallback for op {op.name} with outputs {out_meta!r}")
    return _multi_output_fallback(op, out_meta, boxes, call_kernel)


def _multi_output_fallback(op, out_meta, boxes, call_kernel) -> tuple:
    """One kernel call for an op with several outputs: the first extern buffer runs the eager
    kernel and keeps the other results aside (per thread, so concurrent calls of one compiled
    graph do not mix); each later output is an extern buffer that reads its result from there and
    takes the first buffer as an input, which orders it after the call."""
    stash = threading.local()

    def run_first(out, *arrays):
        results = call_kernel(arrays)
        stash.results = [r._data for r in results]
        np.copyto(out, stash.results[0], casting="unsafe")

    first = extern(out_meta[0], run_first, boxes, f"fallback:{op.name}[0]")
    outs = [first]
    for i in range(1, len(out_meta)):

        def run_other(out, _first, i=i):
            np.copyto(out, stash.results[i], casting="unsafe")

        outs.append(extern(out_meta[i], run_other, [first], f"fallback:{op.name}[{i}]"))
    return tuple(outs)


# ------------------------------------------------------------------------------ indirect indexing


def _indirect(box: TensorBox, index, size: int):
    """An index atom for the runtime value ``box[index]`` (negative values wrap, as in PyTorch)."""
    v = box.loader(index)
    return ops.indirect_indexing(v, size)


@register_lowering("gather")
def _gather(out_meta, x, dim, index, sparse_grad=False):
    nd = len(x.shape)
    d = dim % max(nd, 1)
    idx_loader = index.loader
    inner = x.loader
    size = x.shape[d] if nd else 1

    def loader(out_index):
        target = list(out_index)
        if nd:
            target[d] = ops.indirect_indexing(idx_loader(list(out_index)), size)
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
                sub = [sym.ZERO if sz == 1 else bidx[lead + k] for k, sz in enumerate(s)]
                target[d] = ops.indirect_indexing(loaders[d](sub), x.shape[d])
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
    parts = [t for t in tensors if not (len(t.shape) == 1 and t.shape[0] == 0 and nd > 1)]
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
            shifted[d] = sym.as_expr(index[d]) - off
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
        if nd:
            target[d] = ops.indirect_indexing(idx_loader(list(i)), size)
        return target

    return _scatter_buffer(out_meta, x, index.shape, index_fn, lambda i: src_loader(list(i)), "add")


@register_lowering("index_put")
def _index_put(out_meta, x, indices, values, accumulate=False):
    for t in indices:
        if t is not None and t.dtype in (dt.bool_, dt.uint8):
            raise NotImplementedError("index_put with a boolean mask uses the fallback")
    from ..ops.indexing import index as index_op

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
            sym.ZERO if s == 1 and sub_shape[lead + k] != 1 else i[lead + k]
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


@register_lowering("var")
def _var(out_meta, x, dim=None, correction=1, keepdim=False):
    """Single-pass variance: Welford's running sum of squared deviations, divided at the end."""
    dims = _reduction_dims(x, dim)
    acc = compute_dtype(out_meta.dtype)
    if x.dtype is not acc:
        x = _cast(None, x, acc)
    m2 = make_reduction(x, dims, keepdim, "welford_m2", out_meta.dtype)
    n = 1
    for d in dims:
        n *= x.shape[d]
    divisor = float(max(n - (correction if correction is not None else 1), 0))
    return _elementwise(
        out_meta,
        [m2],
        lambda v: ops.truediv(v, ops.constant(divisor, compute_dtype(out_meta.dtype))),
    )


# matmuls (mm, bmm) live in their own module; importing it registers them
from . import lowering_matmul  # noqa: E402
