"""Recurrent layers (``RNN``, ``LSTM``, ``GRU``) and their single-step cells, as ``torch.nn``.

Parameter names, shapes, initialisation and gate order match PyTorch (LSTM gates ``i, f, g, o``;
GRU gates ``r, z, n``), so state dicts move between the two unchanged. The math is a Python loop
over time steps calling kiln ops: autograd differentiates it and ``kiln.compile`` unrolls it. The
input projection of a whole sequence is one matmul before the loop, as PyTorch does on the CPU.
Packed sequences shrink the active batch step by step: rows past ``batch_sizes[t]`` keep their
state (finished sequences in the forward direction, not yet started ones in the reverse one).
"""

from __future__ import annotations

import math
import numbers
import warnings
from collections.abc import Callable

from ...ops.core.grad_fn_naming import rename_grad_fn
from ...ops.creation import api
from ...runtime import dtypes
from ...runtime.state import per_thread
from ...runtime.tensor import Tensor
from .. import functional as F
from .. import init
from .._functional.recurrent import GATES, STEPS, run_layers
from ..parameter import Parameter
from ..utils.rnn import PackedSequence
from .module import Module

__all__ = ["RNNBase", "RNN", "LSTM", "GRU", "RNNCellBase", "RNNCell", "LSTMCell", "GRUCell"]

State = tuple[Tensor, ...]


class RNNBase(Module):
    """Parameters and argument handling shared by ``RNN``, ``LSTM`` and ``GRU``.

    ``mode`` is ``"RNN_TANH"``, ``"RNN_RELU"``, ``"LSTM"`` or ``"GRU"``. Like PyTorch's, the base
    class has no ``forward`` of its own."""

    def __init__(
        self,
        mode: str,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        bias: bool = True,
        batch_first: bool = False,
        dropout: float = 0.0,
        bidirectional: bool = False,
        proj_size: int = 0,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        if (
            not isinstance(dropout, numbers.Number)
            or isinstance(dropout, bool)
            or not 0 <= dropout <= 1
        ):
            raise ValueError(
                "dropout should be a number in range [0, 1] representing the probability of an "
                "element being zeroed"
            )
        if dropout > 0 and num_layers == 1:
            warnings.warn(
                "dropout option adds dropout after all but last recurrent layer, so non-zero "
                f"dropout expects num_layers greater than 1, but got dropout={dropout} and "
                f"num_layers={num_layers}",
                stacklevel=2,
            )
        for name, value, kind in (
            ("bias", bias, bool),
            ("batch_first", batch_first, bool),
            ("input_size", input_size, int),
            ("hidden_size", hidden_size, int),
        ):
            if not isinstance(value, kind):
                raise TypeError(
                    f"{name} should be of type {kind.__name__}, got: {type(value).__name__}"
                )
            if kind is int and value <= 0:
                raise ValueError(f"{name} must be greater than zero")
        if num_layers <= 0:
            raise ValueError("num_layers must be greater than zero")
        if proj_size < 0:
            raise ValueError(
                "proj_size should be a positive integer or zero to disable projections"
            )
        if proj_size >= hidden_size:
            raise ValueError("proj_size has to be smaller than hidden_size")
        if mode not in GATES:
            raise ValueError("Unrecognized RNN mode: " + mode)
        self.mode = mode
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.bias = bias
        self.batch_first = batch_first
        self.dropout = float(dropout)
        self.bidirectional = bidirectional
        self.proj_size = proj_size
        gate_size = GATES[mode] * hidden_size
        real_hidden_size = proj_size if proj_size > 0 else hidden_size
        num_directions = 2 if bidirectional else 1
        self._flat_weights_names: list[str] = []
        self._all_weights: list[list[str]] = []
        for layer in range(num_layers):
            layer_input_size = input_size if layer == 0 else real_hidden_size * num_directions
            for direction in range(num_directions):
                suffix = "_reverse" if direction == 1 else ""
                shapes = {
                    "weight_ih": (gate_size, layer_input_size),
                    "weight_hh": (gate_size, real_hidden_size),
                }
                if bias:
                    shapes.update(bias_ih=(gate_size,), bias_hh=(gate_size,))
                if proj_size > 0:
                    shapes["weight_hr"] = (proj_size, hidden_size)
                names = []
                for kind, shape in shapes.items():
                    name = f"{kind}_l{layer}{suffix}"
                    setattr(self, name, Parameter(api.empty(shape, device=device, dtype=dtype)))
                    names.append(name)
                self._flat_weights_names.extend(names)
                self._all_weights.append(names)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Every weight and bias ~ U(-1/sqrt(hidden_size), 1/sqrt(hidden_size)), as PyTorch."""
        stdv = 1.0 / math.sqrt(self.hidden_size) if self.hidden_size > 0 else 0
        for weight in self.parameters():
            init.uniform_(weight, -stdv, stdv)

    @property
    def _flat_weights(self) -> list:
        return [getattr(self, name, None) for name in self._flat_weights_names]

    @property
    def all_weights(self) -> list[list[Parameter]]:
        return [[getattr(self, name) for name in names] for names in self._all_weights]

    def flatten_parameters(self) -> None:
        """A no-op: kiln keeps each weight as its own tensor (PyTorch packs them for cuDNN)."""

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if self.proj_size != 0:
            s += f", proj_size={self.proj_size}"
        if self.num_layers != 1:
            s += f", num_layers={self.num_layers}"
        if self.bias is not True:
            s += f", bias={self.bias}"
        if self.batch_first is not False:
            s += f", batch_first={self.batch_first}"
        if self.dropout != 0:
            s += f", dropout={self.dropout}"
        if self.bidirectional is not False:
            s += f", bidirectional={self.bidirectional}"
        return s

    # ------------------------------------------------------------------ argument checks
    def check_input(self, input: Tensor, batch_sizes: Tensor | None) -> None:
        weight_dtype = self.weight_ih_l0.dtype
        # under autocast (any device) the step's products cast their operands, as in PyTorch
        if input.dtype != weight_dtype and per_thread.state.autocast is None:
            raise ValueError(
                f"RNN input dtype ({input.dtype}) does not match weight dtype ({weight_dtype}). "
                f"Convert input: input.to({weight_dtype}), or convert model: "
                f"model.to({input.dtype})"
            )
        expected_dim = 2 if batch_sizes is not None else 3
        if input.dim() != expected_dim:
            raise RuntimeError(f"input must have {expected_dim} dimensions, got {input.dim()}")
        if self.input_size != input.size(-1):
            raise RuntimeError(
                "input.size(-1) must be equal to input_size. Expected "
                f"{self.input_size}, got {input.size(-1)}"
            )

    def _mini_batch(self, input: Tensor, batch_sizes: Tensor | None) -> int:
        if batch_sizes is not None:
            return int(batch_sizes[0])
        return input.size(0) if self.batch_first else input.size(1)

    def get_expected_hidden_size(
        self, input: Tensor, batch_sizes: Tensor | None
    ) -> tuple[int, int, int]:
        layers = self.num_layers * (2 if self.bidirectional else 1)
        size = self.proj_size if self.proj_size > 0 else self.hidden_size
        return (layers, self._mini_batch(input, batch_sizes), size)

    def check_hidden_size(
        self,
        hx: Tensor,
        expected_hidden_size: tuple[int, int, int],
        msg: str = "Expected hidden size {}, got {}",
    ) -> None:
        if tuple(hx.size()) != tuple(expected_hidden_size):
            raise RuntimeError(msg.format(expected_hidden_size, list(hx.size())))

    def check_forward_args(self, input: Tensor, hidden: Tensor, batch_sizes: Tensor | None):
        self.check_input(input, batch_sizes)
        self.check_hidden_size(hidden, self.get_expected_hidden_size(input, batch_sizes))

    def permute_hidden(self, hx: Tensor, permutation: Tensor | None) -> Tensor:
        if permutation is None:
            return hx
        return hx.index_select(1, permutation)

    # ------------------------------------------------------------------ the computation
    def _zero_state(self, input: Tensor, batch: int) -> Tensor:
        """Default hidden state; ``LSTM`` overrides it to return ``(h0, c0)``."""
        layers = self.num_layers * (2 if self.bidirectional else 1)
        return api.zeros(layers, batch, self.hidden_size, dtype=input.dtype, device=input.device)

    def _layer_weights(self, layer: int, direction: int) -> tuple:
        suffix = "_reverse" if direction == 1 else ""
        biases = (None, None)
        if self.bias:
            biases = (
                getattr(self, f"bias_ih_l{layer}{suffix}"),
                getattr(self, f"bias_hh_l{layer}{suffix}"),
            )
        w_hr = getattr(self, f"weight_hr_l{layer}{suffix}") if self.proj_size > 0 else None
        w_ih = getattr(self, f"weight_ih_l{layer}{suffix}")
        w_hh = getattr(self, f"weight_hh_l{layer}{suffix}")
        return w_ih, w_hh, biases[0], biases[1], w_hr

    def _run_layers(self, input: Tensor, state: State, batch_sizes: list[int] | None):
        """All layers and directions (``recurrent.run_layers``) with this module's weights."""
        directions = 2 if self.bidirectional else 1
        weights = [
            self._layer_weights(layer, direction)
            for layer in range(self.num_layers)
            for direction in range(directions)
        ]
        return run_layers(
            self.mode, input, state, weights, self.num_layers, self.bidirectional,
            self.dropout, self.training, batch_sizes,
        )  # fmt: skip

    def _forward(self, input, hx, input_error: str, hx_dims: Callable):
        """PyTorch's argument handling (packed or padded, unbatched, batch_first, default and
        permuted states) around :meth:`_run_layers`. ``hx_dims(hx, batched)`` checks the
        dimensions of a user-given state and returns it batched."""
        is_lstm = self.mode == "LSTM"
        if isinstance(input, PackedSequence):
            input, batch_sizes, sorted_indices, unsorted_indices = input
            if hx is None:
                hx = self._zero_state(input, int(batch_sizes[0]))
            else:
                hx = self.permute_hidden(hx, sorted_indices)
            self.check_forward_args(input, hx, batch_sizes)
            state = hx if is_lstm else (hx,)
            output, final = self._run_layers(input, state, batch_sizes.tolist())
            final = final if is_lstm else final[0]
            packed = PackedSequence(output, batch_sizes, sorted_indices, unsorted_indices)
            return packed, self.permute_hidden(final, unsorted_indices)
        if input.dim() not in (2, 3):
            raise ValueError(input_error.format(input.dim()))
        is_batched = input.dim() == 3
        batch_dim = 0 if self.batch_first else 1
        if not is_batched:
            input = input.unsqueeze(batch_dim)
        if hx is None:
            hx = self._zero_state(input, input.size(batch_dim))
        else:
            hx = hx_dims(hx, is_batched)
        self.check_forward_args(input, hx, None)
        if self.batch_first:
            input = input.transpose(0, 1)
        output, final = self._run_layers(input, hx if is_lstm else (hx,), None)
        if is_lstm and not self.bidirectional and self.proj_size == 0:
            if output.dtype in (dtypes.float32, dtypes.bfloat16):
                # PyTorch's CPU LSTM runs in oneDNN there, and its output node says so
                rename_grad_fn(output, (input,), "MkldnnRnnLayerBackward0")
        if self.batch_first:
            output = output.transpose(0, 1)
            if not is_lstm:  # PyTorch's GRU and RNN transpose through another overload
                rename_grad_fn(output, (), "TransposeBackward1")
        if not is_batched:
            output = output.squeeze(batch_dim)
            final = tuple([f.squeeze(1) for f in final])
        return output, final if is_lstm else final[0]


def _single_state_dims(hx: Tensor, batched: bool) -> Tensor:
    if batched and hx.dim() != 3:
        raise RuntimeError(
            f"For batched 3-D input, hx should also be 3-D but got {hx.dim()}-D tensor"
        )
    if not batched:
        if hx.dim() != 2:
            raise RuntimeError(
                f"For unbatched 2-D input, hx should also be 2-D but got {hx.dim()}-D tensor"
            )
        hx = hx.unsqueeze(1)
    return hx


def _lstm_state_dims(hx: State, batched: bool) -> State:
    want = 3 if batched else 2
    if hx[0].dim() != want or hx[1].dim() != want:
        kind = "batched 3-D" if batched else "unbatched 2-D"
        raise RuntimeError(
            f"For {kind} input, hx and cx should also be {want}-D but got "
            f"({hx[0].dim()}-D, {hx[1].dim()}-D) tensors"
        )
    return hx if batched else (hx[0].unsqueeze(1), hx[1].unsqueeze(1))


class RNN(RNNBase):
    """Elman RNN: ``h_t = act(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh)``, act tanh or relu.

    ``RNN(input_size, hidden_size, num_layers=1, nonlinearity='tanh', bias=True,
    batch_first=False, dropout=0.0, bidirectional=False, device=None, dtype=None)``."""

    def __init__(self, *args, **kwargs) -> None:
        if "proj_size" in kwargs:
            raise ValueError("proj_size argument is only supported for LSTM, not RNN or GRU")
        if len(args) > 3:
            nonlinearity = args[3]
            args = args[:3] + args[4:]
        else:
            nonlinearity = kwargs.pop("nonlinearity", "tanh")
        modes = {"tanh": "RNN_TANH", "relu": "RNN_RELU"}
        if nonlinearity not in modes:
            raise ValueError(
                f"Unknown nonlinearity '{nonlinearity}'. Select from 'tanh' or 'relu'."
            )
        super().__init__(modes[nonlinearity], *args, **kwargs)
        self.nonlinearity = nonlinearity

    def forward(self, input, hx: Tensor | None = None):
        """``(output, h_n)``; a :class:`PackedSequence` input gives a packed output."""
        return self._forward(
            input,
            hx,
            "RNN: Expected input to be 2D or 3D, got {}D tensor instead",
            _single_state_dims,
        )


class LSTM(RNNBase):
    """Long short-term memory, gates ``i, f, g, o``; with ``proj_size > 0`` the hidden state is
    projected by ``weight_hr`` (then ``h`` has ``proj_size`` features, ``c`` ``hidden_size``)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__("LSTM", *args, **kwargs)

    def get_expected_cell_size(
        self, input: Tensor, batch_sizes: Tensor | None
    ) -> tuple[int, int, int]:
        layers = self.num_layers * (2 if self.bidirectional else 1)
        return (layers, self._mini_batch(input, batch_sizes), self.hidden_size)

    def check_forward_args(self, input: Tensor, hidden: State, batch_sizes: Tensor | None):
        self.check_input(input, batch_sizes)
        self.check_hidden_size(
            hidden[0],
            self.get_expected_hidden_size(input, batch_sizes),
            "Expected hidden[0] size {}, got {}",
        )
        self.check_hidden_size(
            hidden[1],
            self.get_expected_cell_size(input, batch_sizes),
            "Expected hidden[1] size {}, got {}",
        )

    def permute_hidden(self, hx: State, permutation: Tensor | None) -> State:
        if permutation is None:
            return hx
        return hx[0].index_select(1, permutation), hx[1].index_select(1, permutation)

    def _zero_state(self, input: Tensor, batch: int) -> State:
        layers = self.num_layers * (2 if self.bidirectional else 1)
        h_size = self.proj_size if self.proj_size > 0 else self.hidden_size
        options = {"dtype": input.dtype, "device": input.device}
        h0 = api.zeros(layers, batch, h_size, **options)
        return h0, api.zeros(layers, batch, self.hidden_size, **options)

    def forward(self, input, hx: State | None = None):
        """``(output, (h_n, c_n))``; a :class:`PackedSequence` input gives a packed output."""
        return self._forward(
            input, hx, "LSTM: Expected input to be 2D or 3D, got {}D instead", _lstm_state_dims
        )


class GRU(RNNBase):
    """Gated recurrent unit, gates ``r, z, n``: ``h' = (1 - z) * n + z * h``."""

    def __init__(self, *args, **kwargs) -> None:
        if "proj_size" in kwargs:
            raise ValueError("proj_size argument is only supported for LSTM, not RNN or GRU")
        super().__init__("GRU", *args, **kwargs)

    def forward(self, input, hx: Tensor | None = None):
        """``(output, h_n)``; a :class:`PackedSequence` input gives a packed output."""
        return self._forward(
            input, hx, "GRU: Expected input to be 2D or 3D, got {}D instead", _single_state_dims
        )


# --------------------------------------------------------------------------- cells
class RNNCellBase(Module):
    """``weight_ih`` (chunks*hidden, input), ``weight_hh`` (chunks*hidden, hidden) and optional
    biases, all ~ U(-1/sqrt(hidden_size), 1/sqrt(hidden_size))."""

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        bias: bool,
        num_chunks: int,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.bias = bias
        options = {"device": device, "dtype": dtype}
        gate_size = num_chunks * hidden_size
        self.weight_ih = Parameter(api.empty((gate_size, input_size), **options))
        self.weight_hh = Parameter(api.empty((gate_size, hidden_size), **options))
        if bias:
            self.bias_ih = Parameter(api.empty(gate_size, **options))
            self.bias_hh = Parameter(api.empty(gate_size, **options))
        else:
            self.register_parameter("bias_ih", None)
            self.register_parameter("bias_hh", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        stdv = 1.0 / math.sqrt(self.hidden_size) if self.hidden_size > 0 else 0
        for weight in self.parameters():
            init.uniform_(weight, -stdv, stdv)

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if self.bias is not True:
            s += f", bias={self.bias}"
        nonlinearity = self.__dict__.get("nonlinearity", "tanh")
        if nonlinearity != "tanh":
            s += f", nonlinearity={nonlinearity}"
        return s

    def _check_dims(self, input: Tensor, states: tuple, names: tuple[str, ...]) -> None:
        kind = type(self).__name__
        if input.dim() not in (1, 2):
            raise ValueError(f"{kind}: Expected input to be 1D or 2D, got {input.dim()}D instead")
        for state, name in zip(states, names):
            if state is not None and state.dim() not in (1, 2):
                raise ValueError(
                    f"{kind}: Expected {name} to be 1D or 2D, got {state.dim()}D instead"
                )

    def _run_cell(self, step, input: Tensor, state: State | None, names: tuple) -> State:
        """PyTorch's argument handling around one ``step``: dimension checks, unbatched (1-D)
        input and states, zero default states (``names`` label them); ``step`` None means an
        unknown nonlinearity, reported after the checks as PyTorch does."""
        self._check_dims(input, state or (), names)
        is_batched = input.dim() == 2
        if not is_batched:
            input = input.unsqueeze(0)
        if state is None:
            zeros = api.zeros(
                input.size(0), self.hidden_size, dtype=input.dtype, device=input.device
            )
            state = tuple([zeros for _ in names])
        elif not is_batched:
            state = tuple([s.unsqueeze(0) for s in state])
        if step is None:
            raise RuntimeError(f"Unknown nonlinearity: {self.nonlinearity}")
        result = self._step(step, input, tuple(state))
        return result if is_batched else tuple([r.squeeze(0) for r in result])

    def _step(self, step, input: Tensor, state: State) -> State:
        """One step of ``step`` after PyTorch's size checks (on the batched tensors)."""
        if input.size(1) != self.input_size:
            raise RuntimeError(
                f"input has inconsistent input_size: got {input.size(1)} expected {self.input_size}"
            )
        for k, s in enumerate(state):
            if input.size(0) != s.size(0):
                raise RuntimeError(
                    f"Input batch size {input.size(0)} doesn't match hidden{k} batch size "
                    f"{s.size(0)}"
                )
            if s.size(1) != self.hidden_size:
                raise RuntimeError(
                    f"hidden{k} has inconsistent hidden_size: got {s.size(1)}, expected "
                    f"{self.hidden_size}"
                )
        gates_x = F.linear(input, self.weight_ih, self.bias_ih)
        return step(gates_x, state, self.weight_hh, self.bias_hh, None)


class RNNCell(RNNCellBase):
    """One Elman RNN step: ``h' = act(x W_ih^T + b_ih + h W_hh^T + b_hh)``."""

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        bias: bool = True,
        nonlinearity: str = "tanh",
        device=None,
        dtype=None,
    ) -> None:
        super().__init__(input_size, hidden_size, bias, num_chunks=1, device=device, dtype=dtype)
        self.nonlinearity = nonlinearity

    def forward(self, input: Tensor, hx: Tensor | None = None) -> Tensor:
        step = {"tanh": STEPS["RNN_TANH"], "relu": STEPS["RNN_RELU"]}.get(self.nonlinearity)
        return self._run_cell(step, input, None if hx is None else (hx,), ("hidden",))[0]


class LSTMCell(RNNCellBase):
    """One LSTM step; ``hx`` is ``(h, c)`` and the result ``(h', c')``."""

    def __init__(
        self, input_size: int, hidden_size: int, bias: bool = True, device=None, dtype=None
    ) -> None:
        super().__init__(input_size, hidden_size, bias, num_chunks=4, device=device, dtype=dtype)

    def forward(self, input: Tensor, hx: State | None = None) -> State:
        state = None if hx is None else tuple(hx)
        return self._run_cell(STEPS["LSTM"], input, state, ("hx[0]", "hx[1]"))


class GRUCell(RNNCellBase):
    """One GRU step: ``h' = (1 - z) * n + z * h``."""

    def __init__(
        self, input_size: int, hidden_size: int, bias: bool = True, device=None, dtype=None
    ) -> None:
        super().__init__(input_size, hidden_size, bias, num_chunks=3, device=device, dtype=dtype)

    def forward(self, input: Tensor, hx: Tensor | None = None) -> Tensor:
        return self._run_cell(STEPS["GRU"], input, None if hx is None else (hx,), ("hidden",))[0]
