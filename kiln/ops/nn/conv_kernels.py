"""numpy kernels of ``convolution``: im2col with one matrix product, and the transposed form.

A convolution copies its input's sliding windows into columns once and multiplies them by the
weight in one product per group, over every image at once. The columns' innermost axis is the
longer contiguous run: the output width for an ordinary convolution, the kernel width for a
weight gradient's convolution (whose "kernel" is the whole output gradient), so the copy moves
long runs either way and the product's inner dimension is the long one.

A transposed convolution gathers where that costs no more multiplies than scattering: split by
the stride's phases, each phase of the output is an ordinary stride-1 convolution of the input
with part of the flipped kernel, so an input gradient is an im2col and a product of the same
size as the forward pass. The scattering form (a product into per-offset columns, then one
strided add per kernel offset: col2im) remains for a small input against a large kernel
(padding would dominate a gather) and for stride and dilation both above one in a dim.

A convolution whose one window is the whole unpadded input (a DCGAN discriminator's last
layer, and its generator's first, transposed, from one pixel) is a plain product: no columns,
no padding, nothing to gather or scatter.

A stride-1 convolution can instead run "wide" (``_WidePlan``): the input is written once, padded,
channels outermost, every image's padded rows end to end, so that each kernel offset reads one
contiguous run of that buffer shifted by the offset. Its columns are then a few shifted copies
of long runs (one per offset of the last kernel dim, or per offset when channels are few), and
one product per remaining offset covers every image at once, accumulating into an output as
wide as the padded input: the positions past each row's or image's end are computed and
dropped. That trades the im2col copy (K times the input, in runs of an output row) for a few
percent more multiply-adds, and also gives the weight gradient and a stride-1 input gradient
(itself a stride-1 convolution) over the whole batch in a few products.

Every product runs through ``blas.kernel_matmul``: a layer's several sub-millisecond products
on the calling thread, not handed to OpenBLAS's threads one by one (see there).
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass

import numpy as np

from ...runtime import blas
from ...runtime.storage import empty_array
from . import conv_direct

__all__ = [
    "conv_forward",
    "conv_forward_keeping_columns",
    "conv_transposed",
    "conv_weight_grad",
    "WideColumns",
    "kernel_offsets",
    "offset_slices",
    "pad_spatial",
    "windows",
    "trimmed_taps",
    "symmetric_live_taps",
]

_as_strided = np.lib.stride_tricks.as_strided

# A transposed convolution's two forms, costed in copied elements (measured on a 2-core EPYC
# with OpenBLAS, float32): a multiply-add in a product of useful shape costs about a tenth of
# one; col2im's columns cost about six each (written by a product whose inner dimension is only
# the input's channels, then read and written again by the per-offset adds); each phase a
# gather runs costs about 100k in fixed numpy and Python work.
_MAC_COST = 0.1
_COLUMN_COST = 6.0
_PHASE_COST = 100_000


# padded rows up to this long are zeroed whole before the copy (8x16x34x34: ~60 us against ~80)
_FILL_WHOLE_WIDTH = 64


def windows(a: np.ndarray, out_sizes, kernel, stride, dilation) -> np.ndarray:
    """Zero-copy view (N, C, *out, *kernel) of the sliding windows over ``a``'s trailing dims."""
    st = a.strides
    k = len(kernel)
    shape = a.shape[:2] + tuple(out_sizes) + tuple(kernel)
    spatial = st[2:]
    strides = (
        st[:2]
        + tuple(spatial[i] * stride[i] for i in range(k))
        + tuple(spatial[i] * dilation[i] for i in range(k))
    )
    return _as_strided(a, shape=shape, strides=strides, writeable=False)


def kernel_offsets(kernel):
    """Every kernel position, as a tuple of per-dim offsets, in C order."""
    return itertools.product(*(range(size) for size in kernel))


def offset_slices(offset, count, stride, dilation) -> tuple:
    """Slices of the (padded) input read by kernel position ``offset`` at every output position."""
    return tuple(
        slice(o * d, o * d + (n - 1) * s + 1, s)
        for o, n, s, d in zip(offset, count, stride, dilation)
    )


def pad_spatial(a: np.ndarray, pads, channels_last: bool = False) -> np.ndarray:
    """``a`` (N, C, *S) with (before, after) zeros on each spatial dim; a negative amount crops.

    ``channels_last``: the result's memory is (N, *S, C) (its axes still read (N, C, *S)), and
    always a copy. Only the border strips are zeroed (the interior is written once by the copy),
    unless rows are short: zeroing a row's side strips costs a numpy inner loop per row."""
    k = a.ndim - 2
    crop = tuple(
        slice(max(-lo, 0), size - max(-hi, 0)) for (lo, hi), size in zip(pads, a.shape[2:])
    )
    a = a[(slice(None), slice(None)) + crop]
    grow = [(max(lo, 0), max(hi, 0)) for lo, hi in pads]
    if not channels_last and not any(lo or hi for lo, hi in grow):
        return a
    spatial = tuple(s + lo + hi for s, (lo, hi) in zip(a.shape[2:], grow))
    if channels_last:
        memory = empty_array((a.shape[0],) + spatial + (a.shape[1],), a.dtype)
        out = memory.transpose((0, k + 1) + tuple(range(1, k + 1)))
    else:
        out = empty_array(a.shape[:2] + spatial, a.dtype)
    whole = spatial[-1] <= _FILL_WHOLE_WIDTH
    if whole:
        # short rows: one fill of everything beats zeroing the side strips row by row
        out.fill(0)
    for i, (lo, hi) in enumerate([] if whole else grow):
        index = [slice(None)] * out.ndim
        for strip in (slice(0, lo), slice(spatial[i] - hi, spatial[i])):
            if strip.start != strip.stop:
                index[2 + i] = strip
                out[tuple(index)] = 0
    interior = tuple(slice(lo, lo + s) for (lo, _), s in zip(grow, a.shape[2:]))
    out[(slice(None), slice(None)) + interior] = a
    return out


def _copied(view: np.ndarray) -> np.ndarray:
    """``view`` copied into a (pooled, when large) C-contiguous array."""
    out = empty_array(view.shape, view.dtype)
    np.copyto(out, view)
    return out


# "taps" columns replace "channels" ones where the weight has more than this many times the
# columns' elements. ResNet-18's layers, forward and weight gradient from the same columns,
# "channels" against "taps" (ms of process time, 1 thread, load 18): at equal sizes (128
# channels over 4x4 images, 64 over 8x8 at stride 2) 1.05 / 1.17 and 0.56 / 0.62; at eight
# times the columns (256 over 2x2, 128 to 256 at stride 2) 1.74 / 1.33 and 0.87 / 0.69
_TAPS_WEIGHT_RATIO = 4


def _column_layout(out_spatial, kernel, channels: int, batch: int, outputs: int) -> str:
    """The columns' innermost axis: the longest run the copy into them reads, the output width
    ("positions"), the kernel width ("taps") or the input channels ("channels", read from a
    channels-last copy of the input).

    "channels" columns also cost a copy of the weight (or, for a weight gradient, of the
    result) with the kernel taps moved inside the channels; where that copy holds more than
    ``_TAPS_WEIGHT_RATIO`` times the columns' elements (``outputs`` per group against ``batch``
    times the output positions), "taps" columns take the weight as it is, and one product reads
    it once: a 512-channel 3x3 layer over 2x2 images (ResNet-18's last stage) copied its 9.4 MB
    weight in every forward pass. ``outputs`` 0: the run lengths alone decide."""
    runs = {"positions": out_spatial[-1], "taps": kernel[-1], "channels": channels}
    layout = max(runs, key=runs.__getitem__)
    columns = batch * math.prod(out_spatial)
    if layout == "channels" and math.prod(kernel) > 1 and outputs > _TAPS_WEIGHT_RATIO * columns:
        return "taps"
    return layout


def _whole_window(spatial, kernel, pads, dilation) -> bool:
    """Whether a convolution's only window is its whole input, unpadded and read contiguously."""
    return all(
        s == size and p == (0, 0) and (d == 1 or size == 1)
        for s, size, p, d in zip(spatial, kernel, pads, dilation)
    )


# a kernel is trimmed to its live taps where they are at most this part of its taps: the
# trimmed weight is a strided copy, which reads every cache line of the weight in runs of a few
# elements (ResNet-18's 256-to-512-channel 3x3 stride-2 layer at 2x2 images, 4 live taps of 9:
# forward 1.9 against 0.85 ms untrimmed; its 512-channel layers at 1x1, 1 of 9: 0.32 against 1.7)
_TRIM_LIVE_MAX = 0.25


def _live_taps(size: int, count: int, kernel: int, stride: int, before: int, dilation: int):
    """The first and one past the last tap of one kernel dim that reads an input position
    (rather than padding) at any of ``count`` windows; None where no tap does."""
    live = []
    for tap in range(kernel):
        start = tap * dilation - before  # the input position the first window reads
        first = max(0, -(start // stride))  # the first window reading a position >= 0
        if first < count and start + first * stride < size:
            live.append(tap)
    return (live[0], live[-1] + 1) if live else None


@functools.lru_cache(maxsize=256)
def trimmed_taps(spatial: tuple, counts: tuple, kernel: tuple, stride: tuple, befores: tuple,
                 dilation: tuple) -> tuple | None:  # fmt: skip
    """Per dim, the (first, stop) kernel taps a convolution's windows can read input through,
    where at most ``_TRIM_LIVE_MAX`` of the taps read the input at some window (a 3x3 layer over
    1x1 images reads its centre tap alone: ResNet-18's last stage), else None. A trimmed tap
    adds only products of zero padding; dropping it leaves the live taps and less padding.
    (Cached: a model asks about the same few geometries every step.)"""
    ranges = [
        _live_taps(size, count, kn, s, b, d)
        for size, count, kn, s, b, d in zip(spatial, counts, kernel, stride, befores, dilation)
    ]
    if any(r is None for r in ranges):
        return None
    if _TRIM_LIVE_MAX * math.prod(kernel) < math.prod(stop - first for first, stop in ranges):
        return None
    return tuple(ranges)


def symmetric_live_taps(reads, windows, kernel, stride, padding, dilation) -> tuple | None:
    """``(ranges, live_padding)``: the taps ``trimmed_taps`` keeps, where every size is a plain
    int and as many taps are dead at both ends of each dim (the smaller kernel then keeps a
    symmetric padding, ``live_padding``, and the output size); None otherwise. The compiled
    convolutions leave the dead taps out by this rule (the lowering, and AOT's shared copy of
    the live taps), so an infinite weight there never meets a padding zero, as in eager."""
    geometry = tuple(tuple(part) for part in (reads, windows, kernel, stride, padding, dilation))
    if any(v.__class__ is not int for part in geometry for v in part):
        return None
    ranges = trimmed_taps(*geometry)
    if ranges is None or any(
        first != kn - stop or p < first * d
        for (first, stop), kn, p, d in zip(ranges, kernel, padding, dilation)
    ):
        return None
    live_padding = [p - first * d for (first, _), p, d in zip(ranges, padding, dilation)]
    return tuple(ranges), live_padding


def _trim_forward(shape, w_shape, stride, pads, dilation, out_spatial):
    """``trimmed_taps`` for a forward convolution of an input of ``shape`` by a weight of
    ``w_shape``: (the weight's index of the live taps, the padding that goes with them), or
    None."""
    kernel = w_shape[2:]
    befores = tuple(lo for lo, _ in pads)
    ranges = trimmed_taps(tuple(shape[2:]), tuple(out_spatial), tuple(kernel), tuple(stride),
                          befores, tuple(dilation))  # fmt: skip
    if ranges is None:
        return None
    pads = [
        (lo - first * d, hi - (kn - stop) * d)
        for (lo, hi), (first, stop), kn, d in zip(pads, ranges, kernel, dilation)
    ]
    return (Ellipsis,) + tuple(slice(first, stop) for first, stop in ranges), pads


def _dense_forward(a, w, groups: int) -> np.ndarray:
    """``conv_forward`` of a whole-window convolution: (N, Cg*K) times (Cg*K, Og) per group."""
    n = a.shape[0]
    og = w.shape[0] // groups
    x = a.reshape(n, groups, -1).transpose(1, 0, 2)
    wm = w.reshape(groups, og, -1).transpose(0, 2, 1)
    out = empty_array((n, groups, og), np.result_type(a, w))
    blas.kernel_matmul(x, wm, out.transpose(1, 0, 2))
    return out.reshape((n, groups * og) + (1,) * (a.ndim - 2))


# A wide convolution's costs, in the units above (an im2col column element copied = 1): its
# copies move long runs (the padded input, the shifted copies, the output taken back out of
# the wide positions), measured at about 0.6 of an im2col element on the same machine.
_LONG_COPY_COST = 0.6
# the last kernel dim's offsets alone are copied (a product per other offset) when that gives
# products of at least this many inner elements (offsets x channels); below it every offset is
# copied and one product per group takes them all (a 3-channel stem: 9 shifts of 3 rows)
_WIDE_MIN_INNER = 32


@dataclass(frozen=True)
class _WidePlan:
    """The geometry of a wide (stride-1) convolution: see the module docstring.

    The input (N, G*Cg, *S) is cropped by ``crop``, padded by ``grow`` to ``padded`` and laid
    out as (G*Cg, N * prod(padded)) plus a zero tail: wide position ``l = n * image + sum(y_d *
    steps[d])`` holds padded pixel ``y`` of image ``n``, and output ``y`` (every ``y_d`` below
    ``out_spatial[d]``) reads wide position ``l + offset`` through each kernel offset. The
    ``copied`` offsets are copied as shifts of the whole buffer, ``outer`` ones (relative to
    the shifts' start) are columns of the product per outer offset."""

    n: int
    groups: int
    cg: int
    kernel: tuple
    crop: tuple
    grow: tuple
    padded: tuple
    out_spatial: tuple
    copied_dims: int  # the trailing kernel dims whose offsets are copied
    copied_strides: tuple  # buffer elements between successive copied offsets, per copied dim
    outer: tuple  # buffer offset of each outer kernel position, in C order
    length: int  # wide positions computed: N * prod(padded)
    reach: int  # the shifted copies' length: length + the largest outer offset
    total: int  # the padded buffer's length: reach + the largest copied offset

    @property
    def shifts(self) -> int:
        return math.prod(self.kernel[len(self.kernel) - self.copied_dims :])


def _wide_plan(shape, kernel, pads, dilation, groups: int) -> _WidePlan:
    n, c = shape[:2]
    k = len(kernel)
    crop = tuple(slice(max(-lo, 0), size - max(-hi, 0)) for (lo, hi), size in zip(pads, shape[2:]))
    grow = tuple((max(lo, 0), max(hi, 0)) for lo, hi in pads)
    padded = tuple((sl.stop - sl.start) + lo + hi for sl, (lo, hi) in zip(crop, grow))
    out_spatial = tuple(p - d * (size - 1) for p, d, size in zip(padded, dilation, kernel))
    steps = tuple(math.prod(padded[d + 1 :]) for d in range(k))
    cg = c // groups
    copied_dims = 1 if k > 1 and kernel[-1] * cg >= _WIDE_MIN_INNER else k
    split = k - copied_dims
    outer = tuple(
        sum(o * dilation[d] * steps[d] for d, o in enumerate(offset))
        for offset in kernel_offsets(kernel[:split])
    )
    copied_strides = tuple(dilation[d] * steps[d] for d in range(split, k))
    length = n * math.prod(padded)
    reach = length + max(outer)
    last = sum((size - 1) * st for size, st in zip(kernel[split:], copied_strides))
    return _WidePlan(n, groups, cg, tuple(kernel), crop, grow, padded, out_spatial,
                     copied_dims, copied_strides, outer, length, reach, reach + last)  # fmt: skip


def _wide_pays(plan: _WidePlan, og: int) -> bool:
    """Whether the wide form costs less than im2col (columns of every offset, ``_MAC_COST``
    per multiply-add) for ``og`` outputs per group."""
    c = plan.groups * plan.cg
    p_k = math.prod(plan.kernel)
    positions = plan.n * math.prod(plan.out_spatial)
    im2col = c * p_k * positions * (1 + og * _MAC_COST)
    copies = c * plan.total + plan.shifts * c * plan.reach + og * plan.groups * positions
    wide = copies * _LONG_COPY_COST + plan.length * c * p_k * og * _MAC_COST
    return wide < im2col


def _wide_buffer(a: np.ndarray, plan: _WidePlan) -> np.ndarray:
    """``a`` (N, C, *S) written into its wide layout: (C, total), zero padded, zero tail."""
    n, c = a.shape[:2]
    buf = empty_array((c, plan.total), a.dtype)
    buf.fill(0)
    images = buf[:, : plan.length].reshape((c, n) + plan.padded)
    interior = tuple(slice(lo, size - hi) for (lo, hi), size in zip(plan.grow, plan.padded))
    cropped = a[(slice(None), slice(None)) + plan.crop]
    np.copyto(images[(slice(None), slice(None)) + interior], cropped.swapaxes(0, 1))
    return buf


def _wide_shifts(buf: np.ndarray, plan: _WidePlan) -> np.ndarray:
    """The copied offsets' shifts of ``buf``: (G, shifts * Cg, reach), rows (offset, channel)."""
    g, cg = plan.groups, plan.cg
    item = buf.itemsize
    copied = plan.kernel[len(plan.kernel) - plan.copied_dims :]
    view = _as_strided(
        buf,
        shape=(g,) + copied + (cg, plan.reach),
        strides=(cg * buf.strides[0],)
        + tuple(st * item for st in plan.copied_strides)
        + (buf.strides[0], item),
        writeable=False,
    )
    shifted = empty_array(view.shape, buf.dtype)
    np.copyto(shifted, view)
    return shifted.reshape(g, plan.shifts * cg, plan.reach)


def _wide_weight(w: np.ndarray, plan: _WidePlan) -> np.ndarray:
    """``w`` (G*Og, Cg, *K) as (G, outer, Og, shifts * Cg), each row (offset, channel)."""
    g, cg = plan.groups, plan.cg
    og = w.shape[0] // g
    moved = w.reshape((g, og, cg, len(plan.outer), plan.shifts)).transpose(0, 3, 1, 4, 2)
    return np.ascontiguousarray(moved).reshape(g, len(plan.outer), og, plan.shifts * cg)


def _wide_forward(a, w, plan: _WidePlan) -> tuple[np.ndarray, np.ndarray]:
    """``conv_forward`` (stride 1) in the wide form; also the shifted copies, which
    ``conv_weight_grad`` reads as its columns."""
    n = plan.n
    g = plan.groups
    og = w.shape[0] // g
    dtype = np.result_type(a, w)
    shifted = _wide_shifts(_wide_buffer(a.astype(dtype, copy=False), plan), plan)
    wmat = _wide_weight(w.astype(dtype, copy=False), plan)
    wide = empty_array((g, og, plan.length), dtype)
    partial = empty_array((g, og, plan.length), dtype) if len(plan.outer) > 1 else None
    for i, offset in enumerate(plan.outer):
        columns = shifted[:, :, offset : offset + plan.length]
        for group in range(g):
            target = wide[group] if i == 0 else partial[group]
            blas.kernel_matmul(wmat[group, i], columns[group], target)
        if i:
            wide += partial
    out = empty_array((n, g * og) + plan.out_spatial, dtype)
    images = wide.reshape((g * og, n) + plan.padded)
    window = tuple(slice(0, size) for size in plan.out_spatial)
    np.copyto(out, images[(slice(None), slice(None)) + window].swapaxes(0, 1))
    return out, shifted


@dataclass(frozen=True)
class WideColumns:
    """What ``conv_forward_keeping_columns`` keeps of a wide convolution: its shifted copies
    (about ``kernel[-1]`` times the input, against im2col's ``prod(kernel)``) and geometry."""

    shifted: np.ndarray
    plan: _WidePlan


def _wide_weight_grad(g: np.ndarray, cols: WideColumns) -> np.ndarray | None:
    """The weight gradient from a wide convolution's shifted copies: per outer offset and
    group, (Og, wide positions) times their (wide positions, shifts * Cg), the output gradient
    written out wide with zeros at the dropped positions. None where the result is not finite:
    the dropped positions' inputs are multiplied by zero too, which turns an infinite input
    into NaN where PyTorch never reads it; the caller copies im2col columns instead."""
    plan, shifted = cols.plan, cols.shifted
    groups, cg = plan.groups, plan.cg
    og = g.shape[1] // groups
    dtype = shifted.dtype
    wide = empty_array((groups, og, plan.length), dtype)
    wide.fill(0)
    images = wide.reshape((groups * og, plan.n) + plan.padded)
    window = tuple(slice(0, size) for size in plan.out_spatial)
    np.copyto(images[(slice(None), slice(None)) + window], g.swapaxes(0, 1))
    total = empty_array((groups, len(plan.outer), og, plan.shifts * cg), dtype)
    for i, offset in enumerate(plan.outer):
        columns = shifted[:, :, offset : offset + plan.length]
        for group in range(groups):
            blas.kernel_matmul(wide[group], columns[group].T, total[group, i])
    if not np.isfinite(total).all():
        return None
    # (G, outer, Og, shifts, Cg) -> (G, Og, Cg, outer, shifts)
    total = total.reshape(groups, len(plan.outer), og, plan.shifts, cg).transpose(0, 2, 4, 1, 3)
    return np.ascontiguousarray(total).reshape((groups * og, cg) + plan.kernel)


def _wide_applies(shape, kernel, stride, pads, dilation, groups: int, og: int):
    """The wide plan of a convolution where that form applies and pays, else None."""
    if any(s != 1 for s in stride) or shape[1] // groups < 2 or shape[0] == 0:
        return None
    plan = _wide_plan(shape, kernel, pads, dilation, groups)
    return plan if _wide_pays(plan, og) else None


def conv_forward(a, w, stride, pads, dilation, groups: int, out_spatial, out=None) -> np.ndarray:
    """Convolution of ``a`` (N, C, *S) with ``w`` (O, C/groups, *K): (N, O, *out_spatial).

    ``pads``: per spatial dim, (before, after) zero padding (negative crops). ``out``: an
    array (a channels-last one) the column products write into; the other paths return
    arrays of their own."""
    trim = _trim_forward(a.shape, w.shape, stride, pads, dilation, out_spatial)
    if trim is not None:
        w, pads = w[trim[0]], trim[1]
    kernel = tuple(w.shape[2:])
    cg = a.shape[1] // groups
    if _whole_window(a.shape[2:], kernel, pads, dilation):
        return _dense_forward(a, w, groups)
    if conv_direct.applies(a, w, stride, pads, dilation, groups, out_spatial):
        return conv_direct.forward(a, w, stride, pads, out_spatial)[0]
    og = w.shape[0] // groups
    plan = _wide_applies(a.shape, kernel, stride, pads, dilation, groups, og)
    if plan is not None:
        return _wide_forward(a, w, plan)[0]
    layout = _column_layout(out_spatial, kernel, cg, a.shape[0], og)
    a = pad_spatial(a, pads, channels_last=layout == "channels" and cg > 1)
    return _convolve_padded(a, w, stride, dilation, groups, tuple(out_spatial), layout, out)


def conv_forward_keeping_columns(
    a, w, stride, pads, dilation, groups: int, out_spatial, out=None, keep_bytes: int | None = None
) -> tuple[np.ndarray, np.ndarray | WideColumns | None]:
    """``conv_forward``, also returning the columns its product read (im2col's, or a wide
    convolution's shifted copies; None where it read none: a whole-window or depthwise
    convolution), which ``conv_weight_grad`` takes instead of copying the same windows again
    in the backward pass. Where some kernel taps read only padding (``trimmed_taps``), the
    columns are the live taps' (``conv_weight_grad`` trims the same way). ``keep_bytes``: im2col
    columns larger than this are not kept (the weight gradient copies them again rather than
    holding ~K times the input); the direct loops' padded input and the wide form's shifted
    copies are kept whatever their size (about the input's, and K's last dim times it)."""
    trim = _trim_forward(a.shape, w.shape, stride, pads, dilation, out_spatial)
    if trim is not None:
        w, pads = w[trim[0]], trim[1]
    kernel = tuple(w.shape[2:])
    cg = a.shape[1] // groups
    if cg == 1 or _whole_window(a.shape[2:], kernel, pads, dilation):
        return conv_forward(a, w, stride, pads, dilation, groups, out_spatial, out), None
    if conv_direct.applies(a, w, stride, pads, dilation, groups, out_spatial):
        return conv_direct.forward(a, w, stride, pads, out_spatial)
    og = w.shape[0] // groups
    plan = _wide_applies(a.shape, kernel, stride, pads, dilation, groups, og)
    if plan is not None:
        out, shifted = _wide_forward(a, w, plan)
        return out, WideColumns(shifted, plan)
    out_spatial = tuple(out_spatial)
    layout = _column_layout(out_spatial, kernel, cg, a.shape[0], og)
    a = pad_spatial(a, pads, channels_last=layout == "channels" and cg > 1)
    if keep_bytes is not None:
        size = a.shape[0] * a.shape[1] * math.prod(kernel) * math.prod(out_spatial)
        if size * a.itemsize > keep_bytes:
            return _convolve_padded(a, w, stride, dilation, groups, out_spatial, layout, out), None
    cols = _columns(a, kernel, stride, dilation, groups, out_spatial, layout)
    if out is None:
        out = empty_array((a.shape[0], w.shape[0]) + out_spatial, np.result_type(a, w))
    _multiply_columns(cols, _weight_matrix(w, groups, layout), groups, layout, out)
    return out, cols


def _weight_matrix(w, groups: int, layout: str) -> np.ndarray:
    """``w`` (G*Og, Cg, *K) as the product's weight operand: (G, Og, Cg*K) for "positions"
    columns, else (G, inner, Og) with the inner axis in the columns' order, (Cg, *K) or, for
    "channels", (*K, Cg). That one is copied channels-innermost, runs of Cg elements (putting
    the outputs innermost gathers single elements, several times slower), and read transposed:
    2-d products take that layout at full speed."""
    og = w.shape[0] // groups
    if layout == "positions":
        return w.reshape(groups, og, -1)
    if layout == "taps":
        return w.reshape(groups, og, -1).transpose(0, 2, 1)
    moved = w.reshape(groups, og, w.shape[1], -1).transpose(0, 1, 3, 2)
    return np.ascontiguousarray(moved).reshape(groups, og, -1).transpose(0, 2, 1)


def _convolve_padded(a, w, stride, dilation, groups, out_spatial, layout, out=None, wmat=None):
    """``conv_forward`` of the already padded ``a`` with columns in ``layout``, written into
    ``out`` (N, O, *out_spatial), which may be a strided view (a transposed convolution's
    phase), or into a new array. ``wmat``: ``_weight_matrix(w, groups, layout)`` when the
    caller has it."""
    n, c = a.shape[:2]
    kernel = tuple(w.shape[2:])
    k = len(kernel)
    cg, og = c // groups, w.shape[0] // groups
    dtype = np.result_type(a, w)
    if out is None:
        out = empty_array((n, groups * og) + out_spatial, dtype)
    grouped = out.reshape((n, groups, og) + out_spatial)  # a view: splits the channels
    if cg == 1:
        # one input channel per group (depthwise): a multiply-add per kernel offset beats
        # a product whose inner dimension is the kernel alone
        xg = a.reshape((n, groups, 1) + a.shape[2:])
        wg = w.reshape((groups, og) + kernel)
        grouped.fill(0)
        for offset in kernel_offsets(kernel):
            sl = xg[(Ellipsis,) + offset_slices(offset, out_spatial, stride, dilation)]
            grouped += sl * wg[(slice(None), slice(None)) + offset].reshape((groups, og) + (1,) * k)
        return out
    cols = _columns(a, kernel, stride, dilation, groups, out_spatial, layout)
    if wmat is None:
        wmat = _weight_matrix(w, groups, layout)
    return _multiply_columns(cols, wmat, groups, layout, out)


def _multiply_columns(cols, wmat, groups: int, layout: str, out) -> np.ndarray:
    """The product of ``_columns``' ``cols`` and ``_weight_matrix``'s ``wmat``, written into
    ``out`` (N, G*Og, *P), which may be a strided view."""
    n = out.shape[0]
    out_spatial = out.shape[2:]
    k = len(out_spatial)
    og = out.shape[1] // groups
    p_out = math.prod(out_spatial)
    grouped = out.reshape((n, groups, og) + out_spatial)  # a view: splits the channels
    if layout == "positions":
        # a product per image and group, written straight into a contiguous output (as fast
        # as one product over every image here, and no copy after it)
        if out.flags.c_contiguous:
            blas.kernel_matmul(wmat, cols, out.reshape(n, groups, og, p_out))
        else:
            np.copyto(grouped, blas.kernel_matmul(wmat, cols).reshape(grouped.shape))
        return out
    if groups == 1 and out.strides[1] == out.itemsize:
        channels_inner = out.transpose((0,) + tuple(range(2, k + 2)) + (1,))
        if channels_inner.flags.c_contiguous:
            # a channels-last output is the product's own (N, *P, O) layout: written in place
            blas.kernel_matmul(cols[0], wmat[0], channels_inner.reshape(n * p_out, og))
            return out
    product = empty_array((groups, n) + out_spatial + (og,), out.dtype)
    flat = product.reshape(groups, n * p_out, og)
    for group in range(groups):
        # 2-d products: numpy runs a batched one with a transposed operand without BLAS
        blas.kernel_matmul(cols[group], wmat[group], flat[group])
    # (G, N, *P, Og) -> (N, G, Og, *P)
    np.copyto(grouped, product.transpose((1, 0, k + 2) + tuple(range(2, k + 2))))
    return out


def _columns(a, kernel, stride, dilation, groups: int, out_spatial, layout: str) -> np.ndarray:
    """im2col of the padded ``a`` (N, C, *S) in ``layout`` (``_column_layout``): (N, G, Cg*K, P)
    for "positions", (G, N*P, Cg*K) for "taps", (G, N*P, K*Cg) for "channels" (read fastest
    from a channels-last ``a``)."""
    n, c = a.shape[:2]
    k = len(kernel)
    cg = c // groups
    p_out, p_k = math.prod(out_spatial), math.prod(kernel)
    win = windows(a, out_spatial, kernel, stride, dilation)
    win = win.reshape((n, groups, cg) + tuple(out_spatial) + tuple(kernel))
    outs = tuple(range(3, 3 + k))
    taps = tuple(range(3 + k, 3 + 2 * k))
    if layout == "positions":
        cols = _copied(win.transpose((0, 1, 2) + taps + outs))
        return cols.reshape(n, groups, cg * p_k, p_out)
    if layout == "taps":
        cols = _copied(win.transpose((1, 0) + outs + (2,) + taps))
    else:
        cols = _copied(win.transpose((1, 0) + outs + taps + (2,)))
    return cols.reshape(groups, n * p_out, cg * p_k)


def conv_weight_grad(
    a, g, kernel, stride, pads, dilation, groups: int, cols: np.ndarray | WideColumns | None = None
) -> np.ndarray:
    """The weight gradient of ``conv_forward(a, w, stride, pads, dilation, groups, ...)``
    for the output gradient ``g`` (N, G*Og, *P): (G*Og, Cg, *kernel). ``cols``: the columns
    ``conv_forward_keeping_columns`` returned for the same call, where it kept them.

    The same columns as the forward pass times the output gradient, where the derivative
    written as a convolution (the input's batch and channels swapped, the gradient as its
    kernel) copied the input twice more and the gradient once, and ran one product whose
    inner dimension is every output position of the batch: with "positions" columns a
    product per image (its positions inner) and a sum over the batch of the small results.

    Where most kernel taps read only padding (``trimmed_taps``, as the forward pass trimmed them),
    the live taps' gradient is computed and the others are zero, as PyTorch's oneDNN kernels
    give them also where the output gradient is not finite (its im2col kernel, which it runs
    for some sizes, gives NaN there: infinity times the padding's zeros)."""
    kernel = tuple(kernel)
    trim = _trim_forward(a.shape, (g.shape[1], a.shape[1] // groups) + kernel, stride, pads,
                         dilation, g.shape[2:])  # fmt: skip
    if trim is None:
        return _weight_grad(a, g, kernel, stride, pads, dilation, groups, cols)
    index, live_pads = trim
    live_kernel = tuple(sl.stop - sl.start for sl in index[1:])
    live = _weight_grad(a, g, live_kernel, stride, live_pads, dilation, groups, cols)
    total = empty_array((g.shape[1], a.shape[1] // groups) + kernel, live.dtype)
    total.fill(0)
    total[index] = live
    return total


def _weight_grad(a, g, kernel, stride, pads, dilation, groups: int, cols) -> np.ndarray:
    """``conv_weight_grad`` of a kernel whose every tap reads the input somewhere."""
    n, c = a.shape[:2]
    k = len(kernel)
    out_spatial = tuple(g.shape[2:])
    cg, og = c // groups, g.shape[1] // groups
    p_out, p_k = math.prod(out_spatial), math.prod(kernel)
    if _whole_window(a.shape[2:], kernel, pads, dilation):
        # (Og, N) times (N, Cg*K) per group: the input is its own column matrix
        x = a.reshape(n, groups, cg * p_k).transpose(1, 0, 2)
        total = empty_array((groups, og, cg * p_k), np.result_type(a, g))
        blas.kernel_matmul(g.reshape(n, groups, og).transpose(1, 2, 0), x, total)
        return total.reshape((groups * og, cg) + kernel)
    if isinstance(cols, conv_direct.PhaseInput):
        total = conv_direct.weight_grad(cols, g, kernel)
        if total is not None:
            return total
        cols = None
    if cols is None:
        plan = _wide_applies(a.shape, kernel, stride, pads, dilation, groups, og)
        if plan is not None:
            buf = _wide_buffer(a.astype(np.result_type(a, g), copy=False), plan)
            cols = WideColumns(_wide_shifts(buf, plan), plan)
    if isinstance(cols, WideColumns):
        total = _wide_weight_grad(g, cols)
        if total is not None:
            return total
        cols = None
    layout = _column_layout(out_spatial, kernel, cg, n, og)
    if cols is None:
        a = pad_spatial(a, pads, channels_last=layout == "channels" and cg > 1)
        cols = _columns(a, kernel, stride, dilation, groups, out_spatial, layout)
    gm = g.reshape(n, groups, og, p_out)
    # products whose result is the gradient's own (Og, Cg*K) rows ((Og, K*Cg) for "channels"
    # columns, moved within each row after): the transposed result, (Cg*K, Og), cost a copy
    # through cache misses of the whole gradient
    dtype = np.result_type(cols, g)
    # (pooled results: a fresh array of a large weight's size costs its page faults)
    total = empty_array((groups, og, cg * p_k), dtype)  # (G, Og, Cg*K or K*Cg)
    if layout == "positions":
        per_image = empty_array((n, groups, og, cg * p_k), dtype)
        blas.kernel_matmul(gm, cols.transpose(0, 1, 3, 2), per_image)
        np.sum(per_image, axis=0, out=total)
    else:
        gt = _copied(gm.transpose(1, 2, 0, 3)).reshape(groups, og, n * p_out)
        blas.kernel_matmul(gt, cols, total)
    if layout == "channels":
        total = total.reshape((groups * og,) + kernel + (cg,))
        order = (0, k + 1) + tuple(range(1, k + 1))
        return np.ascontiguousarray(total.transpose(order)).reshape((groups * og, cg) + kernel)
    return total.reshape((groups * og, cg) + kernel)


def _phases(size_in, size_out, kernel, stride, padding, dilation) -> list[tuple]:
    """One dim of a transposed convolution split by output phase: per phase, (taps, first
    output position, output count, (pad before, pad after) of the input). Output ``y`` with
    ``y + padding = m * stride + r`` reads input ``m - j`` through tap ``r + j * stride``
    (stride > 1, dilation 1) or input ``m - j * dilation`` through tap ``j`` (stride 1), a
    stride-1 convolution with those taps flipped."""
    plans = []
    for r in range(stride):
        taps = list(range(r, kernel, stride))
        first = -((r - padding) // stride)  # smallest m with m * stride + r >= padding
        last = (size_out - 1 + padding - r) // stride
        count = last - first + 1
        step = dilation if stride == 1 else 1
        pads = ((len(taps) - 1) * step - first, last - (size_in - 1))
        plans.append((taps, first * stride + r - padding, count, pads))
    return plans


def _gather_pays(batch, channels, outputs, in_spatial, kernel, plans) -> bool:
    """Whether gathering by phases costs less than col2im (``channels``, ``outputs``: per group;
    the costs above)."""
    gathered = math.prod(
        sum(len(taps) * max(count, 0) for taps, _, count, _ in dim_plans) for dim_plans in plans
    )
    phases = math.prod(sum(1 for taps, _, count, _ in p if taps and count > 0) for p in plans)
    gather = batch * channels * gathered * (1 + outputs * _MAC_COST) + phases * _PHASE_COST
    columns = batch * outputs * math.prod(kernel) * math.prod(in_spatial)
    return gather <= columns * (_COLUMN_COST + channels * _MAC_COST)


def conv_transposed(a, w, stride, padding, dilation, groups: int, out_spatial) -> np.ndarray:
    """Transposed convolution of ``a`` (N, C, *S) with ``w`` (C, O/groups, *K): (N, O, *out).

    Kernel taps whose every product lands in the padding the output crops (a 3x3 layer's
    input gradient at 1x1 images: all but the centre) are left out (``trimmed_taps``)."""
    ranges = trimmed_taps(tuple(out_spatial), a.shape[2:], w.shape[2:], tuple(stride),
                          tuple(padding), tuple(dilation))  # fmt: skip
    if ranges is not None and all(
        p >= first * d for p, (first, _), d in zip(padding, ranges, dilation)
    ):
        w = w[(Ellipsis,) + tuple(slice(first, stop) for first, stop in ranges)]
        padding = [p - first * d for p, (first, _), d in zip(padding, ranges, dilation)]
    kernel = tuple(w.shape[2:])
    k = len(kernel)
    in_spatial = a.shape[2:]
    if all(s == 1 and (d == 1 or size == 1) for s, size, d in zip(in_spatial, kernel, dilation)):
        return _dense_transposed(a, w, padding, groups, out_spatial)
    if all(s == 1 for s in stride) and all(d == 1 for d in dilation) and groups == 1:
        out = conv_direct.transposed(a, w, padding, out_spatial)
        if out is not None:
            return out
    if a.shape[1] == groups and math.prod(kernel) <= _PER_CHANNEL_TAPS_MAX:
        return _per_channel_transposed(a, w, stride, padding, dilation, groups, out_spatial)
    if all(s == 1 or d == 1 for s, d in zip(stride, dilation)):
        plans = [
            _phases(in_spatial[i], out_spatial[i], kernel[i], stride[i], padding[i], dilation[i])
            for i in range(k)
        ]
        cg, og = a.shape[1] // groups, w.shape[1]
        if _gather_pays(a.shape[0], cg, og, in_spatial, kernel, plans):
            return _transposed_by_phases(a, w, stride, dilation, groups, out_spatial, plans)
    return _col2im(a, w, stride, padding, dilation, groups, out_spatial)


def _uncropped(in_spatial, kernel, stride, padding, dilation, out_spatial) -> list:
    """Per dim, the extent a transposed convolution's products are added over before the
    padding crops them (at least the padding and the output)."""
    return [
        max(
            (in_spatial[i] - 1) * stride[i] + dilation[i] * (kernel[i] - 1) + 1,
            padding[i] + out_spatial[i],
        )
        for i in range(len(kernel))
    ]


def _cropped(buf: np.ndarray, padding, out_spatial) -> np.ndarray:
    """The output (N, G*Og, *out) cut from the uncropped (N, G, Og, *full) sums."""
    n, groups, og = buf.shape[:3]
    crop = tuple(slice(p, p + o) for p, o in zip(padding, out_spatial))
    out = np.ascontiguousarray(buf[(Ellipsis,) + crop])
    return out.reshape((n, groups * og) + tuple(out_spatial))


# a transposed convolution with one input channel per group (a depthwise layer's input
# gradient) adds each kernel offset's product into the output when the kernel has at most this
# many offsets
_PER_CHANNEL_TAPS_MAX = 64


def _per_channel_transposed(a, w, stride, padding, dilation, groups, out_spatial) -> np.ndarray:
    """``conv_transposed`` with one input channel per group: per kernel offset, the input
    times that offset's weights added into the output's strided positions. col2im made an
    outer product per group (a GEMM of inner dimension 1) and added columns laid out
    (K, N, G, Og, *in) into the output: 4.6 of a 5.7 ms depthwise 3x3 training step on
    8x32x16x16, against PyTorch's 1.0 ms for the whole step."""
    n = a.shape[0]
    kernel = tuple(w.shape[2:])
    k = len(kernel)
    in_spatial = a.shape[2:]
    og = w.shape[1]
    full = _uncropped(in_spatial, kernel, stride, padding, dilation, out_spatial)
    dtype = np.result_type(a, w)
    buf = np.zeros((n, groups, og) + tuple(full), dtype)
    xg = a.reshape((n, groups, 1) + in_spatial)
    wg = w.reshape((groups, og) + kernel)
    for offset in kernel_offsets(kernel):
        taps = wg[(slice(None), slice(None)) + offset].reshape((groups, og) + (1,) * k)
        buf[(Ellipsis,) + offset_slices(offset, in_spatial, stride, dilation)] += xg * taps
    return _cropped(buf, padding, out_spatial)


def _dense_transposed(a, w, padding, groups: int, out_spatial) -> np.ndarray:
    """``conv_transposed`` of a one-pixel input: (N, Cg) times (Cg, Og*K) per group places the
    whole kernel once; ``padding`` crops it and output padding past it stays zero."""
    n, c = a.shape[:2]
    kernel = tuple(w.shape[2:])
    cg, og = c // groups, w.shape[1]
    dtype = np.result_type(a, w)
    full = empty_array((n, groups, og) + kernel, dtype)
    x = a.reshape(n, groups, cg).transpose(1, 0, 2)
    blas.kernel_matmul(x, w.reshape(groups, cg, -1), full.reshape(n, groups, -1).transpose(1, 0, 2))
    full = full.reshape((n, groups * og) + kernel)
    if all(p == 0 for p in padding) and tuple(out_spatial) == kernel:
        return full
    out = np.zeros((n, groups * og) + tuple(out_spatial), dtype)
    reach = [min(o, size - p) for o, size, p in zip(out_spatial, kernel, padding)]
    if all(r > 0 for r in reach):
        inside = (Ellipsis,) + tuple(slice(0, r) for r in reach)
        out[inside] = full[(Ellipsis,) + tuple(slice(p, p + r) for p, r in zip(padding, reach))]
    return out


def _transposed_by_phases(a, w, stride, dilation, groups, out_spatial, plans) -> np.ndarray:
    """The gathering form: each phase a stride-1 convolution of one padded copy of ``a`` (the
    phases' paddings differ by a few rows, so each reads a window of the widest), written
    straight into its strided positions of the output."""
    n, c = a.shape[:2]
    kernel = tuple(w.shape[2:])
    k = len(kernel)
    cg, og = c // groups, w.shape[1]
    # the forward weight: (G*Og, Cg, *K), input and output channels swapped within each group
    wf = w.reshape((groups, cg, og) + kernel).swapaxes(1, 2).reshape((groups * og, cg) + kernel)
    fdilation = [dilation[i] if stride[i] == 1 else 1 for i in range(k)]
    shape = (n, groups * og) + tuple(out_spatial)
    dtype = np.result_type(a, w)
    combos = [c for c in itertools.product(*plans) if all(count > 0 for _, _, count, _ in c)]
    live = [combo for combo in combos if all(plan[0] for plan in combo)]
    if len(live) < len(combos):
        out = np.zeros(shape, dtype)  # no tap reaches some outputs: they stay zero
    else:
        out = empty_array(shape, dtype)
    if not live:
        return out
    if len(combos) == 1 and all(s == 1 for s in stride):
        # stride 1: one phase, the whole output, a convolution with the flipped kernel
        flipped = wf[(Ellipsis,) + (slice(None, None, -1),) * k]
        pads = [plan[3] for plan in live[0]]
        wide = _wide_applies(a.shape, kernel, stride, pads, fdilation, groups, og)
        if wide is not None:
            return _wide_forward(a, flipped, wide)[0]
    widest = [
        (max(combo[i][3][0] for combo in live), max(combo[i][3][1] for combo in live))
        for i in range(k)
    ]
    unpadded = [(0, 0)] * k
    dilated = groups != 1 or any(d != 1 for d in fdilation)
    first = live[0]
    counts = [plan[2] for plan in first]
    # (the phases copy the weight whatever the layout: "channels" columns cost no more)
    layout = _column_layout(counts, [len(plan[0]) for plan in first], cg, n, 0)
    padded = pad_spatial(a, widest, channels_last=layout == "channels" and cg > 1)
    if layout == "channels":
        # (G, *K, Cg, Og) once, a gather along rows of K elements; each phase's weight operand
        # (G, Kp*Cg, Og) is then a copy of whole Cg x Og blocks
        spatial_axes = tuple(range(3, 3 + k))
        moved = w.reshape((groups, cg, og) + kernel).transpose((0,) + spatial_axes + (1, 2))
        by_tap = np.ascontiguousarray(moved)
    for combo in live:
        taps = tuple(
            slice(plan[0][-1], _before(plan[0][0]), -stride[i]) for i, plan in enumerate(combo)
        )
        counts = tuple(plan[2] for plan in combo)
        window = tuple(
            slice(widest[i][0] - plan[3][0], padded.shape[2 + i] - (widest[i][1] - plan[3][1]))
            for i, plan in enumerate(combo)
        )
        part = padded[(slice(None), slice(None)) + window]
        weight = wf[(Ellipsis,) + taps]
        if not dilated and conv_direct.applies(part, weight, [1] * k, unpadded, [1] * k, 1, counts):
            # the phase through the machine-code loops, then copied to its strided positions
            direct = conv_direct.forward(part, weight, [1] * k, unpadded, counts)[0]
            np.copyto(out[(slice(None), slice(None)) + _phase_positions(combo, stride)], direct)
            continue
        if layout == "channels":
            wmat = by_tap[(slice(None),) + taps].reshape(groups, -1, og)
        else:
            wmat = _weight_matrix(weight, groups, layout)
        if len(combos) == 1 and counts == tuple(out_spatial):
            # stride 1: the one phase is the whole output
            return _convolve_padded(
                part, weight, [1] * k, fdilation, groups, counts, layout, out, wmat
            )
        view = out[(slice(None), slice(None)) + _phase_positions(combo, stride)]
        _convolve_padded(part, weight, [1] * k, fdilation, groups, counts, layout, view, wmat)
    return out


def _phase_positions(combo, stride) -> tuple:
    """The output positions of one phase of a transposed convolution: a strided slice per dim."""
    return tuple(
        slice(plan[1], plan[1] + (plan[2] - 1) * stride[i] + 1, stride[i])
        for i, plan in enumerate(combo)
    )


def _before(index: int):
    """The stop of a backwards slice ending at ``index`` (None past the front)."""
    return index - 1 if index > 0 else None


def _col2im(a, w, stride, padding, dilation, groups, out_spatial) -> np.ndarray:
    """Scatter form: columns (G, Og*K, N*P_in) = W^T @ x in one product per group, then one
    strided add of each kernel offset's columns into the (uncropped) output."""
    n, c = a.shape[:2]
    kernel = tuple(w.shape[2:])
    k = len(kernel)
    in_spatial = a.shape[2:]
    cg, og = c // groups, w.shape[1]
    full = _uncropped(in_spatial, kernel, stride, padding, dilation, out_spatial)
    dtype = np.result_type(a, w)
    buf = empty_array((n, groups, og) + tuple(full), dtype)
    buf.fill(0)
    p_in, p_k = math.prod(in_spatial), math.prod(kernel)
    wmat = w.reshape(groups, cg, og * p_k).transpose(0, 2, 1)
    xs = _copied(a.reshape(n, groups, cg, p_in).transpose(1, 2, 0, 3))
    cols = empty_array((groups, og * p_k, n * p_in), dtype)
    blas.kernel_matmul(wmat, xs.reshape(groups, cg, n * p_in), cols)
    cols = cols.reshape((groups, og) + kernel + (n,) + tuple(in_spatial))
    # (K..., N, G, Og, *in): each offset's slab lines up with the output's axes
    cols = cols.transpose(tuple(range(2, 2 + k)) + (2 + k, 0, 1) + tuple(range(3 + k, 3 + 2 * k)))
    for offset in kernel_offsets(kernel):
        buf[(Ellipsis,) + offset_slices(offset, in_spatial, stride, dilation)] += cols[offset]
    return _cropped(buf, padding, out_spatial)
