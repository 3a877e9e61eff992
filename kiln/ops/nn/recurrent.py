"""Recurrent layers as ops: the step of each cell, and ``_rnn_layer``, every time step of one
RNN/LSTM/GRU layer and direction in one op.

A layer written as a Python loop over time steps costs about a dozen op dispatches and autograd
nodes per step (an LSTM language model's training step made ~92k dispatches), and compiling it
unrolls the loop into a graph that grows with the sequence (34 s of compile time for one model).
``_rnn_layer`` runs the loop inside one numpy kernel that keeps the activated gates as a
workspace output, and ``_rnn_layer_backward`` back-propagates through time in one kernel from
that workspace (what cuDNN's reserve space is for). Compiled graphs hold the two as single extern
calls. Double backward (grad mode on during backward) differentiates the per-step kiln-op
formulas instead, so ``create_graph=True`` keeps working.

Gate layouts are PyTorch's: LSTM (input, forget, cell, output), GRU (reset, update, new). The
input projection ``x @ w_ih.T + b_ih`` of every step is computed before the loop, in one product.
"""

from __future__ import annotations

import numpy as np

from ...runtime import blas, machine_code
from ...runtime import dtypes as dt
from ...runtime.device import cpu
from ...runtime.state import per_thread
from ..core.common import Tensor, fake, wrap
from ..core.registry import OPS, defop
from ..creation.api import zeros_like
from . import recurrent_packed
from .recurrent_packed import sigmoid_in_place, step_order

__all__ = ["STEPS", "GATES", "fused_layer_ok"]

State = tuple  # (h,) or (h, c)


def _linear(x, w, b):
    return OPS["linear"](x, w, b)


# --------------------------------------------------------------------------- one time step in kiln ops
# Each step takes the input projection ``x_t @ w_ih.T + b_ih`` of one time step and the state,
# and returns the new state; its first entry is the step's output.
def _rnn_tanh_step(gates_x: Tensor, state: State, w_hh, b_hh, w_hr) -> State:
    return ((gates_x + _linear(state[0], w_hh, b_hh)).tanh(),)


def _rnn_relu_step(gates_x: Tensor, state: State, w_hh, b_hh, w_hr) -> State:
    return ((gates_x + _linear(state[0], w_hh, b_hh)).relu(),)


def _lstm_step(gates_x: Tensor, state: State, w_hh, b_hh, w_hr) -> State:
    h, c = state
    in_gate, forget_gate, cell_gate, out_gate = (gates_x + _linear(h, w_hh, b_hh)).chunk(4, 1)
    c = forget_gate.sigmoid() * c + in_gate.sigmoid() * cell_gate.tanh()
    h = out_gate.sigmoid() * c.tanh()
    if w_hr is not None:
        h = _linear(h, w_hr, None)
    return h, c


def _gru_step(gates_x: Tensor, state: State, w_hh, b_hh, w_hr) -> State:
    h = state[0]
    x_reset, x_update, x_new = gates_x.chunk(3, 1)
    h_reset, h_update, h_new = _linear(h, w_hh, b_hh).chunk(3, 1)
    reset = (x_reset + h_reset).sigmoid()
    update = (x_update + h_update).sigmoid()
    new = (x_new + reset * h_new).tanh()
    return ((h - new) * update + new,)


STEPS = {
    "RNN_TANH": _rnn_tanh_step,
    "RNN_RELU": _rnn_relu_step,
    "LSTM": _lstm_step,
    "GRU": _gru_step,
}
GATES = {"RNN_TANH": 1, "RNN_RELU": 1, "LSTM": 4, "GRU": 3}
# workspace columns per hidden unit: the activated gates, plus the LSTM's cell state and its
# tanh, and the GRU's ``h @ w_hn.T + b_hn`` (the reset gate multiplies it, so backward needs it)
_WORKSPACE = {"RNN_TANH": 0, "RNN_RELU": 0, "LSTM": 6, "GRU": 4}


def _lstm_workspace(ws: np.ndarray, batch: int, hidden: int) -> tuple:
    """The numpy loops' LSTM workspace (T, B, 6H) as (gates (T, 4H, B), c (T, H, B), tanh(c)
    (T, H, B)); the machine-code loops keep each batch row's (gates, c, tanh(c)) together.

    The numpy kernels run an LSTM hidden-major (each step's state is (H, B): ``gates.T = w_hh @
    h.T``), so each gate of a step is one contiguous (H, B) block: numpy's loops over a gate
    slice of a batch-major (B, 4H) step, 20 rows of 64 apart by 256, cost ~2-3 us more than
    over contiguous memory, for each of a step's dozen operations, and the backward's
    whole-sequence passes over a gate run 35 blocks of 1280 elements instead of 700 rows of 64
    (~7 against ~35 us each here). Each step's block holds its activated gates, then c, then tanh(c)."""
    flat = ws.reshape(ws.shape[0], 6 * batch * hidden)
    size = batch * hidden
    gates = flat[:, : 4 * size].reshape(-1, 4 * hidden, batch)
    cell = flat[:, 4 * size : 5 * size].reshape(-1, hidden, batch)
    return gates, cell, flat[:, 5 * size :].reshape(-1, hidden, batch)


def fused_layer_ok(input: Tensor, state: State, w_hh: Tensor, w_hr) -> bool:  # noqa: A002
    """May a layer run as ``_rnn_layer``? CPU float32/float64 tensors of one dtype, no
    projection (``proj_size``), no autocast; half types and other devices keep the step loop."""
    if w_hr is not None or per_thread.state.autocast is not None:
        return False
    d = input._dtype
    if d is not dt.float32 and d is not dt.float64:
        return False
    for t in (input, w_hh, *state):
        if t._dtype is not d or t._device is not cpu:
            return False
    return True


# --------------------------------------------------------------------------- the layer op


# PyTorch's CPU layers stack their steps' outputs: their output's grad_fn prints StackBackward0
@defop(kind="nn", returns=("output", "h_n", "c_n", "workspace"), grad_fn_name="StackBackward0")
def _rnn_layer(
    mode: str,
    gates: Tensor,
    hx: Tensor,
    cx: Tensor | None,
    w_hh: Tensor,
    b_hh: Tensor | None,
    reverse: bool,
    batch_sizes: list[int] | None = None,
): ...


_rnn_layer.doc = (
    "Every time step of one recurrent layer and direction over the input projections ``gates`` "
    "(T, B, G*H): (output (T, B, H), final h, final c (empty unless LSTM), workspace). The "
    "workspace feeds the backward kernel: a uint8 tensor of the float data's bytes (as "
    "PyTorch's cuDNN reserve space is), so it is not differentiable. With ``batch_sizes`` the "
    "input is packed (N, G*H), step t ``batch_sizes[t]`` rows (the leading rows of the batch), "
    "and so are the output (N, H) and the workspace (``recurrent_packed.py``)."
)


def _lstm_gate_scale(hidden: int, dtype) -> np.ndarray:
    """Per gate column: -1 for the sigmoid gates (input, forget, output), -2 for the cell gate.

    numpy's float32 ``tanh`` costs about twice its ``exp`` (~2.9 against ~1.5 ns an element
    here), so every gate is activated through one ``exp``: ``sigmoid(x) = 1 / (1 + e^-x)``
    (PyTorch's formula) and ``tanh(x) = 2 sigmoid(2x) - 1``. With the recurrent weight's rows
    and the input projections scaled by these factors before the loop (exact: powers of two),
    a step's gates take ``exp``, ``+ 1`` and ``1 /`` over all four blocks, then ``* 2 - 1``
    over the cell gate's: 5 passes instead of 10 (a four-pass sigmoid over two slices and a
    ``tanh``)."""
    scale = np.full(4 * hidden, -1, dtype)
    scale[2 * hidden : 3 * hidden] = -2
    return scale


def _native_lstm(dtype: np.dtype):
    """(the LSTM step loops in machine code, the address of OpenBLAS's ILP64 ``sgemm`` they
    call) for float32 layers where both exist (``inductor/codegen/llvm/eager_recurrent.py``);
    None where the numpy loops run."""
    if dtype != np.float32 or not blas.BLAS.load() or not blas.BLAS.gemm:
        return None
    kernels = machine_code.get("recurrent")
    return None if kernels is None else (kernels, blas.BLAS.gemm[0])


@_rnn_layer.register_kernel
def _rnn_layer_kernel(mode, gates, hx, cx, w_hh, b_hh, reverse, batch_sizes=None):
    if batch_sizes is not None:
        out, h_n, c_n, ws = recurrent_packed.forward(
            mode, gates._data, hx._data, None if cx is None else cx._data, w_hh._data,
            None if b_hh is None else b_hh._data, reverse, batch_sizes, _WORKSPACE[mode],
        )  # fmt: skip
        d = gates._dtype
        return wrap(out, d), wrap(h_n, d), wrap(c_n, d), wrap(ws.view(np.uint8), dt.uint8)
    gx = gates._data
    steps, batch, width = gx.shape
    hidden = w_hh._shape[1]
    whT = w_hh._data.T
    bias = None if b_hh is None else b_hh._data
    h = hx._data
    out = np.empty((steps, batch, hidden), gx.dtype)
    ws = np.empty((steps, batch, _WORKSPACE[mode] * hidden), gx.dtype)
    H = hidden
    native = _native_lstm(gx.dtype) if mode == "LSTM" and steps else None
    if native is not None:
        # batch-major machine code reading the projections where they are (eager_recurrent.py)
        kernels, gemm = native
        scale = _lstm_gate_scale(H, gx.dtype)
        bias = np.zeros(4 * H, gx.dtype) if bias is None else np.ascontiguousarray(bias)
        with blas.products(batch, H, 4 * H):  # (its products on this thread alone)
            kernels.lstm_forward(
                gemm, reverse, np.ascontiguousarray(w_hh._data.T) * scale, np.ascontiguousarray(gx), bias,
                scale, np.ascontiguousarray(h), np.ascontiguousarray(cx._data), ws, out,
            )  # fmt: skip
        last = step_order(steps, reverse)[-1]
        h = out[last]
        c_n = ws[last, :, 4 * H : 5 * H].copy()
    elif mode == "LSTM":
        scale = _lstm_gate_scale(H, gx.dtype)[:, None]
        # the step's constant part, ``x_t @ w_ih.T + b_ih + b_hh``, hidden-major (the bias
        # pass transposes) and scaled for the exp
        pre = np.empty((steps, 4 * H, batch), gx.dtype)
        if bias is not None:
            np.add(gx.transpose(0, 2, 1), bias[:, None], out=pre)
        else:
            np.copyto(pre, gx.transpose(0, 2, 1))
        pre *= scale
        w_scaled = w_hh._data * scale
        h = np.ascontiguousarray(h.T)
        c = np.ascontiguousarray(cx._data.T)
        out_t = np.empty((steps, H, batch), gx.dtype)
        product = np.empty((H, batch), gx.dtype)
        gates_ws, cell_ws, tanh_ws = _lstm_workspace(ws, batch, H)
        # e^-x overflows to inf for x below about -88 (float32): the sigmoid is then 0, as it is
        with blas.products(4 * H, H, batch), np.errstate(over="ignore"):
            for t in step_order(steps, reverse):
                g = gates_ws[t]
                np.matmul(w_scaled, h, out=g)
                g += pre[t]
                np.exp(g, out=g)
                g += 1
                np.reciprocal(g, out=g)
                cell = g[2 * H : 3 * H]
                cell *= 2
                cell -= 1
                c_new = cell_ws[t]
                np.multiply(g[H : 2 * H], c, out=c_new)
                np.multiply(g[:H], cell, out=product)
                c_new += product
                tanh_c = tanh_ws[t]
                np.tanh(c_new, out=tanh_c)
                h = out_t[t]
                np.multiply(g[3 * H :], tanh_c, out=h)
                c = c_new
        np.copyto(out, out_t.transpose(0, 2, 1))
        h = h.T
        c_n = c.T.copy()
    elif mode == "GRU":
        hh = np.empty((batch, 3 * H), gx.dtype)
        for t in step_order(steps, reverse):
            blas.matmul(h, whT, out=hh)
            if bias is not None:
                hh += bias
            w = ws[t]
            rz = w[:, : 2 * H]
            np.add(gx[t, :, : 2 * H], hh[:, : 2 * H], out=rz)
            sigmoid_in_place(rz)
            n, hn = w[:, 2 * H : 3 * H], w[:, 3 * H :]
            hn[...] = hh[:, 2 * H :]
            np.multiply(w[:, :H], hn, out=n)
            n += gx[t, :, 2 * H :]
            np.tanh(n, out=n)
            new_h = out[t]
            np.subtract(h, n, out=new_h)  # (h - n) * z + n, as the step writes it
            new_h *= w[:, H : 2 * H]
            new_h += n
            h = new_h
        c_n = np.empty((0,), gx.dtype)
    else:
        for t in step_order(steps, reverse):
            pre = out[t]
            blas.matmul(h, whT, out=pre)
            pre += gx[t]
            if bias is not None:
                pre += bias
            if mode == "RNN_TANH":
                np.tanh(pre, out=pre)
            else:
                np.maximum(pre, 0, out=pre)
            h = pre
        c_n = np.empty((0,), gx.dtype)
    h_n = h.copy() if steps else hx._data.copy()
    d = gates._dtype
    # bytes, not floats: backward would otherwise materialise a zero gradient for it (two
    # 1 MB fills per LSTM language-model step) that the derivative never reads
    return wrap(out, d), wrap(h_n, d), wrap(c_n, d), wrap(ws.view(np.uint8), dt.uint8)


@_rnn_layer.register_meta
def _rnn_layer_meta(mode, gates, hx, cx, w_hh, b_hh, reverse, batch_sizes=None):
    hidden = w_hh._shape[1]
    d = gates._dtype
    if batch_sizes is not None:
        rows = gates._shape[0]
        batch = hx._shape[0]
        return (
            fake((rows, hidden), d, gates),
            fake((batch, hidden), d, gates),
            fake((batch, hidden) if mode == "LSTM" else (0,), d, gates),
            fake((rows, _WORKSPACE[mode] * hidden * d.itemsize), dt.uint8, gates),
        )
    steps, batch, _ = gates._shape
    return (
        fake((steps, batch, hidden), d, gates),
        fake((batch, hidden), d, gates),
        fake((batch, hidden) if mode == "LSTM" else (0,), d, gates),
        fake((steps, batch, _WORKSPACE[mode] * hidden * d.itemsize), dt.uint8, gates),
    )


def _loop(mode, gates, hx, cx, w_hh, b_hh, reverse, batch_sizes=None):
    """The layer as kiln ops, one step at a time (the reference the kernels follow); a packed
    step updates the leading rows of the state only."""
    state = (hx, cx) if mode == "LSTM" else (hx,)
    steps = gates.unbind(0) if batch_sizes is None else gates.split(list(batch_sizes))
    outputs = [None] * len(steps)
    batch = hx.shape[0]
    for t in step_order(len(steps), reverse):
        rows = steps[t].shape[0]
        if rows == batch:
            state = STEPS[mode](steps[t], state, w_hh, b_hh, None)
            outputs[t] = state[0]
            continue
        active = STEPS[mode](steps[t], tuple([s[:rows] for s in state]), w_hh, b_hh, None)
        outputs[t] = active[0]
        state = tuple([OPS["cat"]([a, s[rows:]]) for a, s in zip(active, state)])
    c_n = state[1] if mode == "LSTM" else gates.new_zeros((0,))
    joined = OPS["stack"](outputs) if batch_sizes is None else OPS["cat"](outputs)
    return joined, state[0], c_n


def _rnn_layer_grad(c, g_out, g_h, g_c, _g_workspace=None):
    mode, gates, hx, cx, w_hh, b_hh, reverse, batch_sizes = c.args
    out, _, _, workspace = c.out
    needs = c.needs_input_grad
    if per_thread.state.grad_enabled:
        # double backward: differentiate the kiln-op formulas of the same layer
        from ...autograd.engine import grad as autograd_grad

        wanted = [(i, t) for i, t in enumerate(c.args) if isinstance(t, Tensor) and needs[i]]
        outs = _loop(mode, gates, hx, cx, w_hh, b_hh, reverse, batch_sizes)
        pairs = [(o, g) for o, g in zip(outs, (g_out, g_h, g_c)) if g is not None]
        pairs = [(o, g) for o, g in pairs if o.requires_grad]
        grads = autograd_grad(
            [o for o, _ in pairs],
            [t for _, t in wanted],
            [g for _, g in pairs],
            create_graph=True,
            allow_unused=True,
        )
        result = [None] * 8
        for (i, t), gr in zip(wanted, grads):
            result[i] = gr if gr is not None else zeros_like(t)
        return tuple(result)
    zeros = zeros_like
    g_out = zeros(out) if g_out is None else g_out
    g_h = zeros(hx) if g_h is None else g_h
    if mode == "LSTM" and g_c is None:
        g_c = zeros(cx)
    d_gates, d_hx, d_cx, d_w, d_b = _rnn_layer_backward(
        mode, g_out, g_h, g_c if mode == "LSTM" else None, hx, cx, w_hh, out, workspace, reverse,
        batch_sizes,
    )  # fmt: skip
    return (
        None,
        d_gates if needs[1] else None,
        d_hx if needs[2] else None,
        d_cx if mode == "LSTM" and needs[3] else None,
        d_w if needs[4] else None,
        d_b if b_hh is not None and needs[5] else None,
        None,
        None,
    )


_rnn_layer.register_derivative(_rnn_layer_grad, save_output=True)


@defop(
    kind="nn",
    returns=("grad_gates", "grad_hx", "grad_cx", "grad_w_hh", "grad_b_hh"),
    differentiable=False,
)
def _rnn_layer_backward(
    mode: str,
    grad_output: Tensor,
    grad_h: Tensor,
    grad_c: Tensor | None,
    hx: Tensor,
    cx: Tensor | None,
    w_hh: Tensor,
    output: Tensor,
    workspace: Tensor,
    reverse: bool,
    batch_sizes: list[int] | None = None,
): ...


_rnn_layer_backward.doc = "Back-propagation through time of ``_rnn_layer`` from its workspace."


def _times_previous(a: np.ndarray, states: np.ndarray, first: np.ndarray, reverse: bool) -> None:
    """``a[t] *= state_{t-1}`` for every step: ``states[t]`` is step t's state, ``first`` the
    state before the first step (the last index when ``reverse``)."""
    if not len(a):
        return
    if reverse:
        a[:-1] *= states[1:]
        a[-1] *= first
    else:
        a[1:] *= states[:-1]
        a[0] *= first


@_rnn_layer_backward.register_kernel
def _rnn_layer_backward_kernel(
    mode, grad_output, grad_h, grad_c, hx, cx, w_hh, output, workspace, reverse, batch_sizes=None
):
    if batch_sizes is not None:
        d_gates, dh, d_cx, d_w, d_b = recurrent_packed.backward(
            mode, grad_output._data, grad_h._data, None if grad_c is None else grad_c._data,
            hx._data, None if cx is None else cx._data, w_hh._data, output._data,
            workspace._data.view(output._data.dtype), reverse, batch_sizes, GATES[mode],
        )  # fmt: skip
        return _backward_results(output._dtype, d_gates, dh, d_cx, d_w, d_b)
    go = grad_output._data
    out = output._data
    ws = workspace._data.view(out.dtype)  # the forward's floats, kept as bytes
    w = w_hh._data
    steps, batch, hidden = out.shape
    H = hidden
    dtype = out.dtype
    width = GATES[mode] * H
    d_gates = np.empty((steps, batch, width), dtype)
    # gradients of ``h @ w_hh.T + b_hh``: the input gates' for the LSTM and plain RNNs, but the
    # GRU's new-gate column is scaled by the reset gate there
    d_hh = d_gates if mode != "GRU" else np.empty((steps, batch, width), dtype)
    dh = grad_h._data.astype(dtype, copy=True)
    h0 = hx._data
    order = list(step_order(steps, reverse))
    previous = {t: (order[k - 1] if k else None) for k, t in enumerate(order)}
    native = _native_lstm(dtype) if mode == "LSTM" and steps else None
    if native is not None:
        # batch-major machine code, its factors made per row (eager_recurrent.py)
        kernels, gemm = native
        dc = np.array(grad_c._data, dtype, order="C")  # copies: the loop updates them
        dh = np.ascontiguousarray(dh)
        with blas.products(batch, 4 * H, H):
            kernels.lstm_backward(
                gemm, reverse, np.ascontiguousarray(w), np.ascontiguousarray(go), ws,
                np.ascontiguousarray(cx._data), d_gates, dh, dc,
            )  # fmt: skip
        d_cx = dc
    elif mode == "LSTM":
        # hidden-major, as the forward ran: states (H, B), each step's gates (4H, B)
        dh = np.ascontiguousarray(dh.T)
        dc = np.array(grad_c._data.T, dtype, order="C")  # a copy: the loop updates it
        go_t = np.ascontiguousarray(go.transpose(0, 2, 1))
        gate, cell, tanh_c = _lstm_workspace(ws, batch, H)
        i, f, cg, o = (gate[:, k * H : (k + 1) * H] for k in range(4))
        # what each step's gate gradients multiply, for every step at once (one pass over the
        # whole sequence costs less than a dozen small ones per step): d(input, forget, cell)
        # = dc * (cell, c_{t-1}, input) * activation', d(output) = dh * tanh(c) * output', and
        # dc gains dh * output * tanh'(c)
        factor = 1 - gate
        factor *= gate  # sigmoid' = s (1 - s); the cell gate's rows are redone below
        d_cell = factor[:, 2 * H : 3 * H]
        np.multiply(cg, cg, out=d_cell)
        np.subtract(1, d_cell, out=d_cell)
        d_cell *= i
        factor[:, :H] *= cg
        _times_previous(factor[:, H : 2 * H], cell, cx._data.T, reverse)
        factor[:, 3 * H :] *= tanh_c
        to_dc = tanh_c * tanh_c
        np.subtract(1, to_dc, out=to_dc)
        to_dc *= o
        factor = factor.reshape(steps, 4, H, batch)
        d_gates_t = np.empty((steps, 4 * H, batch), dtype)
        blocks = d_gates_t.reshape(steps, 4, H, batch)
        product = np.empty((H, batch), dtype)
        w_t = w.T
        with blas.products(H, 4 * H, batch):
            for t in reversed(order):
                dh += go_t[t]
                np.multiply(dh, to_dc[t], out=product)
                dc += product
                np.multiply(factor[t, :3], dc, out=blocks[t, :3])
                np.multiply(factor[t, 3], dh, out=blocks[t, 3])
                dc *= f[t]
                np.matmul(w_t, d_gates_t[t], out=dh)
        np.copyto(d_gates, d_gates_t.transpose(0, 2, 1))
        dh = dh.T.copy()
        d_cx = dc.T.copy()
    elif mode == "GRU":
        for t in reversed(order):
            dh += go[t]
            g = ws[t]
            r, z, n, hn = g[:, :H], g[:, H : 2 * H], g[:, 2 * H : 3 * H], g[:, 3 * H :]
            p = previous[t]
            h_prev = h0 if p is None else out[p]
            dg, dhh = d_gates[t], d_hh[t]
            d_n = dg[:, 2 * H :]
            np.subtract(1, z, out=d_n)
            d_n *= dh
            d_n *= 1 - n * n  # through the tanh
            np.subtract(h_prev, n, out=dg[:, H : 2 * H])
            dg[:, H : 2 * H] *= dh
            dg[:, H : 2 * H] *= z * (1 - z)
            np.multiply(d_n, hn, out=dg[:, :H])
            dg[:, :H] *= r * (1 - r)
            dhh[:, : 2 * H] = dg[:, : 2 * H]
            np.multiply(d_n, r, out=dhh[:, 2 * H :])
            dh = dh * z
            dh += blas.matmul(dhh, w)
        d_cx = None
    else:
        for t in reversed(order):
            dh += go[t]
            dg = d_gates[t]
            h_t = out[t]
            if mode == "RNN_TANH":
                np.multiply(h_t, h_t, out=dg)
                np.subtract(1, dg, out=dg)
                dg *= dh
            else:  # relu's derivative: zero where the output is <= 0 (NaN passes the gradient)
                np.copyto(dg, dh)
                dg[h_t <= 0] = 0
            dh = blas.matmul(dg, w)
        d_cx = None
    # d w_hh = sum over steps of d_hh[t].T @ h_{t-1}: the steps after the first take h_{t-1}
    # from the output (one product over all of them), the first from hx
    if steps:
        first = order[0]
        later, earlier = (
            (slice(0, -1), slice(1, None)) if reverse else (slice(1, None), slice(0, -1))
        )
        rows = (steps - 1) * batch
        d_w = blas.matmul(d_hh[first].T, h0)
        if rows:
            d_w += blas.matmul(d_hh[later].reshape(rows, width).T, out[earlier].reshape(rows, H))
    else:
        d_w = np.zeros((width, H), dtype)
    d_b = d_hh.reshape(steps * batch, width).sum(0)
    return _backward_results(output._dtype, d_gates, dh, d_cx, d_w, d_b)


def _backward_results(d, d_gates, dh, d_cx, d_w, d_b) -> tuple:
    """The backward op's five results as tensors of dtype ``d`` (an empty c gradient unless
    LSTM)."""
    empty = np.empty((0,), d_gates.dtype)
    return (
        wrap(d_gates, d),
        wrap(dh, d),
        wrap(d_cx if d_cx is not None else empty, d),
        wrap(d_w, d),
        wrap(d_b, d),
    )


@_rnn_layer_backward.register_meta
def _rnn_layer_backward_meta(
    mode, grad_output, grad_h, grad_c, hx, cx, w_hh, output, workspace, reverse, batch_sizes=None
):
    hidden = w_hh._shape[1]
    batch = hx._shape[0]
    d = output._dtype
    width = GATES[mode] * hidden
    return (
        fake(tuple(output._shape[:-1]) + (width,), d, output),
        fake((batch, hidden), d, output),
        fake((batch, hidden) if mode == "LSTM" else (0,), d, output),
        fake(tuple(w_hh._shape), d, output),
        fake((width,), d, output),
    )
