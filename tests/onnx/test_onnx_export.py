"""``kiln.onnx.export``: ONNX files that onnx.checker accepts and onnxruntime runs like eager."""

from __future__ import annotations

import io
import os
import subprocess
import sys

import numpy as np
import pytest

import kiln
import kiln.nn as nn
from tests.models.models import GPTConfig, copy_weights, models_for
from tests.oracle import assert_close, needs_torch, torch

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

MODELS = models_for(kiln)
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class LSTMNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(4, 8, num_layers=2, batch_first=True)
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        y, (h, c) = self.lstm(x)
        return self.head(y), h, c


def _export(model, args, **options) -> bytes:
    buffer = io.BytesIO()
    kiln.onnx.export(model, args, buffer, **options)
    return buffer.getvalue()


def _run(blob: bytes, *inputs) -> list[np.ndarray]:
    session = ort.InferenceSession(blob, providers=["CPUExecutionProvider"])
    feeds = {i.name: np.asarray(v) for i, v in zip(session.get_inputs(), inputs)}
    return session.run(None, feeds)


def _eager(model, *args) -> list:
    with kiln.no_grad():
        out = model(*args)
    return [o for o in (out if isinstance(out, tuple) else (out,)) if o is not None]


CASES = {
    "mlp": (lambda: MODELS.MLP(), lambda: (kiln.randn(3, 8),)),
    "cnn": (lambda: MODELS.SmallCNN(), lambda: (kiln.randn(2, 3, 8, 8),)),
    "tiny_gpt": (lambda: MODELS.TinyGPT(GPTConfig()), lambda: (kiln.randint(0, 32, (2, 16)),)),
    "lstm": (lambda: LSTMNet(), lambda: (kiln.randn(2, 5, 4),)),
}


@pytest.mark.parametrize("name", list(CASES))
def test_onnxruntime_matches_eager(name):
    make_model, make_args = CASES[name]
    model, args = make_model(), make_args()
    blob = _export(model, args)
    onnx.checker.check_model(onnx.load_from_string(blob), full_check=True)
    assert model.training  # exported in eval mode, the model's own mode restored
    model.eval()
    got = _run(blob, *[a.numpy() for a in args])
    expected = _eager(model, *args)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert_close(kiln.tensor(g), e, rtol=1e-5, atol=1e-5)


class Recurrent(nn.Module):
    """A recurrent layer with a given initial state, every output returned."""

    def __init__(self, kind: str, **options):
        super().__init__()
        self.rnn = getattr(nn, kind)(4, 6, **options)

    def forward(self, x, h0):
        out, state = self.rnn(x, h0)
        return (out, *state) if isinstance(state, tuple) else (out, state)


@pytest.mark.parametrize(
    "kind, options",
    [
        ("LSTM", dict(num_layers=2, bidirectional=True)),
        ("LSTM", dict(bias=False, batch_first=True)),
        ("GRU", dict(num_layers=2, bidirectional=True, batch_first=True)),
        ("GRU", dict(bias=False)),
        ("RNN", dict(nonlinearity="tanh", bidirectional=True)),
        ("RNN", dict(nonlinearity="relu", num_layers=2)),
    ],
)
def test_recurrent_layers_become_onnx_recurrent_operators(kind, options):
    model = Recurrent(kind, **options).eval()
    states = options.get("num_layers", 1) * (2 if options.get("bidirectional") else 1)
    x, h0 = kiln.randn(3, 5, 4), kiln.randn(states, 3 if options.get("batch_first") else 5, 6)
    h0 = (h0, kiln.randn(*h0.shape)) if kind == "LSTM" else h0
    args = (x, h0)
    blob = _export(model, args)
    onnx.checker.check_model(onnx.load_from_string(blob), full_check=True)
    operator = "RNN" if kind == "RNN" else kind
    assert operator in {n.op_type for n in onnx.load_from_string(blob).graph.node}
    flat = [x.numpy(), *([t.numpy() for t in h0] if kind == "LSTM" else [h0.numpy()])]
    for got, expected in zip(_run(blob, *flat), _eager(model, *args), strict=True):
        assert_close(kiln.tensor(got), expected, rtol=1e-5, atol=1e-5)


def test_weights_are_initializers_and_inputs_are_the_users():
    model = MODELS.SmallCNN()
    proto = onnx.load_from_string(_export(model, (kiln.randn(1, 3, 8, 8),)))
    initializers = {i.name for i in proto.graph.initializer}
    assert {"features.0.weight", "features.1.running_mean", "classifier.1.weight"} <= initializers
    assert [i.name for i in proto.graph.input] == ["x"]
    assert proto.opset_import[0].version >= 17
    ops = {n.op_type for n in proto.graph.node}
    assert {"Conv", "BatchNormalization", "MaxPool", "Relu", "MatMul"} <= ops


def test_input_and_output_names():
    model = MODELS.MLP()
    proto = onnx.load_from_string(
        _export(model, (kiln.randn(2, 8),), input_names=["features"], output_names=["logits"])
    )
    assert [i.name for i in proto.graph.input] == ["features"]
    assert [o.name for o in proto.graph.output] == ["logits"]


@pytest.mark.parametrize("name", ["mlp", "cnn", "tiny_gpt"])
def test_dynamic_batch_axis_is_symbolic_and_runs_at_other_sizes(name):
    make_model, make_args = CASES[name]
    model = make_model().eval()
    (x,) = make_args()
    input_name = "idx" if name == "tiny_gpt" else "x"
    blob = _export(model, (x,), dynamic_axes={input_name: {0: "batch"}, "output": {0: "batch"}})
    proto = onnx.load_from_string(blob)
    assert proto.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"
    assert proto.graph.output[0].type.tensor_type.shape.dim[0].dim_param == "batch"
    for batch in (1, 5):
        shape = (batch, *x.shape[1:])
        other = kiln.randint(0, 32, shape) if name == "tiny_gpt" else kiln.randn(*shape)
        assert_close(kiln.tensor(_run(blob, other.numpy())[0]), _eager(model, other)[0],
                     rtol=1e-5, atol=1e-5)  # fmt: skip


def _dims(proto, which: str) -> list:
    values = getattr(proto.graph, which)[0].type.tensor_type.shape.dim
    return [d.dim_param or d.dim_value for d in values]


def _shape_ops(proto) -> set[str]:
    return {n.op_type for n in proto.graph.node} & {"Shape", "Range"}


def test_tiny_gpt_sequence_axis_is_symbolic_and_matches_eager():
    """The sequence length sizes the position ids (arange) and slices the causal mask: the ONNX
    graph computes both from the input's shape, so it serves every length up to block_size
    (the mask's size bounds the axis, as torch.export's automatic dims find)."""
    model = MODELS.TinyGPT(GPTConfig()).eval()
    axes = {"idx": {0: "batch", 1: "seq"}, "output": {0: "batch", 1: "seq"}}
    blob = _export(model, (kiln.randint(0, 32, (2, 8)),), dynamic_axes=axes)
    proto = onnx.load_from_string(blob)
    assert _dims(proto, "input") == ["batch", "seq"]
    assert _dims(proto, "output") == ["batch", "seq", 32]
    assert _shape_ops(proto) == {"Shape", "Range"}
    for batch, seq in ((3, 5), (1, 16), (2, 1)):
        idx = kiln.randint(0, 32, (batch, seq))
        assert_close(kiln.tensor(_run(blob, idx.numpy())[0]), _eager(model, idx)[0],
                     rtol=1e-5, atol=1e-5)  # fmt: skip


def test_sizes_computed_from_a_dynamic_axis_are_onnx_arithmetic():
    """``x.shape[0] * 2`` as a value and as a reshape target: Shape, Mul, Concat in ONNX."""

    def fn(x):
        flat = x.reshape(x.shape[0] * 2, -1)
        return flat * x.shape[0]

    blob = _export(fn, (kiln.randn(4, 6),), input_names=["x"], dynamic_axes={"x": {0: "n"}})
    proto = onnx.load_from_string(blob)
    assert _dims(proto, "output") == ["2*n", 3]
    for n in (2, 7):
        x = kiln.randn(n, 6)
        assert_close(kiln.tensor(_run(blob, x.numpy())[0]), fn(x))


def test_dynamic_axis_the_code_fixes_is_an_error():
    """A reshape to a fixed size ties the axis to the example's size: an error naming the axis
    and the line, not a file that is wrong at other sizes."""

    def fn(x):
        return x.view(4, 6) + 1  # the line the error names

    with pytest.raises(kiln.onnx.OnnxExportError, match=r"batch.*constant \(4\).*line|batch"):
        _export(fn, (kiln.randn(4, 6),), input_names=["x"], dynamic_axes={"x": {0: "batch"}})
    with pytest.raises(kiln.onnx.OnnxExportError, match="test_onnx_export.py"):
        _export(fn, (kiln.randn(4, 6),), input_names=["x"], dynamic_axes={"x": {0: "batch"}})


def test_dynamic_axis_of_size_one_in_the_example_is_proven_by_resizing():
    """An example of size 1 cannot be traced symbolically (sizes 0 and 1 specialize): the
    exporter checks instead that the ONNX graph does not change with the axis."""
    model = MODELS.MLP().eval()
    blob = _export(model, (kiln.randn(1, 8),), dynamic_axes={"x": {0: "batch"}})
    assert _dims(onnx.load_from_string(blob), "input") == ["batch", 8]
    x = kiln.randn(6, 8)
    assert_close(kiln.tensor(_run(blob, x.numpy())[0]), _eager(model, x)[0], rtol=1e-5, atol=1e-5)
    gpt = MODELS.TinyGPT(GPTConfig())
    with pytest.raises(kiln.onnx.OnnxExportError, match="depends on the size of a dynamic axis"):
        _export(gpt, (kiln.randint(0, 32, (2, 1)),), dynamic_axes={"idx": [1]})


def test_op_without_a_mapping_names_the_op_and_the_line():
    def fn(x):
        return x.erfinv() * 2  # the line the error names

    with pytest.raises(kiln.onnx.OnnxExportError) as info:
        _export(fn, (kiln.rand(3),))
    message = str(info.value)
    assert "'erfinv'" in message
    assert f"test_onnx_export.py:{fn.__code__.co_firstlineno + 1}" in message


def test_cond_becomes_an_if_and_runs_either_branch():
    class Branchy(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(3, 3)

        def forward(self, x):
            return kiln.cond(x.sum() > 0, lambda x: self.lin(x).relu(), lambda x: x * -2.0, (x,))

    model = Branchy()
    blob = _export(model, (kiln.ones(2, 3),))
    assert "If" in {n.op_type for n in onnx.load_from_string(blob).graph.node}
    for x in (kiln.ones(2, 3), -kiln.ones(2, 3)):
        assert_close(kiln.tensor(_run(blob, x.numpy())[0]), _eager(model, x)[0])


@pytest.mark.parametrize("opset", [17, 18, 21])
def test_opsets(opset):
    def fn(x):
        return x.mean(-1, keepdim=True), x.amax(0), x.softmax(-1)

    x = kiln.randn(3, 4)
    blob = _export(fn, (x,), opset_version=opset)
    assert onnx.load_from_string(blob).opset_import[0].version == opset
    for got, expected in zip(_run(blob, x.numpy()), fn(x)):
        assert_close(kiln.tensor(got), expected)
    with pytest.raises(ValueError, match="opset_version 16 is not supported"):
        _export(fn, (x,), opset_version=16)


def test_args_with_a_trailing_kwargs_dict_and_a_path(tmp_path):
    def fn(x, scale=None):
        return x * scale

    x, scale = kiln.randn(2), kiln.full((2,), 3.0)
    path = tmp_path / "fn.onnx"
    kiln.onnx.export(fn, (x, {"scale": scale}), str(path))
    assert_close(kiln.tensor(_run(path.read_bytes(), x.numpy(), scale.numpy())[0]), x * scale)


@needs_torch
def test_tiny_gpt_file_matches_pytorch_eager():
    model = MODELS.TinyGPT(GPTConfig())
    reference = models_for(torch).TinyGPT(GPTConfig()).eval()
    copy_weights(torch, reference, model)
    idx = kiln.randint(0, 32, (2, 16))
    got = _run(_export(model, (idx,)), idx.numpy())[0]
    with torch.no_grad():
        expected = reference(torch.from_numpy(idx.numpy()))[0]
    np.testing.assert_allclose(got, expected.numpy(), rtol=1e-5, atol=1e-5)


def test_import_kiln_onnx_needs_neither_onnx_nor_the_compiler():
    code = (
        "import sys\n"
        "sys.modules['onnx'] = None\n"  # as if the onnx package were not installed
        "import kiln, kiln.onnx\n"
        "assert not kiln.onnx.is_in_onnx_export()\n"
        "assert 'kiln.dynamo' not in sys.modules\n"
        "try:\n"
        "    kiln.onnx.export(lambda x: x, (kiln.ones(1),), 'never.onnx')\n"
        "except ImportError as e:\n"
        "    print(e)\n"
    )
    env = dict(os.environ, PYTHONPATH=_ROOT)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "pip install onnx" in done.stdout
