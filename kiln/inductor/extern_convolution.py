"""Direct convolution loops as extern calls of compiled CPU graphs.

Small-channel 2-d convolutions (the layers of small CNNs: 3-32 channels, 3x3 kernels) lose to
no fused loop in the columns-and-product lowering: their products are thin (16 or 32 outputs by
27-288 inputs, ~95 GFLOP/s against the machine's 180 for square products) and the columns
copies around them cost nearly as much again. The eager runtime's register-tiled loops
(``codegen/llvm/eager_convolution.py``) read a padded, phase-split copy of the input instead,
and a layer's forward and backward ran 1.4-1.8x faster there than compiled (8x16x32x32 images
with a 16-channel 3x3 kernel: 1.24 against 1.94 ms). The lowering (``lowering/convolution.py``)
writes that copy as a generated loop (where the producer, a batch norm's affine and ReLU, fuses
in) and calls these functions for the products; eager and compiled then agree to the bit.

Both take C-contiguous float32 arrays in the loops' layouts (``NativeConvolution``'s docstring),
and the row stride as a plain int argument, so a package describes the call by name. Without the
machine code (LLVM failed to build it) numpy computes the same sums from the same layouts.
"""

from __future__ import annotations

import numpy as np

from ..runtime import machine_code

__all__ = ["conv2d_direct_out", "conv2d_weight_grad_out"]


# eager mode's tile: 8 lanes, 4 output channels by 2 vectors of columns (3 taps a gradient tile)
_EAGER = (8, 4, 2, 3)


def _kernels(tiles=None):
    """The loops for ``tiles`` (eager's when None or equal to them), or None without LLVM."""
    kernels = machine_code.get("convolution")
    if kernels is None or tiles is None:
        return kernels
    return machine_code.get("convolution_tiles")


def _tiles(lanes: int, channels: int, columns: int, taps: int, whole: int):
    if (lanes, channels, columns, taps) == _EAGER and not whole:
        return None  # eager's loops, with their walks for short rows
    compiled = machine_code.get("convolution_tiles")
    if compiled is None:
        return None  # no machine code: numpy computes the layer (``_kernels`` is None too)
    return compiled.tiles(lanes, channels, columns, taps, whole=bool(whole))


def conv2d_direct_out(
    out: np.ndarray,
    xp: np.ndarray,
    wb: np.ndarray,
    stride: int,
    lanes: int = 8,
    channels: int = 4,
    columns: int = 2,
    whole: int = 0,
) -> None:
    """``out`` (N, O, OH, OWV) = the convolution of the phase-split input ``xp`` (N, C, HP, SW,
    WQ) by the channel-blocked weight ``wb`` (ceil(O/CB), C, KH, KW, CB); ``stride``: the
    rows'. ``lanes``, ``channels`` (CB), ``columns``: the register tile the lowering chose
    (OWV a multiple of ``lanes``); every tile gives the same bits. ``whole``: OWV is a multiple
    of ``columns`` vectors (the loops for the rest left out)."""
    tiles = _tiles(int(lanes), int(channels), int(columns), 3, int(whole))
    kernels = _kernels(tiles)
    if kernels is not None:
        if tiles is None:
            kernels.forward(xp, wb, out, int(stride))
        else:
            kernels.forward(xp, wb, out, int(stride), tiles)
        return
    o = out.shape[1]
    blocks, c, kh, kw, block = wb.shape
    weight = wb.transpose(0, 4, 1, 2, 3).reshape(blocks * block, c, kh, kw)[:o]
    out[...] = 0
    for i in range(kh):
        for j in range(kw):
            window = _tap_window(xp, i, j, int(stride), out.shape[2:])
            out += np.einsum("oc,ncij->noij", weight[:, :, i, j], window)


def conv2d_weight_grad_out(
    out: np.ndarray,
    xp: np.ndarray,
    g: np.ndarray,
    stride: int,
    exact: np.ndarray | None = None,
    lanes: int = 8,
    channels: int = 4,
    taps: int = 3,
    whole: int = 0,
) -> None:
    """``out`` (C, KH, KW, O) = the weight gradient of the convolution that read ``xp`` (N, C,
    HP, SW, WQ), for the output gradient ``g`` (N, O, OH, OWV). ``exact``: the gradient
    itself (N, O, OH, OW) where ``g`` is it zero-padded to whole vectors: a result that is not
    finite is computed again over its real columns (an infinite input read only by a padding
    column gave NaN, where PyTorch never reads it). ``lanes``, ``channels``, ``taps``: the
    register tile the lowering chose (OWV a multiple of ``lanes``; the sums' order, hence the
    last bits, depend on ``lanes``). ``whole``: O and the kernel's taps are multiples of
    ``channels`` and ``taps`` (the loops for the rest left out)."""
    tiles = _tiles(int(lanes), int(channels), 2, int(taps), int(whole))
    kernels = _kernels(tiles)
    if kernels is not None:
        if tiles is None:
            kernels.weight_grad(xp, g, out, int(stride))
        else:
            kernels.weight_grad(xp, g, out, int(stride), tiles)
        if exact is None or exact.shape[3] == g.shape[3] or np.isfinite(out).all():
            return
        g = exact
    for i in range(out.shape[1]):
        for j in range(out.shape[2]):
            window = _tap_window(xp, i, j, int(stride), g.shape[2:])
            out[:, i, j, :] = np.einsum("noij,ncij->co", g, window)


def _tap_window(xp: np.ndarray, i: int, j: int, stride: int, out_spatial) -> np.ndarray:
    """The input every output position reads at kernel tap (i, j): (N, C, OH, OWV)."""
    n, c, hp, phases, wq = xp.shape
    oh, owv = out_spatial
    row = phases * wq
    start = i * row + (j % phases) * wq + j // phases
    item = xp.itemsize
    flat = xp.reshape(n, c, hp * row)
    return np.lib.stride_tricks.as_strided(
        flat[:, :, start:],
        (n, c, oh, owv),
        (c * hp * row * item, hp * row * item, stride * row * item, item),
        writeable=False,
    )
