"""Small-channel float32 2-d convolutions through the direct machine-code loops.

``inductor/codegen/llvm/eager_convolution.py`` builds the loops (reached through
``runtime.machine_code``, as every eager machine-code set is); this module lays the operands out
for them and says where they apply. The input is copied once, zero padded, each row split by
the column stride's phases (``PhaseInput``); the forward pass keeps that copy for the weight
gradient, as the numpy kernels keep their im2col columns. The output is computed eight columns
at a time, into a width rounded up to eight, and sliced where that differs.

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
LANES = 8  # output columns the loops compute at a time (``eager_convolution``'s)
BLOCK = 4  # output channels a tile of the loops computes (``eager_convolution.CHANNEL_BLOCK``)

# input channels x kernel taps above which the numpy kernels' products are faster (a 64-channel
# 3x3 layer: even at 16x16 images, slower at 56x56); a tile's loop over them below
# ``MIN_TAPS`` kernel taps (a 1x1 convolution: a plain product) or a row narrower than
# ``MIN_WIDTH`` (one vector per tile) is too short to beat a product
MAX_CHANNEL_TAPS = 288
MIN_TAPS = 4
MIN_WIDTH = 16


@dataclass(frozen=True)
class PhaseInput:
    """The forward pass's input as the loops read it: (N, C, rows, stride_w, WQ), where
    ``xp[n, c, r, p, j]`` is padded input pixel (r, j * stride_w + p), zero outside the input."""

    xp: np.ndarray
    stride: tuple
    out_spatial: tuple


def _kernels():
    return machine_code.get("convolution")


def applies(a: np.ndarray, w: np.ndarray, stride, pads, dilation, groups: int, out_spatial) -> bool:
    """Whether the loops compute ``conv_forward(a, w, stride, pads, dilation, groups)`` and pay
    (``pays``), with the machine code built."""
    return (
        a.dtype == np.float32
        and w.dtype == np.float32
        and pays(a.shape, w.shape, pads, dilation, groups, out_spatial)
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


def _width(columns: int) -> int:
    return -(-columns // LANES) * LANES


def phase_input(a: np.ndarray, kernel, stride, pads, out_spatial) -> PhaseInput:
    """``a`` (N, C, H, W) copied into the loops' layout for one convolution's geometry."""
    n, c, h, w = a.shape
    kh, kw = kernel
    sh, sw = stride
    (top, _), (left, _) = pads
    oh, ow = out_spatial
    rows = (oh - 1) * sh + kh
    wq = _width(ow) + (kw - 1) // sw
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
    return PhaseInput(xp, (sh, sw), (oh, ow))


def _blocked(w: np.ndarray) -> np.ndarray:
    """A weight (O, C, KH, KW) as the loops read it: (ceil(O / 4), C, KH, KW, 4), zero past O."""
    o = w.shape[0]
    blocks = -(-o // BLOCK)
    wb = np.zeros((blocks * BLOCK,) + w.shape[1:], _F32) if o % BLOCK else w
    if wb is not w:
        wb[:o] = w
    wb = wb.reshape((blocks, BLOCK) + w.shape[1:])
    return np.ascontiguousarray(wb.transpose(0, 2, 3, 4, 1))


def _convolve(x: PhaseInput, w: np.ndarray) -> np.ndarray:
    """The loops' forward pass over ``x`` with ``w`` (O, C, KH, KW): (N, O, OH, OW)."""
    oh, ow = x.out_spatial
    out = empty_array((x.xp.shape[0], w.shape[0], oh, _width(ow)), _F32)
    _kernels().forward(x.xp, _blocked(w), out, x.stride[0])
    if out.shape[3] == ow:
        return out
    narrow = empty_array(out.shape[:3] + (ow,), _F32)
    np.copyto(narrow, out[..., :ow])
    return narrow


def forward(a: np.ndarray, w: np.ndarray, stride, pads, out_spatial) -> tuple:
    """``conv_forward`` where ``applies``: the output and the ``PhaseInput`` it read."""
    x = phase_input(a, w.shape[2:], stride, pads, out_spatial)
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
    x = phase_input(g, kernel, (1, 1), pads, tuple(out_spatial))
    return _convolve(x, wf)


def weight_grad(x: PhaseInput, g: np.ndarray, kernel) -> np.ndarray | None:
    """The weight gradient (O, C, KH, KW) of the forward pass that read ``x``, for its output
    gradient ``g`` (N, O, OH, OW); None where it is not finite and the output width was
    rounded up: the rounded columns' inputs are multiplied by zero, which turns an infinite
    input there into NaN where PyTorch never reads it (the caller's numpy kernels then run)."""
    n, o, oh, ow = g.shape
    width = _width(ow)
    if width == ow and g.dtype == np.float32 and g.flags.c_contiguous:
        gv = g
    else:
        gv = empty_array((n, o, oh, width), _F32)
        gv[..., ow:] = 0
        gv[..., :ow] = g
    c = x.xp.shape[1]
    dwt = empty_array((c,) + tuple(kernel) + (o,), _F32)
    _kernels().weight_grad(x.xp, gv, dwt, x.stride[0])
    dw = np.ascontiguousarray(dwt.transpose(3, 0, 1, 2))
    if width != ow and not np.isfinite(dw).all():
        return None
    return dw
