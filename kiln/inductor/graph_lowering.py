"""Walk a prim-level GraphModule and lower every node into loop IR buffers.

Inputs and attribute constants become ``InputBuffer``s; each ``call_function`` runs its lowering
(or the eager fallback, logged) on ``TensorBox``es; values read by several nodes, or whose inlined
expression grew large, are realized so work is not repeated; outputs are realized last. The
result lists buffers in dependency order, ready for the scheduler.
"""

from __future__ import annotations

import logging
import operator
from dataclasses import dataclass, field

from ..autograd.grad_mode import set_grad_enabled_node
from ..ops.core.registry import Op
from ..runtime.memory_format import format_strides, is_non_overlapping_and_dense
from ..runtime.symbolic import SymInt, size_or_one, statically_known_true
from ..runtime.tensor import Tensor
from . import sym
from .ir import Buffer, GraphContext, InputBuffer, Layout, TensorBox
from .lowering import CURRENT, LOWERINGS, fallback

__all__ = ["GraphLowering", "LoweredGraph", "REALIZE_SIZE_HINT"]

log = logging.getLogger("kiln.inductor")

# inline at most this many ops into one consumer before storing the value
REALIZE_SIZE_HINT = 24
# a value read by several nodes is recomputed in each when it costs at most this many ops
REUSE_INLINE_LIMIT = 3


@dataclass
class LoweredGraph:
    inputs: list  # InputBuffer per placeholder (None for non-tensor placeholders)
    constants: dict  # buffer name -> real tensor (get_attr values)
    buffers: list  # ComputedBuffer / ExternBuffer in dependency order
    outputs: (
        list  # per graph output: ("buffer", Buffer, Layout) | ("input", index) | ("const", value)
    )
    output_spec: object  # nesting of the graph's output value
    fallbacks: list = field(default_factory=list)  # op names run through their eager kernel


class GraphLowering:
    def __init__(self, gm, example_inputs):
        self.gm = gm
        self.example_inputs = list(example_inputs)
        self.ctx = GraphContext()
        self.env: dict = {}
        self.inputs: list = []
        self.constants: dict = {}
        self.fallbacks: list = []

    def run(self) -> LoweredGraph:
        saved, CURRENT.ctx = CURRENT.ctx, self.ctx
        try:
            return self._run()
        finally:
            CURRENT.ctx = saved

    def _run(self) -> LoweredGraph:
        graph = self.gm.graph
        placeholder_index = 0
        output_value = None
        for node in graph.nodes:
            if node.op == "placeholder":
                example = self._example(node, placeholder_index)
                placeholder_index += 1
                if isinstance(example, Tensor):
                    buf = InputBuffer(
                        f"arg{placeholder_index - 1}_{node.name}", _layout_of(example)
                    )
                    self.inputs.append(buf)
                    self.env[node] = TensorBox.of_buffer(buf, self.ctx)
                else:
                    self.inputs.append(None)
                    self.env[node] = example
            elif node.op == "get_attr":
                value = _fetch(self.gm, node.target)
                if isinstance(value, Tensor):
                    name = f"const_{node.target.replace('.', '_')}"
                    buf = InputBuffer(name, _layout_of(value))
                    self.constants[name] = value
                    self.env[node] = TensorBox.of_buffer(buf, self.ctx)
                else:
                    self.env[node] = value
            elif node.op == "call_function":
                self.env[node] = self._lower(node)
            elif node.op == "output":
                output_value = node.args[0]
        return self._finish(output_value)

    def _example(self, node, i):
        if i < len(self.example_inputs):
            return self.example_inputs[i]
        return node.meta.get("val")

    def _lower(self, node):
        args = _map(node.args, lambda n: self.env[n])
        kwargs = _map(node.kwargs, lambda n: self.env[n])
        target = node.target
        if target is operator.getitem:
            return args[0][args[1]]
        if target is set_grad_enabled_node:  # kernels do not record gradients
            return None
        out_meta = node.meta.get("val")
        if not isinstance(target, Op) and out_meta.__class__ in (int, SymInt):
            # size arithmetic (``x.size(0) * x.size(1)``): its value is its meta value, an
            # expression over the graph's size symbols when they are symbolic
            return out_meta
        if not isinstance(target, Op):
            raise NotImplementedError(f"inductor cannot lower Python call {target!r}")
        lowering = LOWERINGS.get(target)
        result = None
        if isinstance(out_meta, Tensor) and not statically_known_true("<=", out_meta.numel(), 1):
            _realize_broadcast_scalars(self.ctx.buffers, args, kwargs)
        CURRENT.node = node
        if lowering is not None:
            try:
                result = lowering(out_meta, *args, **kwargs)
            except NotImplementedError as e:
                log.info("inductor: %s falls back to eager: %s", target.name, e)
        if result is None:
            self.fallbacks.append(target.name)
            log.info(
                "inductor: no lowering for %s; running its eager kernel as an extern call",
                target.name,
            )
            result = fallback(target, out_meta, list(args) + list(kwargs.values()))
        if isinstance(result, TensorBox):
            if result.ctx is None:
                result.ctx = self.ctx
            result.origins = [node]
            if result.buffer is not None and not result.buffer.origins:
                result.buffer.origins = [node]
            self._maybe_realize(node, result)
        elif isinstance(result, (tuple, list)):
            # an op with several results (a multi-output fallback): each buffer names the node
            for part in result:
                if isinstance(part, TensorBox) and part.buffer is not None:
                    part.buffer.origins = part.buffer.origins or [node]
        return result

    def _maybe_realize(self, node, box: TensorBox) -> None:
        if box.is_realized() or getattr(box, "view_of", None) is not None:
            return
        users = len(node.users)
        # several readers: store the value unless recomputing it is cheaper than a memory pass;
        # a graph output is stored where it is computed, so the scheduler (which fuses buffers
        # in order) can put it in the kernel that computes its neighbours
        if (
            (users > 1 and box.size_hint > REUSE_INLINE_LIMIT)
            or box.size_hint > REALIZE_SIZE_HINT
            or any(user.op == "output" for user in node.users)
            or (users > 1 and not getattr(box, "is_view", False) and _feeds_matmul(node))
        ):
            output = any(user.op == "output" for user in node.users)
            box.realize(_output_layout(node.meta.get("val")) if output else None)

    def _finish(self, output_value) -> LoweredGraph:
        from ..utils.pytree import tree_flatten

        flat, spec = tree_flatten(output_value)
        # outputs from here on are tensors saved for the backward: only it reads their layout
        saved_from = self.gm.graph.output_node.meta.get("saved_from", len(flat))
        outputs = []
        for position, item in enumerate(flat):
            value = self.env[item] if hasattr(item, "op") else item
            if isinstance(value, TensorBox):
                if value.buffer is not None and isinstance(value.buffer, InputBuffer):
                    outputs.append(("buffer", value.buffer, value.buffer.layout))
                    continue
                view = getattr(value, "view_of", None)
                eager = None
                if view is not None and position < saved_from and hasattr(item, "op"):
                    meta = item.meta.get("val")
                    eager = _contiguous_eager_layout(meta)
                    if eager is None:
                        # dense in another order (a channels-last convolution's); a symbolic
                        # layout only where it is so for every size (no size decided here)
                        eager = (
                            _dense_for_every_size(meta)
                            if _is_symbolic_meta(meta)
                            else _output_layout(meta)
                        )
                if view is not None and (
                    eager is None
                    or isinstance(view[0], InputBuffer)
                    or all(map(_same_stride, eager.stride, view[1].stride))
                ):
                    outputs.append(("buffer", view[0], view[1]))
                    continue
                if view is not None:
                    # a view of a buffer in another order or with padded rows (a convolution's
                    # product, its direct loops' rows) where eager's is contiguous or
                    # channels-last: a copy, so the user's ``.view`` of it works as in eager
                    buf = value.realize(eager)
                    outputs.append(("buffer", buf, buf.layout))
                    continue
                buf = value.realize()
                layout = _output_layout(item.meta.get("val")) if hasattr(item, "op") else None
                if layout is not None and layout.stride != buf.layout.stride:
                    buf = value.realize(layout)  # a copy in eager's layout
                outputs.append(("buffer", buf, buf.layout))
            else:
                outputs.append(("const", value))
        return LoweredGraph(
            self.inputs, self.constants, list(self.ctx.buffers), outputs, spec, self.fallbacks
        )


_VIEW_OPS = frozenset(
    {
        "view",
        "reshape",
        "permute",
        "expand",
        "slice",
        "select",
        "unsqueeze",
        "squeeze",
        "alias",
        "clone",
    }
)
_MATMULS = frozenset({"mm", "bmm"})


def _feeds_matmul(node, depth: int = 8) -> bool:
    """Whether a matmul reads ``node`` through views only. Such a value is stored once, where
    it is computed, and each matmul takes a view of it: inlined instead, every matmul would
    store its own (often transposed) copy — a linear layer's bias add feeding q, k and v, a
    gradient feeding both the input and the weight gradient."""
    stack = [(u, 0) for u in node.users]
    while stack:
        user, d = stack.pop()
        name = getattr(getattr(user, "target", None), "name", None)
        if name in _MATMULS:
            return True
        if name in _VIEW_OPS and d < depth:
            stack.extend((u, d + 1) for u in user.users)
    return False


def _realize_broadcast_scalars(buffers: list, args, kwargs) -> None:
    """A one-element value computed inline would be recomputed for every element of the bigger
    loop that reads it (an optimizer's bias corrections: float64 ``pow`` per element), and the
    loop cannot hoist it: store it once instead. Its buffer moves up to just after the buffers
    it reads, so it does not sit between (and split) the kernels the scheduler fuses in order."""
    for arg in (*args, *kwargs.values()):
        if (
            isinstance(arg, TensorBox)
            and not arg.is_realized()
            and arg.size_hint > 1
            and statically_known_true("==", arg.numel(), 1)
        ):
            buf = arg.realize()
            buffers.pop()  # ``realize`` appended it
            reads = set(buffers_read(buf))
            position = max((i + 1 for i, b in enumerate(buffers) if b.name in reads), default=0)
            buffers.insert(position, buf)


def _output_layout(meta) -> Layout | None:
    """The layout eager gives a graph output, when it is dense but not contiguous (a pointwise
    op of a transposed input keeps the input's dim order): compiled outputs have eager's
    strides, as PyTorch's inductor gives them. None: contiguous will do."""
    if not isinstance(meta, Tensor) or statically_known_true("<=", meta.numel(), 1):
        return None
    shape, stride = tuple(meta.shape), tuple(meta.stride())
    if _channels_last_with_size_one_dims(shape, stride):
        return Layout(shape, stride, meta.dtype, 0, meta.device.type)
    if sym.known_contiguous(shape, stride):
        return None
    if _is_symbolic_meta(meta):
        dense = _dense_for_every_size(meta)
        if dense is not None:
            return dense
    if meta.is_contiguous():
        return None
    if not is_non_overlapping_and_dense(shape, stride) and not _gapped(shape, stride):
        return None
    return Layout(shape, stride, meta.dtype, 0, meta.device.type)


def _gapped(shape: tuple, stride: tuple) -> bool:
    """Strides that leave gaps between elements but never reach one twice, for every size (a
    view scatter of a sliced input keeps the slice's strides, as eager and PyTorch do): taken
    from the smallest, each dim longer than one steps over the whole extent of those before."""
    left = [d for d in range(len(shape)) if not statically_known_true("==", shape[d], 1)]
    extent = 1
    while left:
        pick = next(
            (
                d
                for d in left
                if all(statically_known_true("<=", stride[d], stride[e]) for e in left)
            ),
            None,
        )
        if pick is None or not statically_known_true(">=", stride[pick], extent):
            return False
        left.remove(pick)
        extent = stride[pick] * (shape[pick] - 1) + extent
    return True


def _dense_for_every_size(meta: Tensor) -> Layout | None:
    """The layout of a symbolic ``meta`` where it is dense in another dim order for every size
    (a pooled image kept for the backward pass, its batch and channel dims swapped; a
    channels-last convolution): ``is_contiguous`` would ask whether a symbolic size is 1,
    which a compile for every size cannot decide. None otherwise."""
    shape, stride = tuple(meta.shape), tuple(meta.stride())
    if _known_dense(shape, stride):
        return Layout(shape, stride, meta.dtype, 0, meta.device.type)
    return None


def _channels_last_with_size_one_dims(shape: tuple, stride: tuple) -> bool:
    """A channels-last layout that ``is_contiguous`` also accepts, its size-1 dims' strides
    aside (a globally pooled (N, C, 1, 1) image: (C, 1, C, C)): eager gives PyTorch's
    strides, so the compiled output takes them too. Static sizes only."""
    if len(shape) not in (4, 5) or any(v.__class__ is not int for v in (*shape, *stride)):
        return False
    name = "channels_last" if len(shape) == 4 else "channels_last_3d"
    return stride == format_strides(shape, name) and stride != format_strides(
        shape, "contiguous_format"
    )


def _is_symbolic_meta(meta) -> bool:
    return isinstance(meta, Tensor) and any(
        v.__class__ is SymInt for v in (*meta.shape, *meta.stride())
    )


def _contiguous_eager_layout(meta) -> Layout | None:
    """The contiguous layout when eager gives a graph output one (so the user may ``.view``
    it); None otherwise, or for at most one element (any strides will do)."""
    if not isinstance(meta, Tensor) or statically_known_true("<=", meta.numel(), 1):
        return None
    shape, stride = tuple(meta.shape), tuple(meta.stride())
    if sym.known_contiguous(shape, stride):
        return Layout.contiguous(shape, meta.dtype, meta.device.type)
    return None


def _same_stride(a, b) -> bool:
    """Equal for every size (a padded row's ``8 * ((s3 + 7) // 8)`` is not ``s3``)."""
    return statically_known_true("==", a, b)


def _known_dense(shape, stride) -> bool:
    """Non-overlapping and dense for every size, in some order of the dims: each stride, taken
    innermost first, is the product of the sizes already taken (as ``sym.known_contiguous`` asks
    it, without deciding a symbolic size); a dim known to be of size 1 may go anywhere."""
    left = list(range(len(shape)))
    expected = plain = 1
    while left:
        pick = next(
            (
                d
                for d in left
                if statically_known_true("==", stride[d], expected)
                or statically_known_true("==", stride[d], plain)
            ),
            None,
        )
        if pick is None:
            return all(statically_known_true("==", shape[d], 1) for d in left)
        left.remove(pick)
        expected, plain = expected * size_or_one(shape[pick]), plain * shape[pick]
    return True


def _layout_of(t: Tensor) -> Layout:
    return Layout(tuple(t.shape), tuple(t.stride()), t.dtype, 0, t.device.type)


def _fetch(module, qualified: str):
    obj = module
    for part in qualified.split("."):
        obj = getattr(obj, part)
    return obj


def _map(a, fn):
    from ..ir.node import map_arg

    return map_arg(a, fn)


def buffers_read(buffer: Buffer) -> list:
    """Names of the buffers a buffer's loop body loads (via the dependency recorder)."""
    from .dependencies import read_names

    return read_names(buffer)
