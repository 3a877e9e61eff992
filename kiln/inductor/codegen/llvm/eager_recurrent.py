"""Machine code for the time steps of an eager float32 LSTM layer, forward and backward.

A step of the numpy kernels (``ops/nn/recurrent.py``) is a small product and a dozen array
operations over (H, B) blocks (64 x 20 for the word-language-model LSTM), each a numpy call of a
few microseconds: ~75 us a step, 35 steps a layer, two layers, forward and backward, in every
training step, against PyTorch's fused C++ cell. Here one call runs a layer's whole loop: each
step's product through OpenBLAS's ``gemm`` (its address is an argument: numpy's ILP64 OpenBLAS,
``runtime.blas``) and the gate arithmetic in one vector pass, with the numpy kernels' formulas
and layout (hidden-major states, the gates pre-scaled so that every gate is ``1 / (1 + e^x)``;
the cell gate's tanh is then ``2 s - 1``) and the compiled kernels' ``exp`` and ``tanh``.

The whole-sequence passes around the loops (the pre-scaled input projections, the backward's
per-step factors, the weight gradients) stay in numpy: each is already one call over all steps.
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


def _gemm(b, gemm, trans_a, m, n, k, a, lda, x, ldb, c, ldc) -> None:
    """c = op(a) @ x, row-major, op(a) = a or a^T"""
    b.call(
        gemm,
        [ir.Constant(I32, _ROW_MAJOR), ir.Constant(I32, trans_a), ir.Constant(I32, _NO_TRANS),
         m, n, k, ir.Constant(F32, 1.0), a, lda, x, ldb, ir.Constant(F32, 0.0), c, ldc],
    )  # fmt: skip


def _step_index(b, k, steps, reverse):
    """The time index of the k-th step run: k, or steps - 1 - k for a reversed direction."""
    return b.select(b.icmp_signed("!=", reverse, _i64(0)), b.sub(b.sub(steps, _i64(1)), k), k)


def _step_loop(module: ir.Module, name: str, pointers: int):
    """``void name(i64 steps, i64 B, i64 H, i64 reverse, float* x pointers, i8* gemm)``: its
    arguments but the last, a builder in its entry block, ``gemm`` as a function, and the
    sizes every step uses (H B: a state, 4 H B: a step's gates, 6 H B: a workspace step)."""
    args = [I64] * 4 + [_F32P] * pointers + [_I8P]
    fn = ir.Function(module, ir.FunctionType(_VOID, args), name)
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    gemm = b.bitcast(fn.args[-1], _GEMM.as_pointer())
    hb = b.mul(fn.args[2], fn.args[1])
    return fn.args[:-1], b, gemm, (hb, b.mul(hb, _i64(4)), b.mul(hb, _i64(6)))


def _forward(module: ir.Module) -> None:
    """``kiln_lstm_forward(steps, B, H, reverse, w, pre, h0, c0, ws, out, gemm)``: per step t,
    gates = 1 / (1 + e^(w @ h + pre[t])) (the cell gate's block then 2 s - 1), c = f c + i g,
    ws[t] = (gates, c, tanh(c)), out[t] = o tanh(c); w (4H, H) and ``pre`` (T, 4H, B) are
    scaled as ``recurrent._lstm_gate_scale`` says; states are (H, B)."""
    args, b, gemm, (hb, gates_size, step_size) = _step_loop(module, "kiln_lstm_forward", 6)
    steps, batch, hidden, reverse, w, pre, h0, c0, ws, out = args

    def step(k):
        t = _step_index(b, k, steps, reverse)
        before = _step_index(b, b.sub(k, _i64(1)), steps, reverse)
        first = b.icmp_signed("==", k, _i64(0))
        h_prev = b.select(first, h0, b.gep(out, [b.mul(before, hb)]))
        c_prev = b.select(
            first, c0, b.gep(ws, [b.add(b.mul(before, step_size), b.mul(hb, _i64(4)))])
        )
        g = b.gep(ws, [b.mul(t, step_size)])
        _gemm(
            b,
            gemm,
            _NO_TRANS,
            b.mul(hidden, _i64(4)),
            batch,
            hidden,
            w,
            hidden,
            h_prev,
            batch,
            g,
            batch,
        )
        p = b.gep(pre, [b.mul(t, gates_size)])

        def activate(ops, i, lanes):
            x = ops.add(_value(ops, g, i, lanes), _value(ops, p, i, lanes))
            s = ops.truediv(_const(ops, 1.0, lanes), ops.add(ops.exp(x), _const(ops, 1.0, lanes)))
            store(ops.b, s.value, g, i, lanes)

        vector_loop(b, gates_size, activate)
        gate_i, gate_f = g, b.gep(g, [hb])
        gate_g, gate_o = b.gep(g, [b.mul(hb, _i64(2))]), b.gep(g, [b.mul(hb, _i64(3))])
        cell, tanh_c = b.gep(g, [b.mul(hb, _i64(4))]), b.gep(g, [b.mul(hb, _i64(5))])
        h_out = b.gep(out, [b.mul(t, hb)])

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

        vector_loop(b, hb, update)

    counted_loop(b, steps, step)
    b.ret_void()


def _backward(module: ir.Module) -> None:
    """``kiln_lstm_backward(steps, B, H, reverse, w, go, to_dc, factor, ws, d_gates, dh, dc,
    gemm)``: the numpy kernel's step loop, last step first: dh += go[t], dc += dh to_dc[t],
    d_gates[t] = (factor[t, :3] dc, factor[t, 3] dh), dc *= f[t], dh = w^T @ d_gates[t]; ``dh``
    and ``dc`` (H, B) come in as the gradients after the last step and leave as those before
    the first."""
    args, b, gemm, (hb, gates_size, step_size) = _step_loop(module, "kiln_lstm_backward", 8)
    steps, batch, hidden, reverse, w, go, to_dc, factor, ws, d_gates, dh, dc = args

    def step(k):
        t = _step_index(b, b.sub(b.sub(steps, _i64(1)), k), steps, reverse)
        go_t, to_dc_t = b.gep(go, [b.mul(t, hb)]), b.gep(to_dc, [b.mul(t, hb)])
        factors = [
            b.gep(factor, [b.add(b.mul(t, gates_size), b.mul(hb, _i64(j)))]) for j in range(4)
        ]
        blocks = [
            b.gep(d_gates, [b.add(b.mul(t, gates_size), b.mul(hb, _i64(j)))]) for j in range(4)
        ]
        forget = b.gep(ws, [b.add(b.mul(t, step_size), hb)])

        def update(ops, i, lanes):
            h = ops.add(_value(ops, dh, i, lanes), _value(ops, go_t, i, lanes))
            c = ops.add(_value(ops, dc, i, lanes), ops.mul(h, _value(ops, to_dc_t, i, lanes)))
            for j in range(3):
                store(
                    ops.b, ops.mul(_value(ops, factors[j], i, lanes), c).value, blocks[j], i, lanes
                )
            store(ops.b, ops.mul(_value(ops, factors[3], i, lanes), h).value, blocks[3], i, lanes)
            store(ops.b, ops.mul(c, _value(ops, forget, i, lanes)).value, dc, i, lanes)

        vector_loop(b, hb, update)
        # dh = w^T @ d_gates[t]: (H, 4H) @ (4H, B), w (4H, H) read transposed
        _gemm(
            b,
            gemm,
            _TRANS,
            hidden,
            batch,
            b.mul(hidden, _i64(4)),
            w,
            hidden,
            blocks[0],
            batch,
            dh,
            batch,
        )

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
        self._forward = compiled.cfunc("kiln_lstm_forward", None, *[i64] * 4, *[p] * 7)
        self._backward = compiled.cfunc("kiln_lstm_backward", None, *[i64] * 4, *[p] * 9)

    def lstm_forward(self, gemm: int, reverse: bool, w, pre, h0, c0, ws, out) -> None:
        steps, hidden, batch = out.shape
        arrays = (w, pre, h0, c0, ws, out)
        self._forward(steps, batch, hidden, int(reverse), *map(data_address, arrays), gemm)

    def lstm_backward(self, gemm: int, reverse: bool, w, go, to_dc, factor, ws, d_gates, dh, dc):
        steps, hidden, batch = go.shape
        arrays = (w, go, to_dc, factor, ws, d_gates, dh, dc)
        self._backward(steps, batch, hidden, int(reverse), *map(data_address, arrays), gemm)


def build() -> NativeRecurrent:
    """Compile (or load from the object cache) the LSTM step loops."""
    return NativeRecurrent(compile_module(_module(), opt_level=3))
