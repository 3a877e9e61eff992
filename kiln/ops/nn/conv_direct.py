"""Small-channel float32 2-d convolutions through the direct machine-code loops.

``inductor/codegen/llvm/eager_convolution.py`` builds the loops (reached through
``runtime.machine_code``, as every eager machine-code set is); this module lays the operands out
for them and says where they apply. The input is copied once, zero padded, each row split by
the column stride's phases (``PhaseInput``); the forward pass keeps that copy for the weight
gradient, as the numpy kernels keep their im2col columns. The output is computed a vector of
columns at a time, into a width rounded up to whole vectors, and sliced where that differs.

The loops' register tile follows the host, as compiled graphs' do
(``inductor/lowering/convolution.py``'s ``forward_tiles`` and ``grad_tiles``): with AVX-512,
16-lane tiles (kernels of their own, ``CompiledTiles``, compiled in the background on first use
and kept in the kernel cache); elsewhere eager mode's 8-lane module. Every forward tile sums an
output element's terms in the same order, so eager and compiled forward passes agree to the
bit; a weight gradient's sums follow the lanes, which are the same on both paths then.

A stride-1 layer whose output rows are not whole vectors (the MNIST CNN's 24 and 26 columns, 32
computed a row) walks each image's padded plane as one flat row instead (``_plane``): output
element ``y * WP + x`` reads the flat input at the same position plus each tap's ``i * WP + j``,
so only the ``WP - OW`` columns past each row are computed beyond the output. The walk also
serves layers of up to ``PLANE_CHANNEL_TAPS`` channels by taps (the MNIST CNN's input gradient,
64 channels by 9 taps), where the rows form stops at ``MAX_CHANNEL_TAPS``.

Where the loops win (measured on a 2-core EPYC against the numpy kernels' OpenBLAS products,
one and two threads): every layer of small CNNs, whose products are thin (16-64 output
channels) and whose im2col copies cost as much as the products. Past ``MAX_CHANNEL_TAPS``
input channels times kernel taps a tile's input rows no longer stay in the first-level cache
while every block of output channels rereads them, and the products' packed blocking wins.

The weight gradient of a layer the loops ran forward runs in them too, from the kept input.
Alone it can lose to products over im2col columns a forward kept (a strided 16-channel layer:
0.72 against 0.40 ms), but those columns are not there to read, and in a ResNet CNN step the
loops' weight gradients took the step from 12.4-13.1 to 10.3-10.7 ms (PyTorch: 9.2).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ...runtime import machine_code
from ...runtime.storage import empty_array

__all__ = [
    "PhaseInput", "applies", "forward", "pays", "transposed", "weight_grad",
]  # fmt: skip

_F32 = np.dtype(np.float32)
LANES = 8  # output columns eager mode's loops compute at a time (``eager_convolution``'s)
BLOCK = 4  # output channels a tile of eager mode's loops computes (``CHANNEL_BLOCK``)
_WIDE = 16  # lanes of the AVX-512 tiles

# input channels x kernel taps above which the numpy kernels' products are faster (a 64-channel
# 3x3 layer: even at 16x16 images, slower at 56x56); a tile's loop over them below
# ``MIN_TAPS`` kernel taps (a 1x1 convolution: a plain product) or a row narrower than
# ``MIN_WIDTH`` (one vector per tile) is too short to beat a product
MAX_CHANNEL_TAPS = 288
MIN_TAPS = 4
MIN_WIDTH = 16
# input channels x kernel taps up to which a stride-1 layer walks flat planes (compiled graphs'
# ``PLANE_CHANNEL_TAPS_MAX``): the MNIST CNN's input gradient, 64 channels by 9 taps
PLANE_CHANNEL_TAPS = 576


@dataclass(frozen=True)
class PhaseInput:
    """The forward pass's input as the loops read it: (N, C, rows, stride_w, WQ), where
    ``xp[n, c, r, p, j]`` is padded input pixel (r, j * stride_w + p), zero outside the input.
    ``plane``: the flat planes' walk ``(rows, step, chunk)`` that read it (stride 1: WQ is the
    padded width), or None for the rows form; ``lanes``: the loops' vector width."""

    xp: np.ndarray
    stride: tuple
    out_spatial: tuple
    plane: tuple | None = None
    lanes: int = LANES


def _kernels():
    """The loops of this host's tiles: AVX-512's compiled tiles where the host has it, else
    eager mode's module; None without LLVM."""
    tiles = machine_code.get("convolution_tiles")
    if tiles is not None and tiles.host_lanes >= _WIDE:
        return tiles
    return machine_code.get("convolution")


def _lanes(kernels) -> int:
    return _WIDE if getattr(kernels, "host_lanes", LANES) >= _WIDE else LANES


def applies(a: np.ndarray, w: np.ndarray, stride, pads, dilation, groups: int, out_spatial) -> bool:
    """Whether the loops compute ``conv_forward(a, w, stride, pads, dilation, groups)`` and pay
    (``pays``, or a stride-1 layer's flat planes), with the machine code built."""
    return (
        a.dtype == np.float32
        and w.dtype == np.float32
        and (
            pays(a.shape, w.shape, pads, dilation, groups, out_spatial)
            or _plane_applies(a.shape, w.shape, stride, pads, dilation, groups, out_spatial)
        )
        and _kernels() is not None
    )


def pays(x_shape, w_shape, pads, dilation, groups: int, out_spatial) -> bool:
    """Whether the loops pay for a float32 convolution of these sizes: 2-d, one group, no
    dilation, padding (not cropping), the sizes above. Compiled graphs ask too
    (``inductor/lowering/convolution.py``): there the padded copy is a generated loop the
    input's producer fuses into, and the forward, stride-1 input gradient and weight gradient
    all run the loops (a ResNet CNN step 9.3 against 12.2 ms with columns and products)."""
    return (
        len(x_shape) == 4
        and groups == 1
        and tuple(dilation) == (1, 1)
        and all(lo >= 0 and hi >= 0 for lo, hi in pads)
        and MIN_TAPS <= w_shape[2] * w_shape[3]
        and x_shape[1] * w_shape[2] * w_shape[3] <= MAX_CHANNEL_TAPS
        and out_spatial[-1] >= MIN_WIDTH
        and math.prod(x_shape) > 0
        and math.prod(w_shape) > 0
    )


def _plane_applies(x_shape, w_shape, stride, pads, dilation, groups, out_spatial) -> bool:
    """Whether a stride-1 layer of up to ``PLANE_CHANNEL_TAPS`` channels by taps runs the flat
    planes' walk (``_plane``; ``pays`` with that bound, at stride 1)."""
    return (
        len(x_shape) == 4
        and tuple(stride) == (1, 1)
        and groups == 1
        and tuple(dilation) == (1, 1)
        and all(lo >= 0 and hi >= 0 for lo, hi in pads)
        and MIN_TAPS <= w_shape[2] * w_shape[3]
        and x_shape[1] * w_shape[2] * w_shape[3] <= PLANE_CHANNEL_TAPS
        and out_spatial[-1] >= MIN_WIDTH
        and math.prod(x_shape) > 0
        and math.prod(w_shape) > 0
    )


def _width(columns: int, lanes: int = LANES) -> int:
    return -(-columns // lanes) * lanes


def _plane(oh: int, ow: int, padded_width: int, lanes: int, channel_taps: int):
    """The flat planes' walk ``(rows, step, chunk)`` of a stride-1 layer (each image's output as
    ``rows`` loop rows of ``chunk`` elements, a loop row ``step`` input rows after the one
    before): one row of the whole plane rounded up to a vector, or rows of ``step`` padded rows
    where that is whole vectors, whichever computes fewer elements (more rows for the threads
    at a tie). None where the rows form computes no more (and takes the layer)."""
    walks = [(_width(oh * padded_width, lanes), 1, oh, _width(oh * padded_width, lanes))]
    least = lanes // math.gcd(padded_width, lanes)
    for step in range(least, oh, least):
        rows = -(-oh // step)
        walks.append((rows * step * padded_width, rows, step, step * padded_width))
    computed, rows, step, chunk = min(walks, key=lambda walk: (walk[0], -walk[1]))
    if channel_taps <= MAX_CHANNEL_TAPS and computed >= oh * _width(ow, lanes):
        return None
    return rows, step, chunk


def phase_input(a: np.ndarray, kernel, stride, pads, out_spatial, lanes: int = LANES) -> PhaseInput:
    """``a`` (N, C, H, W) copied into the loops' layout for one convolution's geometry."""
    n, c, h, w = a.shape
    kh, kw = kernel
    sh, sw = stride
    (top, _), (left, _) = pads
    oh, ow = out_spatial
    rows = (oh - 1) * sh + kh
    wq = _width(ow, lanes) + (kw - 1) // sw
    xp = empty_array((n, c, rows, sw, wq), _F32)
    xp.fill(0)
    inside = min(h, rows - top)  # input rows the windows reach
    for phase in range(sw):
        first = (phase - left) % sw  # the first input column of this phase
        j = (left + first) // sw
        count = min(len(range(first, w, sw)), wq - j)
        if count > 0 and inside > 0:
            last = first + (count - 1) * sw + 1
            xp[:, :, top : top + inside, phase, j : j + count] = a[:, :, :inside, first:last:sw]
    return PhaseInput(xp, (sh, sw), (oh, ow), None, lanes)


def _plane_input(a: np.ndarray, kernel, pads, out_spatial, plane, lanes: int) -> PhaseInput:
    """``a`` (N, C, H, W) zero padded into whole planes for the flat walk ``plane``, with the
    rows its last vector reaches past the padding."""
    n, c, h, w = a.shape
    kh, kw = kernel
    (top, bottom), (left, right) = pads
    rows, _, chunk = plane
    padded_width = w + left + right
    stored = max(-(-(rows * chunk + (kh - 1) * padded_width + kw - 1) // padded_width), h + top)
    xp = empty_array((n, c, stored, 1, padded_width), _F32)
    xp.fill(0)
    xp[:, :, top : top + h, 0, left : left + w] = a
    return PhaseInput(xp, (1, 1), tuple(out_spatial), plane, lanes)


def _blocked(w: np.ndarray, block: int = BLOCK) -> np.ndarray:
    """A weight (O, C, KH, KW) as the loops read it: (ceil(O / B), C, KH, KW, B), zero past O."""
    o = w.shape[0]
    blocks = -(-o // block)
    wb = np.zeros((blocks * block,) + w.shape[1:], _F32) if o % block else w
    if wb is not w:
        wb[:o] = w
    wb = wb.reshape((blocks, block) + w.shape[1:])
    return np.ascontiguousarray(wb.transpose(0, 2, 3, 4, 1))


def _forward_tiles(kernels, out_channels: int, chunk: int):
    """The forward tile for ``kernels`` (None: eager mode's) and its output channels: with
    AVX-512, 8 channels by 2 vectors where rows are 2+ vectors wide, else 16 by one (compiled
    graphs' ``forward_tiles``)."""
    if _lanes(kernels) < _WIDE:
        return None, BLOCK
    if -(-chunk // _WIDE) >= 2 or out_channels <= 8:
        return kernels.tiles(_WIDE, 8, 2), 8
    return kernels.tiles(_WIDE, 16, 1), 16


def _convolve(x: PhaseInput, w: np.ndarray) -> np.ndarray:
    """The loops' forward pass over ``x`` with ``w`` (O, C, KH, KW): (N, O, OH, OW)."""
    kernels = _kernels()
    n, o = x.xp.shape[0], w.shape[0]
    oh, ow = x.out_spatial
    if x.plane is None:
        rows, chunk, step = oh, _width(ow, x.lanes), x.stride[0]
    else:
        rows, step, chunk = x.plane
    tiles, block = _forward_tiles(kernels, o, chunk)
    out = empty_array((n, o, rows, chunk), _F32)
    if tiles is None:
        kernels.forward(x.xp, _blocked(w, block), out, step)
    else:
        kernels.forward(x.xp, _blocked(w, block), out, step, tiles)
    if x.plane is not None:
        padded_width = x.xp.shape[4]
        flat = out.reshape(n, o, rows * chunk)[:, :, : oh * padded_width]
        view = flat.reshape(n, o, oh, padded_width)[..., :ow]
    elif chunk != ow:
        view = out[..., :ow]
    else:
        return out
    narrow = empty_array((n, o, oh, ow), _F32)
    np.copyto(narrow, view)
    return narrow


def _phase_input_for(a: np.ndarray, w_shape, stride, pads, out_spatial) -> PhaseInput:
    """The loops' input for ``a``: flat planes where they pay, else rows of whole vectors."""
    lanes = _lanes(_kernels())
    kh, kw = w_shape[2:]
    if tuple(stride) == (1, 1):
        padded_width = a.shape[3] + pads[1][0] + pads[1][1]
        plane = _plane(*out_spatial, padded_width, lanes, a.shape[1] * kh * kw)
        if plane is not None:
            return _plane_input(a, (kh, kw), pads, out_spatial, plane, lanes)
    return phase_input(a, (kh, kw), stride, pads, out_spatial, lanes)


def forward(a: np.ndarray, w: np.ndarray, stride, pads, out_spatial) -> tuple:
    """``conv_forward`` where ``applies``: the output and the ``PhaseInput`` it read."""
    x = _phase_input_for(a, w.shape, stride, pads, tuple(out_spatial))
    return _convolve(x, w), x


def transposed(g: np.ndarray, w: np.ndarray, padding, out_spatial) -> np.ndarray | None:
    """A stride-1 transposed convolution of ``g`` (N, O, *S) with ``w`` (O, C, KH, KW) (the
    input gradient of the convolution by ``w``): the forward loops over ``g`` padded by
    K - 1 - padding with the kernel flipped and its channels swapped. None where that padding
    would crop, or where the loops do not apply."""
    if g.ndim != 4:
        return None
    kernel = w.shape[2:]
    pads = [(k - 1 - p, k - 1 - p) for k, p in zip(kernel, padding)]
    wf = w[:, :, ::-1, ::-1].swapaxes(0, 1)
    if not applies(g, wf, (1, 1), pads, (1, 1), 1, out_spatial):
        return None
    return forward(g, wf, (1, 1), pads, tuple(out_spatial))[0]


def weight_grad(x: PhaseInput, g: np.ndarray, kernel) -> np.ndarray | None:
    """The weight gradient (O, C, KH, KW) of the forward pass that read ``x``, for its output
    gradient ``g`` (N, O, OH, OW); None where it is not finite and the loops read columns
    past the output (rows rounded up to whole vectors, or the planes' padding columns): those
    columns' inputs are multiplied by zero, which turns an infinite input there into NaN where
    PyTorch never reads it (the caller's numpy kernels then run)."""
    kernels = _kernels()
    n, o, oh, ow = g.shape
    if x.plane is None:
        rows, width, step = oh, _width(ow, x.lanes), x.stride[0]
        exact = width == ow
        if exact and g.dtype == np.float32 and g.flags.c_contiguous:
            gv = g
        else:
            gv = empty_array((n, o, oh, width), _F32)
            gv[..., ow:] = 0
            gv[..., :ow] = g
    else:
        rows, step, width = x.plane
        padded_width = x.xp.shape[4]
        exact = False
        gv = empty_array((n, o, rows, width), _F32)
        gv.fill(0)
        flat = gv.reshape(n, o, rows * width)[:, :, : oh * padded_width]
        flat.reshape(n, o, oh, padded_width)[..., :ow] = g
    c = x.xp.shape[1]
    dwt = empty_array((c,) + tuple(kernel) + (o,), _F32)
    if _lanes(kernels) < _WIDE:
        kernels.weight_grad(x.xp, gv, dwt, step)
    else:
        kernels.weight_grad(x.xp, gv, dwt, step, kernels.tiles(_WIDE, 8, 2, 3))
    dw = np.ascontiguousarray(dwt.transpose(3, 0, 1, 2))
    if not exact and not np.isfinite(dw).all():
        return None
    return dw
