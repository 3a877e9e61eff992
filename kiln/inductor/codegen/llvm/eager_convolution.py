"""Machine code for small-channel float32 2-d convolutions in eager mode: direct vector loops.

The numpy kernels (``ops/nn/conv_kernels.py``) turn a convolution into matrix products over
copied columns (im2col, or the "wide" shifted copies). At the channel counts of small CNNs
(3-64 channels, 3x3 kernels) those products are thin (16 or 32 outputs by 48-288 inputs), run
single-threaded at ~55 GFLOP/s, and the copies around them cost nearly as much again: a ResNet
block's 16-channel 3x3 layer over 8x32x32 images took 1.15 ms forward against PyTorch's 0.40.

Here each output row (one image, one output row, every output channel) is a register tile
loop: four output channels by sixteen output columns (eight accumulators of eight floats), over
every input channel and kernel tap, with one broadcast of a weight and two vector loads of the
input per eight multiply-adds. The input is read from one padded copy whose rows are split by
the stride's phases (``xp[n, c, row, phase, j] = padded[n, c, row, j * stride + phase]``), so a
tap of any stride reads a contiguous run; the output rows are computed eight columns at a time
into a width rounded up to eight (the caller's buffer, sliced after where that width differs).
Rows are shared by the compiled kernels' thread pool (``cpu_pool``).

The weight gradient is the same walk transposed: per input channel and block of four output
channels, twelve accumulators (four channels by three taps) summed over every image and row,
one vector load of the output gradient per channel and one of the input per tap, then reduced
across lanes. The input gradient of a stride-1 convolution is itself a stride-1 convolution of
the padded output gradient with the flipped, transposed kernel, so it runs the forward loop.

The tile's shape is a parameter (``Tiles``): eager mode builds the one above for every shape,
sized for AVX2's 16 registers; compiled graphs choose per layer (``lowering/convolution.py``)
and get AVX-512's 16-lane tiles (16 accumulators of 16 floats, ~1.6x the forward rate) as
kernels of their own (``CompiledTiles``).

Small images (4-8 output columns: a DCGAN's layers) leave most lanes of a row's vectors empty;
there the lanes run over output channels instead (``_channels_forward``): a tile of a few
output pixels by a few vectors of channels, each pixel's input value broadcast, over the
padded input as it is (no phase split) and a table of each pixel's first element, so any
stride and dilation is a table, and the weight gradient's convolution (whose "pixels" are the
input channels by kernel taps) runs the same loop. Compiled graphs only (``ChannelTiles``).
"""

from __future__ import annotations

import ctypes
import functools
import threading
from dataclasses import dataclass

import numpy as np
from llvmlite import ir

from ..cpu_pool import KERNEL_TYPE, RowKernel
from . import jit
from .flat_loops import LANES, counted_loop, load, splat, store
from .jit import compile_module, data_address
from .values import F32, I64
from .values import LANES as HOST_LANES

__all__ = [
    "CHANNEL_BLOCK", "COLUMN_BLOCK", "ChannelTiles", "EAGER_TILES", "NativeConvolution", "TAP_BLOCK",
    "Tiles",
    "build", "build_tiles",
]  # fmt: skip

CHANNEL_BLOCK = 4  # output channels a tile holds
COLUMN_BLOCK = 2  # vectors of output columns a forward tile holds (16 floats)
TAP_BLOCK = 3  # kernel taps a weight-gradient tile holds


@dataclass(frozen=True)
class Tiles:
    """A register tile of the loops: ``lanes`` floats a vector; the forward pass's tile holds
    ``channels`` output channels by ``columns`` vectors of output columns; the weight
    gradient's, ``channels`` output channels by ``taps`` kernel taps; ``row_vectors``: the
    output rows' vectors (OWV / lanes) the weight gradient's walk is unrolled for (None: a
    loop over them); ``whole``: every block is whole (the forward pass's row vectors a
    multiple of ``columns``; the weight gradient's output channels of ``channels`` and kernel
    taps of ``taps``), so no loops for the rest are built (a compiled graph's layer, whose
    sizes it knows: less code to compile). Eager mode runs ``EAGER_TILES`` for every shape; compiled graphs pick a
    tile per layer (``lowering/convolution.py``)."""

    lanes: int = LANES
    channels: int = CHANNEL_BLOCK
    columns: int = COLUMN_BLOCK
    taps: int = TAP_BLOCK
    row_vectors: int | None = None
    whole: bool = False

    @property
    def suffix(self) -> str:
        rows = "" if self.row_vectors is None else f"_{self.row_vectors}v"
        rows += "_whole" if self.whole else ""
        return f"l{self.lanes}c{self.channels}x{self.columns}t{self.taps}{rows}"


EAGER_TILES = Tiles()


@dataclass(frozen=True)
class ChannelTiles:
    """The channels-in-lanes loop's register tile: ``pixels`` output pixels by ``vectors``
    vectors of ``lanes`` output channels (the output channels a multiple of
    ``vectors * lanes``)."""

    lanes: int
    vectors: int
    pixels: int

    @property
    def suffix(self) -> str:
        return f"l{self.lanes}v{self.vectors}p{self.pixels}"


_VOID = ir.VoidType()
_I8PP = ir.IntType(8).as_pointer().as_pointer()
_KERNEL_FN = ir.FunctionType(_VOID, [I64, I64, _I8PP])

# forward and weight-gradient parameters, in the order of the int64 array each call passes
_FORWARD_PARAMS = ("C", "O", "OH", "OWV", "T", "ROW", "PLANE", "OUT_PLANE")
_GRAD_PARAMS = ("C", "O", "N", "OH", "OWV", "T", "ROW", "PLANE", "G_PLANE", "BLOCKS")


def _i64(v: int) -> ir.Constant:
    return ir.Constant(I64, v)


def _zero_vector(lanes: int) -> ir.Constant:
    return ir.Constant(ir.VectorType(F32, lanes), [0.0] * lanes)


class _Kernel:
    """A row kernel's function, its builder in the entry block and its unpacked arguments."""

    def __init__(self, module: ir.Module, name: str, params: tuple, buffers: int, lanes: int):
        self.fn = ir.Function(module, _KERNEL_FN, name)
        self.row_start, self.row_end, pointers = self.fn.args
        self.b = b = ir.IRBuilder(self.fn.append_basic_block("entry"))
        self.lanes = lanes
        self.vec = vec = ir.VectorType(F32, lanes)
        intrinsic = f"llvm.fmuladd.v{lanes}f32"
        self.fmuladd = module.globals.get(intrinsic) or ir.Function(
            module, ir.FunctionType(vec, [vec] * 3), intrinsic
        )
        raw = [b.load(b.gep(pointers, [_i64(i)])) for i in range(buffers + 2)]
        p = b.bitcast(raw[0], I64.as_pointer())
        self.p = {name: b.load(b.gep(p, [_i64(i)])) for i, name in enumerate(params)}
        self.taps = b.bitcast(raw[1], I64.as_pointer())
        self.buffers = [b.bitcast(r, F32.as_pointer()) for r in raw[2:]]

    def accumulators(self, count: int) -> list:
        """``count`` vector slots in the entry block (promoted to registers by LLVM)."""
        entry = self.fn.entry_basic_block
        here = self.b.block
        self.b.position_at_start(entry)
        slots = [self.b.alloca(self.vec) for _ in range(count)]
        self.b.position_at_end(here)
        return slots

    def fma(self, a, x, acc):
        return self.b.call(self.fmuladd, [a, x, acc])

    def blocked_loop(self, count, block: int, body, exact: bool = False) -> None:
        """``body(start, block)`` over whole blocks of ``block`` from 0, then ``body(start, 1)``
        over what remains (one loop for blocks of one, or where ``exact`` says ``count`` is
        whole blocks: half the code to compile)."""
        b = self.b
        if exact:
            counted_loop(b, count, lambda i: body(i, block), step=block)
            return
        if block == 1:
            counted_loop(b, count, lambda i: body(i, 1))
            return
        whole = b.mul(b.sdiv(count, _i64(block)), _i64(block))
        counted_loop(b, whole, lambda i: body(i, block), step=block)
        counted_loop(b, count, lambda i: body(i, 1), start=whole)


def _forward(module: ir.Module, tiles: Tiles = EAGER_TILES, name: str | None = None) -> None:
    """``kiln_conv2d_forward(row_start, row_end, pointers)``: pointers = (params, taps, xp, wb,
    out). Row r is image r // OH, output row r % OH: out[n, o, oh, 0:OWV] = sum over c, t of
    wb[o // CB, c, t, o % CB] * xp[n, c, ...][oh * ROW + taps[t] + 0:OWV] (ROW: the elements of
    ``stride`` input rows; ``taps[t]``: the tap's offset from the output row's first input
    element; CB: ``tiles.channels``). The weight is blocked by CB output channels (zero past
    O), so that a tile reads its channels' weights as one contiguous run. Every output element
    sums its terms in the same order whatever the tile: all tiles give the same bits."""
    lanes, cb, cols = tiles.lanes, tiles.channels, tiles.columns
    k = _Kernel(module, name or _forward_name(tiles), _FORWARD_PARAMS, 3, lanes)
    b, p = k.b, k.p
    x, w, out = k.buffers
    acc = k.accumulators(cb * cols)
    w_channel = b.mul(p["T"], _i64(cb))  # one input channel's weights in a block
    w_block = b.mul(p["C"], w_channel)
    blocks = b.sdiv(b.add(p["O"], _i64(cb - 1)), _i64(cb))

    def row(r):
        n, oh = b.sdiv(r, p["OH"]), b.srem(r, p["OH"])
        x_row = b.gep(x, [b.add(b.mul(n, b.mul(p["C"], p["PLANE"])), b.mul(oh, p["ROW"]))])
        out_row = b.gep(out, [b.add(b.mul(n, b.mul(p["O"], p["OUT_PLANE"])), b.mul(oh, p["OWV"]))])

        def block(blk):
            o0 = b.mul(blk, _i64(cb))
            w_blk = b.gep(w, [b.mul(blk, w_block)])

            def columns(col, nv):
                for j in range(cb):
                    for v in range(nv):
                        b.store(_zero_vector(lanes), acc[j * cols + v])

                def channel(c):
                    x_c = b.gep(x_row, [b.add(b.mul(c, p["PLANE"]), col)])
                    w_c = b.gep(w_blk, [b.mul(c, w_channel)])

                    def tap(t):
                        x_t = b.gep(x_c, [b.load(b.gep(k.taps, [t]))])
                        xs = [load(b, x_t, _i64(v * lanes), lanes) for v in range(nv)]
                        w_t = b.gep(w_c, [b.mul(t, _i64(cb))])
                        for j in range(cb):
                            wj = splat(b, b.load(b.gep(w_t, [_i64(j)])), lanes)
                            for v in range(nv):
                                s = acc[j * cols + v]
                                b.store(k.fma(wj, xs[v], b.load(s)), s)

                    counted_loop(b, p["T"], tap)

                counted_loop(b, p["C"], channel)
                for j in range(cb):
                    o = b.add(o0, _i64(j))
                    with b.if_then(b.icmp_signed("<", o, p["O"]), likely=True):
                        o_row = b.gep(out_row, [b.mul(o, p["OUT_PLANE"])])
                        for v in range(nv):
                            s = acc[j * cols + v]
                            store(b, b.load(s), o_row, b.add(col, _i64(v * lanes)), lanes)

            # whole tiles of ``cols`` vectors, then one vector (OWV is a multiple of lanes)
            k.blocked_loop(
                b.sdiv(p["OWV"], _i64(lanes)),
                cols,
                lambda v0, nv: columns(b.mul(v0, _i64(lanes)), nv),
                tiles.whole,
            )

        counted_loop(b, blocks, block)

    counted_loop(b, k.row_end, row, start=k.row_start)
    b.ret_void()


def _forward_name(tiles: Tiles) -> str:
    base = "kiln_conv2d_forward"
    return base if tiles == EAGER_TILES else f"{base}_{tiles.suffix}"


# output rows this short (in vectors) get a weight-gradient walk of their own, with the row's
# vectors unrolled: at 16 columns the loop over two vectors cost as much as its multiply-adds
# (a 32-channel 3x3 layer over 8x16x16 images: 0.78 against 0.46 ms unrolled, same bits; a
# 16-channel one over 8x32x32: 0.52 against 0.42 ms; same-process A/B on a loaded machine)
UNROLLED_ROW_VECTORS = (1, 2, 3, 4)


def _weight_grad(module: ir.Module, tiles: Tiles = EAGER_TILES, name: str | None = None) -> None:
    """``kiln_conv2d_weight_grad(row_start, row_end, pointers)``: pointers = (params, taps, xp,
    g, dw). Row r is input channel r // BLOCKS and output channels from CB * (r % BLOCKS)
    (CB: ``tiles.channels``): dw[c, t, o] = sum over n, oh, columns of g[n, o, oh, :] * xp[n, c, ...][oh *
    ROW + taps[t] + columns] (``g``: the output gradient zero-padded to OWV columns).

    Image by image: one image's rows of the block's output gradient and of the input channel
    stay in the first-level cache while every block of taps sweeps them, each block's
    accumulators loaded from and stored back to a per-row vector per (tap, channel)."""
    lanes, block, tap_block, row_vectors = (
        tiles.lanes,
        tiles.channels,
        tiles.taps,
        tiles.row_vectors,
    )
    k = _Kernel(module, name or _weight_grad_name(tiles), _GRAD_PARAMS, 3, lanes)
    b, p = k.b, k.p
    x, g, dw = k.buffers
    acc = k.accumulators(block * tap_block)
    vectors = b.sdiv(p["OWV"], _i64(lanes))
    # (tap, channel) vectors, allocated once in the entry block (where the builder still is)
    sums = b.alloca(k.vec, size=b.mul(p["T"], _i64(block)))

    def row(r):
        c = b.sdiv(r, p["BLOCKS"])
        first = b.mul(b.srem(r, p["BLOCKS"]), _i64(block))
        x_c = b.gep(x, [b.mul(c, p["PLANE"])])
        dw_c = b.gep(dw, [b.mul(c, b.mul(p["T"], p["O"]))])

        def tile(n, o0, cb, t0, tb):
            def slot(j, i):
                return b.gep(sums, [b.add(b.mul(b.add(t0, _i64(i)), _i64(block)), _i64(j))])

            for j in range(cb):
                for i in range(tb):
                    b.store(b.load(slot(j, i)), acc[j * tb + i])
            offsets = [b.load(b.gep(k.taps, [b.add(t0, _i64(i))])) for i in range(tb)]
            x_n = b.gep(x_c, [b.mul(n, b.mul(p["C"], p["PLANE"]))])
            g_n = b.gep(g, [b.add(b.mul(n, b.mul(p["O"], p["G_PLANE"])), b.mul(o0, p["G_PLANE"]))])

            def image_row(oh):
                x_q = b.gep(x_n, [b.mul(oh, p["ROW"])])
                g_q = b.gep(g_n, [b.mul(oh, p["OWV"])])
                g_rows = [b.gep(g_q, [b.mul(_i64(j), p["G_PLANE"])]) for j in range(cb)]
                x_taps = [b.gep(x_q, [off]) for off in offsets]

                def vector(v):
                    col = b.mul(v, _i64(lanes))
                    xs = [load(b, x_t, col, lanes) for x_t in x_taps]
                    for j in range(cb):
                        gj = load(b, g_rows[j], col, lanes)
                        for i in range(tb):
                            a = acc[j * tb + i]
                            b.store(k.fma(gj, xs[i], b.load(a)), a)

                if row_vectors is None:
                    counted_loop(b, vectors, vector)
                else:
                    for v in range(row_vectors):
                        vector(_i64(v))

            counted_loop(b, p["OH"], image_row)
            for j in range(cb):
                for i in range(tb):
                    b.store(b.load(acc[j * tb + i]), slot(j, i))

        def channels(o0, cb):
            def clear(t):
                for j in range(cb):
                    b.store(
                        _zero_vector(lanes), b.gep(sums, [b.add(b.mul(t, _i64(block)), _i64(j))])
                    )

            counted_loop(b, p["T"], clear)
            counted_loop(
                b,
                p["N"],
                lambda n: k.blocked_loop(
                    p["T"], tap_block, lambda t0, tb: tile(n, o0, cb, t0, tb), tiles.whole
                ),
            )

            def write(t):
                for j in range(cb):
                    vec = b.load(b.gep(sums, [b.add(b.mul(t, _i64(block)), _i64(j))]))
                    spot = b.add(b.mul(t, p["O"]), b.add(o0, _i64(j)))
                    b.store(_lane_sum(b, vec, lanes), b.gep(dw_c, [spot]))

            counted_loop(b, p["T"], write)

        # a whole block of output channels, or the last block's remainder one at a time
        if tiles.whole:
            channels(first, block)
        else:
            left = b.sub(p["O"], first)
            with b.if_else(b.icmp_signed(">=", left, _i64(block))) as (whole, part):
                with whole:
                    channels(first, block)
                with part:
                    counted_loop(b, left, lambda j: channels(b.add(first, j), 1))

    counted_loop(b, k.row_end, row, start=k.row_start)
    b.ret_void()


# channels-in-lanes parameters, in the order of the int64 array each call passes
_CHANNELS_PARAMS = ("C", "O", "T", "PLANE")


def _channels_forward(module: ir.Module, tiles: ChannelTiles, name: str) -> None:
    """``name(row_start, row_end, pointers)``: pointers = (params, taps, sources, targets,
    weights, x, wt, out). Row r is output pixels PB * r .. PB * r + PB - 1 (PB:
    ``tiles.pixels``): out[targets[p] + o] = sum over c, t of x[sources[p] + c * PLANE +
    taps[t]] * wt[weights[r] + (c * T + t) * O + o], ``x`` the padded input (PLANE elements a
    channel), ``sources[p]`` where pixel p's window starts (sample, row and column by the
    strides), ``taps[t]`` a kernel tap's offset from there (by the dilation), ``wt`` weights
    (C, T, O) from ``weights[r]`` (a transposed layer's rows take their phase's), ``out``
    channels-last from ``targets[p]``. Each output element sums its terms in the same order
    whatever the tile."""
    lanes, vectors, pixels = tiles.lanes, tiles.vectors, tiles.pixels
    k = _Kernel(module, name, _CHANNELS_PARAMS, 6, lanes)
    b, p = k.b, k.p
    sources, targets, weights, x, w, out = k.buffers
    sources, targets, weights = (
        b.bitcast(t, I64.as_pointer()) for t in (sources, targets, weights)
    )
    acc = k.accumulators(vectors * pixels)
    w_channel = b.mul(p["T"], p["O"])
    block = vectors * lanes

    def row(r):
        first = b.mul(r, _i64(pixels))
        pixel = [b.add(first, _i64(i)) for i in range(pixels)]
        x_pixels = [b.gep(x, [b.load(b.gep(sources, [i]))]) for i in pixel]
        o_pixels = [b.gep(out, [b.load(b.gep(targets, [i]))]) for i in pixel]
        w_row = b.gep(w, [b.load(b.gep(weights, [r]))])

        def channels(blk):
            o0 = b.mul(blk, _i64(block))
            for slot in acc:
                b.store(_zero_vector(lanes), slot)

            def channel(c):
                x_c = [b.gep(x_p, [b.mul(c, p["PLANE"])]) for x_p in x_pixels]
                w_c = b.gep(w_row, [b.add(b.mul(c, w_channel), o0)])

                def tap(t):
                    offset = b.load(b.gep(k.taps, [t]))
                    w_t = b.gep(w_c, [b.mul(t, p["O"])])
                    ws = [load(b, w_t, _i64(j * lanes), lanes) for j in range(vectors)]
                    for i in range(pixels):
                        xi = splat(b, b.load(b.gep(x_c[i], [offset])), lanes)
                        for j in range(vectors):
                            s = acc[i * vectors + j]
                            b.store(k.fma(xi, ws[j], b.load(s)), s)

                counted_loop(b, p["T"], tap)

            counted_loop(b, p["C"], channel)
            for i in range(pixels):
                for j in range(vectors):
                    at = b.add(o0, _i64(j * lanes))
                    store(b, b.load(acc[i * vectors + j]), o_pixels[i], at, lanes)

        counted_loop(b, b.sdiv(p["O"], _i64(block)), channels)

    counted_loop(b, k.row_end, row, start=k.row_start)
    b.ret_void()


def _lane_sum(b: ir.IRBuilder, vec: ir.Value, lanes: int) -> ir.Value:
    """The sum of a vector's lanes, pairwise (halves added until one lane is left)."""
    width = lanes
    while width > 1:
        width //= 2
        low = b.shuffle_vector(
            vec, vec, ir.Constant(ir.VectorType(ir.IntType(32), width), list(range(width)))
        )
        high = b.shuffle_vector(
            vec,
            vec,
            ir.Constant(ir.VectorType(ir.IntType(32), width), list(range(width, 2 * width))),
        )
        vec = b.fadd(low, high)
    return b.extract_element(vec, ir.Constant(ir.IntType(32), 0))


def _weight_grad_name(tiles: Tiles) -> str:
    base = "kiln_conv2d_weight_grad"
    eager = Tiles(row_vectors=tiles.row_vectors)
    if tiles == eager:
        return base if tiles.row_vectors is None else f"{base}_{tiles.row_vectors}v"
    return f"{base}_{tiles.suffix}"


_EAGER_GRAD_TILES = (EAGER_TILES,) + tuple(Tiles(row_vectors=n) for n in UNROLLED_ROW_VECTORS)


def _module(forward: tuple = (EAGER_TILES,), grad: tuple = _EAGER_GRAD_TILES) -> ir.Module:
    module = ir.Module(name="kiln_eager_convolution")
    for tiles in forward:
        _forward(module, tiles)
    for tiles in grad:
        _weight_grad(module, tiles)
    return module


class NativeConvolution:
    """The direct convolution loops over C-contiguous float32 arrays, run on the compiled
    kernels' thread pool, for the tiles they were built with. Shapes: ``xp`` (N, C, HP,
    stride, WQ), the phase-split padded input; ``wb`` (ceil(O / CB), C, KH, KW, CB), zero past
    O (CB: the forward tile's channels); ``out`` (N, O, OH, OWV) with OWV a multiple of the
    tile's lanes; ``g`` the same as ``out``; ``dw`` (C, KH, KW, O)."""

    def __init__(self, compiled, forward: tuple = (EAGER_TILES,), grad: tuple = _EAGER_GRAD_TILES):
        self._compiled = compiled

        def kernel(name):
            address = compiled.address(name)
            return RowKernel(name, KERNEL_TYPE(address), address, 0, 0, ())

        self._forward = {tiles: kernel(_forward_name(tiles)) for tiles in forward}
        self._weight_grad = {tiles: kernel(_weight_grad_name(tiles)) for tiles in grad}

    def _forward_kernel(self, tiles: Tiles) -> RowKernel:
        return self._forward[tiles]

    def _weight_grad_kernel(self, tiles: Tiles) -> RowKernel:
        return self._weight_grad[tiles]

    @staticmethod
    def taps(kh: int, kw: int, phases: int, wq: int) -> np.ndarray:
        """Each tap's offset into the phase-split input from its output row's first element
        (``phases``: the column stride; ``wq``: a phase's run)."""
        row = phases * wq
        return np.array(
            [i * row + (j % phases) * wq + j // phases for i in range(kh) for j in range(kw)],
            np.int64,
        )

    def _run(self, kernel: RowKernel, params, taps, arrays, rows: int, work: int) -> None:
        pointers = (ctypes.c_void_p * (2 + len(arrays)))(
            data_address(params), data_address(taps), *map(data_address, arrays)
        )
        kernel(pointers, rows=rows, work=work)

    def forward(
        self,
        xp: np.ndarray,
        wb: np.ndarray,
        out: np.ndarray,
        stride: int,
        tiles: Tiles = EAGER_TILES,
    ) -> None:
        n, c, hp, phases, wq = xp.shape
        o = out.shape[1]
        kh, kw = wb.shape[2:4]
        oh, owv = out.shape[2:]
        t = kh * kw
        row = phases * wq
        params = np.array([c, o, oh, owv, t, stride * row, hp * row, oh * owv], np.int64)
        work = n * oh * owv * o * c * t // 8
        taps = self.taps(kh, kw, phases, wq)
        self._run(self._forward_kernel(tiles), params, taps, (xp, wb, out), n * oh, work)

    def weight_grad(
        self, xp: np.ndarray, g: np.ndarray, dw: np.ndarray, stride: int, tiles: Tiles | None = None
    ) -> None:
        """``tiles``: None for eager's (8 lanes, unrolled for rows of 1-4 vectors)."""
        n, c, hp, phases, wq = xp.shape
        _, kh, kw, o = dw.shape
        oh, owv = g.shape[2:]
        t = kh * kw
        row = phases * wq
        if tiles is None:
            tiles = Tiles(
                row_vectors=owv // LANES if owv // LANES in UNROLLED_ROW_VECTORS else None
            )
        blocks = -(-o // tiles.channels)
        params = np.array([c, o, n, oh, owv, t, stride * row, hp * row, oh * owv, blocks], np.int64)
        work = n * oh * owv * o * c * t // 8
        taps = self.taps(kh, kw, phases, wq)
        self._run(self._weight_grad_kernel(tiles), params, taps, (xp, g, dw), c * blocks, work)


def build() -> NativeConvolution:
    """Compile (or load from the object cache) the direct convolution loops."""
    return NativeConvolution(compile_module(_module(), opt_level=3))


@functools.cache
def build_tiles(forward: Tiles | None = None, grad: Tiles | None = None) -> NativeConvolution:
    """The loops of one forward tile and/or one weight-gradient tile as one module, compiled
    here (benchmarks and tests; compiled graphs use ``CompiledTiles``)."""
    fw = () if forward is None else (forward,)
    gr = () if grad is None else (grad,)
    return NativeConvolution(compile_module(_module(fw, gr), opt_level=3), fw, gr)


class CompiledTiles(NativeConvolution):
    """The loops of the tiles compiled graphs chose, each tile a kernel of its own compiled in
    the background as the graphs' kernels are (``jit.compile_in_background``: on the JIT's
    thread or in the helper process, while the compiler goes on), asked for by the lowering
    (``request``) and waited for by the first call."""

    # the host's vector width: eager convolutions take these tiles where it is AVX-512's 16
    host_lanes = HOST_LANES

    def __init__(self):  # noqa: D107 - no module of its own
        self._pending: dict = {}
        self._kernels: dict = {}
        self._modules: list = []  # the machine code, alive while the kernels are
        self._lock = threading.Lock()

    @staticmethod
    def tiles(*fields, **named) -> Tiles:
        """A tile by its fields (``Tiles``'s): the lowering and the extern calls reach this
        module only through ``runtime.machine_code`` (the code generator's modules sit below
        them)."""
        return Tiles(*fields, **named)

    @staticmethod
    def channel_tiles(lanes: int, vectors: int, pixels: int) -> ChannelTiles:
        """A channels-in-lanes tile by its fields (as ``tiles``)."""
        return ChannelTiles(lanes, vectors, pixels)

    def request(self, kind: str, tiles: Tiles | ChannelTiles) -> None:
        """Start compiling the ``kind`` ("forward", "grad" or "channels") loops of ``tiles``."""
        with self._lock:
            if (kind, tiles) in self._pending:
                return
            module = ir.Module(name=f"kiln_conv2d_{kind}_{tiles.suffix}")
            _BUILDERS[kind](module, tiles, name="kernel")
            text = str(module)
            key = jit.kernel_key(text)
            self._pending[(kind, tiles)] = (key, jit.compile_in_background({key: text}))

    def _kernel(self, kind: str, tiles: Tiles) -> RowKernel:
        found = self._kernels.get((kind, tiles))
        if found is not None:
            return found
        self.request(kind, tiles)
        key, future = self._pending[(kind, tiles)]
        compiled, name = future.result()[key]
        address = compiled.address(name)
        kernel = RowKernel(name, KERNEL_TYPE(address), address, 0, 0, ())
        self._modules.append(compiled)
        self._kernels[(kind, tiles)] = kernel
        return kernel

    def _forward_kernel(self, tiles: Tiles) -> RowKernel:
        return self._kernel("forward", tiles)

    def _weight_grad_kernel(self, tiles: Tiles) -> RowKernel:
        return self._kernel("grad", tiles)

    def channels_call(
        self, windows: tuple, c: int, o: int, plane: int, tiles: ChannelTiles
    ) -> _ChannelsCall:
        """The loop over ``windows`` ((sources, targets, weights, taps), the int64 tables
        ``_channels_forward`` reads, sources and targets whole rows of the tile's pixels) for
        an input of ``c`` channels of ``plane`` elements and ``o`` output channels, as a
        callable ``(x, wt, out)``: a layer's call, made once (a pointer array built per call
        from eight arrays took 10 us, as long as the loop over a 4x4 image)."""
        sources, targets, weights, taps = windows
        params = np.array([c, o, len(taps), plane], np.int64)
        fixed = (params, taps, sources, targets, weights)
        work = len(sources) * o * c * len(taps) // 8
        return _ChannelsCall(self._kernel("channels", tiles), fixed, len(weights), work)


class _ChannelsCall:
    """One layer's channels-in-lanes loop: its kernel, its tables and their addresses."""

    __slots__ = ("kernel", "tables", "addresses", "rows", "work")
    _POINTERS = ctypes.c_void_p * 8

    def __init__(self, kernel: RowKernel, tables: tuple, rows: int, work: int):
        self.kernel = kernel
        self.tables = tables  # kept alive while their addresses are used
        self.addresses = tuple(map(data_address, tables))
        self.rows, self.work = rows, work

    def __call__(self, x: np.ndarray, wt: np.ndarray, out: np.ndarray) -> None:
        """``out`` = the loop over the padded input ``x`` and the weights ``wt`` (C-contiguous
        float32, the shapes the call was made for)."""
        pointers = self._POINTERS(
            *self.addresses, data_address(x), data_address(wt), data_address(out)
        )
        self.kernel(pointers, rows=self.rows, work=self.work)


_BUILDERS = {"forward": _forward, "grad": _weight_grad, "channels": _channels_forward}

_COMPILED_TILES: list = []


def compiled_tiles() -> CompiledTiles:
    """The process's ``CompiledTiles``."""
    if not _COMPILED_TILES:
        _COMPILED_TILES.append(CompiledTiles())
    return _COMPILED_TILES[0]
