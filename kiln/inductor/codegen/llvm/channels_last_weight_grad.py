"""Machine code for the weight gradient of stride-1 2-d convolutions with output channels in
the vector lanes: ``dw[c, i, j, o] = sum over n, y, x of g[n, y, x, o] * xp[n, c, y + i,
x + j]`` over the padded input ``xp`` and the output gradient stored channels-last.

The direct loops' weight gradient (``eager_convolution._weight_grad``) runs its lanes along
output columns: eleven vector loads for 24 multiply-adds, sums folded across lanes at the end,
and rows rounded up to whole vectors (an MNIST CNN's 24 columns computed as 32, or 26 a row
over flat planes, zeros times whatever the extra columns read). With the output channels in
the lanes each output position costs one vector load of the gradient per vector of channels
and one broadcast of the input per (input channel, tap) pair: a tile of 6 pairs by 4 vectors
of 16 channels is 24 multiply-adds for 4 loads and 6 broadcasts, every accumulator a slice of
the result itself, and only real output positions are visited (no zero column, so an infinite
input never meets a zero PyTorch does not multiply it by).

A loop row is one block of pairs by one block of output channels; each thread walks the images
outermost over its rows, so an image's gradient (OH * OW * O floats) stays in the second-level
cache while every pair sweeps it. Each image's sums start from zero and are added to the
result, so a sum runs over one image's positions (576 terms in the MNIST CNN), not the batch's.
Compiled graphs only (``lowering/convolution.py``), each tile a kernel compiled in the
background as the graph's kernels are.
"""

from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass

import numpy as np
from llvmlite import ir

from ..cpu_pool import KERNEL_TYPE, RowKernel
from . import jit
from .ir_loops import counted_loop, load, splat, store
from .jit import data_address
from .values import F32, I64

__all__ = ["WeightGradTiles", "request", "weight_grad"]

# parameters, in the order of the int64 array each call passes
_PARAMS = ("N", "OH", "OW", "WP", "O", "X_IMAGE", "G_IMAGE", "BLOCKS")
_KERNEL_FN = ir.FunctionType(ir.VoidType(), [I64, I64, ir.IntType(8).as_pointer().as_pointer()])


@dataclass(frozen=True)
class WeightGradTiles:
    """The register tile: ``pairs`` (input channel, tap) pairs by ``vectors`` vectors of
    ``lanes`` output channels (the output channels a multiple of ``vectors * lanes``)."""

    lanes: int
    vectors: int
    pairs: int

    @property
    def suffix(self) -> str:
        return f"l{self.lanes}v{self.vectors}p{self.pairs}"


def _i64(v: int) -> ir.Constant:
    return ir.Constant(I64, v)


def _kernel(module: ir.Module, tiles: WeightGradTiles, name: str) -> None:
    """``name(row_start, row_end, pointers)``: pointers = (params, offsets, xp, g, dw). Row r
    is pairs ``P * (r // BLOCKS)`` on (P: ``tiles.pairs``) by output channels ``V * L * (r %
    BLOCKS)`` on; pair q reads the input from ``offsets[q]`` (its channel's plane and its
    tap's ``i * WP + j``); ``dw`` (pairs, O) is added to."""
    lanes, vectors, pairs = tiles.lanes, tiles.vectors, tiles.pairs
    fn = ir.Function(module, _KERNEL_FN, name)
    row_start, row_end, pointers = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    vec = ir.VectorType(F32, lanes)
    intrinsic = f"llvm.fmuladd.v{lanes}f32"
    fmuladd = module.globals.get(intrinsic) or ir.Function(
        module, ir.FunctionType(vec, [vec] * 3), intrinsic
    )
    raw = [b.load(b.gep(pointers, [_i64(i)])) for i in range(5)]
    params = b.bitcast(raw[0], I64.as_pointer())
    p = {key: b.load(b.gep(params, [_i64(i)])) for i, key in enumerate(_PARAMS)}
    offsets = b.bitcast(raw[1], I64.as_pointer())
    x, g, dw = (b.bitcast(r, F32.as_pointer()) for r in raw[2:])
    acc = [b.alloca(vec) for _ in range(vectors * pairs)]
    block = vectors * lanes
    g_row = b.mul(p["OW"], p["O"])

    def image(n):
        x_n = b.gep(x, [b.mul(n, p["X_IMAGE"])])
        g_n = b.gep(g, [b.mul(n, p["G_IMAGE"])])

        def row(r):
            q0 = b.mul(b.sdiv(r, p["BLOCKS"]), _i64(pairs))
            o0 = b.mul(b.srem(r, p["BLOCKS"]), _i64(block))
            x_pairs = [
                b.gep(x_n, [b.load(b.gep(offsets, [b.add(q0, _i64(i))]))]) for i in range(pairs)
            ]
            g_o = b.gep(g_n, [o0])
            for slot in acc:
                b.store(ir.Constant(vec, [0.0] * lanes), slot)

            def out_row(y):
                x_y = [b.gep(x_q, [b.mul(y, p["WP"])]) for x_q in x_pairs]
                g_y = b.gep(g_o, [b.mul(y, g_row)])

                def column(col):
                    g_c = b.gep(g_y, [b.mul(col, p["O"])])
                    gs = [load(b, g_c, _i64(j * lanes), lanes) for j in range(vectors)]
                    for i in range(pairs):
                        xi = splat(b, b.load(b.gep(x_y[i], [col])), lanes)
                        for j in range(vectors):
                            s = acc[i * vectors + j]
                            b.store(b.call(fmuladd, [xi, gs[j], b.load(s)]), s)

                counted_loop(b, p["OW"], column)

            counted_loop(b, p["OH"], out_row)
            for i in range(pairs):
                dw_q = b.gep(dw, [b.add(b.mul(b.add(q0, _i64(i)), p["O"]), o0)])
                for j in range(vectors):
                    at = _i64(j * lanes)
                    total = b.fadd(load(b, dw_q, at, lanes), b.load(acc[i * vectors + j]))
                    store(b, total, dw_q, at, lanes)

        counted_loop(b, row_end, row, start=row_start)

    counted_loop(b, p["N"], image)
    b.ret_void()


class _Compiled:
    """The tiles' kernels, each compiled in the background when a lowering asks for it and
    waited for by the first call."""

    def __init__(self):
        self.pending: dict = {}
        self.kernels: dict = {}
        self.modules: list = []  # the machine code, alive while the kernels are
        self.lock = threading.Lock()

    def request(self, tiles: WeightGradTiles) -> None:
        with self.lock:
            if tiles in self.pending:
                return
            module = ir.Module(name=f"kiln_conv2d_weight_grad_channels_last_{tiles.suffix}")
            _kernel(module, tiles, "kernel")
            text = str(module)
            key = jit.kernel_key(text)
            self.pending[tiles] = (key, jit.compile_in_background({key: text}))

    def kernel(self, tiles: WeightGradTiles) -> RowKernel:
        found = self.kernels.get(tiles)
        if found is not None:
            return found
        self.request(tiles)
        key, future = self.pending[tiles]
        compiled, name = future.result()[key]
        address = compiled.address(name)
        kernel = RowKernel(name, KERNEL_TYPE(address), address, 0, 0, ())
        with self.lock:
            self.modules.append(compiled)
            self.kernels[tiles] = kernel
        return kernel


_COMPILED = _Compiled()


def request(tiles: WeightGradTiles) -> None:
    """Start compiling ``tiles``' kernel now, so that a graph's first call finds it built."""
    _COMPILED.request(tiles)


def weight_grad(
    dw: np.ndarray, xp: np.ndarray, g: np.ndarray, offsets: np.ndarray, tiles: WeightGradTiles
) -> None:
    """``dw`` (Q, O), Q a multiple of ``tiles.pairs``: row q the sum over images and output
    positions of ``g`` (N, OH, OW, O) times ``xp`` (N, ..., WP) flattened per image, read from
    ``offsets[q]`` (int64, Q of them) plus ``y * WP + x``. C-contiguous float32 arrays."""
    n, oh, ow, o = g.shape
    wp = xp.shape[-1]
    blocks = o // (tiles.vectors * tiles.lanes)
    image = xp[0].size if n else 0
    params = np.array([n, oh, ow, wp, o, image, oh * ow * o, blocks], np.int64)
    dw[...] = 0
    rows = len(offsets) // tiles.pairs * blocks
    pointers = (ctypes.c_void_p * 5)(*map(data_address, (params, offsets, xp, g, dw)))
    work = n * oh * ow * o * len(offsets) // 8
    _COMPILED.kernel(tiles)(pointers, rows=rows, work=work)
