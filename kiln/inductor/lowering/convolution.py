"""Lowering of ``convolution``: the direct loops for small channel counts, else im2col or
col2im loops around one extern BLAS product.

Float32 2-d convolutions of few channels (``conv_direct.pays``: small CNNs' 3x3 layers) run the
register-tiled loops eager mode runs (``extern_convolution``, ``_direct``): a generated loop
stores the input padded and split by the column stride's phases (``_phase_input``, where the
input's producer fuses), another the weight blocked by four output channels, and the extern call
computes the output rows. The input gradient of a stride-1 layer is such a forward pass over the
flipped kernel; the weight gradient (a convolution whose kernel is the output gradient's image)
is recognized by its shape and runs the loops' weight-gradient walk. Each layer takes a register
tile of its own (``forward_tiles``, ``grad_tiles``): on AVX-512 hosts 16-lane tiles, compiled
in the background as the graph's kernels are, where eager mode runs its 8-lane ones. A stride-1
layer whose rows those vectors would round up (24 columns computed as 32: the MNIST CNN) walks
each image's padded plane as flat rows instead (``_plane_forward``: only the padding columns
computed past the output), which also serves layers of up to 64 channels by 9 taps that the
rows form leaves to the columns (the MNIST CNN's input gradient); its weight gradient runs with
the output channels in the lanes (``_channels_last_weight_grad``). Where output
rows are too short for those loops' vectors (4-8 pixels: a DCGAN's layers), the lanes run over
output channels instead (``_channels``: any stride, padding and dilation, the weight gradient's
form too, and a strided transposed convolution phase by phase, ``_channels_transposed``), the
output channels-last and read as NCHW through a view. Everything else takes the columns and a
product, below.

A convolution is a matrix product once its input windows are laid out as columns. The eager
kernel builds the columns with numpy (a padded copy, then a strided copy); here they are loops of
the generated code: the input is stored once with its padding (``_padded_source``, which is also
where whatever computes the input, a batch norm's affine and ReLU, runs), then the columns loop
reads in-bounds rows of it (``_columns``). The product runs through ``extern_matmul`` into a
buffer the scheduler pools, exactly as ``mm`` does; bias and every pointwise consumer (batch
norm, the residual add, ReLU) then read that buffer in the kernel they are fused into.

Forward products take one of two shapes (``_forward``): per sample (columns ``[N, G, C*K, P]``,
the result is the NCHW output itself) or one product for the whole batch (columns
``[G, C*K, N*P]``, the result is ``[O, N, P]``, read through a permuted view). The second serves
small outputs: the weight gradient, which the derivative writes as a convolution whose "output"
is the 3x3 kernel and whose "batch" is the input channels, becomes one
``[O, N*H*W] @ [N*H*W, C*9]`` product rather than ``C`` products nine columns wide.

A transposed convolution (the input gradient, ``ConvTranspose``) with unit strides is a forward
convolution over the flipped kernel (``_as_forward``), unless a flipped copy of the weight costs
more than it saves (``_flip_costs_more``: many channels over small images). Otherwise it is the
product first, ``W^T x`` giving one column per (output channel, kernel offset, input position),
BLAS reading the stored weight transposed, then col2im as a gather: every output element sums
the kernel offsets whose input position lands on it (``_col2im``), a loop the consumers fuse
with. 16-bit dtypes run the eager kernel (logged).

The batch and image sizes may be symbolic (a graph compiled once for every size): loop bounds,
padding tests and product shapes are expressions over them, and the two size-dependent choices
(a product per sample or one for the batch; which order the columns are stored in) are made from
the sizes seen, without a guard, since either is correct for every size. Any size of a forward
convolution may be symbolic (the weight gradient's is a convolution whose channels are the batch
and whose kernel is the output gradient's image); a transposed convolution's channel counts and
kernel sizes must be plain ints (a parameter's shape, or a symbol a guard pinned to one value).
"""

from __future__ import annotations

import contextlib
import itertools
import math
import threading

from ...ops.core.registry import OPS
from ...ops.nn import conv_direct
from ...ops.nn.conv_kernels import symmetric_live_taps
from ...runtime import dtypes as dt
from ...runtime import machine_code
from ...runtime.symbolic import SizeDependentError, hint_int
from .. import config, extern_convolution, extern_matmul, sym
from ..codegen.llvm.values import LANES
from ..ir import ExternBuffer, Layout, TensorBox
from ..virtualized import ops
from .framework import (
    CURRENT,
    LOWERINGS,
    _box,
    _ctx,
    _meta_like_shape,
    _realized_input,
    register_lowering,
)
from .matmul import blas_layout

__all__ = ["COLUMNS_PER_SAMPLE_MIN", "static_images_only"]

# a forward convolution with at least this many output positions per sample multiplies each
# sample's columns on their own (its result is NCHW as it is); smaller outputs are multiplied
# as one product over the batch (wider products, and a result read through a permuted view)
COLUMNS_PER_SAMPLE_MIN = 256

# a transposed convolution with fewer input positions per sample than this multiplies the
# whole batch at once (``_transposed_batch``). extern_matmul_out, 2 threads, load ~6: per
# sample against batched, 16 samples of 1024x64 by 64x1 (a DCGAN generator's noise) 0.057 /
# 0.023 ms; of 512x64 by 64x16 0.130 / 0.123; of 48x32 by 32x64 0.023 / 0.030
TRANSPOSED_COLUMNS_PER_SAMPLE_MIN = 16

_DTYPES = (dt.float32, dt.float64)


@register_lowering("convolution")
def _convolution(
    out_meta, x, w, bias, stride, padding, dilation, transposed, output_padding, groups
):
    _check_supported(out_meta, x, w, transposed)
    spec = _Spec(x, w, stride, padding, dilation, groups, tuple(out_meta.shape[2:]))
    spec = _without_dead_taps(spec, transposed)
    if not transposed:
        result = _per_channel(spec) or _direct(spec) or _channels(spec) or _forward(spec)
    elif _as_forward_possible(spec, output_padding):
        forward = _as_forward(spec)
        result = _per_channel(forward) or _direct(forward) or _channels(forward)
        if result is None:
            result = _transposed(spec) if _flip_costs_more(spec) else _forward(forward)
    else:
        result = _channels_transposed(spec) or _transposed(spec)
    if bias is not None:
        result = _add_bias(result, bias)
    return result


def _check_supported(out_meta, x, w, transposed: bool) -> None:
    """The cases this lowering computes; others run the eager kernel (``NotImplementedError``
    makes the graph lowering log why and fall back)."""
    if out_meta.device.type != "cpu":
        raise NotImplementedError("convolution lowering is for CPU graphs")
    if out_meta.dtype not in _DTYPES or x.dtype is not w.dtype:
        raise NotImplementedError(f"convolution lowering computes float32/float64, not {x.dtype}")
    shapes = tuple(x.shape) + tuple(w.shape) + tuple(out_meta.shape)
    if _STATIC_IMAGES.on and sym.is_symbolic(
        tuple(_static(s) for s in tuple(x.shape[1:]) + tuple(w.shape))
    ):
        raise NotImplementedError(
            "convolution lowering of symbolic image sizes gave a graph with no kernels for "
            "every size; lowered for symbolic batch sizes only"
        )
    if transposed and sym.is_symbolic((_static(x.shape[1]),) + tuple(_static(s) for s in w.shape)):
        # col2im enumerates the kernel's offsets (a forward convolution takes any sizes: the
        # weight gradient's "kernel" is the output gradient's image)
        raise NotImplementedError(
            "transposed convolution lowering needs static channel and kernel sizes"
        )
    if any(_static(s).__class__ is int and _static(s) == 0 for s in shapes):
        raise NotImplementedError("empty convolution")
    if any(hint_int(s) == 0 for s in shapes):
        # sizes that are 0 for the inputs seen: the eager kernel's empty result, not products
        # of zero-sized operands (other sizes take the lowering on a later compile)
        raise NotImplementedError("empty convolution")


class _StaticImages(threading.local):
    on = False


_STATIC_IMAGES = _StaticImages()


@contextlib.contextmanager
def static_images_only():
    """Within: convolutions with symbolic channel, image or kernel sizes run their eager kernel.
    The symbolic compile retries a graph this way when the lowering's loops made a size
    decision the symbols' ranges leave open (a grouped or dilated convolution's output size
    that some sizes make 0), which would otherwise send the whole graph to the per-size route."""
    previous = _STATIC_IMAGES.on
    _STATIC_IMAGES.on = True
    try:
        yield
    finally:
        _STATIC_IMAGES.on = previous


def _static(size):
    """``size`` with a guard's pinned symbols folded in (a plain int when nothing else is left)."""
    return sym.size_value(size)


class _Spec:
    """A convolution's geometry in the terms the products use."""

    def __init__(self, x, w, stride, padding, dilation, groups, out_spatial):
        self.x, self.w = x, w
        self.k = len(w.shape) - 2
        self.stride, self.padding, self.dilation = list(stride), list(padding), list(dilation)
        self.groups = groups
        self.batch = _static(x.shape[0])
        self.channels = _static(x.shape[1])
        self.in_spatial = tuple(_static(s) for s in x.shape[2:])
        self.out_spatial = tuple(_static(s) for s in out_spatial)
        self.kernel = tuple(_static(s) for s in w.shape[2:])
        self.weight_shape = tuple(_static(s) for s in w.shape)
        self.dtype = x.dtype

    def io_spatial(self) -> tuple:
        """(the input's spatial sizes, the output's): what the windows read, how many."""
        return self.in_spatial, self.out_spatial


def _without_dead_taps(spec: _Spec, transposed: bool) -> _Spec:
    """``spec`` without the kernel taps that read only padding, where the eager kernels leave
    them out (``trimmed_taps``: at most a quarter of the taps read the input, as a 3x3 layer's
    centre tap alone at 1x1 images): an infinite weight there then never meets a padding zero,
    and the result (and a transposed convolution's, the input gradient) is eager's and
    PyTorch's finite one, not NaN. Taken where every size is known and as many taps are dead
    at both ends of each dim, so the smaller kernel keeps a symmetric padding and the output
    size."""
    reads, windows = (spec.out_spatial, spec.in_spatial) if transposed else spec.io_spatial()
    live = symmetric_live_taps(
        reads, windows, spec.kernel, spec.stride, spec.padding, spec.dilation
    )
    if live is None:
        return spec
    ranges, padding = live
    w = spec.w
    for i, (first, stop) in enumerate(ranges):
        shape = tuple(w.shape[: 2 + i]) + (stop - first,) + tuple(w.shape[3 + i :])
        w = LOWERINGS[OPS["slice"]](_meta_like_shape(shape, w.dtype), w, 2 + i, first, stop)
    return _Spec(spec.x, w, spec.stride, padding, spec.dilation, spec.groups, spec.out_spatial)


def _operand(box: TensorBox, shape: tuple, index_map, strided):
    """``box`` seen as ``shape`` (``index_map`` from an index of ``shape`` to one of ``box``;
    ``strided`` the same as a layout map) handed to BLAS: a strided view of a buffer when one
    serves, else a copy in ``shape``'s order."""
    from .views import _view_box

    view = _view_box(box, shape, index_map, strided)
    return _realized_input(view, blas_layout)


def _reshape_strided(shape: tuple):
    """The ``strided`` map of a reshape to ``shape`` (None when strides cannot describe it)."""
    from ...ops.shape.views import view_strides

    def strided(layout):
        try:
            st = view_strides(layout.shape, layout.stride, shape, guard=False)
        except SizeDependentError:  # a view for some sizes only: the copy serves every size
            return None
        return None if st is None else Layout(shape, tuple(st), layout.dtype, layout.offset)

    return strided


def _unflatten(index, sizes) -> list:
    """Split a flat index over ``sizes`` (row-major) into one index per size (sizes may be
    symbolic: each part's step is the product of the sizes after it, never a quotient)."""
    out = []
    flat = sym.as_expr(index)
    step = 1
    for s in reversed(sizes):
        if s.__class__ is int and s == 1:
            out.append(sym.ZERO)
        else:
            out.append(flat % s if step.__class__ is int and step == 1 else (flat // step) % s)
        step = step * s
    return out[::-1]


def _flat(parts, sizes):
    flat = sym.ZERO
    for i, s in zip(parts, sizes):
        flat = flat * s + sym.as_expr(i)
    return flat


def _weight_matrix(spec: _Spec, rows: int, cols: int, transpose: bool):
    """The weight ``[G*rows, cols...]`` as ``[G, rows, cols]`` (or its transpose per group)."""
    w = spec.w
    g = spec.groups
    shape = (g, rows, cols)
    flat_sizes = spec.weight_shape[1:]

    def index_map(index):
        return [index[0] * rows + index[1]] + _unflatten(index[2], flat_sizes)

    buf_view = _operand(w, shape, index_map, _reshape_strided(shape))
    if not transpose:
        return buf_view
    buf, layout = buf_view
    st = layout.stride
    return buf, Layout(
        (g, cols, rows), (st[0], st[2], st[1]), layout.dtype, layout.offset, layout.device
    )


# ------------------------------------------------------------------------------ forward


def _forward(spec: _Spec) -> TensorBox:
    g = spec.groups
    n = spec.batch
    cg = spec.channels // g
    og = spec.weight_shape[0] // g
    kn = math.prod(spec.kernel)
    p = math.prod(spec.out_spatial)
    weight = _weight_matrix(spec, og, cg * kn, transpose=False)
    per_sample = hint_int(p) >= COLUMNS_PER_SAMPLE_MIN  # either is right for every size
    columns = _columns(spec, cg, per_sample)
    if per_sample:
        # result [N, G, Og, P]: the NCHW output
        buf = _product(spec, (n, g, og, p), weight, columns)
        return _stored_as(buf, (n, g * og) + spec.out_spatial)
    # result [G, Og, N*P], viewed as [N, G*Og, *out]
    buf = _product(spec, (g, og, n * p), weight, columns)
    return _swap_leading(_stored_as(buf, (g * og, n) + spec.out_spatial))


def _stored_as(buf: ExternBuffer, shape: tuple) -> TensorBox:
    """The contiguous product ``buf`` read as a contiguous tensor of ``shape`` (same numel)."""
    return _buffer_view(buf, Layout.contiguous(shape, buf.dtype), shape)


def _swap_leading(box: TensorBox) -> TensorBox:
    from .views import _permute

    nd = len(box.shape)
    dims = [1, 0] + list(range(2, nd))
    shape = tuple(box.shape[d] for d in dims)
    return _permute(_meta_like_shape(shape, box.dtype), box, dims)


def _columns(spec: _Spec, cg: int, per_sample: bool):
    """im2col as a loop: the input value under each (channel, kernel offset, output position),
    zero in the padding. Stored with the output position innermost, so the loop reads the input
    along a row; BLAS takes the per-batch matrix transposed when that is the order it needs."""
    x = spec.x
    g, n, k = spec.groups, spec.batch, spec.k
    kernel, out_spatial = spec.kernel, spec.out_spatial
    kn, p = math.prod(kernel), math.prod(out_spatial)
    stride, dilation = spec.stride, spec.dilation
    if per_sample:
        # [N, G, Cg, *K, *out]: one [Cg*K, P] matrix per (sample, group)
        shape = (n, g, cg) + kernel + out_spatial

        def split(index):
            return index[0], index[1], index[2], index[3 : 3 + k], index[3 + k :]

        matrix = ((n, g, cg * kn, p), (g * cg * kn * p, cg * kn * p, p, 1))
    else:
        # the whole batch as one product: [G, Cg*K, N*P]; stored [G, N, *out, Cg, *K] (the
        # sample and output position outermost) when the kernel's rows are longer than the
        # output's, else [G, Cg, *K, N, *out]
        kernel_inner = hint_int(kernel[-1]) > hint_int(out_spatial[-1])
        if kernel_inner:
            shape = (g, n) + out_spatial + (cg,) + kernel

            def split(index):
                return index[1], index[0], index[2 + k], index[3 + k :], index[2 : 2 + k]

            matrix = ((g, cg * kn, n * p), (n * p * cg * kn, 1, cg * kn))
        else:
            shape = (g, cg) + kernel + (n,) + out_spatial

            def split(index):
                return index[2 + k], index[0], index[1], index[2 : 2 + k], index[3 + k :]

            matrix = ((g, cg * kn, n * p), (cg * kn * n * p, n * p, 1))
    source = _padded_source(spec)
    inner = source.loader
    to = x.dtype

    def loader(index):
        sample, group, channel, offsets, outs = split(index)
        positions = [
            sym.as_expr(outs[i]) * stride[i] + sym.as_expr(offsets[i]) * dilation[i]
            for i in range(k)
        ]
        return inner([sample, sym.as_expr(group) * cg + sym.as_expr(channel)] + positions)

    box = _box(_ctx(x), shape, to, loader, source)
    buf = box.realize()
    if CURRENT.node is not None:
        buf.origins = [CURRENT.node]
    mshape, mstride = matrix
    return buf, Layout(mshape, mstride, to, 0, buf.layout.device)


def _padded_source(spec: _Spec) -> TensorBox:
    """The convolution's input as the columns loop should read it: stored, with the padding as
    zeros around it. Every column reads each input value up to K times; computing the input
    (a batch norm's affine and ReLU) or testing the padding bounds once per value, in one pass
    over the input, costs less than doing it per column, and in-bounds rows of a stored buffer
    are what the code generator loads as vectors."""
    x = spec.x
    padding, size, k = spec.padding, spec.in_spatial, spec.k
    plain = x.is_realized() or getattr(x, "view_of", None) is not None
    if not any(padding) and (plain or getattr(x, "is_view", False)):
        return x
    if not any(padding):
        x.realize()
        return x
    inner = x.loader
    shape = (spec.batch, spec.channels) + tuple(s + 2 * p for s, p in zip(size, padding))

    def loader(index):
        positions = [sym.as_expr(index[2 + i]) - padding[i] for i in range(k)]
        cond = _inside([(positions[i], size[i]) for i in range(k) if padding[i]])
        value = inner(list(index[:2]) + positions)
        return value if cond is None else ops.where(cond, value, ops.constant(0.0, x.dtype))

    box = _box(_ctx(x), shape, x.dtype, loader, x)
    box.realize()
    return box


def _product(spec: _Spec, shape: tuple, a, b) -> ExternBuffer:
    """A contiguous extern buffer of ``shape`` holding ``a @ b`` (the plain matmul extern, so a
    package describes it as one)."""
    layout = Layout.contiguous(shape, spec.dtype)
    return _extern_call(spec, layout, extern_matmul.matmul_out, [a, b])


def _extern_call(spec: _Spec, layout: Layout, kernel, inputs: list) -> ExternBuffer:
    """The convolution's extern call ``kernel(out, *inputs)`` into a buffer of ``layout``."""
    ctx = _ctx(spec.x, spec.w)
    buf = ExternBuffer(ctx.new_name(), layout, kernel, inputs, {}, "convolution")
    if CURRENT.node is not None:
        buf.origins = [CURRENT.node]
    ctx.buffers.append(buf)
    return buf


# ------------------------------------------------------------------------------ per channel

# a convolution with one input channel per group (depthwise) sums its kernel's offsets in the
# output's loop when the kernel has at most this many
PER_CHANNEL_TAPS_MAX = 64


def _per_channel(spec: _Spec) -> TensorBox | None:
    """A convolution with one input channel per group (a depthwise layer, its stride-1 input
    gradient): each output element sums its kernel's offsets, the input read where the
    window is inside it, one pointwise loop the consumers fuse with (the columns made a
    product of inner dimension 9 per group, and an im2col copy first). None elsewhere."""
    k, groups = spec.k, spec.groups
    if spec.channels.__class__ is not int or spec.channels != groups:
        return None
    if any(s.__class__ is not int for s in spec.kernel + spec.weight_shape[:2]):
        return None
    if math.prod(spec.kernel) > PER_CHANNEL_TAPS_MAX or spec.weight_shape[1] != 1:
        return None
    per_group = spec.weight_shape[0] // groups
    # the input stored once (its producer, a batch norm's affine and ReLU, runs there), not
    # computed again for each of the kernel's offsets that read it
    x_load, w_load = _buffer_view(*_realized_input(spec.x)).loader, spec.w.loader
    to = spec.dtype

    def loader(index):
        sample, channel, ys = index[0], sym.as_expr(index[1]), index[2:]
        source = channel // per_group if per_group > 1 else channel
        total = None
        for offset in itertools.product(*(range(size) for size in spec.kernel)):
            positions = [
                sym.as_expr(ys[i]) * spec.stride[i] - spec.padding[i] + offset[i] * spec.dilation[i]
                for i in range(k)
            ]
            value = x_load([sample, source] + positions)
            inside = _inside(list(zip(positions, spec.in_spatial)))
            if inside is not None:
                value = ops.where(inside, value, ops.constant(0.0, to))
            term = ops.mul(value, w_load([channel, sym.ZERO] + [sym.const(o) for o in offset]))
            total = term if total is None else ops.add(total, term)
        return total

    box = _box(
        _ctx(spec.x),
        (spec.batch, spec.weight_shape[0]) + spec.out_spatial,
        to,
        loader,
        spec.x,
        spec.w,
    )
    box.size_hint = 3 * math.prod(spec.kernel)
    return box


# ------------------------------------------------------------------------------ direct loops


def _direct(spec: _Spec) -> TensorBox | None:
    """The convolution through the direct loops (``extern_convolution``) where they pay, as a
    forward pass or, for the weight gradient's form (a convolution whose kernel is the output
    gradient's image), as the loops' weight gradient; None where the columns lowering runs."""
    if (
        not config.direct_convolutions
        or spec.k != 2
        or spec.groups != 1
        or spec.dtype is not dt.float32
        or spec.w.dtype is not dt.float32
        or not _loops_built()
    ):
        return None
    # image sizes may be symbolic (a graph compiled for every size): the loops take their
    # shapes from the arrays each call passes, and are chosen by the sizes seen
    forward = None
    if all(s.__class__ is int for s in spec.kernel + spec.weight_shape[2:]):
        forward = _plane_forward(spec) or _direct_forward(spec)
    return forward or _plane_weight_grad(spec) or _direct_weight_grad(spec)


def _loops_built() -> bool:
    """Whether the direct loops have machine code for the tiles this host's graphs take. The
    AVX-512 tiles are kernels compiled in the background (``CompiledTiles``), so eager mode's
    module (every eager tile's loops in one, compiled at once: 1.0 s with an empty cache, load
    3) is built here only where the graphs run eager's tiles (AVX2 hosts); a compile asking
    for it on an AVX-512 host waited that long on the lowering's thread for loops it never
    calls."""
    if _wide():
        return machine_code.get("convolution_tiles") is not None
    return machine_code.get("convolution") is not None


def _direct_forward(spec: _Spec) -> TensorBox | None:
    n, c, o = spec.batch, spec.channels, spec.weight_shape[0]
    if c.__class__ is not int or o.__class__ is not int or tuple(spec.dilation) != (1, 1):
        return None
    pads = [(p, p) for p in spec.padding]
    x_shape = (hint_int(n), c) + tuple(hint_int(s) for s in spec.in_spatial)
    seen = tuple(hint_int(s) for s in spec.out_spatial)
    if not conv_direct.pays(x_shape, spec.weight_shape, pads, (1, 1), 1, seen):
        return None
    oh, ow = spec.out_spatial
    lanes, channels, columns = forward_tiles(o, seen[1])
    width = _lanes_width(ow, lanes)
    inner = spec.x.loader

    def read(sample, channel, row, col):
        return inner([sample, channel, row, col])

    xp = _phase_input(spec, read, (n, c) + spec.in_spatial, spec.kernel, spec.stride, width)
    wb = _blocked_weight(spec, channels)
    layout = Layout.contiguous((n, o, oh, width), spec.dtype)
    inputs = [xp, wb, spec.stride[0]]
    if (lanes, channels, columns) != EAGER_TILES[:3]:
        # a width the graph knows in whole tiles: no loop for a last vector
        whole = width.__class__ is int and (width // lanes) % columns == 0
        _request_tiles("forward", (lanes, channels, columns, 3, None, whole))
        inputs += [lanes, channels, columns, int(whole)]
    buf = _extern_call(spec, layout, extern_convolution.conv2d_direct_out, inputs)
    if width.__class__ is int and width == ow:
        return _stored_as(buf, (n, o, oh, ow))
    return _narrowed(buf, (n, o, oh, ow))


def _direct_weight_grad(spec: _Spec) -> TensorBox | None:
    """``convolution(x^T, g^T, stride=1, padding=p, dilation=s)``, the weight gradient the
    derivative writes for a stride-s layer (``out[c, o, i, j] = sum x[n, c, a * s + i - p,
    b * s + j - p] g[n, o, a, b]``), as the loops' weight gradient of the convolution of ``x`` (N, C, H, W) whose
    output gradient is ``g`` (N, O, OH, OW). The loops' result is (C, KH, KW, O), read through
    a permuted view. The loops walk whole vectors: for a width not a multiple of eight (or not
    known to be one) they read ``g`` zero-padded, and the extern call, given ``g`` itself too,
    recomputes the sums over the real columns where the result is not finite (an infinite
    input under a padding column times zero would make NaN where PyTorch never reads it)."""
    c, n = spec.batch, spec.channels  # the roles of the transposed operands
    o = spec.weight_shape[0]
    kernel = spec.out_spatial
    if c.__class__ is not int or o.__class__ is not int:
        return None
    if any(k.__class__ is not int for k in kernel) or tuple(spec.stride) != (1, 1):
        # a dilated layer's: the loops' walk has no dilation
        return None
    lanes, channels, taps = grad_tiles()
    # a strided layer's gradient convolves with the stride as its dilation: the loops walk
    # the input split by the stride's phases, as eager's forward pass left it. With eager's
    # tile the columns product beat them (8x16x32x32 with 32 outputs at stride 2: the loops
    # took 0.42 ms against 0.30 + 0.16); AVX-512's tile takes 0.16 ms (load 3.9; PyTorch 0.14)
    stride = tuple(spec.dilation)
    if stride != (1, 1) and lanes < _WIDE:
        return None
    grad_spatial = spec.kernel  # (OH, OW): the output gradient's image
    oh, ow = grad_spatial
    pads = [(p, p) for p in spec.padding]
    x_shape = (hint_int(n), c) + tuple(hint_int(s) for s in spec.in_spatial)
    seen = tuple(hint_int(s) for s in grad_spatial)
    if not conv_direct.pays(x_shape, (o, c) + kernel, pads, (1, 1), 1, seen):
        return None
    inner = spec.x.loader

    def read(sample, channel, row, col):
        return inner([channel, sample, row, col])

    width = _lanes_width(ow, lanes)
    geometry = _Spec(spec.x, spec.w, stride, spec.padding, (1, 1), 1, grad_spatial)
    xp = _phase_input(geometry, read, (n, c) + spec.in_spatial, kernel, stride, width)
    g = _contiguous_operand(_swap_leading(spec.w))  # (N, O, OH, OW)
    inputs = [xp, g, stride[0]]
    if not (width.__class__ is int and width == ow):
        inputs = [xp, _zero_padded(g, width), stride[0], g]
    if (lanes, channels, taps) != (EAGER_TILES[0], EAGER_TILES[1], EAGER_TILES[3]):
        # output channels and kernel taps in whole blocks: no loops for the rest
        whole = o % channels == 0 and math.prod(kernel) % taps == 0
        _request_tiles("grad", (lanes, channels, 2, taps, None, whole))
        inputs += [None] * (4 - len(inputs)) + [lanes, channels, taps, int(whole)]
    layout = Layout.contiguous((c,) + kernel + (o,), spec.dtype)
    buf = _extern_call(spec, layout, extern_convolution.conv2d_weight_grad_out, inputs)
    kh, kw = kernel
    view = Layout((c, o, kh, kw), (kh * kw * o, 1, kw * o, o), spec.dtype, 0, buf.layout.device)
    return _buffer_view(buf, view)


# ------------------------------------------------------------------------------ flat planes

# input channels x kernel taps up to which a stride-1 layer runs the loops over flat planes
# (``_plane_forward``) where the rows form does not take it (``conv_direct.MAX_CHANNEL_TAPS``):
# the MNIST CNN's input gradient, 64 channels by 9 taps over 64x28x28 padded images, 25 ms
# against 60 for the columns (100 MB of them) and product (2 threads, AVX-512, load ~3)
PLANE_CHANNEL_TAPS_MAX = 576

# False: every layer takes the rows form or the columns as before the plane walk (an A/B
# switch for benchmarks and tests)
PLANES = True


def _plane_rows(out_rows: int, padded_width: int, lanes: int) -> tuple:
    """How the loops walk a flat plane of ``out_rows`` output rows ``padded_width`` apart:
    ``(rows, step, chunk)``, each image's output as ``rows`` loop rows of ``chunk`` elements
    (whole vectors), a loop row ``step`` input rows after the one before. One row of the whole
    plane rounded up to a vector, or rows of ``step * padded_width`` elements where that is a
    whole number of vectors: whichever computes fewer elements (the same: more loop rows, for
    the threads)."""
    whole = _lanes_width(out_rows * padded_width, lanes)
    walks = [(whole, 1, out_rows, whole)]
    least = lanes // math.gcd(padded_width, lanes)
    for step in range(least, out_rows, least):
        rows = -(-out_rows // step)
        walks.append((rows * step * padded_width, rows, step, step * padded_width))
    return min(walks, key=lambda walk: (walk[0], -walk[1]))[1:]


def _plane_pays(channels: int, taps: int, out_spatial: tuple, padded_width: int, lanes: int):
    """The plane walk ``(rows, step, chunk)`` for a stride-1 layer where it computes fewer
    elements than the rows form (each output row rounded up to whole vectors: an MNIST CNN's
    24-column rows take 32, the plane 26 a row), or where the rows form does not run the layer
    (more than ``conv_direct.MAX_CHANNEL_TAPS``) and the columns would; else None."""
    oh, ow = out_spatial
    if not PLANES or ow < conv_direct.MIN_WIDTH or taps < conv_direct.MIN_TAPS:
        return None
    if channels * taps > PLANE_CHANNEL_TAPS_MAX:
        return None
    rows, step, chunk = _plane_rows(oh, padded_width, lanes)
    if channels * taps <= conv_direct.MAX_CHANNEL_TAPS and rows * chunk >= oh * _lanes_width(
        ow, lanes
    ):
        return None
    return rows, step, chunk


def _plane_input_rows(rows: int, chunk: int, kernel: tuple, padded_width: int) -> int:
    """Padded input rows the plane walk reads: its last vector's reach by the last tap."""
    kh, kw = kernel
    return -(-(rows * chunk + (kh - 1) * padded_width + kw - 1) // padded_width)


def _plane_forward(spec: _Spec) -> TensorBox | None:
    """A stride-1 layer through the direct loops walking each image's padded plane as one flat
    row: output element ``y * WP + x`` sums the input at the same flat position plus each
    tap's ``i * WP + j`` (WP the padded width), so the columns past the output width (WP - OW
    of them) are all the loops compute beyond the output, where the rows form rounds each row
    up to whole vectors. The output is read through a view whose rows are WP apart. The
    loops' call is the rows form's, on arrays shaped so (``_plane_rows``). None where it does
    not apply or pay."""
    c, o = spec.channels, spec.weight_shape[0]
    if tuple(spec.stride) != (1, 1) or tuple(spec.dilation) != (1, 1):
        return None
    sizes = (c, o) + spec.in_spatial + spec.out_spatial + spec.kernel
    if any(s.__class__ is not int for s in sizes) or min(spec.padding) < 0:
        return None
    (oh, ow), (kh, kw), left = spec.out_spatial, spec.kernel, spec.padding[1]
    padded_width = spec.in_spatial[1] + 2 * left
    lanes = forward_tiles(o, ow)[0]
    walk = _plane_pays(c, kh * kw, (oh, ow), padded_width, lanes)
    if walk is None:
        return None
    rows, step, chunk = walk
    lanes, channels, columns = forward_tiles(o, chunk)
    n = spec.batch
    inner = spec.x.loader

    def read(sample, channel, row, col):
        return inner([sample, channel, row, col])

    stored = _plane_input_rows(rows, chunk, spec.kernel, padded_width)
    x_shape = (n, c) + spec.in_spatial
    xp = _phase_input(spec, read, x_shape, spec.kernel, (1, 1), ow, rows=stored)
    wb = _blocked_weight(spec, channels)
    inputs = [xp, wb, step]
    if (lanes, channels, columns) != EAGER_TILES[:3]:
        whole = (chunk // lanes) % columns == 0
        _request_tiles("forward", (lanes, channels, columns, 3, None, whole))
        inputs += [lanes, channels, columns, int(whole)]
    layout = Layout.contiguous((n, o, rows, chunk), spec.dtype)
    buf = _extern_call(spec, layout, extern_convolution.conv2d_direct_out, inputs)
    plane = rows * chunk
    strides = (o * plane, plane, padded_width, 1)
    view = Layout((n, o, oh, ow), strides, spec.dtype, 0, buf.layout.device)
    return _buffer_view(buf, view)


def _plane_weight_grad(spec: _Spec) -> TensorBox | None:
    """The weight gradient's form (``_direct_weight_grad``) of a layer the plane walk takes:
    with the output channels in the lanes where they are whole vectors
    (``_channels_last_weight_grad``), else over flat planes (``_plane_forward``): the output
    gradient stored as the plane walk's rows, zero in the columns past its width, the input as
    the forward pass's plane. A zero column times an infinite input would make NaN where
    PyTorch never reads it: the extern call is given the gradient itself too and sums a result
    that is not finite again over its real columns."""
    c, n = spec.batch, spec.channels  # the roles of the transposed operands
    o = spec.weight_shape[0]
    kernel, grad_spatial = spec.out_spatial, spec.kernel
    if tuple(spec.stride) != (1, 1) or tuple(spec.dilation) != (1, 1):
        return None
    sizes = (c, o) + kernel + grad_spatial + spec.in_spatial
    if any(s.__class__ is not int for s in sizes) or min(spec.padding) < 0:
        return None
    (oh, ow), (kh, kw), left = grad_spatial, kernel, spec.padding[1]
    padded_width = spec.in_spatial[1] + 2 * left
    if padded_width - kw + 1 != ow:
        return None
    lanes, channels, taps = grad_tiles()
    walk = _plane_pays(c, kh * kw, (oh, ow), padded_width, lanes)
    if walk is None:
        return None
    tiles = channels_last_tiles(o)
    if tiles is not None:
        return _channels_last_weight_grad(spec, tiles)
    rows, step, chunk = walk
    inner = spec.x.loader

    def read(sample, channel, row, col):
        return inner([channel, sample, row, col])

    stored = _plane_input_rows(rows, chunk, kernel, padded_width)
    geometry = _Spec(spec.x, spec.w, (1, 1), spec.padding, (1, 1), 1, grad_spatial)
    xp = _phase_input(geometry, read, (n, c) + spec.in_spatial, kernel, (1, 1), ow, rows=stored)
    g_load = spec.w.loader  # (O, N, OH, OW)

    def flat_gradient(index):
        row, col = sym.as_expr(index[2]), sym.as_expr(index[3])
        y = row * step + col // padded_width
        x = col % padded_width
        inside = _inside([(y, oh), (x, ow)])
        value = g_load([index[1], index[0], y, x])
        return value if inside is None else ops.where(inside, value, ops.constant(0.0, spec.dtype))

    shape = (n, o, rows, chunk)
    flat = _box(_ctx(spec.w), shape, spec.dtype, flat_gradient, spec.w).realize()
    exact = _contiguous_operand(_swap_leading(spec.w))  # (N, O, OH, OW)
    whole = 0
    if (lanes, channels, taps) != (EAGER_TILES[0], EAGER_TILES[1], EAGER_TILES[3]):
        whole = int(o % channels == 0 and (kh * kw) % taps == 0)
        _request_tiles("grad", (lanes, channels, 2, taps, None, bool(whole)))
    inputs = [xp, (flat, flat.layout), step, exact, lanes, channels, taps, whole, 1]
    layout = Layout.contiguous((c,) + kernel + (o,), spec.dtype)
    buf = _extern_call(spec, layout, extern_convolution.conv2d_weight_grad_out, inputs)
    view = Layout((c, o, kh, kw), (kh * kw * o, 1, kw * o, o), spec.dtype, 0, buf.layout.device)
    return _buffer_view(buf, view)


def channels_last_tiles(out_channels: int) -> tuple | None:
    """The channels-last weight gradient's register tile for a layer: (lanes, vectors of
    output channels, (channel, tap) pairs), or None where the output channels are not whole
    vectors. 24 accumulators of AVX-512's 32 registers, 12 of AVX2's 16. The MNIST CNN's
    32 -> 64-channel 3x3 layer over 64x26x26 images (2 threads, load ~12, one process): 6
    pairs by 4 vectors 34 ms, 12 by 2 36, 8 by 2 38; the flat planes' walk of the
    columns-in-lanes loops 45 ms, PyTorch 144 (its threads suffer the load most)."""
    lanes = _WIDE if _wide() else EAGER_TILES[0]
    if out_channels % lanes:
        return None
    most, budget = (4, 24) if lanes == _WIDE else (2, 12)
    vectors = next(v for v in (4, 2, 1) if v <= most and out_channels % (v * lanes) == 0)
    return lanes, vectors, min(budget // vectors, 12)


def _channels_last_weight_grad(spec: _Spec, tiles: tuple) -> TensorBox:
    """The weight gradient's form of a stride-1 layer through the channels-last loops
    (``extern_convolution.conv2d_weight_grad_channels_last_out``): the output gradient
    stored (N, OH, OW, O), the input padded as the rows form stores it (one phase), the
    result (pairs, O) read as the weight through a view. Only real output positions are
    summed: no zero columns, nothing to sum again for infinities."""
    c, n = spec.batch, spec.channels  # the roles of the transposed operands
    o = spec.weight_shape[0]
    (kh, kw), (oh, ow) = spec.out_spatial, spec.kernel
    inner = spec.x.loader

    def read(sample, channel, row, col):
        return inner([channel, sample, row, col])

    geometry = _Spec(spec.x, spec.w, (1, 1), spec.padding, (1, 1), 1, (oh, ow))
    x_shape = (n, c) + spec.in_spatial
    xp = _phase_input(geometry, read, x_shape, (kh, kw), (1, 1), ow)
    g_load = spec.w.loader  # (O, N, OH, OW)

    def channels_last(index):
        return g_load([index[3], index[0], index[1], index[2]])

    g = _box(_ctx(spec.w), (n, oh, ow, o), spec.dtype, channels_last, spec.w).realize()
    lanes, vectors, pairs = tiles
    extern_convolution.request_channels_last(lanes, vectors, pairs)
    rows = -(-(c * kh * kw) // pairs) * pairs
    layout = Layout.contiguous((rows, o), spec.dtype)
    kernel = extern_convolution.conv2d_weight_grad_channels_last_out
    inputs = [xp, (g, g.layout), kh, kw, lanes, vectors, pairs]
    buf = _extern_call(spec, layout, kernel, inputs)
    view = Layout((c, o, kh, kw), (kh * kw * o, 1, kw * o, o), spec.dtype, 0, buf.layout.device)
    return _buffer_view(buf, view)


# ------------------------------------------------------------------------------ channels in lanes

# input channels x kernel taps up to which the channels-in-lanes loop runs a layer (a tile
# sweeps every weight of its output channels: 512 x 64 float32, 128 KB, measured; past that
# BLAS's packed blocks keep theirs in cache)
CHANNELS_TAPS_MAX = 1024


def _channels(spec: _Spec) -> TensorBox | None:
    """A float32 2-d convolution whose output rows are too short for the direct loops' vectors
    (fewer than ``conv_direct.MIN_WIDTH`` columns: a DCGAN's 4x4 and 8x8 images, and the weight
    gradients whose "output" is a 4x4 kernel) through the channels-in-lanes loop
    (``extern_convolution.conv2d_channels_out``): the padded input as ``_padded_source`` stores
    it, the weight as (C, KH * KW, O), the output channels-last, read as NCHW through a view.
    The columns copy and product it replaces: the 16x32x8x8 layer of 64 4x4 filters at stride 2
    took 0.07 ms to copy columns and 0.14 ms to multiply (``compiled_profile``, 2 threads,
    AVX-512, load 2), the loop 0.14 (load 5). None where it does not apply, and for a weight
    gradient of more output channels than terms per sum (``_read_transposed``)."""
    if not _channels_applies(spec):
        return None
    c, o = spec.channels, spec.weight_shape[0]
    taps = math.prod(spec.kernel)
    if (
        spec.out_spatial[-1] >= conv_direct.MIN_WIDTH
        or taps < conv_direct.MIN_TAPS
        or c * taps > CHANNELS_TAPS_MAX
    ):
        return None
    tiles = channel_tiles(o)
    if tiles is None or (o > c * taps and _read_transposed()):
        return None
    (oh, ow), (kh, kw) = spec.out_spatial, spec.kernel
    source = _contiguous_operand(_padded_source(spec))
    shape = (c, kh, kw, o)

    def weight(index):
        return spec.w.loader([index[3], index[0], index[1], index[2]])

    wt = _box(_ctx(spec.w), shape, spec.dtype, weight, spec.w).realize()
    inputs = [source, (wt, wt.layout), *spec.stride, *spec.dilation, kh, kw, oh, ow]
    return _channels_call(spec, extern_convolution.conv2d_channels_out, inputs, o, tiles)


def _read_transposed() -> bool:
    """Whether every use of the convolution being lowered swaps its first two dims: the weight
    gradient's form, whose (input channel, output channel) result the derivative transposes
    into the weight's order. The channels-in-lanes loop writes that result output channels
    innermost, so a copy then transposes it; the columns product writes it in the weight's
    order, which the graph's clone aliases. Where the output channels outnumber the terms of
    each sum (resnet18's 256-channel layers over 2x2 images: 256 against 8 samples by 2x2
    positions), that copy costs more than the columns the product needs."""
    from .views import _name

    users = list(getattr(CURRENT.node, "users", ()))
    return bool(users) and all(
        _name(user) == "permute" and list(user.args[1][:2]) == [1, 0] for user in users
    )


def _channels_call(spec: _Spec, kernel, inputs: list, o: int, tiles: tuple) -> TensorBox:
    """The loop's extern call and its output read as NCHW: (pixels, O) channels-last, with a
    tile's rows less one of scratch past the output (a last row filled up with pixels that
    are not the output's writes there)."""
    n, (oh, ow) = spec.batch, spec.out_spatial
    lanes, vectors, pixels = tiles
    compiled = machine_code.get("convolution_tiles")
    compiled.request("channels", compiled.channel_tiles(lanes, vectors, pixels))
    layout = Layout.contiguous((n * oh * ow + pixels - 1, o), spec.dtype)
    buf = _extern_call(spec, layout, kernel, inputs + [lanes, vectors, pixels])
    view = Layout((n, o, oh, ow), (oh * ow * o, 1, ow * o, o), spec.dtype, 0, buf.layout.device)
    return _buffer_view(buf, view)


def _channels_applies(spec: _Spec) -> bool:
    """Float32, 2-d, one group, static sizes, the direct loops on, LLVM there."""
    sizes = (spec.batch, spec.channels) + spec.in_spatial + spec.out_spatial + spec.weight_shape
    return (
        config.direct_convolutions
        and spec.k == 2
        and spec.groups == 1
        and spec.dtype is dt.float32
        and spec.w.dtype is dt.float32
        and all(s.__class__ is int for s in sizes)
        and min(spec.out_spatial) > 0
        and machine_code.get("convolution_tiles") is not None
    )


def _channels_transposed(spec: _Spec) -> TensorBox | None:
    """A strided transposed convolution of small images (a DCGAN generator's upsampling
    layers, a strided layer's input gradient) through the channels-in-lanes loop, phase by
    phase (``extern_convolution._transposed_windows``): output position y along a dim takes
    kernel offsets ``r + s * j`` (``r = (y + p) % s``) from input ``(y + p) // s - j``, so each
    phase is a stride-1 convolution by its part of the kernel. Where the kernel is a whole
    number of strides, without dilation. The product ``W^T x`` and the col2im gather it
    replaces: 16x64x4x4 to 8x8 by 32 4x4 filters, 0.16 + 0.03 ms (``compiled_profile``, 2
    threads, AVX-512, load 2), the loop 0.13 (load 5). None where it does not apply."""
    if not _channels_applies(spec) or any(d != 1 for d in spec.dilation):
        return None
    if any(s < 2 or k % s for s, k in zip(spec.stride, spec.kernel)):
        return None  # stride 1: the forward form; uneven phases: col2im
    c, o = spec.channels, spec.weight_shape[1]
    (sh, sw), (kh, kw) = spec.stride, spec.kernel
    jh, jw = kh // sh, kw // sw
    if spec.out_spatial[-1] >= conv_direct.MIN_WIDTH or c * jh * jw > CHANNELS_TAPS_MAX:
        return None
    tiles = channel_tiles(o)
    if tiles is None:
        return None
    (h, w), (oh, ow), (ph, pw) = spec.in_spatial, spec.out_spatial, spec.padding
    # rows and columns the phases read: from -(j - 1) to the last output's (y + p) // s
    rows = jh - 1 + max(h, (oh - 1 + ph) // sh + 1)
    cols = jw - 1 + max(w, (ow - 1 + pw) // sw + 1)
    inner = spec.x.loader

    def padded(index):
        row = sym.as_expr(index[2]) - (jh - 1)
        col = sym.as_expr(index[3]) - (jw - 1)
        value = inner([index[0], index[1], row, col])
        cond = _inside([(row, h), (col, w)])
        return value if cond is None else ops.where(cond, value, ops.constant(0.0, spec.dtype))

    shape = (spec.batch, c, rows, cols)
    source = _box(_ctx(spec.x), shape, spec.dtype, padded, spec.x).realize()
    w_load = spec.w.loader

    def phase_weight(index):
        ry, rx, channel, j, i, out = (sym.as_expr(v) for v in index)
        return w_load([channel, out, ry + sh * j, rx + sw * i])

    wshape = (sh, sw, c, jh, jw, o)
    wt = _box(_ctx(spec.w), wshape, spec.dtype, phase_weight, spec.w).realize()
    inputs = [(source, source.layout), (wt, wt.layout), sh, sw, ph, pw, oh, ow]
    kernel = extern_convolution.conv2d_channels_transposed_out
    return _channels_call(spec, kernel, inputs, o, tiles)


def channel_tiles(out_channels: int) -> tuple | None:
    """The channels-in-lanes loop's register tile for a layer: (lanes, vectors of output
    channels, output pixels), or None where the output channels are not whole vectors. 16
    accumulators with AVX-512's 32 registers (64 channels: 4 vectors by 4 pixels; the layer
    above took 0.21 ms so, 0.22 by 8 pixels of 2 vectors, 0.24 by 6 of 2, 0.28 by 6 of 4, in
    one process at load 4; 32 channels: 2 by 8), 8 with AVX2's 16."""
    lanes = _WIDE if _wide() else EAGER_TILES[0]
    if out_channels % lanes:
        return None
    most = 4 if lanes == _WIDE else 2
    vectors = next(v for v in (4, 2, 1) if v <= most and out_channels % (v * lanes) == 0)
    accumulators = 16 if lanes == _WIDE else 8
    return lanes, vectors, accumulators // vectors


# eager mode's tile (lanes, output channels, column vectors, weight-gradient taps): the loops'
# build; the others compile when a graph first chooses them
EAGER_TILES = (8, 4, 2, 3)

# None: a tile per layer for the host (``forward_tiles``, ``grad_tiles``); "eager": eager
# mode's for every layer; "wide": AVX-512's on any host (LLVM splits the vectors for AVX2).
# Tests force each kind through this
TILES: str | None = None
_WIDE = 16  # lanes of the AVX-512 tiles


def _wide() -> bool:
    return TILES == "wide" or (TILES is None and LANES >= _WIDE)


def forward_tiles(out_channels: int, out_width: int) -> tuple:
    """The forward loops' register tile for a layer: (lanes, output channels, column vectors).

    With AVX-512 (16 lanes, 32 vector registers) a tile of 16 accumulators: 8 channels by 2
    vectors where rows are 2+ vectors wide, else 16 channels by one vector. Eager mode's tile
    (4 by 2 vectors of 8) is what fits AVX2's 16 registers. One layer's forward pass, 2
    threads, load 3.5 (``eager_convolution.build_tiles``, same inputs): 8x16x32x32 by a
    16-channel 3x3 kernel 0.37 ms eager's tile, 0.21 ms 8x2 of 16 lanes (16x1: 0.22); the
    same at stride 2 (16x16 rows, 32 outputs) 0.19, 0.12 (16x1: 0.11); 8x32x16x16 by 32
    channels 0.36, 0.24 (16x1: 0.22); PyTorch (oneDNN): 0.20, 0.12, 0.16."""
    if not _wide():
        return EAGER_TILES[:3]
    vectors = -(-out_width // _WIDE)
    if vectors >= 2 or out_channels <= 8:
        return (_WIDE, 8, 2)
    return (_WIDE, 16, 1)


def grad_tiles() -> tuple:
    """The weight-gradient loops' tile: (lanes, output channels, taps). 8 channels by 3 taps
    of 16 lanes with AVX-512: 8x16x32x32 with 16 outputs, 3x3, 0.23 ms against eager tile's
    0.34 (4 by 3: 0.26; 2 by 9: 0.31); at 8x32x16x16 with 32: 0.32 against 0.37; PyTorch 0.20
    and 0.17 (2 threads, load 3.5). Its walk loops over a row's vectors: unrolled for one or
    two (as eager's are) it was 3-9% faster, but took twice as long to compile (0.32 against
    0.15 s each at load 6)."""
    if not _wide():
        return (EAGER_TILES[0], EAGER_TILES[1], EAGER_TILES[3])
    return (_WIDE, 8, 3)


def _request_tiles(kind: str, tiles: tuple) -> None:
    """Start compiling a tile's loops now, so that the graph's first call finds them built."""
    compiled = machine_code.get("convolution_tiles")
    if compiled is not None:
        compiled.request(kind, compiled.tiles(*tiles))


def _zero_padded(g, width):
    """The buffer ``g`` (N, O, OH, OW) stored ``width`` columns wide, zero past OW."""
    box = _buffer_view(*g)
    shape = tuple(box.shape[:3]) + (width,)
    ow = box.shape[3]
    load = box.loader

    def loader(index):
        col = sym.as_expr(index[3])
        inside = ops.lt(ops.index_expr(col, dt.int64), _int64(ow))
        return ops.where(inside, load(index), ops.constant(0.0, box.dtype))

    padded = _box(_ctx(), shape, box.dtype, loader, box)
    buf = padded.realize()
    return buf, buf.layout


def _lanes_width(columns, lanes: int):
    """``columns`` rounded up to whole vectors of ``lanes`` (an expression when symbolic)."""
    return (columns + (lanes - 1)) // lanes * lanes


def _phase_input(spec: _Spec, read, x_shape: tuple, kernel, stride, width: int, rows=None):
    """The loops' input: ``xp[n, c, r, q, j]`` = padded input pixel (r, j * stride_w + q), zero
    outside the input, for outputs ``width`` columns wide (``conv_direct.phase_input``'s layout),
    stored contiguously by a generated loop (where whatever computes the input fuses).
    ``rows``: how many padded rows to store (the windows' reach where None; the flat planes'
    walk reads a few rows past it)."""
    n, c, h, w = x_shape
    kh, kw = kernel
    sh, sw = stride
    top, left = spec.padding
    oh = spec.out_spatial[0]
    if rows is None:
        rows = (oh - 1) * sh + kh
    wq = width + (kw - 1) // sw
    shape = (n, c, rows, sw, wq)

    def loader(index):
        row = sym.as_expr(index[2]) - top
        col = sym.as_expr(index[4]) * sw + sym.as_expr(index[3]) - left
        cond = _inside([(row, h), (col, w)])
        value = read(index[0], index[1], row, col)
        if cond is None:
            return value
        return ops.where(cond, value, ops.constant(0.0, spec.dtype))

    box = _box(_ctx(spec.x), shape, spec.dtype, loader, spec.x)
    buf = box.realize()
    if CURRENT.node is not None:
        buf.origins = [CURRENT.node]
    return buf, buf.layout


def _inside(positions: list):
    """An ops bool: every ``(position, size)`` has ``0 <= position < size``, the tests its
    index range already proves left out; None when all are proved."""
    cond = None
    for position, size in positions:
        lo, hi = position.bounds()
        iv = ops.index_expr(position, dt.int64)
        checks = []
        if not sym.known(">=", lo, 0):
            checks.append(ops.ge(iv, ops.constant(0, dt.int64)))
        if not sym.known("<", hi, size):
            checks.append(ops.lt(iv, _int64(size)))
        for check in checks:
            cond = check if cond is None else ops.logical_and(cond, check)
    return cond


def _blocked_weight(spec: _Spec, block: int):
    """The weight (O, C, KH, KW) as the loops read it: (ceil(O / B), C, KH, KW, B) for a tile
    of ``block`` output channels, zero past O, stored by a generated loop (a transposed
    convolution's flipped kernel is read flipped)."""
    o = spec.weight_shape[0]
    blocks = -(-o // block)
    inner = spec.w.loader

    def loader(index):
        channel = sym.as_expr(index[0]) * block + sym.as_expr(index[4])
        value = inner([channel, index[1], index[2], index[3]])
        if o % block == 0:
            return value
        inside = ops.lt(ops.index_expr(channel, dt.int64), ops.constant(o, dt.int64))
        return ops.where(inside, value, ops.constant(0.0, spec.dtype))

    shape = (blocks, spec.weight_shape[1]) + spec.kernel + (block,)
    box = _box(_ctx(spec.w), shape, spec.dtype, loader, spec.w)
    buf = box.realize()
    return buf, buf.layout


def _contiguous_operand(box: TensorBox):
    """``box`` handed to a direct loop: C-contiguous, a view of a buffer when one is. A stored
    value in another order (a graph input that is a permuted view: the weight gradient's
    batch-and-channels-swapped image) is copied, since the loops read it as contiguous."""
    shape = tuple(box.shape)
    buf, layout = _realized_input(
        box, lambda layout: layout == Layout.contiguous(shape, layout.dtype)
    )
    contiguous = Layout.contiguous(shape, layout.dtype)
    if layout != contiguous:
        buf = box.realize(contiguous)
        layout = buf.layout
    return buf, layout


def _narrowed(buf: ExternBuffer, shape: tuple) -> TensorBox:
    """The direct loops' output (N, O, OH, OWV), computed in whole vectors, read as its first
    ``shape[-1]`` columns."""
    st = buf.layout.stride
    return _buffer_view(buf, Layout(shape, st, buf.dtype, 0, buf.layout.device))


def _buffer_view(buf, layout: Layout, shape: tuple | None = None) -> TensorBox:
    """A box reading the stored ``buf`` through ``layout`` (externs take it as that view)."""
    name = buf.name

    def loader(index):
        return ops.load(name, layout.offset_expr(index))

    box = TensorBox(tuple(layout.shape) if shape is None else shape, buf.dtype, loader, _ctx())
    box.view_of = (buf, layout)
    return box


# ------------------------------------------------------------------------------ transposed


def _as_forward_possible(spec: _Spec, output_padding) -> bool:
    """A transposed convolution with unit strides is a convolution with the kernel flipped and
    the padding's complement: the columns loop reads rows as vectors there, where col2im's
    gather tests every kernel offset. Not where the output is much larger than the input: the
    forward form multiplies every kernel tap over the complement's zeros (a DCGAN generator's
    first layer, 1x1 noise to 4x4 by a 4x4 kernel, made 16 times the product's multiply-adds
    and ran 1.18 ms against eager's 0.35), while the product then col2im computes only the
    taps that land."""
    grows = hint_int(math.prod(spec.out_spatial)) > 2 * hint_int(math.prod(spec.in_spatial))
    return (
        all(s == 1 for s in spec.stride)
        and not any(output_padding)
        and all(p <= d * (k - 1) for p, d, k in zip(spec.padding, spec.dilation, spec.kernel))
        and not grows
    )


def _flip_costs_more(spec: _Spec) -> bool:
    """Whether a unit-stride transposed convolution that would take the columns and product
    (``_forward`` of ``_as_forward``) costs less as the product ``W^T x`` and col2im. The
    forward form copies the weight flipped (a loop BLAS cannot skip: no strides describe a
    flip), stores the input padded and writes columns of ``Icg * K`` rows per output position;
    the product form reads the stored weight through a transposed view and writes columns of
    ``Og * K`` rows per input position, which col2im gathers where its consumers run. Taken
    where the weight's copy and the forward columns hold more than the product's columns: the
    input gradients of resnet18's 128- and 256-channel 3x3 layers over 4x4 and 2x2 images,
    whose weights (0.6 and 2.4 MB, copied each step) outweigh their columns."""
    if all(kn == 1 for kn in spec.kernel):
        return False  # nothing to flip: the forward form reads the weight as a view
    g, n = spec.groups, spec.batch
    icg, ocg = spec.channels // g, spec.weight_shape[1]
    kn = math.prod(spec.kernel)
    weight = g * icg * ocg * kn
    forward_columns = g * icg * kn * hint_int(n * math.prod(spec.out_spatial))
    product_columns = g * ocg * kn * hint_int(n * math.prod(spec.in_spatial))
    return weight + forward_columns > product_columns


def _as_forward(spec: _Spec) -> _Spec:
    """The forward convolution computing the transposed one ``spec`` describes."""
    w = spec.w
    g = spec.groups
    icg, ocg = spec.weight_shape[0] // g, spec.weight_shape[1]
    kernel, k = spec.kernel, spec.k
    inner = w.loader

    def loader(index):
        channel = sym.as_expr(index[0])
        group, within = (channel // ocg, channel % ocg) if g > 1 else (sym.ZERO, channel)
        flipped = [kernel[i] - 1 - sym.as_expr(index[2 + i]) for i in range(k)]
        return inner([group * icg + sym.as_expr(index[1]), within] + flipped)

    if g == 1 and all(kn == 1 for kn in kernel):
        # nothing to flip: the weight transposed, a view (BLAS reads a stored weight so, where
        # a loop copied it: resnet18's 512-channel layers' centre taps, 1 MB each)
        flipped = _swap_leading(w)
    else:
        flipped = _box(_ctx(w), (g * ocg, icg) + kernel, w.dtype, loader, w)
    padding = [d * (kn - 1) - p for p, d, kn in zip(spec.padding, spec.dilation, kernel)]
    return _Spec(spec.x, flipped, spec.stride, padding, spec.dilation, g, spec.out_spatial)


def _transposed(spec: _Spec) -> TensorBox:
    """``W^T x`` per group into columns ``[N, G, Og*K, Pin]``, then col2im as a gather."""
    x = spec.x
    g, n = spec.groups, spec.batch
    icg = spec.channels // g
    ocg = spec.weight_shape[1]
    kn = math.prod(spec.kernel)
    pin = math.prod(spec.in_spatial)
    if icg.__class__ is int and icg == 1:
        return _col2im(spec, _outer_columns(spec, ocg), ocg)
    weight = _weight_matrix(spec, icg, ocg * kn, transpose=True)  # [G, Og*K, Icg]
    if hint_int(pin) < TRANSPOSED_COLUMNS_PER_SAMPLE_MIN:  # either is right for every size
        return _col2im(spec, _transposed_batch(spec, weight), ocg)
    shape = (n, g, icg, pin)

    def index_map(index):
        return [index[0], index[1] * icg + index[2]] + _unflatten(index[3], spec.in_spatial)

    inputs = _operand(x, shape, index_map, _reshape_strided(shape))
    buf = _product(spec, (n, g, ocg * kn, pin), weight, inputs)
    return _col2im(spec, _stored_as(buf, (n, g, ocg) + spec.kernel + spec.in_spatial), ocg)


def _outer_columns(spec: _Spec, ocg: int) -> TensorBox:
    """The columns ``[N, G, Og, *K, *in]`` of a transposed convolution with one input channel
    per group: ``W^T x`` multiplies by nothing but that channel, so each column is a product
    of two values, computed where col2im reads it (one pointwise kernel). A DCGAN
    discriminator's last layer's input gradient (16x1x1x1 by 1x64x4x4) took 0.04 ms as a BLAS
    outer product, plus its col2im pass."""
    k = spec.k
    x_load, w_load = spec.x.loader, spec.w.loader
    shape = (spec.batch, spec.groups, ocg) + spec.kernel + spec.in_spatial

    def loader(index):
        sample, group, channel = index[0], index[1], index[2]
        value = x_load([sample, group] + list(index[3 + k :]))
        return ops.mul(value, w_load([group, channel] + list(index[3 : 3 + k])))

    return _box(_ctx(spec.x), shape, spec.dtype, loader, spec.x, spec.w)


def _transposed_batch(spec: _Spec, weight) -> TensorBox:
    """``W^T x`` for small inputs: one product per group over the whole batch, ``[G, Og*K,
    Icg] @ [G, Icg, N*Pin]`` (the input copied sample-inner, or viewed so where each sample is
    one position), read as the columns ``[N, G, Og, *K, *in]`` through a permuted view. Per
    sample, a DCGAN generator's first layer (1x1 noise) made 16 matrix-vector products."""
    x = spec.x
    g, n, k = spec.groups, spec.batch, spec.k
    icg = spec.channels // g
    ocg = spec.weight_shape[1]
    kn = math.prod(spec.kernel)
    pin = math.prod(spec.in_spatial)
    shape = (g, icg, n * pin)

    def index_map(index):
        sample_position = _unflatten(index[2], (n,) + spec.in_spatial)
        return [sample_position[0], index[0] * icg + index[1]] + sample_position[1:]

    def strided(layout):
        # one position per sample: the input's own strides describe [G, Icg, N]
        if not (pin.__class__ is int and pin == 1):
            return None
        sn, sc = layout.stride[:2]
        return Layout(shape, (icg * sc, sc, sn), layout.dtype, layout.offset)

    inputs = _operand(x, shape, index_map, strided)
    buf = _product(spec, (g, ocg * kn, n * pin), weight, inputs)
    stored = _stored_as(buf, (g, ocg) + spec.kernel + (n,) + spec.in_spatial)
    from .views import _permute

    dims = [2 + k, 0, 1] + list(range(2, 2 + k)) + list(range(3 + k, 3 + 2 * k))
    shape = tuple(stored.shape[d] for d in dims)
    return _permute(_meta_like_shape(shape, stored.dtype), stored, dims)


def _col2im(spec: _Spec, columns: TensorBox, ocg: int) -> TensorBox:
    """Each output element sums, over kernel offsets, the column whose input position lands on
    it: position ``y`` takes offset ``k`` from input ``(y + pad - k*dil) / stride`` when that
    divides evenly and lies inside the input.

    Along a strided dim without dilation only the offsets ``k = r + stride*j`` with
    ``r = (y + pad) % stride`` land (from input ``(y + pad) // stride - j``): those are looped
    over instead of every offset behind a divisibility test, ``stride`` times fewer loads (a
    DCGAN generator's 4x4 kernels at stride 2: 4 loads per output element instead of 16; the
    gathering kernel of a 64->32-channel one at 16x8x8 measured 0.33 against 0.37 ms)."""
    if _phases_apply(spec):
        return _col2im_by_phase(spec, columns, ocg)
    k = spec.k
    g, n = spec.groups, spec.batch
    out_shape = (n, g * ocg) + spec.out_spatial
    load = columns.loader
    to = spec.dtype
    terms = math.prod(
        -(-spec.kernel[i] // spec.stride[i])
        if spec.stride[i] > 1 and spec.dilation[i] == 1
        else spec.kernel[i]
        for i in range(k)
    )

    def loader(index):
        sample, channel, ys = index[0], sym.as_expr(index[1]), index[2:]
        group, within = (channel // ocg, channel % ocg) if g > 1 else (sym.ZERO, channel)
        per_dim = [_col2im_taps(spec, i, sym.as_expr(ys[i])) for i in range(k)]
        return _sum_of_taps(load, [sample, group, within], per_dim, to)

    box = _box(_ctx(spec.x), out_shape, to, loader, spec.x)
    box.size_hint = terms + 1
    return box


def _sum_of_taps(load, lead: list, per_dim: list, to) -> object:
    """The sum over every combination of one tap per dim (``(offset, input position,
    conditions)``, None for one that never lands) of the columns at ``lead + offsets +
    positions``, each taken where its conditions hold."""
    total = None
    for taps in itertools.product(*per_dim):
        if any(tap is None for tap in taps):
            continue
        conds = [c for tap in taps for c in tap[2]]
        value = load(lead + [tap[0] for tap in taps] + [tap[1] for tap in taps])
        if conds:
            cond = conds[0]
            for c in conds[1:]:
                cond = ops.logical_and(cond, c)
            value = ops.where(cond, value, ops.constant(0.0, to))
        total = value if total is None else ops.add(total, value)
    return ops.constant(0.0, to) if total is None else total


def _phases_apply(spec: _Spec) -> bool:
    """Stride 2 along every spatial dim, no dilation, even static output sizes: each output
    position's parity then picks its kernel offsets (``_col2im_by_phase``)."""
    return (
        all(s == 2 for s in spec.stride)
        and all(d == 1 for d in spec.dilation)
        and all(isinstance(o, int) and o % 2 == 0 and o > 0 for o in spec.out_spatial)
        and all(isinstance(s, int) for s in spec.in_spatial + spec.kernel)
        and isinstance(spec.batch, int)
    )


def _col2im_by_phase(spec: _Spec, columns: TensorBox, ocg: int) -> TensorBox:
    """col2im of a stride-2 layer (the input gradient of a strided convolution, a transposed
    convolution upsampling 2x) looped by phase: output position ``y = 2 q + r`` along each dim
    is iterated as ``(r, q)`` with ``r`` outer. The offsets that land on ``y`` are
    ``r' + 2 j`` with ``r' = (r + pad) % 2``, from input ``q + (r + pad) // 2 - j`` — affine in
    the loop variables, where ``_col2im``'s gather divides each index by the stride. So the
    columns are read as vectors along ``q``, and the result is stored through a layout of
    stride 2 into the plain NCHW buffer every reader sees. The ResNet CNN's 8x16x32x32 input
    gradient (compiled_profile, 2 threads, load ~4): 0.51 ms in the gathering kernel its ReLU
    gradient fused into, 0.14 ms by phase (the ReLU gradient's own pass is a few us)."""
    k = spec.k
    g, n = spec.groups, spec.batch
    channels = g * ocg
    out = spec.out_spatial
    half = tuple(o // 2 for o in out)
    load = columns.loader
    to = spec.dtype
    out_strides = Layout.contiguous((n, channels) + out, to).stride
    phase_shape = (n, channels) + (2,) * k + half
    phase_strides = out_strides[:2] + out_strides[2:] + tuple(2 * st for st in out_strides[2:])

    def loader(index):
        sample, channel = index[0], sym.as_expr(index[1])
        rs, qs = index[2 : 2 + k], index[2 + k :]
        group, within = (channel // ocg, channel % ocg) if g > 1 else (sym.ZERO, channel)
        per_dim = [_phase_taps(spec, i, sym.as_expr(rs[i]), sym.as_expr(qs[i])) for i in range(k)]
        return _sum_of_taps(load, [sample, group, within], per_dim, to)

    box = _box(_ctx(spec.x), phase_shape, to, loader, spec.x)
    buf = box.realize(Layout(phase_shape, phase_strides, to))
    return _buffer_view(buf, Layout.contiguous((n, channels) + out, to))


def _phase_taps(spec: _Spec, i: int, r: sym.Expr, q: sym.Expr) -> list:
    """``[(kernel offset, input position, conditions)]`` landing on ``y = 2 q + r`` along dim
    ``i`` (``r`` a loop variable over {0, 1}): offset ``r' + 2 j``, r' = (r + pad) % 2 (r or
    1 - r), from input ``q + (r + pad) // 2 - j`` ((r + pad) // 2 = pad // 2 + r * (pad % 2))."""
    padding, size, kernel = spec.padding[i], spec.in_spatial[i], spec.kernel[i]
    odd = padding % 2
    phase = (sym.ONE - r) if odd else r
    base = q + (padding // 2) + (r if odd else sym.ZERO)
    taps = []
    for j in range(-(-kernel // 2)):
        offset = phase + 2 * j
        source = base - j
        conds = []
        if kernel % 2 and j == -(-kernel // 2) - 1:
            conds.append(ops.lt(ops.index_expr(offset, dt.int64), ops.constant(kernel, dt.int64)))
        lo, hi = source.bounds()
        if not sym.known(">=", lo, 0):
            conds.append(ops.ge(ops.index_expr(source, dt.int64), ops.constant(0, dt.int64)))
        if not sym.known("<", hi, size):
            conds.append(ops.lt(ops.index_expr(source, dt.int64), ops.constant(size, dt.int64)))
        taps.append((offset, source, conds))
    return taps


def _col2im_taps(spec: _Spec, i: int, y: sym.Expr) -> list:
    """``[(kernel offset, input position, conditions)]`` that may land on output position ``y``
    along dim ``i`` (None for one that never does)."""
    stride, padding, dilation = spec.stride[i], spec.padding[i], spec.dilation[i]
    size, kernel = spec.in_spatial[i], spec.kernel[i]
    taps: list = []
    if stride > 1 and dilation == 1:
        shifted = y + padding  # never negative
        phase, base = shifted % stride, shifted // stride
        for j in range(-(-kernel // stride)):
            offset = phase + stride * j
            source = base - j
            conds = []
            if kernel % stride and j == -(-kernel // stride) - 1:
                conds.append(
                    ops.lt(ops.index_expr(offset, dt.int64), ops.constant(kernel, dt.int64))
                )
            lo, hi = source.bounds()
            if not sym.known(">=", lo, 0):
                conds.append(ops.ge(ops.index_expr(source, dt.int64), ops.constant(0, dt.int64)))
            if not sym.known("<", hi, size):
                conds.append(ops.lt(ops.index_expr(source, dt.int64), _int64(size)))
            taps.append((offset, source, conds))
        return taps
    for offset in range(kernel):
        shifted = y + (padding - offset * dilation)
        reach = _lands(shifted, stride, size)
        if reach is False:
            taps.append(None)
            continue
        source = shifted // stride if stride > 1 else shifted
        taps.append((sym.const(offset), source, [] if reach is True else [reach]))
    return taps


def _int64(size):
    """A size as an int64 value of the kernel: a constant, or the expression over the size
    arguments when it is symbolic."""
    if size.__class__ is int:
        return ops.constant(size, dt.int64)
    return ops.index_expr(sym.as_expr(size), dt.int64)


def _lands(shifted: sym.Expr, stride: int, size: int):
    """Whether ``shifted / stride`` is an input position: True or False when known from the
    index's range, else an ops bool value."""
    lo, hi = shifted.bounds()
    if sym.known("<", hi, 0) or sym.known(">=", lo, stride * size):
        return False
    checks = []
    iv = ops.index_expr(shifted, dt.int64)
    if not sym.known(">=", lo, 0):
        checks.append(ops.ge(iv, ops.constant(0, dt.int64)))
    if not sym.known("<", hi, stride * (size - 1) + 1):
        checks.append(ops.lt(iv, _int64(stride * (size - 1) + 1)))
    if stride > 1:
        rem = ops.remainder(iv, ops.constant(stride, dt.int64))
        checks.append(ops.eq(rem, ops.constant(0, dt.int64)))
    if not checks:
        return True
    cond = checks[0]
    for c in checks[1:]:
        cond = ops.logical_and(cond, c)
    return cond


# ------------------------------------------------------------------------------ bias


def _add_bias(result: TensorBox, bias: TensorBox) -> TensorBox:
    """The bias as a pointwise add on the product: it runs in whatever kernel reads the output."""
    inner, bias_load = result.loader, bias.loader
    to = result.dtype

    def loader(index):
        b = bias_load([index[1]])
        return ops.add(inner(index), b if bias.dtype is to else ops.to_dtype(b, to))

    return _box(result.ctx, result.shape, to, loader, result, bias)
