"""RNN, LSTM, GRU and their cells against torch.nn: the same weights (a torch state dict loaded
through numpy), the same inputs and seeds of gradient, then outputs, final states, input
gradients and every parameter gradient must agree, for each mode and option combination."""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pytest

import kiln
from tests.oracle import assert_close, needs_torch, torch

# torch's oneDNN path warns that it falls back for projected LSTMs: not a kiln concern
pytestmark = [needs_torch, pytest.mark.filterwarnings("ignore:LSTM with projections")]

INPUT, HIDDEN, STEPS, BATCH = 4, 5, 5, 3
LENGTHS = [3, 5, 2]  # unsorted on purpose: packing sorts and the states come back permuted
TOL = {"float64": (1e-9, 1e-10), "float32": (2e-5, 2e-5)}
# (class name, extra constructor arguments)
MODES = {
    "rnn_tanh": ("RNN", {}),
    "rnn_relu": ("RNN", {"nonlinearity": "relu"}),
    "lstm": ("LSTM", {}),
    "lstm_proj": ("LSTM", {"proj_size": 3}),
    "gru": ("GRU", {}),
}


def _lib_dtype(lib, name: str):
    return getattr(lib, name)


def _twins(cls: str, dtype: str, *args, **kwargs):
    """A torch module and a kiln module holding the same weights (torch's, through numpy)."""
    torch.manual_seed(0)
    t_mod = getattr(torch.nn, cls)(*args, **kwargs).to(_lib_dtype(torch, dtype))
    k_mod = getattr(kiln.nn, cls)(*args, **kwargs).to(_lib_dtype(kiln, dtype))
    state = {k: kiln.tensor(v.detach().numpy()) for k, v in t_mod.state_dict().items()}
    k_mod.load_state_dict(state)
    return k_mod, t_mod


def _both(array: np.ndarray, requires_grad: bool = True):
    return (
        kiln.tensor(array).requires_grad_(requires_grad),
        torch.tensor(array).requires_grad_(requires_grad),
    )


def _as_tuple(state) -> tuple:
    return state if isinstance(state, tuple) else (state,)


def _states(result):
    """The tensors of an ``(output, h)`` or ``(output, (h, c))`` result, output unpacked."""
    output, hidden = result
    output = output.data if hasattr(output, "batch_sizes") else output
    return [output, *_as_tuple(hidden)]


def _backward(tensors, weights: list, lib):
    """Backpropagate a random weighting of every result, so each output feeds a gradient."""
    loss = 0
    for t, w in zip(tensors, weights):
        loss = loss + (t * lib.tensor(w, dtype=t.dtype)).sum()
    loss.backward()


def _compare_grads(k_mod, t_mod, dtype: str) -> None:
    rtol, atol = TOL[dtype]
    t_params = dict(t_mod.named_parameters())
    k_params = dict(k_mod.named_parameters())
    assert list(k_params) == list(t_params)
    for name, t_param in t_params.items():
        assert k_params[name].grad is not None, name
        assert_close(k_params[name].grad, t_param.grad, rtol=rtol, atol=atol)


def _compare_results_and_grads(k_mod, t_mod, dtype, k_tensors, t_tensors) -> None:
    """The twins' result tensors agree in shape and value; backpropagating the same random
    weighting of them gives the same parameter gradients."""
    rtol, atol = TOL[dtype]
    assert len(k_tensors) == len(t_tensors)
    for k, t in zip(k_tensors, t_tensors):
        assert tuple(k.shape) == tuple(t.shape)
        assert_close(k, t, rtol=rtol, atol=atol)
    weights = [
        np.random.default_rng(i).standard_normal(tuple(t.shape)) for i, t in enumerate(t_tensors)
    ]
    _backward(k_tensors, weights, kiln)
    _backward(t_tensors, weights, torch)
    _compare_grads(k_mod, t_mod, dtype)


def _run_both(k_mod, t_mod, dtype, k_args, t_args):
    k_result, t_result = k_mod(*k_args), t_mod(*t_args)
    _compare_results_and_grads(k_mod, t_mod, dtype, _states(k_result), _states(t_result))
    return k_result, t_result


def _hidden(cls, kwargs, layers, directions, batch, rng, dtype):
    """Random initial states for a module (``(h0, c0)`` for an LSTM)."""
    h_size = kwargs.get("proj_size") or HIDDEN
    h0 = rng.standard_normal((layers * directions, batch, h_size)).astype(dtype)
    if cls != "LSTM":
        return _both(h0)
    c0 = rng.standard_normal((layers * directions, batch, HIDDEN)).astype(dtype)
    (kh, th), (kc, tc) = _both(h0), _both(c0)
    return (kh, kc), (th, tc)


COMBOS = list(itertools.product(MODES, [1, 2], [False, True], [False, True]))


def _combo_id(combo):
    mode, layers, bidirectional, batch_first = combo
    return f"{mode}-L{layers}" + ("-bi" if bidirectional else "") + ("-bf" if batch_first else "")


# every option combination in float64, padded with zero states and packed with given states
# (the packed path permutes the given states); float32 once per mode, on the widest combination
SEQUENCE_CASES = [
    (combo, packed, packed, "float64") for combo in COMBOS for packed in (False, True)
] + [((mode, 2, True, True), True, True, "float32") for mode in MODES]


def _sequence_id(case):
    combo, packed, with_h0, dtype = case
    kind = "packed-given_h0" if packed else "padded-zero_h0"
    return f"{_combo_id(combo)}-{kind}-{dtype}"


@pytest.mark.parametrize(
    "combo,packed,with_h0,dtype", SEQUENCE_CASES, ids=[_sequence_id(c) for c in SEQUENCE_CASES]
)
def test_sequences_match_torch(combo, packed, with_h0, dtype):
    """Padded batches, or packed ones of unsorted variable lengths (the output stays packed and
    the final states come back in the caller's batch order)."""
    mode, layers, bidirectional, batch_first = combo
    cls, extra = MODES[mode]
    kwargs = dict(extra, num_layers=layers, bidirectional=bidirectional, batch_first=batch_first)
    k_mod, t_mod = _twins(cls, dtype, INPUT, HIDDEN, **kwargs)
    rng = np.random.default_rng(1)
    shape = (BATCH, STEPS, INPUT) if batch_first else (STEPS, BATCH, INPUT)
    kx, tx = _both(rng.standard_normal(shape).astype(dtype))
    k_args, t_args = [kx], [tx]
    if packed:
        options = {"batch_first": batch_first, "enforce_sorted": False}
        k_args = [kiln.nn.utils.rnn.pack_padded_sequence(kx, LENGTHS, **options)]
        t_args = [torch.nn.utils.rnn.pack_padded_sequence(tx, LENGTHS, **options)]
    if with_h0:
        kh, th = _hidden(cls, extra, layers, 1 + bidirectional, BATCH, rng, dtype)
        k_args.append(kh)
        t_args.append(th)
    k_result, _ = _run_both(k_mod, t_mod, dtype, k_args, t_args)
    rtol, atol = TOL[dtype]
    assert_close(kx.grad, tx.grad, rtol=rtol, atol=atol)
    if with_h0:
        for k, t in zip(_as_tuple(k_args[1]), _as_tuple(t_args[1]), strict=True):
            assert_close(k.grad, t.grad, rtol=rtol, atol=atol)
    if packed:
        assert isinstance(k_result[0], kiln.nn.utils.rnn.PackedSequence)
        assert k_result[0].batch_sizes.tolist() == t_args[0].batch_sizes.tolist()
        assert k_result[0].unsorted_indices.tolist() == t_args[0].unsorted_indices.tolist()


@pytest.mark.parametrize("with_h0", [False, True], ids=["zero_h0", "given_h0"])
@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("mode", list(MODES))
def test_unbatched_input_matches_torch(mode, batch_first, with_h0):
    dtype = "float64"
    cls, extra = MODES[mode]
    kwargs = dict(extra, num_layers=2, bidirectional=True, batch_first=batch_first)
    k_mod, t_mod = _twins(cls, dtype, INPUT, HIDDEN, **kwargs)
    rng = np.random.default_rng(3)
    kx, tx = _both(rng.standard_normal((STEPS, INPUT)).astype(dtype))
    k_args, t_args = [kx], [tx]
    if with_h0:
        kh, th = _hidden(cls, extra, 2, 2, 1, rng, dtype)
        squeeze = lambda h: tuple(x[:, 0] for x in h) if isinstance(h, tuple) else h[:, 0]  # noqa: E731
        k_args.append(squeeze(kh))
        t_args.append(squeeze(th))
    k_result, t_result = _run_both(k_mod, t_mod, dtype, k_args, t_args)
    assert [tuple(t.shape) for t in _states(k_result)] == [
        tuple(t.shape) for t in _states(t_result)
    ]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("mode", list(MODES))
def test_no_bias_matches_torch(mode, dtype):
    cls, extra = MODES[mode]
    k_mod, t_mod = _twins(cls, dtype, INPUT, HIDDEN, num_layers=2, bias=False, **extra)
    assert not any("bias" in name for name, _ in k_mod.named_parameters())
    kx, tx = _both(np.random.default_rng(4).standard_normal((STEPS, BATCH, INPUT)).astype(dtype))
    _run_both(k_mod, t_mod, dtype, [kx], [tx])


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_saturated_lstm_gates_match_torch_without_warnings(dtype):
    """Inputs large enough to drive some gates past where e^-x overflows (|x| > ~88 in float32,
    ~709 in float64; the fused layer activates every gate through one exp): outputs and
    gradients still agree with torch's, and no floating-point warning escapes."""
    k_mod, t_mod = _twins("LSTM", dtype, INPUT, HIDDEN, num_layers=2, bidirectional=True)
    scale = {"float64": 1000, "float32": 150}[dtype]
    array = scale * np.random.default_rng(7).standard_normal((STEPS, BATCH, INPUT))
    kx, tx = _both(array.astype(dtype))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _run_both(k_mod, t_mod, dtype, [kx], [tx])
    assert_close(kx.grad, tx.grad, rtol=TOL[dtype][0], atol=TOL[dtype][1])


def test_dropout_of_one_zeroes_the_inputs_of_upper_layers_like_torch():
    k_mod, t_mod = _twins("LSTM", "float64", INPUT, HIDDEN, num_layers=3, dropout=1.0)
    kx, tx = _both(np.random.default_rng(5).standard_normal((STEPS, BATCH, INPUT)))
    output = _run_both(k_mod, t_mod, "float64", [kx], [tx])[0][0]
    # the last layer only sees zeros: its output no longer depends on the input
    assert_close(k_mod(kiln.randn(STEPS, BATCH, INPUT, dtype=kiln.float64))[0], output)


def test_dropout_is_inactive_in_eval_mode():
    k_mod, t_mod = _twins("GRU", "float64", INPUT, HIDDEN, num_layers=2, dropout=0.5)
    k_mod.eval()
    t_mod.eval()
    kx, tx = _both(np.random.default_rng(6).standard_normal((STEPS, BATCH, INPUT)))
    _run_both(k_mod, t_mod, "float64", [kx], [tx])


def test_dropout_in_training_is_random_and_seeded():
    k_mod, _ = _twins("RNN", "float64", INPUT, HIDDEN, num_layers=2, dropout=0.5)
    x = kiln.randn(STEPS, BATCH, INPUT, dtype=kiln.float64)
    kiln.manual_seed(7)
    first = k_mod(x)[0]
    second = k_mod(x)[0]
    kiln.manual_seed(7)
    again = k_mod(x)[0]
    assert not np.allclose(first.detach().numpy(), second.detach().numpy())
    np.testing.assert_array_equal(first.detach().numpy(), again.detach().numpy())
    k_mod.eval()
    plain = k_mod(x)[0]
    assert not np.allclose(first.detach().numpy(), plain.detach().numpy())


def test_dropout_with_one_layer_warns_like_torch():
    with pytest.warns(UserWarning, match="num_layers greater than 1"):
        kiln.nn.LSTM(INPUT, HIDDEN, dropout=0.3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        kiln.nn.LSTM(INPUT, HIDDEN, num_layers=2, dropout=0.3)


# ------------------------------------------------------------------ parameters and state dicts
@pytest.mark.parametrize(
    "cls,kwargs",
    [
        ("RNN", {"num_layers": 3, "bidirectional": True}),
        ("LSTM", {"num_layers": 2, "proj_size": 2, "bidirectional": True}),
        ("LSTM", {"num_layers": 2, "proj_size": 2, "bias": False}),
        ("GRU", {"num_layers": 2, "bias": False, "bidirectional": True}),
    ],
)
def test_parameter_names_shapes_and_state_dicts_match_torch(cls, kwargs):
    t_mod = getattr(torch.nn, cls)(INPUT, HIDDEN, **kwargs)
    k_mod = getattr(kiln.nn, cls)(INPUT, HIDDEN, **kwargs)
    t_shapes = {k: tuple(v.shape) for k, v in t_mod.state_dict().items()}
    k_shapes = {k: tuple(v.shape) for k, v in k_mod.state_dict().items()}
    assert list(k_shapes.items()) == list(t_shapes.items())
    assert k_mod._flat_weights_names == t_mod._flat_weights_names
    assert k_mod._all_weights == t_mod._all_weights
    assert [[p.shape for p in ws] for ws in k_mod.all_weights] == [
        [p.shape for p in ws] for ws in t_mod.all_weights
    ]
    assert all(
        w is getattr(k_mod, n) for w, n in zip(k_mod._flat_weights, k_mod._flat_weights_names)
    )
    # kiln -> torch through numpy, strict
    t_mod.load_state_dict({k: torch.tensor(v.numpy()) for k, v in k_mod.state_dict().items()})
    for name, value in k_mod.state_dict().items():
        np.testing.assert_array_equal(t_mod.state_dict()[name].numpy(), value.numpy())


@pytest.mark.parametrize(
    "build",
    [
        lambda lib: lib.nn.RNN(3, 8, 2, "relu", False),
        lambda lib: lib.nn.LSTM(3, 8, proj_size=2, bidirectional=True),
        lambda lib: lib.nn.GRU(3, 8, bias=False, batch_first=True, dropout=0.25, num_layers=2),
        lambda lib: lib.nn.RNNCell(3, 8, bias=False, nonlinearity="relu"),
        lambda lib: lib.nn.LSTMCell(3, 8),
        lambda lib: lib.nn.GRUCell(3, 8, bias=False),
    ],
    ids=["rnn", "lstm", "gru", "rnn_cell", "lstm_cell", "gru_cell"],
)
def test_init_range_dtype_and_repr_match_torch(build):
    k_mod, t_mod = build(kiln), build(torch)
    assert repr(k_mod) == repr(t_mod)
    assert [n for n, _ in k_mod.named_parameters()] == [n for n, _ in t_mod.named_parameters()]
    stdv = 1 / np.sqrt(8)
    for param in k_mod.parameters():
        values = param.detach().numpy()
        assert values.dtype == np.float32
        assert values.min() >= -stdv and values.max() <= stdv and values.std() > stdv / 4
    k_mod.reset_parameters()
    k_double = build(kiln).double()
    assert all(p.dtype is kiln.float64 for p in k_double.parameters())


def test_factory_dtype_and_flatten_parameters():
    lstm = kiln.nn.LSTM(INPUT, HIDDEN, dtype=kiln.float64)
    assert all(p.dtype is kiln.float64 for p in lstm.parameters())
    assert lstm.flatten_parameters() is None
    cell = kiln.nn.GRUCell(INPUT, HIDDEN, dtype=kiln.float64)
    assert all(p.dtype is kiln.float64 for p in cell.parameters())


# ------------------------------------------------------------------ cells
CELLS = {
    "rnn_tanh": ("RNNCell", {}),
    "rnn_relu": ("RNNCell", {"nonlinearity": "relu"}),
    "lstm": ("LSTMCell", {}),
    "gru": ("GRUCell", {}),
}


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("hx_kind", ["none", "batched", "unbatched"])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("mode", list(CELLS))
def test_cells_match_torch(mode, bias, hx_kind, dtype):
    cls, extra = CELLS[mode]
    k_mod, t_mod = _twins(cls, dtype, INPUT, HIDDEN, bias=bias, **extra)
    rng = np.random.default_rng(8)
    shape = (INPUT,) if hx_kind == "unbatched" else (BATCH, INPUT)
    kx, tx = _both(rng.standard_normal(shape).astype(dtype))
    k_args, t_args = [kx], [tx]
    if hx_kind != "none":
        h_shape = (HIDDEN,) if hx_kind == "unbatched" else (BATCH, HIDDEN)
        states = [_both(rng.standard_normal(h_shape).astype(dtype)) for _ in range(2)]
        if cls == "LSTMCell":
            k_args.append(tuple(s[0] for s in states))
            t_args.append(tuple(s[1] for s in states))
        else:
            k_args.append(states[0][0])
            t_args.append(states[0][1])
    k_out, t_out = k_mod(*k_args), t_mod(*t_args)
    k_list = list(k_out) if isinstance(k_out, tuple) else [k_out]
    t_list = list(t_out) if isinstance(t_out, tuple) else [t_out]
    _compare_results_and_grads(k_mod, t_mod, dtype, k_list, t_list)
    rtol, atol = TOL[dtype]
    assert_close(kx.grad, tx.grad, rtol=rtol, atol=atol)


def test_cells_step_through_a_sequence_like_the_layer():
    """An LSTMCell driven step by step reproduces a one-layer LSTM with the same weights."""
    lstm = kiln.nn.LSTM(INPUT, HIDDEN).double()
    cell = kiln.nn.LSTMCell(INPUT, HIDDEN).double()
    cell.load_state_dict({k[:-3]: v for k, v in lstm.state_dict().items()})
    x = kiln.randn(STEPS, BATCH, INPUT, dtype=kiln.float64)
    output, (h_n, c_n) = lstm(x)
    h = c = kiln.zeros(BATCH, HIDDEN, dtype=kiln.float64)
    for t in range(STEPS):
        h, c = cell(x[t], (h, c))
        assert_close(h, output[t], rtol=1e-12, atol=1e-12)
    assert_close(c, c_n[0], rtol=1e-12, atol=1e-12)


# ------------------------------------------------------------------ errors
def _error_of(fn):
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - the type is what is compared
        return type(e), str(e).replace("torch.", "kiln.")
    return None


def _same_error(make_call):
    expected = _error_of(lambda: make_call(torch))
    assert expected is not None
    assert _error_of(lambda: make_call(kiln)) == expected


@pytest.mark.parametrize(
    "make",
    [
        lambda lib: lib.nn.LSTM(4, 5, dropout=1.5),
        lambda lib: lib.nn.LSTM(4, 5, dropout=True),
        lambda lib: lib.nn.LSTM(4, 5, bias=1),
        lambda lib: lib.nn.LSTM(4, 5, batch_first=None),
        lambda lib: lib.nn.LSTM(4.0, 5),
        lambda lib: lib.nn.LSTM(0, 5),
        lambda lib: lib.nn.LSTM(4, "5"),
        lambda lib: lib.nn.LSTM(4, 0),
        lambda lib: lib.nn.LSTM(4, 5, num_layers=0),
        lambda lib: lib.nn.LSTM(4, 5, proj_size=-1),
        lambda lib: lib.nn.LSTM(4, 5, proj_size=5),
        lambda lib: lib.nn.GRU(4, 5, proj_size=2),
        lambda lib: lib.nn.RNN(4, 5, proj_size=2),
        lambda lib: lib.nn.RNN(4, 5, nonlinearity="gelu"),
        lambda lib: lib.nn.RNNBase("CELL", 4, 5),
    ],
)
def test_constructor_errors_match_torch(make):
    _same_error(make)


def _call(cls, *shapes, packed=False, dtype="float32", **kwargs):
    def make_call(lib):
        torch.manual_seed(0)
        module = getattr(lib.nn, cls)(4, 5, **kwargs)
        tensors = [
            tuple(lib.zeros(*s) for s in shape)
            if isinstance(shape[0], tuple)
            else lib.zeros(*shape)
            for shape in shapes
        ]
        tensors[0] = tensors[0].to(getattr(lib, dtype))
        if packed:
            tensors[0] = lib.nn.utils.rnn.pack_sequence([tensors[0][:3], tensors[0][:2]])
        return module(*tensors)

    return make_call


@pytest.mark.parametrize(
    "make_call",
    [
        _call("LSTM", (5, 2, 4), dtype="float64"),
        _call("LSTM", (5, 2, 4, 1)),
        _call("GRU", (5,)),
        _call("RNN", (5, 2, 4, 1)),
        _call("RNN", (5, 2, 3)),
        _call("RNN", (5, 2, 4), (1, 3, 5)),
        _call("RNN", (5, 2, 4), (2, 2, 5)),
        _call("GRU", (5, 2, 4), (2, 5)),
        _call("GRU", (5, 4), (1, 2, 5)),
        _call("LSTM", (5, 2, 4), ((1, 2, 5), (1, 3, 5))),
        _call("LSTM", (5, 2, 4), ((1, 2, 3), (1, 2, 5))),
        _call("LSTM", (5, 2, 4), ((2, 5), (1, 2, 5))),
        _call("LSTM", (5, 4), ((1, 5), (1, 2, 5))),
        _call("LSTM", (0, 2, 4)),
        _call("GRU", (4, 4), (1, 3, 5), packed=True),
        _call("RNN", (4, 3), packed=True),
        _call("RNNCell", (2, 3)),
        _call("RNNCell", (2, 4, 1)),
        _call("RNNCell", (2, 4), (3, 5)),
        _call("GRUCell", (2, 4), (2, 6)),
        _call("GRUCell", (4,), (2, 5)),
        _call("GRUCell", (2, 4), (1, 2, 5)),
        _call("LSTMCell", (2, 4), ((2, 5), (3, 5))),
        _call("LSTMCell", (2, 4), ((2, 5), (2, 6))),
        _call("LSTMCell", (2, 4), ((2, 5), (1, 2, 5))),
        _call("RNNCell", (2, 4), nonlinearity="gelu"),
    ],
)
def test_forward_errors_match_torch(make_call):
    _same_error(make_call)


@pytest.mark.parametrize("mode", ["gru", "rnn_tanh", "lstm"])
def test_bfloat16_input_under_autocast_runs_like_torch(mode):
    """A conv front end under CPU bfloat16 autocast hands the recurrent layer bfloat16 while
    its weights stay float32: PyTorch skips the dtype check under autocast and returns
    bfloat16; values and gradients agree to bfloat16's precision (rounding order differs)."""
    cls, extra = MODES[mode]
    k_mod, t_mod = _twins(cls, "float32", INPUT, HIDDEN, batch_first=True, **extra)
    x = np.random.default_rng(0).standard_normal((BATCH, STEPS, INPUT)).astype(np.float32)
    results = {}
    for lib, module, leaf in zip((kiln, torch), (k_mod, t_mod), _both(x)):
        with lib.autocast("cpu", dtype=lib.bfloat16):
            output, _ = module(leaf.to(lib.bfloat16))
        output.float().pow(2).sum().backward()
        results[lib] = (output, leaf.grad, module.weight_ih_l0.grad)
    for got, expected in zip(results[kiln], results[torch]):
        assert str(got.dtype).split(".")[-1] == str(expected.dtype).split(".")[-1]
        np.testing.assert_allclose(got.detach().float().numpy(), expected.detach().float().numpy(),
                                   rtol=3e-2, atol=2e-2)  # fmt: skip
    with pytest.raises(ValueError, match="does not match weight dtype"):  # outside autocast
        k_mod(kiln.tensor(x).to(kiln.bfloat16))


# ------------------------------------------------------------------ compile and training
@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compiled_lstm_forward_and_backward_match_eager(backend):
    kiln.manual_seed(0)
    model = kiln.nn.LSTM(3, 4, num_layers=2, bidirectional=True, batch_first=True)
    x = kiln.randn(2, 4, 3)

    def loss_fn(module, inputs):
        output, (h, c) = module(inputs)
        return output.sum() + h.pow(2).sum() + c.mean()

    compiled = kiln.compile(loss_fn, backend=backend, fullgraph=True)
    loss = compiled(model, x)
    loss.backward()
    compiled_grads = {n: p.grad.numpy().copy() for n, p in model.named_parameters()}
    model.zero_grad()
    expected = loss_fn(model, x)
    expected.backward()
    assert_close(loss, expected, rtol=1e-5, atol=1e-5)
    for name, param in model.named_parameters():
        np.testing.assert_allclose(compiled_grads[name], param.grad.numpy(), rtol=1e-4, atol=1e-5)


def test_compiled_gru_module_matches_eager():
    kiln.manual_seed(1)
    model = kiln.nn.GRU(3, 4)
    x, h0 = kiln.randn(5, 2, 3), kiln.randn(1, 2, 4)
    compiled = kiln.compile(model, backend="aot_eager", fullgraph=True)
    for got, want in zip(compiled(x, h0), model(x, h0)):
        assert_close(got, want, rtol=1e-6, atol=1e-6)


def _train_classifier(lib, model, head, inputs, labels, steps=20):
    """Adam on cross-entropy of ``head(h_n[-1])``; returns the loss curve and final accuracy."""
    opt = lib.optim.Adam([*model.parameters(), *head.parameters()], lr=0.02)
    x, y = lib.tensor(inputs), lib.tensor(labels)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        _, (h, _) = model(x)
        logits = head(h[-1])
        loss = lib.nn.functional.cross_entropy(logits, y)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    accuracy = float((logits.argmax(1) == y).float().mean())
    return np.array(losses), accuracy


def test_lstm_sequence_classifier_learns_like_torch():
    """Classify whether a sequence's values sum above zero from the last hidden state: the loss
    falls, the classifier becomes accurate, and the loss curve follows torch's from the same
    initial weights."""
    rng = np.random.default_rng(9)
    inputs = rng.standard_normal((64, 6, 2)).astype(np.float32)
    labels = (inputs.sum(axis=(1, 2)) > 0).astype(np.int64)
    train, held_out = slice(0, 32), slice(32, None)
    k_lstm, t_lstm = _twins("LSTM", "float32", 2, 8, batch_first=True)
    k_head, t_head = _twins("Linear", "float32", 8, 2)
    k_losses, k_accuracy = _train_classifier(kiln, k_lstm, k_head, inputs[train], labels[train])
    t_losses, t_accuracy = _train_classifier(torch, t_lstm, t_head, inputs[train], labels[train])
    assert k_losses[-1] < 0.5 * k_losses[0]
    assert k_accuracy >= 0.9 and k_accuracy == t_accuracy
    with kiln.no_grad():
        _, (h, _) = k_lstm(kiln.tensor(inputs[held_out]))
        predicted = k_head(h[-1]).argmax(1).numpy()
    assert (predicted == labels[held_out]).mean() >= 0.8
    np.testing.assert_allclose(k_losses, t_losses, rtol=1e-3, atol=1e-4)


# ------------------------------------------------------------------ one op per layer
@pytest.mark.parametrize("mode", ["rnn_tanh", "rnn_relu", "lstm", "gru"])
def test_each_layer_runs_as_one_op_with_torch_gradients(mode):
    """CPU float layers run every time step in one ``_rnn_layer`` op (and one backward op)."""
    cls, kwargs = MODES[mode]
    k_mod, t_mod = _twins(cls, "float64", INPUT, HIDDEN, num_layers=2, **kwargs)
    rng = np.random.default_rng(5)
    kx, tx = _both(rng.standard_normal((STEPS, BATCH, INPUT)))
    k_out, t_out = k_mod(kx), t_mod(tx)
    assert k_out[0].grad_fn.op.name == "_rnn_layer"
    assert k_out[0].grad_fn.name() == t_out[0].grad_fn.name()
    seed = rng.standard_normal(k_out[0].shape)
    (k_out[0] * kiln.tensor(seed)).sum().backward()
    (t_out[0] * torch.tensor(seed)).sum().backward()
    assert_close(kx.grad, tx.grad, rtol=1e-9, atol=1e-10)
    for kp, tp in zip(k_mod.parameters(), t_mod.parameters()):
        assert_close(kp.grad, tp.grad, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("batch,hidden", [(1, 3), (4, 1), (1, 1), (3, 5)])
@pytest.mark.parametrize("reverse", [False, True], ids=["forward", "bidirectional"])
def test_lstm_layer_edge_shapes_match_torch_and_keep_the_given_gradients(batch, hidden, reverse):
    """The LSTM kernels run hidden-major ((H, B) states): batch or hidden size 1 makes the
    transposes contiguous views, and the gradients handed to backward must stay as given."""
    k_mod, t_mod = _twins("LSTM", "float32", INPUT, hidden, bidirectional=reverse)
    rng = np.random.default_rng(7)
    directions = 1 + reverse
    kx, tx = _both(rng.standard_normal((STEPS, batch, INPUT)).astype(np.float32))
    kh, th = _both(rng.standard_normal((directions, batch, hidden)).astype(np.float32))
    kc, tc = _both(rng.standard_normal((directions, batch, hidden)).astype(np.float32))
    k_out, (k_h, k_c) = k_mod(kx, (kh, kc))
    t_out, (t_h, t_c) = t_mod(tx, (th, tc))
    seeds = [rng.standard_normal(tuple(t.shape)).astype(np.float32) for t in (t_out, t_h, t_c)]
    k_seeds = [kiln.tensor(s) for s in seeds]
    kiln.autograd.backward([k_out, k_h, k_c], k_seeds)
    torch.autograd.backward([t_out, t_h, t_c], [torch.tensor(s) for s in seeds])
    for k_seed, seed in zip(k_seeds, seeds):
        np.testing.assert_array_equal(k_seed.numpy(), seed)
    rtol, atol = TOL["float32"]
    for k, t in ((k_out, t_out), (k_h, t_h), (k_c, t_c), (kx.grad, tx.grad)):
        assert_close(k, t, rtol=rtol, atol=atol)
    assert_close(kh.grad, th.grad, rtol=rtol, atol=atol)
    assert_close(kc.grad, tc.grad, rtol=rtol, atol=atol)
    _compare_grads(k_mod, t_mod, "float32")


@pytest.mark.parametrize("mode", ["rnn_tanh", "lstm", "gru"])
def test_layer_workspace_is_bytes_that_backward_never_gets_a_gradient_for(mode, monkeypatch):
    """The workspace is a uint8 tensor (PyTorch's cuDNN reserve space is one): the engine makes
    no zero gradient for it, so a backward through the layer fills no workspace-sized zeros."""
    cls, kwargs = MODES[mode]
    k_mod, t_mod = _twins(cls, "float32", INPUT, HIDDEN, **kwargs)
    kx, tx = _both(np.random.default_rng(8).standard_normal((STEPS, BATCH, INPUT)).astype("f4"))
    k_out = k_mod(kx)
    node = k_out[0].grad_fn
    assert node.op.name == "_rnn_layer"
    assert node.out_meta[3][1] == kiln.uint8
    shapes = []
    real = kiln.zeros

    def spy(*size, **options):
        shapes.append(tuple(size[0]) if len(size) == 1 else size)
        return real(*size, **options)

    monkeypatch.setattr(kiln.ops.creation.api, "zeros", spy)
    k_out[0].sum().backward()
    monkeypatch.undo()
    assert all(len(s) < 3 for s in shapes), shapes
    t_mod(tx)[0].sum().backward()
    assert_close(kx.grad, tx.grad, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("mode", ["rnn_tanh", "lstm", "gru"])
def test_double_backward_through_a_layer_matches_torch(mode):
    cls, kwargs = MODES[mode]
    k_mod, t_mod = _twins(cls, "float64", INPUT, HIDDEN, **kwargs)
    rng = np.random.default_rng(6)
    kx, tx = _both(rng.standard_normal((STEPS, BATCH, INPUT)))
    grads = []
    for lib, mod, x in ((kiln, k_mod, kx), (torch, t_mod, tx)):
        out = mod(x)[0]
        (gx,) = lib.autograd.grad(out.pow(2).sum(), x, create_graph=True)
        gx.pow(2).sum().backward()
        grads.append((gx, x.grad, mod.weight_hh_l0.grad))
    for k_value, t_value in zip(*grads):
        assert_close(k_value, t_value, rtol=1e-8, atol=1e-9)


def test_modifying_a_layer_output_in_place_before_backward_raises_like_torch():
    k_mod, t_mod = _twins("LSTM", "float32", INPUT, HIDDEN)
    x = kiln.randn(STEPS, BATCH, INPUT, requires_grad=True)
    out = k_mod(x)[0]
    out.mul_(2)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.sum().backward()


def test_compiled_lstm_holds_one_extern_call_per_layer():
    """The compiled graph keeps the layer op whole: no unrolled time steps to compile."""
    from kiln.dynamo import explain

    kiln.manual_seed(0)
    model = kiln.nn.LSTM(3, 4, num_layers=2)
    x = kiln.randn(30, 2, 3, requires_grad=True)
    report = explain(lambda inputs: model(inputs)[0].sum())(x)
    graph = report.graphs[0]
    layers = [n for n in graph.graph.nodes if getattr(n.target, "name", None) == "_rnn_layer"]
    assert len(layers) == 2
    assert len(graph.graph.nodes) < 40  # not 30 steps x a dozen ops


def _packed_loss(lib, mod, x, lengths, lstm: bool):
    packed = lib.nn.utils.rnn.pack_padded_sequence(x, lengths, enforce_sorted=False)
    out, h = mod(packed)
    padded, _ = lib.nn.utils.rnn.pad_packed_sequence(out)
    return padded.pow(2).sum() + (h[0] if lstm else h).sum()


@pytest.mark.parametrize("mode", ["rnn_tanh", "lstm", "gru"])
def test_double_backward_through_a_packed_layer_matches_torch(mode):
    """``create_graph`` over a packed sequence differentiates the per-step kiln-op formulas of
    the packed kernel's layer (the leading rows of each step)."""
    cls, kwargs = MODES[mode]
    k_mod, t_mod = _twins(cls, "float64", INPUT, HIDDEN, bidirectional=True, **kwargs)
    rng = np.random.default_rng(7)
    kx, tx = _both(rng.standard_normal((STEPS, BATCH, INPUT)))
    grads = []
    for lib, mod, x in ((kiln, k_mod, kx), (torch, t_mod, tx)):
        loss = _packed_loss(lib, mod, x, LENGTHS, cls == "LSTM")
        (gx,) = lib.autograd.grad(loss, x, create_graph=True)
        gx.pow(2).sum().backward()
        grads.append((gx, x.grad, mod.weight_hh_l0.grad, mod.weight_hh_l0_reverse.grad))
    for k_value, t_value in zip(*grads):
        assert_close(k_value, t_value, rtol=1e-8, atol=1e-9)


@pytest.mark.parametrize("cls", ["LSTM", "GRU"])
def test_compiled_packed_layers_run_one_op_each_and_match_torch(cls):
    """A packed sequence's layer is one ``_rnn_layer`` op per layer and direction in a compiled
    graph too (not a dozen ops per step), with PyTorch's values and input gradient."""
    from kiln.dynamo import explain

    k_mod, t_mod = _twins(cls, "float32", INPUT, HIDDEN, num_layers=2, bidirectional=True)
    x = np.random.default_rng(8).standard_normal((STEPS, BATCH, INPUT)).astype("float32")
    kx, tx = _both(x)
    compiled = kiln.compile(
        lambda inputs: _packed_loss(kiln, k_mod, inputs, LENGTHS, cls == "LSTM")
    )
    k_loss = compiled(kx)
    k_loss.backward()
    t_loss = _packed_loss(torch, t_mod, tx, LENGTHS, cls == "LSTM")
    t_loss.backward()
    assert_close(k_loss, t_loss, rtol=1e-5, atol=1e-5)
    assert_close(kx.grad, tx.grad, rtol=1e-5, atol=1e-5)
    report = explain(lambda inputs: _packed_loss(kiln, k_mod, inputs, LENGTHS, cls == "LSTM"))(
        kiln.tensor(x)
    )
    names = [getattr(n.target, "name", None) for g in report.graphs for n in g.graph.nodes]
    assert names.count("_rnn_layer") == 4
