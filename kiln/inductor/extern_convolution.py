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

Small images (output rows of a few columns) run the channels-in-lanes loop instead
(``conv2d_channels_out``): over the padded input as stored, the output channels-last.

All take C-contiguous float32 arrays in the loops' layouts (``NativeConvolution``'s docstring),
and the row stride as a plain int argument, so a package describes the call by name. Without the
machine code (LLVM failed to build it) numpy computes the same sums from the same layouts.
"""

from __future__ import annotations

import numpy as np

from ..runtime import machine_code

__all__ = [
    "conv2d_channels_out", "conv2d_channels_transposed_out", "conv2d_direct_out",
    "conv2d_weight_grad_channels_last_out", "conv2d_weight_grad_out", "request_channels_last",
]  # fmt: skip


# eager mode's tile: 8 lanes, 4 output channels by 2 vectors of columns (3 taps a gradient tile)
_EAGER = (8, 4, 2, 3)


def _kernels(tiles=None):
    """The loops for ``tiles`` (eager's when None), or None without LLVM. Another tile's loops
    are compiled kernels of their own (``_tiles`` gave it only where they exist): eager mode's
    module, every eager tile compiled at once, is not built for them."""
    if tiles is None:
        return machine_code.get("convolution")
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
    exact_stride: int = 0,
) -> None:
    """``out`` (C, KH, KW, O) = the weight gradient of the convolution that read ``xp`` (N, C,
    HP, SW, WQ), for the output gradient ``g`` (N, O, OH, OWV). ``exact``: the gradient
    itself (N, O, OH, OW) where ``g`` is it zero-padded to whole vectors: a result that is not
    finite is computed again over its real columns (an infinite input read only by a padding
    column gave NaN, where PyTorch never reads it). ``lanes``, ``channels``, ``taps``: the
    register tile the lowering chose (OWV a multiple of ``lanes``; the sums' order, hence the
    last bits, depend on ``lanes``). ``whole``: O and the kernel's taps are multiples of
    ``channels`` and ``taps`` (the loops for the rest left out). ``exact_stride``: the rows'
    stride ``exact`` is read with, where it differs from ``g``'s (the flat planes' walk,
    whose rows ``g`` are ``stride`` input rows apart, ``exact``'s one)."""
    tiles = _tiles(int(lanes), int(channels), 2, int(taps), int(whole))
    kernels = _kernels(tiles)
    if kernels is not None:
        if tiles is None:
            kernels.weight_grad(xp, g, out, int(stride))
        else:
            kernels.weight_grad(xp, g, out, int(stride), tiles)
        if exact is None or exact.shape[3] == g.shape[3] or np.isfinite(out).all():
            return
    if exact is not None:
        g, stride = exact, int(exact_stride) or int(stride)
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


# window tables by geometry: a graph calls the same layers every step
_WINDOWS: dict = {}
WINDOWS_KEPT = 256


def _kept(key, make):
    found = _WINDOWS.get(key)
    if found is None:
        if len(_WINDOWS) >= WINDOWS_KEPT:
            _WINDOWS.clear()
        found = _WINDOWS[key] = make()
    return found


def _int64(values) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(values, np.int64).reshape(-1))


def _forward_windows(x_shape, out_spatial, stride, dilation, kernel, channels, block) -> tuple:
    """The loop's tables (``NativeConvolution``'s ``channels_forward``) for a forward
    convolution over the padded ``x`` (N, C, HP, WP): pixels in NCHW's order, the last row
    filled up with the first pixel's window, written to the scratch rows past the output."""
    n, c, hp, wp = x_shape
    oh, ow = out_spatial
    count = n * oh * ow
    rows = -(-count // block)
    sources = np.zeros(rows * block, np.int64)
    sources[:count] = (
        np.arange(n, dtype=np.int64)[:, None, None] * (c * hp * wp)
        + np.arange(oh, dtype=np.int64)[None, :, None] * (stride[0] * wp)
        + np.arange(ow, dtype=np.int64)[None, None, :] * stride[1]
    ).reshape(-1)
    targets = np.arange(rows * block, dtype=np.int64) * channels
    kh, kw = kernel
    taps = [i * dilation[0] * wp + j * dilation[1] for i in range(kh) for j in range(kw)]
    return sources, targets, np.zeros(rows, np.int64), _int64(taps)


def _transposed_windows(x_shape, out_spatial, stride, padding, phase_kernel, channels, block):
    """The tables for a transposed convolution whose kernel is ``stride * phase_kernel``:
    output position y along a dim takes kernel offsets r + s * j (r = (y + p) % s, j <
    phase_kernel) from input (y + p) // s - j, so each phase (r along each dim) is a stride-1
    convolution by its part of the kernel, read backwards. ``x`` is padded by phase_kernel - 1
    before each dim (``lowering/convolution.py``); a row holds one phase's pixels (a phase's
    last row filled up with its first pixel, written to the scratch rows past the output),
    and takes that phase's weights (``wt``: (phases, C, T, O))."""
    n, c, hp, wp = x_shape
    oh, ow = out_spatial
    (sh, sw), (ph, pw), (jh, jw) = stride, padding, phase_kernel
    sources, targets, weights = [], [], []
    for ry in range(sh):
        for rx in range(sw):
            ys = np.array([y for y in range(oh) if (y + ph) % sh == ry], np.int64)
            xs = np.array([x for x in range(ow) if (x + pw) % sw == rx], np.int64)
            if not len(ys) or not len(xs):
                continue
            source = (
                np.arange(n, dtype=np.int64)[:, None, None] * (c * hp * wp)
                + ((ys + ph) // sh + jh - 1)[None, :, None] * wp
                + ((xs + pw) // sw + jw - 1)[None, None, :]
            ).reshape(-1)
            target = (
                (np.arange(n, dtype=np.int64)[:, None, None] * oh + ys[None, :, None]) * ow
                + xs[None, None, :]
            ).reshape(-1) * channels
            rows = -(-len(source) // block)
            spare = rows * block - len(source)
            sources += [source, np.full(spare, source[0])]
            targets += [target, (n * oh * ow + np.arange(spare, dtype=np.int64)) * channels]
            weights.append(np.full(rows, (ry * sw + rx) * c * jh * jw * channels))
    taps = [-(i * wp + j) for i in range(jh) for j in range(jw)]
    return (
        _int64(np.concatenate(sources)),
        _int64(np.concatenate(targets)),
        _int64(np.concatenate(weights)),
        _int64(taps),
    )


def _channels(x, wt, out, tiles: tuple, windows_for, geometry: tuple) -> None:
    """The loop over the tables ``windows_for(x.shape, *geometry, O, tile's pixels)`` makes
    (once per shapes, geometry and tile; ``wt``: ((phases,) C, T, O)); without the machine
    code, numpy gathers the same terms."""
    c, o = wt.shape[-3], wt.shape[-1]

    def make():
        windows = windows_for(x.shape, *geometry, o, tiles[2])
        compiled = machine_code.get("convolution_tiles")
        if compiled is None:
            return windows, None
        plane = x.shape[2] * x.shape[3]
        return windows, compiled.channels_call(windows, c, o, plane, compiled.channel_tiles(*tiles))

    key = (windows_for, x.shape, wt.shape, out.shape, geometry, tiles)
    windows, call = _kept(key, make)
    if call is not None and machine_code.get("convolution_tiles") is not None:
        call(x, wt, out)
        return
    sources, targets, weights, taps = windows
    plane = x.shape[2] * x.shape[3]
    flat, kernels = x.reshape(-1), wt.reshape(-1, c, len(taps), o)
    block = len(sources) // len(weights)
    reach = np.arange(c, dtype=np.int64)[:, None] * plane + taps[None, :]
    result = out.reshape(-1, o)
    for offset in np.unique(weights):
        pixels = np.repeat(weights == offset, block)
        gathered = flat[sources[pixels][:, None, None] + reach[None]]
        rows = targets[pixels] // o
        result[rows] = np.einsum("pct,cto->po", gathered, kernels[offset // (c * len(taps) * o)])


def conv2d_channels_out(
    out: np.ndarray,
    x: np.ndarray,
    wt: np.ndarray,
    stride_h: int,
    stride_w: int,
    dilation_h: int,
    dilation_w: int,
    kernel_h: int,
    kernel_w: int,
    out_h: int,
    out_w: int,
    lanes: int,
    vectors: int,
    pixels: int,
) -> None:
    """``out`` (N * OH * OW + ``pixels`` - 1, O): its first N * OH * OW rows the convolution of
    the padded input ``x`` (N, C, HP, WP) by ``wt`` (C, KH, KW, O), channels-last (the rows
    past them are scratch). ``lanes``, ``vectors``, ``pixels``: the register tile the
    lowering chose (O a multiple of ``lanes * vectors``)."""
    geometry = ((int(out_h), int(out_w)), (int(stride_h), int(stride_w)))
    geometry += ((int(dilation_h), int(dilation_w)), (int(kernel_h), int(kernel_w)))
    weights = wt.reshape(wt.shape[0], -1, wt.shape[-1])
    _channels(x, weights, out, (int(lanes), int(vectors), int(pixels)), _forward_windows, geometry)


def conv2d_channels_transposed_out(
    out: np.ndarray,
    x: np.ndarray,
    wt: np.ndarray,
    stride_h: int,
    stride_w: int,
    padding_h: int,
    padding_w: int,
    out_h: int,
    out_w: int,
    lanes: int,
    vectors: int,
    pixels: int,
) -> None:
    """``out`` as ``conv2d_channels_out``'s for a transposed convolution whose kernel is a
    whole number of strides (``_transposed_windows``): ``x`` (N, C, HP, WP) the input padded
    by the phase kernel less one before each dim (and after, as far as the output reads),
    ``wt`` (SH, SW, C, JH, JW, O) each phase's kernel, ``wt[ry, rx, c, j, i, o]`` = the
    weight's [c, o, ry + SH * j, rx + SW * i]."""
    jh, jw = wt.shape[3:5]
    geometry = ((int(out_h), int(out_w)), (int(stride_h), int(stride_w)))
    geometry += ((int(padding_h), int(padding_w)), (jh, jw))
    phases = wt.reshape(-1, wt.shape[2], jh * jw, wt.shape[-1])
    tiles = (int(lanes), int(vectors), int(pixels))
    _channels(x, phases, out, tiles, _transposed_windows, geometry)


def _channels_last():
    """The channels-last weight-gradient loops (``codegen/llvm/channels_last_weight_grad``),
    or None where the direct loops have no machine code (LLVM failed to build them)."""
    if machine_code.get("convolution_tiles") is None:
        return None
    from .codegen.llvm import channels_last_weight_grad

    return channels_last_weight_grad


def request_channels_last(lanes: int, vectors: int, pairs: int) -> None:
    """Start compiling the channels-last weight gradient's tile, so that a graph's first call
    finds it built."""
    kernels = _channels_last()
    if kernels is not None:
        kernels.request(kernels.WeightGradTiles(lanes, vectors, pairs))


def conv2d_weight_grad_channels_last_out(
    out: np.ndarray,
    xp: np.ndarray,
    g: np.ndarray,
    kernel_h: int,
    kernel_w: int,
    lanes: int,
    vectors: int,
    pairs: int,
) -> None:
    """``out`` (Q, O): its first C * KH * KW rows the weight gradient (C, KH, KW, O) of the
    stride-1 convolution that read the padded input ``xp`` (N, C, HP, 1, WP), for the output
    gradient ``g`` (N, OH, OW, O) channels-last (the rows past them are scratch, Q a multiple
    of ``pairs``). ``lanes``, ``vectors``, ``pairs``: the register tile the lowering chose (O
    a multiple of ``lanes * vectors``)."""
    n, c, hp, _, wp = xp.shape
    kh, kw = int(kernel_h), int(kernel_w)
    count = c * kh * kw
    kernels = _channels_last()
    if kernels is not None:

        def make():
            offsets = np.zeros(out.shape[0], np.int64)
            taps = np.array([i * wp + j for i in range(kh) for j in range(kw)], np.int64)
            offsets[:count] = (np.arange(c, dtype=np.int64)[:, None] * (hp * wp) + taps).ravel()
            return offsets

        offsets = _kept(("channels_last", c, hp, wp, kh, kw, out.shape[0]), make)
        tiles = kernels.WeightGradTiles(int(lanes), int(vectors), int(pairs))
        kernels.weight_grad(out, xp, g, offsets, tiles)
        return
    _, oh, ow, o = g.shape
    out[count:] = 0
    result = out[:count].reshape(c, kh, kw, o)
    for i in range(kh):
        for j in range(kw):
            window = xp[:, :, i : i + oh, 0, j : j + ow]
            result[:, i, j, :] = np.einsum("nyxo,ncyx->co", g, window)
