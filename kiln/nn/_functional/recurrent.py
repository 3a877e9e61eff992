"""Recurrent computations: one time step of each cell, whole multi-layer runs, and PyTorch's
functional forms of them (``kiln.lstm``, ``kiln.gru``, ``kiln.rnn_tanh``, ``kiln.rnn_relu`` and
the ``*_cell`` functions), which take the weights as a flat list as ``torch.lstm`` does.

``nn.RNN`` / ``LSTM`` / ``GRU`` and the cells run the same code (``run_layers``, the steps), so
the modules and the functions agree exactly. A layer of CPU float32/float64 tensors runs as
one ``_rnn_layer`` op (``kiln/ops/nn/recurrent.py``: the time loop in one kernel, back-propagation
through time in another; a packed sequence's in ``recurrent_packed.py``); projections, half types
and autocast run the steps as a Python loop over kiln ops, which autograd differentiates and
``kiln.compile`` unrolls.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ...amp.autocast_mode import autocast_policy
from ...ops import OPS
from ...ops.core.registry import torch_function
from ...ops.nn.recurrent import GATES, STEPS, fused_layer_ok
from ...runtime.tensor import Tensor
from .dropout import dropout
from .layers import linear

__all__ = ["STEPS", "GATES", "run_layers"]

State = tuple[Tensor, ...]


def _lstm_policy(args: tuple, kwargs: dict) -> str | None:
    """CPU autocast of an LSTM layer without projection over a padded batch: PyTorch runs it as
    one oneDNN kernel in the low-precision dtype, states included; GRU and RNN layers, packed
    sequences and projections take the default path, whose parts (``linear``) autocast alone."""
    step, gates, state, weights = args[:4]
    if step.__name__ != "_lstm_step" or weights[2] is not None:
        return None
    rows = state[0].shape[0]
    return "lower" if all(g.shape[0] == rows for g in gates) else None


@autocast_policy(cpu=_lstm_policy)
def _run_direction(step, gates_x: list, state: State, weights: tuple, reverse: bool):
    """Run ``step`` over the time steps (backwards if ``reverse``); a step with fewer rows than
    the state (a packed sequence) updates only the leading rows. Returns (outputs, state)."""
    batch = state[0].shape[0]
    outputs = []
    for gates in reversed(gates_x) if reverse else gates_x:
        rows = gates.shape[0]
        if rows == batch:
            state = step(gates, state, *weights)
            outputs.append(state[0])
        else:
            active = step(gates, tuple([s[:rows] for s in state]), *weights)
            outputs.append(active[0])
            state = tuple([OPS["cat"]([a, s[rows:]]) for a, s in zip(active, state)])
    if reverse:
        outputs.reverse()
    return outputs, state


def run_layers(
    mode: str,
    input: Tensor,  # noqa: A002 - PyTorch's name
    state: State,
    weights: Sequence[tuple],
    num_layers: int,
    bidirectional: bool,
    dropout_p: float,
    train: bool,
    batch_sizes: list[int] | None,
):
    """All layers and directions over time-major ``input`` ((T, B, I), or packed (N, I) with
    ``batch_sizes``); ``state`` holds (layers*directions, B, H) tensors and ``weights`` one
    ``(w_ih, w_hh, b_ih, b_hh, w_hr)`` per layer and direction. Returns the last layer's output
    and the final states stacked the same way."""
    if batch_sizes is None and input.shape[0] == 0:
        raise RuntimeError("Expected sequence length to be larger than 0 in RNN")
    step = STEPS[mode]
    num_directions = 2 if bidirectional else 1
    finals = []
    for layer in range(num_layers):
        outputs = []
        for direction in range(num_directions):
            w_ih, w_hh, b_ih, b_hh, w_hr = weights[layer * num_directions + direction]
            gates = linear(input, w_ih, b_ih)
            initial = tuple([s[layer * num_directions + direction] for s in state])
            if fused_layer_ok(gates, initial, w_hh, w_hr):
                out, h_n, c_n, _ = OPS["_rnn_layer"](
                    mode,
                    gates,
                    initial[0],
                    initial[1] if mode == "LSTM" else None,
                    w_hh,
                    b_hh,
                    direction == 1,
                    batch_sizes,
                )
                outputs.append(out)
                finals.append((h_n, c_n) if mode == "LSTM" else (h_n,))
                continue
            steps = gates.unbind(0) if batch_sizes is None else gates.split(batch_sizes)
            out_steps, final = _run_direction(
                step, list(steps), initial, (w_hh, b_hh, w_hr), reverse=direction == 1
            )
            outputs.append(
                OPS["stack"](out_steps) if batch_sizes is None else OPS["cat"](out_steps)
            )
            finals.append(final)
        input = outputs[0] if num_directions == 1 else OPS["cat"](outputs, -1)
        if dropout_p > 0 and train and layer < num_layers - 1:
            input = dropout(input, dropout_p, True)
    return input, tuple([OPS["stack"]([f[k] for f in finals]) for k in range(len(state))])


# --------------------------------------------------------------------------- kiln.lstm & co.


def _grouped(params, has_biases: bool, groups: int, name: str) -> list[tuple]:
    """PyTorch's flat weight list, per layer and direction: w_ih, w_hh[, b_ih, b_hh][, w_hr]."""
    params = list(params)
    if groups == 0 or len(params) % groups:
        raise RuntimeError(f"{name}: got {len(params)} weights for {groups} layer directions")
    size = len(params) // groups
    if size not in ((4, 5) if has_biases else (2, 3)):
        raise RuntimeError(f"{name}: {size} weights per layer direction do not match has_biases")
    out = []
    for g in range(groups):
        chunk = params[g * size : (g + 1) * size]
        w_ih, w_hh = chunk[0], chunk[1]
        b_ih, b_hh = (chunk[2], chunk[3]) if has_biases else (None, None)
        w_hr = chunk[-1] if size in (3, 5) else None
        out.append((w_ih, w_hh, b_ih, b_hh, w_hr))
    return out


def _published(fn: Callable, name: str, doc: str) -> Callable:
    """``fn`` as ``kiln.<name>``: its name, its maker's docstring with the name filled in, and
    ``__torch_function__`` dispatch like PyTorch's function of that name."""
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = doc.replace("``kiln.<name>", f"``kiln.{name}")
    torch_function(name)(fn)
    return fn


def _functional(mode: str, name: str) -> Callable:
    """``kiln.<name>``: both of PyTorch's overloads -- (input, hx, params, has_biases,
    num_layers, dropout, train, bidirectional, batch_first) over a padded batch, and (data,
    batch_sizes, hx, params, has_biases, num_layers, dropout, train, bidirectional) over a
    packed one. Returns (output, h) -- (output, h, c) for the LSTM."""

    def run(input, *args):  # noqa: A002 - PyTorch's name
        # the packed overload has batch_sizes where the padded one has hx (an LSTM's is a pair)
        packed = isinstance(args[0], Tensor) and (mode == "LSTM" or isinstance(args[1], Tensor))
        if packed:
            batch_sizes, hx, params, has_biases, num_layers, p, train, bidirectional = args
            batch_first = False
        else:
            hx, params, has_biases, num_layers, p, train, bidirectional, batch_first = args
            batch_sizes = None
        state = tuple(hx) if mode == "LSTM" else (hx,)
        groups = num_layers * (2 if bidirectional else 1)
        weights = _grouped(params, has_biases, groups, name)
        x = input.transpose(0, 1) if batch_first else input
        sizes = None if batch_sizes is None else [int(n) for n in batch_sizes.tolist()]
        output, final = run_layers(
            mode, x, state, weights, num_layers, bidirectional, p, train, sizes
        )
        if batch_first:
            output = output.transpose(0, 1)
        return (output, *final)

    return _published(run, name, _functional.__doc__)


lstm = _functional("LSTM", "lstm")
gru = _functional("GRU", "gru")
rnn_tanh = _functional("RNN_TANH", "rnn_tanh")
rnn_relu = _functional("RNN_RELU", "rnn_relu")


def _cell(mode: str, name: str) -> Callable:
    """``kiln.<name>(input, hx, w_ih, w_hh, b_ih=None, b_hh=None)``: one step of a cell."""

    def cell(input, hx, w_ih, w_hh, b_ih=None, b_hh=None):  # noqa: A002 - PyTorch's name
        state = tuple(hx) if mode == "LSTM" else (hx,)
        result = STEPS[mode](linear(input, w_ih, b_ih), state, w_hh, b_hh, None)
        return result if mode == "LSTM" else result[0]

    return _published(cell, name, _cell.__doc__)


lstm_cell = _cell("LSTM", "lstm_cell")
gru_cell = _cell("GRU", "gru_cell")
rnn_tanh_cell = _cell("RNN_TANH", "rnn_tanh_cell")
rnn_relu_cell = _cell("RNN_RELU", "rnn_relu_cell")
