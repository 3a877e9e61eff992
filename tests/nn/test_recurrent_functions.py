"""kiln.lstm / gru / rnn_tanh / rnn_relu and the *_cell functions against PyTorch's, with the
weights as PyTorch's flat list: padded and packed inputs, layers, directions, projections,
values and gradients. nn.LSTM & co. run the same code (tests/nn/test_rnn.py)."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from tests.oracle import assert_close, needs_torch, to_torch, torch

pytestmark = needs_torch

_MODULES = {
    "lstm": lambda lib, **kw: lib.nn.LSTM(**kw),
    "gru": lambda lib, **kw: lib.nn.GRU(**kw),
    "rnn_tanh": lambda lib, **kw: lib.nn.RNN(nonlinearity="tanh", **kw),
    "rnn_relu": lambda lib, **kw: lib.nn.RNN(nonlinearity="relu", **kw),
}


def _weights(mode, **kwargs):
    """A torch module's flat weights, and the same values as kiln tensors needing grad."""
    torch.manual_seed(0)
    module = _MODULES[mode](torch, input_size=3, hidden_size=4, **kwargs)
    flat = [p.detach().double().requires_grad_(True) for p in module._flat_weights]
    mirror = [kiln.tensor(p.detach().numpy(), requires_grad=True) for p in flat]
    return flat, mirror


def _state(lib, mode, layers, batch, hidden):
    rng = np.random.default_rng(1)
    h = lib.tensor(rng.standard_normal((layers, batch, hidden)), requires_grad=True)
    if mode != "lstm":
        return h
    return (h, lib.tensor(rng.standard_normal((layers, batch, hidden)), requires_grad=True))


def _leaves(state):
    return list(state) if isinstance(state, tuple) else [state]


@pytest.mark.parametrize("bidirectional", [False, True], ids=["uni", "bi"])
@pytest.mark.parametrize("batch_first", [False, True], ids=["seq_first", "batch_first"])
@pytest.mark.parametrize("mode", list(_MODULES))
def test_padded_sequences_match_torch(mode, batch_first, bidirectional):
    flat, mirror = _weights(mode, num_layers=2, bidirectional=bidirectional)
    layers = 2 * (2 if bidirectional else 1)
    x = np.random.default_rng(2).standard_normal((2, 5, 3) if batch_first else (5, 2, 3))
    results = {}
    for lib, weights in ((kiln, mirror), (torch, flat)):
        inp = lib.tensor(x, requires_grad=True)
        state = _state(lib, mode, layers, 2, 4)
        out = getattr(lib, mode)(inp, state, weights, True, 2, 0.0, False, bidirectional,
                                 batch_first)  # fmt: skip
        sum(o.pow(2).sum() for o in out).backward()
        results[lib] = (out, [inp.grad, *(s.grad for s in _leaves(state))],
                        [w.grad for w in weights])  # fmt: skip
    for got, want in zip(results[kiln], results[torch]):
        assert_close(list(got), list(want))


@pytest.mark.parametrize("mode", ["lstm", "gru"])
def test_packed_sequences_and_projection_match_torch(mode):
    extra = {"proj_size": 2} if mode == "lstm" else {}
    flat, mirror = _weights(mode, num_layers=1, **extra)
    hidden = 2 if mode == "lstm" else 4
    batch_sizes = [3, 3, 2, 1]
    data = np.random.default_rng(3).standard_normal((sum(batch_sizes), 3))
    results = {}
    for lib, weights in ((kiln, mirror), (torch, flat)):
        rng = np.random.default_rng(4)
        h = lib.tensor(rng.standard_normal((1, 3, hidden)))
        state = (h, lib.tensor(rng.standard_normal((1, 3, 4)))) if mode == "lstm" else h
        sizes = lib.tensor(batch_sizes)
        results[lib] = getattr(lib, mode)(lib.tensor(data), sizes, state, weights, True, 1, 0.0,
                                          False, False)  # fmt: skip
    assert_close(list(results[kiln]), list(results[torch]))


@pytest.mark.parametrize("mode", list(_MODULES))
def test_cells_match_torch_without_and_with_biases(mode):
    rng = np.random.default_rng(5)
    gates = {"lstm": 4, "gru": 3}.get(mode, 1)
    arrays = [rng.standard_normal(s) for s in ((2, 3), (gates * 4, 3), (gates * 4, 4), (gates * 4,),
                                               (gates * 4,))]  # fmt: skip
    h = rng.standard_normal((2, 4))
    c = rng.standard_normal((2, 4))
    for with_bias in (False, True):
        out = {}
        for lib in (kiln, torch):
            x, w_ih, w_hh, b_ih, b_hh = (lib.tensor(a, requires_grad=True) for a in arrays)
            state = (lib.tensor(h), lib.tensor(c)) if mode == "lstm" else lib.tensor(h)
            biases = (b_ih, b_hh) if with_bias else ()
            result = getattr(lib, f"{mode}_cell")(x, state, w_ih, w_hh, *biases)
            sum(r.sum() for r in (result if mode == "lstm" else (result,))).backward()
            out[lib] = (result, x.grad, w_hh.grad)
        assert_close(list(out[kiln][0]) if mode == "lstm" else out[kiln][0],
                     list(out[torch][0]) if mode == "lstm" else out[torch][0])  # fmt: skip
        assert_close(out[kiln][1:], out[torch][1:])


def test_functional_lstm_is_the_modules_computation():
    kiln.manual_seed(0)
    module = kiln.nn.LSTM(3, 4, num_layers=2)
    x = kiln.randn(5, 2, 3)
    h = (kiln.zeros(2, 2, 4), kiln.zeros(2, 2, 4))
    out, (hn, cn) = module(x, h)
    weights = [p for p in module.parameters()]
    f_out, f_hn, f_cn = kiln.lstm(x, h, weights, True, 2, 0.0, False, False, False)
    assert f_out.equal(out) and f_hn.equal(hn) and f_cn.equal(cn)
    with pytest.raises(RuntimeError, match="got 7 weights for 2 layer directions"):
        kiln.lstm(x, h, weights[:-1], True, 2, 0.0, False, False, False)
    assert to_torch(out).shape == (5, 2, 4)
