"""Machine code for the time steps of an eager float32 LSTM layer, forward and backward.

A step of the numpy kernels (``ops/nn/recurrent.py``) is a small product and a dozen array
operations over (H, B) blocks (64 x 20 for the word-language-model LSTM), each a numpy call of a
few microseconds: ~75 us a step, 35 steps a layer, two layers, forward and backward, in every
training step, against PyTorch's fused C++ cell. Here one call runs a layer's whole loop: each
step's product through OpenBLAS's ``gemm`` (its address is an argument: numpy's ILP64 OpenBLAS,
``runtime.blas``) and the gate arithmetic in one vector pass per batch row, with the numpy
kernels' formulas (the gates pre-scaled so that every gate is ``1 / (1 + e^x)``; the cell gate's
tanh is then ``2 s - 1``) and the compiled kernels' ``exp`` and ``tanh``.

Unlike the numpy loops, which run hidden-major ((H, B) blocks: numpy's calls over a gate slice
of a batch row cost more than over contiguous memory), these run batch-major, the layout of the
op's operands: a row's gates are contiguous either way in machine code, and so the input
projections, the output, the output's gradient and the gates' gradient are read and written
where they are, and the backward's per-step factors are made per row from the workspace,
instead of numpy's whole-sequence transposes and factor passes (~0.4 ms a 35x20x64 layer).
"""

from __future__ import annotations

import ctypes

from llvmlite import ir

from ....runtime import dtypes as dt
from .flat_loops import counted_loop, load, splat, store, vector_loop
from .jit import compile_module, data_address
from .ops_handler import LLVMOps
from .values import F32, I32, I64, V

__all__ = ["NativeRecurrent", "build"]

_F = dt.float32
_VOID = ir.VoidType()
_F32P = F32.as_pointer()
_I8P = ir.IntType(8).as_pointer()
_ROW_MAJOR, _NO_TRANS, _TRANS = 101, 111, 112
# the forward's gate arithmetic (an exp and a division per gate, a tanh per state) in 16-lane
# vectors: ~105 against ~150 us a 35x20x64 layer on AVX-512 (the backward's products and sums
# measured no faster at 16); elementwise, so the bits are those of any width
_FORWARD_LANES = 16
# cblas_sgemm with 64-bit sizes: order, transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc
_GEMM = ir.FunctionType(
    _VOID,
    [I32, I32, I32, I64, I64, I64, F32, _F32P, I64, _F32P, I64, F32, _F32P, I64],
)


def _i64(v: int) -> ir.Constant:
    return ir.Constant(I64, v)


def _value(ops: LLVMOps, p: ir.Value, i: ir.Value, lanes: int) -> V:
    return V(load(ops.b, p, i, lanes), _F)


def _const(ops: LLVMOps, value: float, lanes: int) -> V:
    return V(splat(ops.b, ir.Constant(F32, value), lanes), _F)


def _gemm(b, gemm, trans_a, trans_x, m, n, k, a, lda, x, ldb, c, ldc) -> None:
    """c = op(a) @ op(x), row-major, op(a) = a or a^T"""
    b.call(
        gemm,
        [ir.Constant(I32, _ROW_MAJOR), ir.Constant(I32, trans_a), ir.Constant(I32, trans_x),
         m, n, k, ir.Constant(F32, 1.0), a, lda, x, ldb, ir.Constant(F32, 0.0), c, ldc],
    )  # fmt: skip


def _step_index(b, k, steps, reverse):
    """The time index of the k-th step run: k, or steps - 1 - k for a reversed direction."""
    return b.select(b.icmp_signed("!=", reverse, _i64(0)), b.sub(b.sub(steps, _i64(1)), k), k)


def _step_loop(module: ir.Module, name: str, pointers: int):
    """``void name(i64 steps, i64 B, i64 H, i64 reverse, float* x pointers, i8* gemm)``: its
    arguments but the last, a builder in its entry block, ``gemm`` as a function, and the
    sizes every step uses (H: a state row, 4 H: a gate row, 6 H: a workspace row, B H: a
    state, 4 B H: a step's gates, 6 B H: a workspace step)."""
    args = [I64] * 4 + [_F32P] * pointers + [_I8P]
    fn = ir.Function(module, ir.FunctionType(_VOID, args), name)
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    gemm = b.bitcast(fn.args[-1], _GEMM.as_pointer())
    batch, hidden = fn.args[1], fn.args[2]
    rows = (hidden, b.mul(hidden, _i64(4)), b.mul(hidden, _i64(6)))
    steps = tuple(b.mul(batch, r) for r in rows)
    return fn.args[:-1], b, gemm, rows, steps


def _previous(b, k, first_value, later, steps, reverse, step_size):
    """The state before the k-th step run: ``first_value`` for the first, else ``later`` at the
    previous step's index (``step_size`` floats a step)."""
    before = _step_index(b, b.sub(k, _i64(1)), steps, reverse)
    first = b.icmp_signed("==", k, _i64(0))
    return first, b.select(first, first_value, b.gep(later, [b.mul(before, step_size)]))


def _forward(module: ir.Module) -> None:
    """``kiln_lstm_forward(steps, B, H, reverse, w_t, gx, bias, scale, h0, c0, ws, out,
    gemm)``: per step t and batch row, gates = 1 / (1 + e^(h @ w_t + (gx[t] + bias) * scale))
    (the cell gate's block then 2 s - 1), c = f c + i g, ws[t] = (gates, c, tanh(c)) and
    out[t] = o tanh(c), every array batch-major: w_t (H, 4H) is the recurrent weight
    transposed (OpenBLAS's product with a transposed operand took twice as long, 12.8 against
    6.8 us) and scaled as ``recurrent._lstm_gate_scale`` says, gx (T, B, 4H) the unscaled input
    projections, ws (T, B, 6H), out (T, B, H)."""
    args, b, gemm, (row, gate_row, ws_row), (hb, gates_size, step_size) = _step_loop(
        module, "kiln_lstm_forward", 8
    )
    steps, batch, hidden, reverse, w_t, gx, bias, scale, h0, c0, ws, out = args

    def step(k):
        t = _step_index(b, k, steps, reverse)
        first, h_prev = _previous(b, k, h0, out, steps, reverse, hb)
        _, c_step = _previous(b, k, c0, b.gep(ws, [gate_row]), steps, reverse, step_size)
        c_stride = b.select(first, row, ws_row)  # c0 is (B, H); a workspace's c rows 6H apart
        g_step = b.gep(ws, [b.mul(t, step_size)])
        # gates = h @ w_t: (B, H) @ (H, 4H), each row into its workspace row
        _gemm(
            b, gemm, _NO_TRANS, _NO_TRANS, batch, gate_row, hidden,
            h_prev, hidden, w_t, gate_row, g_step, ws_row,
        )  # fmt: skip

        def each_row(r):
            g = b.gep(g_step, [b.mul(r, ws_row)])
            p = b.gep(gx, [b.add(b.mul(t, gates_size), b.mul(r, gate_row))])
            c_prev = b.gep(c_step, [b.mul(r, c_stride)])
            h_out = b.gep(out, [b.add(b.mul(t, hb), b.mul(r, row))])

            def activate(ops, i, lanes):
                projected = ops.mul(
                    ops.add(_value(ops, p, i, lanes), _value(ops, bias, i, lanes)),
                    _value(ops, scale, i, lanes),
                )
                x = ops.add(_value(ops, g, i, lanes), projected)
                one = _const(ops, 1.0, lanes)
                store(ops.b, ops.truediv(one, ops.add(ops.exp(x), one)).value, g, i, lanes)

            vector_loop(b, gate_row, activate, _FORWARD_LANES)
            gate_i, gate_f = g, b.gep(g, [row])
            gate_g, gate_o = b.gep(g, [b.mul(row, _i64(2))]), b.gep(g, [b.mul(row, _i64(3))])
            cell, tanh_c = b.gep(g, [b.mul(row, _i64(4))]), b.gep(g, [b.mul(row, _i64(5))])

            def update(ops, i, lanes):
                cg = ops.sub(
                    ops.mul(_value(ops, gate_g, i, lanes), _const(ops, 2.0, lanes)),
                    _const(ops, 1.0, lanes),
                )
                store(ops.b, cg.value, gate_g, i, lanes)
                c = ops.add(
                    ops.mul(_value(ops, gate_f, i, lanes), _value(ops, c_prev, i, lanes)),
                    ops.mul(_value(ops, gate_i, i, lanes), cg),
                )
                store(ops.b, c.value, cell, i, lanes)
                tc = ops.tanh(c)
                store(ops.b, tc.value, tanh_c, i, lanes)
                store(ops.b, ops.mul(_value(ops, gate_o, i, lanes), tc).value, h_out, i, lanes)

            vector_loop(b, row, update, _FORWARD_LANES)

        counted_loop(b, batch, each_row)

    counted_loop(b, steps, step)
    b.ret_void()


def _backward(module: ir.Module) -> None:
    """``kiln_lstm_backward(steps, B, H, reverse, w, go, ws, c0, d_gates, dh, dc, gemm)``: the
    numpy kernel's step loop, last step first, batch-major, with its whole-sequence factors
    made per row from the workspace: dh += go[t], dc += dh (1 - tanh(c)^2) o, d_gates[t] =
    (dc (1 - i) i g, dc (1 - f) f c_{t-1}, dc (1 - g^2) i, dh (1 - o) o tanh(c)), dc *= f,
    dh = d_gates[t] @ w; ``dh`` and ``dc`` (B, H) come in as the gradients after the last step
    and leave as those before the first; w (4H, H), go (T, B, H), d_gates (T, B, 4H)."""
    args, b, gemm, (row, gate_row, ws_row), (hb, gates_size, step_size) = _step_loop(
        module, "kiln_lstm_backward", 7
    )
    steps, batch, hidden, reverse, w, go, ws, c0, d_gates, dh, dc = args

    def step(k):
        n = b.sub(b.sub(steps, _i64(1)), k)  # the n-th step run, run backwards
        t = _step_index(b, n, steps, reverse)
        first, c_step = _previous(b, n, c0, b.gep(ws, [gate_row]), steps, reverse, step_size)
        c_stride = b.select(first, row, ws_row)
        d_step = b.gep(d_gates, [b.mul(t, gates_size)])

        def each_row(r):
            g = b.gep(ws, [b.add(b.mul(t, step_size), b.mul(r, ws_row))])
            gate = [b.gep(g, [b.mul(row, _i64(j))]) for j in range(6)]  # i f g o c tanh(c)
            blocks = [b.gep(d_step, [b.add(b.mul(r, gate_row), b.mul(row, _i64(j)))])
                      for j in range(4)]  # fmt: skip
            go_row = b.gep(go, [b.add(b.mul(t, hb), b.mul(r, row))])
            c_prev = b.gep(c_step, [b.mul(r, c_stride)])
            dh_row, dc_row = b.gep(dh, [b.mul(r, row)]), b.gep(dc, [b.mul(r, row)])

            def update(ops, i, lanes):
                one = _const(ops, 1.0, lanes)
                i_, f_, g_, o_, tc = (_value(ops, gate[j], i, lanes) for j in (0, 1, 2, 3, 5))

                def sigmoid_slope(s):
                    return ops.mul(ops.sub(one, s), s)

                h = ops.add(_value(ops, dh_row, i, lanes), _value(ops, go_row, i, lanes))
                to_dc = ops.mul(ops.sub(one, ops.mul(tc, tc)), o_)
                c = ops.add(_value(ops, dc_row, i, lanes), ops.mul(h, to_dc))
                factors = (
                    ops.mul(sigmoid_slope(i_), g_),
                    ops.mul(sigmoid_slope(f_), _value(ops, c_prev, i, lanes)),
                    ops.mul(ops.sub(one, ops.mul(g_, g_)), i_),
                )
                for j, factor in enumerate(factors):
                    store(ops.b, ops.mul(factor, c).value, blocks[j], i, lanes)
                d_o = ops.mul(ops.mul(sigmoid_slope(o_), tc), h)
                store(ops.b, d_o.value, blocks[3], i, lanes)
                store(ops.b, ops.mul(c, f_).value, dc_row, i, lanes)

            vector_loop(b, row, update)

        counted_loop(b, batch, each_row)
        # dh = d_gates[t] @ w: (B, 4H) @ (4H, H)
        _gemm(
            b, gemm, _NO_TRANS, _NO_TRANS, batch, hidden, gate_row,
            d_step, gate_row, w, hidden, dh, hidden,
        )  # fmt: skip

    counted_loop(b, steps, step)
    b.ret_void()


def _module() -> ir.Module:
    module = ir.Module(name="kiln_eager_recurrent")
    _forward(module)
    _backward(module)
    return module


class NativeRecurrent:
    """The LSTM step loops over C-contiguous float32 arrays (shapes in the functions' notes),
    given the address of an ILP64 ``cblas_sgemm``."""

    def __init__(self, compiled):
        p = ctypes.c_void_p
        i64 = ctypes.c_int64
        self._forward = compiled.cfunc("kiln_lstm_forward", None, *[i64] * 4, *[p] * 9)
        self._backward = compiled.cfunc("kiln_lstm_backward", None, *[i64] * 4, *[p] * 8)

    def lstm_forward(self, gemm: int, reverse: bool, w_t, gx, bias, scale, h0, c0, ws, out):
        steps, batch, hidden = out.shape
        arrays = (w_t, gx, bias, scale, h0, c0, ws, out)
        self._forward(steps, batch, hidden, int(reverse), *map(data_address, arrays), gemm)

    def lstm_backward(self, gemm: int, reverse: bool, w, go, ws, c0, d_gates, dh, dc) -> None:
        steps, batch, hidden = go.shape
        arrays = (w, go, ws, c0, d_gates, dh, dc)
        self._backward(steps, batch, hidden, int(reverse), *map(data_address, arrays), gemm)


def build() -> NativeRecurrent:
    """Compile (or load from the object cache) the LSTM step loops."""
    return NativeRecurrent(compile_module(_module(), opt_level=3))
