"""The lowering framework: the ``LOWERINGS`` table, the boxes lowerings build, extern calls.

``LOWERINGS[op]`` takes the node's canonical args with tensors replaced by ``TensorBox``es plus
the node's fake result (``out_meta``) and returns a box. The helpers here compose loaders
(``_elementwise``, ``_broadcast_loader``), know what the graph being lowered is (``CURRENT``) and
turn a box into an extern kernel call (``extern``; ``fallback`` runs an op's eager kernel that
way). Every family of lowerings in this package builds on this module and nothing else here.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np

from ...ops.core.registry import OPS
from ...runtime import dtypes as dt
from ...runtime.tensor import Tensor
from .. import sym
from ..ir import ExternBuffer, Layout, TensorBox
from ..virtualized import ops

__all__ = [
    "LOWERINGS",
    "register_lowering",
    "fallback",
    "fallback_kernels",
    "compute_dtype",
    "extern",
    "CURRENT",
]

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


_SIXTEEN_BIT = (dt.float16, dt.bfloat16)


def _broadcast_loader(
    x, out_shape: tuple, to: dt.dtype, rounded_to: dt.dtype | None = None
) -> Callable:
    """Loader of ``x`` (box or Python scalar) at an index of ``out_shape``, cast to ``to``.

    ``rounded_to``: the op's common dtype where it is a 16-bit float that operands of other types
    are rounded to before the float32 math (PyTorch rounds a Python number or a 0-d float32
    tensor to a float16 op's type, except in add, sub, mul and true division)."""
    if rounded_to not in _SIXTEEN_BIT or rounded_to is to:
        rounded_to = None
    if not isinstance(x, TensorBox):
        value = x
        if (
            rounded_to is not None
            and isinstance(value, (int, float))
            and not isinstance(value, bool)
        ):
            wide = np.asarray(float(value))
            value = float(dt.through_float32(wide, rounded_to.np).astype(rounded_to.np))

        def load_scalar(index):
            return ops.constant(value, to)

        return load_scalar
    inner = x.loader
    lead = len(out_shape) - len(x.shape)
    broadcast = [sym.broadcasts(s, out_shape[lead + i]) for i, s in enumerate(x.shape)]
    src = x.dtype

    through = rounded_to if rounded_to is not None and src is not rounded_to else None

    def load(index):
        idx = [sym.ZERO if b else index[lead + i] for i, b in enumerate(broadcast)]
        v = inner(idx)
        if through is not None:
            v = ops.to_dtype(v, through)
        return v if src is to and through is None else ops.to_dtype(v, to)

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
    out_meta: Tensor,
    inputs,
    fn: Callable,
    compute: dt.dtype | None = None,
    rounded_to=None,
) -> TensorBox:
    """A pointwise box computing ``fn(*input values)`` in ``compute`` dtype, stored as out's
    dtype (``rounded_to``: as ``_broadcast_loader``'s, one for every input or one per input)."""
    out_dtype = out_meta.dtype
    compute = compute or compute_dtype(out_dtype)
    shape = tuple(out_meta.shape)
    per_input = rounded_to if isinstance(rounded_to, (list, tuple)) else [rounded_to] * len(inputs)
    loaders = [_broadcast_loader(x, shape, compute, r) for x, r in zip(inputs, per_input)]
    result_is_bool = out_dtype is dt.bool_

    def loader(index):
        v = fn(*[ld(index) for ld in loaders])
        return v if result_is_bool else _finish(v, compute, out_dtype)

    return _box(_ctx(*inputs), shape, out_dtype, loader, *inputs)


def _fake(x):
    """Promotion needs tensors' dtypes and dimensionality: a tiny stand-in for a box."""
    if not isinstance(x, TensorBox):
        return x
    from ...runtime.device import meta
    from ...runtime.tensor import make_fake

    return make_fake(x.shape, x.dtype, meta)


def _cast(out_meta, x, dtype):
    ld = x.loader
    src = x.dtype

    def loader(index):
        v = ld(index)
        return v if src is dtype else ops.to_dtype(v, dtype)

    return _box(x.ctx, x.shape, dtype, loader, x)


def input_meta(i: int):
    node = CURRENT.node
    if node is None or i >= len(node.args):
        return None
    arg = node.args[i]
    val = getattr(arg, "meta", {}).get("val") if hasattr(arg, "meta") else None
    return val if isinstance(val, Tensor) else None


def _meta_like(box):
    from ...runtime.device import meta
    from ...runtime.tensor import make_fake

    return make_fake(box.shape, box.dtype, meta)


def _meta_like_shape(shape, dtype):
    from ...runtime.device import meta
    from ...runtime.tensor import make_fake

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
    boxes = []

    def collect(a):
        if isinstance(a, TensorBox):
            boxes.append(a)
            return ("__box__", len(boxes) - 1)
        if isinstance(a, (list, tuple)):
            return type(a)(collect(x) for x in a)
        return a

    template = tuple(collect(a) for a in args)
    dtypes = tuple(b.dtype for b in boxes)
    if isinstance(out_meta, Tensor):
        # the template goes as an argument: size expressions in it take each call's values
        (run,) = fallback_kernels(op.name, dtypes, 1)
        return extern(out_meta, run, boxes, f"fallback:{op.name}", template=template)
    if not isinstance(out_meta, (tuple, list)) or not all(isinstance(m, Tensor) for m in out_meta):
        raise NotImplementedError(f"fallback for op {op.name} with outputs {out_meta!r}")
    runs = fallback_kernels(op.name, dtypes, len(out_meta))
    first = extern(out_meta[0], runs[0], boxes, f"fallback:{op.name}[0]", template=template)
    outs = [first]
    for i in range(1, len(out_meta)):
        outs.append(extern(out_meta[i], runs[i], [first], f"fallback:{op.name}[{i}]"))
    return tuple(outs)


def _host(t: Tensor) -> np.ndarray:
    """A fallback result's values in host memory, where extern calls write: an op that makes a
    tensor on a device (``to_device``, or a factory under ``set_default_device("cuda")``)
    returns device memory, which the Triton runtime's extern call uploads again after."""
    data = t._data
    return data if isinstance(data, np.ndarray) else t.cpu()._data


def fallback_kernels(op_name: str, dtypes: tuple, results: int) -> list[Callable]:
    """The extern kernels running op ``op_name``'s eager kernel on arrays of ``dtypes``: one
    ``run(out, *arrays, template)`` for an op with one result; for ``results`` > 1, the first
    runs the op and keeps the other results aside (per thread, so concurrent calls of one
    compiled graph do not mix) and each later one ``run(out, first)`` copies its result from
    there (its input, the first buffer, orders it after the call). Each kernel's ``recipe``
    says how to make it again (the compiled-graph cache stores that, not the closure)."""
    from ...runtime.tensor import wrap_array

    op = OPS[op_name]

    def call_kernel(arrays, template):
        def fill(a):
            if isinstance(a, tuple) and len(a) == 2 and a[0] == "__box__":
                return wrap_array(arrays[a[1]], dtypes[a[1]])
            if isinstance(a, (list, tuple)):
                return type(a)(fill(x) for x in a)
            return a

        return op.kernel(*[fill(a) for a in template])

    if results == 1:

        def run(out, *arrays, template):
            np.copyto(out, _host(call_kernel(arrays, template)), casting="unsafe")

        kernels = [run]
    else:
        stash = threading.local()

        def run_first(out, *arrays, template):
            outputs = call_kernel(arrays, template)
            stash.results = [_host(r) for r in outputs]
            np.copyto(out, stash.results[0], casting="unsafe")

        kernels = [run_first]
        for i in range(1, results):

            def run_other(out, _first, i=i):
                np.copyto(out, stash.results[i], casting="unsafe")

            kernels.append(run_other)
    for i, kernel in enumerate(kernels):
        kernel.recipe = (op_name, dtypes, results, i)
    return kernels
