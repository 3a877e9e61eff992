"""The eager float32 LSTM's step loops in machine code (``llvm/eager_recurrent.py``): outputs,
final states and every gradient against PyTorch and against the numpy loops they replace, over
directions, layer counts, hidden sizes with and without a vector tail, one step and saturated
gates."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.runtime import machine_code
from tests.oracle import needs_torch, torch


def _run(lib, seed, steps, batch, width, hidden, layers, bidirectional, scale=1.0):
    """Outputs, final (h, c) and the gradients of the input, the initial state and every
    parameter, for a seeded LSTM and seeded data."""
    rng = np.random.default_rng(seed)
    lstm = lib.nn.LSTM(width, hidden, layers, bidirectional=bidirectional)
    with lib.no_grad():
        for p in lstm.parameters():
            p.copy_(lib.tensor(rng.uniform(-0.4, 0.4, tuple(p.shape)).astype(np.float32)))
    directions = 2 if bidirectional else 1
    x = lib.tensor((rng.standard_normal((steps, batch, width)) * scale).astype(np.float32))
    h0 = lib.tensor(rng.standard_normal((layers * directions, batch, hidden)).astype(np.float32))
    c0 = lib.tensor(rng.standard_normal((layers * directions, batch, hidden)).astype(np.float32))
    for t in (x, h0, c0):
        t.requires_grad_()
    out, (h, c) = lstm(x, (h0, c0))
    g = [lib.tensor(rng.standard_normal(tuple(t.shape)).astype(np.float32)) for t in (out, h, c)]
    wanted = [x, h0, c0, *lstm.parameters()]
    grads = lib.autograd.grad([out, h, c], wanted, g)
    return [t.detach().numpy() for t in (out, h, c)] + [t.numpy() for t in grads]


_SHAPES = [
    # steps, batch, width, hidden, layers, bidirectional
    (7, 3, 5, 12, 2, True),
    (1, 4, 6, 8, 1, False),
    (9, 2, 3, 17, 3, False),
    (5, 20, 64, 64, 2, False),
]


@needs_torch
@pytest.mark.parametrize("shape", _SHAPES, ids=lambda s: "-".join(map(str, s)))
def test_lstm_matches_torch(shape):
    for got, want in zip(_run(kiln, 3, *shape), _run(torch, 3, *shape)):
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-5)


@pytest.mark.parametrize("shape", _SHAPES, ids=lambda s: "-".join(map(str, s)))
def test_machine_code_loops_match_the_numpy_loops(shape, monkeypatch):
    assert machine_code.get("recurrent") is not None
    native = _run(kiln, 5, *shape)
    monkeypatch.setitem(machine_code._built, "recurrent", False)
    loops = _run(kiln, 5, *shape)
    for got, want in zip(native, loops):
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6)


@needs_torch
def test_saturated_gates_match_torch_without_warnings(recwarn):
    # inputs large enough that e^x overflows to inf in the gates: sigmoid 0, tanh +-1, no NaN
    shape = (4, 3, 5, 9, 1, True)
    got = _run(kiln, 11, *shape, scale=400.0)
    want = _run(torch, 11, *shape, scale=400.0)
    for a, b in zip(got, want):
        assert not np.isnan(a).any()
        np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-4)
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]


def _run_variant(lib, seed, bias, batch_first):
    """Outputs and gradients of a 2-layer LSTM without biases or batch-first, its initial state
    strided views (the loops read their operands batch-major: they take contiguous copies)."""
    rng = np.random.default_rng(seed)
    steps, batch, width, hidden = 6, 5, 7, 16
    lstm = lib.nn.LSTM(width, hidden, 2, bias=bias, batch_first=batch_first)
    with lib.no_grad():
        for p in lstm.parameters():
            p.copy_(lib.tensor(rng.uniform(-0.4, 0.4, tuple(p.shape)).astype(np.float32)))
    shape = (batch, steps, width) if batch_first else (steps, batch, width)
    x = lib.tensor(rng.standard_normal(shape).astype(np.float32), requires_grad=True)
    h0 = lib.tensor(rng.standard_normal((batch, 2, hidden)).astype(np.float32), requires_grad=True)
    c0 = lib.tensor(rng.standard_normal((2, hidden, batch)).astype(np.float32), requires_grad=True)
    out, (h, c) = lstm(x, (h0.transpose(0, 1), c0.permute(0, 2, 1)))
    g = [lib.tensor(rng.standard_normal(tuple(t.shape)).astype(np.float32)) for t in (out, h, c)]
    grads = lib.autograd.grad([out, h, c], [x, h0, c0, *lstm.parameters()], g)
    return [t.detach().numpy() for t in (out, h, c)] + [t.numpy() for t in grads]


@needs_torch
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("batch_first", [False, True])
def test_strided_states_without_bias_match_torch_and_the_numpy_loops(
    bias, batch_first, monkeypatch
):
    native = _run_variant(kiln, 7, bias, batch_first)
    for got, want in zip(native, _run_variant(torch, 7, bias, batch_first)):
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-5)
    monkeypatch.setitem(machine_code._built, "recurrent", False)
    for got, want in zip(native, _run_variant(kiln, 7, bias, batch_first)):
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6)
