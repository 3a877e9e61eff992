"""The numpy kernels of ``_rnn_layer`` and ``_rnn_layer_backward`` over a packed sequence.

A packed sequence (``pack_padded_sequence``) holds its time steps one after another, step t
``batch_sizes[t]`` rows long, the rows sorted by length so that the sequences still running at
a step are a prefix of the batch. A step updates that prefix of the state and leaves the other
rows as they are: finished sequences keep their last state (forward direction), sequences not
yet started keep the initial one (reverse direction). Run as a Python loop of kiln ops that is a
dozen dispatches and autograd nodes per step (a bidirectional two-layer GRU over 35 steps: ~3.5x
PyTorch's time); here a layer's loop is one kernel, with the activated gates kept as a
workspace laid out as the packed input is, and one kernel back-propagates through it.

Batch-major, PyTorch's formulas as the step functions in ``recurrent.py`` write them; the padded
(unpacked) kernels there keep their own faster layouts and machine code.
"""

from __future__ import annotations

import numpy as np

from ...runtime import blas

__all__ = ["forward", "backward", "offsets", "sigmoid_in_place", "step_order"]


def offsets(batch_sizes) -> list[int]:
    """Where each step's rows start in the packed arrays."""
    out, total = [], 0
    for n in batch_sizes:
        out.append(total)
        total += n
    return out


def step_order(steps: int, reverse: bool) -> range:
    """The time steps in the order a direction runs them."""
    return range(steps - 1, -1, -1) if reverse else range(steps)


def sigmoid_in_place(a: np.ndarray) -> np.ndarray:
    """PyTorch's formula, 1 / (1 + e^-x), in place (callers ignore exp's overflow to inf, which
    gives 0 as PyTorch does)."""
    np.negative(a, out=a)
    np.exp(a, out=a)
    a += 1
    np.reciprocal(a, out=a)
    return a


def _previous(states: np.ndarray, initial: np.ndarray, batch_sizes, reverse: bool):
    """Per packed row, the state its step started from: (N, H), from the previous step's rows
    of ``states`` (packed, each step's new state) where that row ran there, else ``initial``."""
    starts = offsets(batch_sizes)
    prev = np.empty_like(states)
    before = None
    for t in step_order(len(batch_sizes), reverse):
        n, at = batch_sizes[t], starts[t]
        ran = 0 if before is None else min(n, batch_sizes[before])
        if ran:
            prev[at : at + ran] = states[starts[before] : starts[before] + ran]
        prev[at + ran : at + n] = initial[ran:n]
        before = t
    return prev


def forward(mode: str, gx, h0, c0, w_hh, b_hh, reverse: bool, batch_sizes, workspace_width: int):
    """(output (N, H), h_n (B, H), c_n (B, H) or empty, workspace (N, width * H)) of one layer
    and direction over the packed input projections ``gx`` (N, G*H)."""
    hidden = w_hh.shape[1]
    H = hidden
    dtype = gx.dtype
    rows = gx.shape[0]
    out = np.empty((rows, H), dtype)
    ws = np.empty((rows, workspace_width * H), dtype)
    h = h0.astype(dtype, copy=True)
    c = c0.astype(dtype, copy=True) if mode == "LSTM" else None
    wT = w_hh.T
    starts = offsets(batch_sizes)
    with (
        blas.products(batch_sizes[0] if batch_sizes else 1, H, w_hh.shape[0]),
        np.errstate(over="ignore"),
    ):
        for t in step_order(len(batch_sizes), reverse):
            n, at = batch_sizes[t], starts[t]
            here = slice(at, at + n)
            hh = np.matmul(h[:n], wT)
            if b_hh is not None:
                hh += b_hh
            if mode == "LSTM":
                g = ws[here, : 4 * H]
                np.add(gx[here], hh, out=g)
                sigmoid_in_place(g[:, : 2 * H])
                np.tanh(g[:, 2 * H : 3 * H], out=g[:, 2 * H : 3 * H])
                sigmoid_in_place(g[:, 3 * H :])
                cell, tanh_c = ws[here, 4 * H : 5 * H], ws[here, 5 * H :]
                np.multiply(g[:, H : 2 * H], c[:n], out=cell)
                cell += g[:, :H] * g[:, 2 * H : 3 * H]
                np.tanh(cell, out=tanh_c)
                np.multiply(g[:, 3 * H :], tanh_c, out=out[here])
                c[:n] = cell
            elif mode == "GRU":
                w = ws[here]
                rz = w[:, : 2 * H]
                np.add(gx[here, : 2 * H], hh[:, : 2 * H], out=rz)
                sigmoid_in_place(rz)
                new, hn = w[:, 2 * H : 3 * H], w[:, 3 * H :]
                hn[...] = hh[:, 2 * H :]
                np.multiply(w[:, :H], hn, out=new)
                new += gx[here, 2 * H :]
                np.tanh(new, out=new)
                step = out[here]
                np.subtract(h[:n], new, out=step)  # (h - n) * z + n, as the step writes it
                step *= w[:, H : 2 * H]
                step += new
            else:
                step = out[here]
                np.add(gx[here], hh, out=step)
                if mode == "RNN_TANH":
                    np.tanh(step, out=step)
                else:
                    np.maximum(step, 0, out=step)
            h[:n] = out[here]
    c_n = c if c is not None else np.empty((0,), dtype)
    return out, h, c_n, ws


def backward(mode, go, dh_n, dc_n, h0, c0, w_hh, out, ws, reverse: bool, batch_sizes, gates: int):
    """(d_gates (N, G*H), d_h0, d_c0 or None, d_w_hh, d_b_hh) of ``forward``'s layer, given
    the packed output gradient ``go`` and the final states' gradients."""
    H = w_hh.shape[1]
    dtype = out.dtype
    width = gates * H
    rows = out.shape[0]
    d_gates = np.empty((rows, width), dtype)
    d_hh = d_gates if mode != "GRU" else np.empty((rows, width), dtype)
    dh = dh_n.astype(dtype, copy=True)
    dc = dc_n.astype(dtype, copy=True) if mode == "LSTM" else None
    h_prev = _previous(out, h0, batch_sizes, reverse)
    if mode == "LSTM":
        c_prev = _previous(np.ascontiguousarray(ws[:, 4 * H : 5 * H]), c0, batch_sizes, reverse)
    starts = offsets(batch_sizes)
    with blas.products(batch_sizes[0] if batch_sizes else 1, width, H):
        for t in reversed(list(step_order(len(batch_sizes), reverse))):
            n, at = batch_sizes[t], starts[t]
            here = slice(at, at + n)
            d = dh[:n] + go[here]
            dg = d_gates[here]
            if mode == "LSTM":
                g = ws[here]
                i, f, cg, o = (g[:, k * H : (k + 1) * H] for k in range(4))
                tanh_c = g[:, 5 * H :]
                dcell = dc[:n] + d * o * (1 - tanh_c * tanh_c)
                np.multiply(d * tanh_c, o * (1 - o), out=dg[:, 3 * H :])
                np.multiply(dcell * cg, i * (1 - i), out=dg[:, :H])
                np.multiply(dcell * c_prev[here], f * (1 - f), out=dg[:, H : 2 * H])
                np.multiply(dcell * i, 1 - cg * cg, out=dg[:, 2 * H : 3 * H])
                dc[:n] = dcell * f
                dh[:n] = np.matmul(dg, w_hh)
            elif mode == "GRU":
                g = ws[here]
                r, z, new, hn = (g[:, k * H : (k + 1) * H] for k in range(4))
                d_new = dg[:, 2 * H :]
                np.multiply(d * (1 - z), 1 - new * new, out=d_new)
                np.multiply(d * (h_prev[here] - new), z * (1 - z), out=dg[:, H : 2 * H])
                np.multiply(d_new * hn, r * (1 - r), out=dg[:, :H])
                dhh = d_hh[here]
                dhh[:, : 2 * H] = dg[:, : 2 * H]
                np.multiply(d_new, r, out=dhh[:, 2 * H :])
                dh[:n] = d * z + np.matmul(dhh, w_hh)
            else:
                h_t = out[here]
                if mode == "RNN_TANH":
                    np.multiply(d, 1 - h_t * h_t, out=dg)
                else:  # relu's derivative: zero where the output is <= 0
                    np.copyto(dg, d)
                    dg[h_t <= 0] = 0
                dh[:n] = np.matmul(dg, w_hh)
    d_w = blas.matmul(d_hh.T, h_prev) if rows else np.zeros((width, H), dtype)
    d_b = d_hh.sum(0)
    return d_gates, dh, dc, d_w, d_b
