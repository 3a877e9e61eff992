"""``kiln.utils.tensorboard.SummaryWriter`` against ``torch.utils.tensorboard``: the same calls
write the same events (read back with tensorboard's own loaders), and TensorBoard reads them."""

from __future__ import annotations

import io
import os

import numpy as np
import pytest

import kiln

from ..oracle import needs_torch, to_torch, torch

tensorboard = pytest.importorskip("tensorboard")  # the optional extra; CI's test extra has it

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402
from tensorboard.backend.event_processing.event_file_loader import RawEventFileLoader  # noqa: E402
from tensorboard.compat.proto import event_pb2, graph_pb2  # noqa: E402

from kiln.utils.tensorboard import SummaryWriter  # noqa: E402


def _events(log_dir) -> dict[str, list]:
    """Every event file under ``log_dir`` by its directory (relative), as ``Event`` protos."""
    found = {}
    for root, _, files in os.walk(log_dir):
        for name in files:
            if name.startswith("events.out.tfevents"):
                loader = RawEventFileLoader(os.path.join(root, name))
                events = [event_pb2.Event.FromString(raw) for raw in loader.Load()]
                found[os.path.relpath(root, log_dir)] = events
    return found


def _torch_writer(*args, **kwargs):
    from torch.utils.tensorboard import SummaryWriter as TorchWriter

    return TorchWriter(*args, **kwargs)


def _pixels(png: bytes) -> np.ndarray:
    from PIL import Image

    return np.asarray(Image.open(io.BytesIO(png)))


def _comparable(event, keep_time: bool):
    """An event without what legitimately differs: the file-version event's time, times the
    caller did not fix, and the PNG encoder's bytes (the pixels are compared instead)."""
    event = event_pb2.Event.FromString(event.SerializeToString())
    pixels = []
    for value in event.summary.value:
        if value.HasField("image"):
            pixels.append(_pixels(value.image.encoded_image_string))
            value.image.encoded_image_string = b""
    if not keep_time or event.HasField("file_version"):
        event.wall_time = 0
    event.ClearField("source_metadata")
    return event, pixels


def _write_both(tmp_path, calls, keep_time=True, **options):
    """Run ``calls(writer, lib)`` on a kiln and a torch writer; their events, per directory."""
    out = []
    for lib, make in (("kiln", SummaryWriter), ("torch", _torch_writer)):
        log_dir = tmp_path / lib
        with make(log_dir=str(log_dir), **options) as writer:
            calls(writer, kiln if lib == "kiln" else torch)
        out.append(_events(log_dir))
    ours, theirs = out
    assert ours.keys() == theirs.keys()
    for where in ours:
        assert len(ours[where]) == len(theirs[where]), where
        for mine, reference in zip(ours[where], theirs[where]):
            mine, my_pixels = _comparable(mine, keep_time)
            reference, their_pixels = _comparable(reference, keep_time)
            assert mine == reference, (where, mine, reference)
            for a, b in zip(my_pixels, their_pixels, strict=True):
                np.testing.assert_array_equal(a, b)
    return ours


def _tensor(lib, array):
    return lib.tensor(array) if lib is kiln else to_torch(kiln.tensor(array))


# ---------------------------------------------------------------- the same events as PyTorch's
@needs_torch
@pytest.mark.parametrize(
    "options",
    [{}, {"new_style": True}, {"new_style": True, "double_precision": True}],
    ids=["simple_value", "new_style", "double"],
)
def test_scalars_match_pytorch(tmp_path, options):
    def calls(writer, lib):
        for step in range(3):
            writer.add_scalar("loss", 1.0 / (step + 1), step, walltime=100.0 + step, **options)
        writer.add_scalar("tensor", _tensor(lib, [2.5]), 7, walltime=5.0, **options)
        writer.add_scalar("numpy", np.float32(0.25), walltime=6.0, **options)

    _write_both(tmp_path, calls)


@needs_torch
def test_add_scalars_writes_one_run_per_curve_like_pytorch(tmp_path):
    def calls(writer, lib):
        for step in range(2):
            writer.add_scalars("run/lr", {"train": step * 1.0, "val": step * 2.0}, step, 9.0)

    events = _write_both(tmp_path, calls)
    assert {"run_lr_train", "run_lr_val"} <= set(events)


@needs_torch
@pytest.mark.parametrize(
    "bins, max_bins",
    [("tensorflow", None), (10, None), ("auto", None), (64, 7), ([-1.0, 0.0, 0.5, 4.0], None)],
)
def test_histograms_match_pytorch(tmp_path, bins, max_bins):
    values = np.random.default_rng(0).normal(size=500).astype(np.float32)

    def calls(writer, lib):
        writer.add_histogram("w", _tensor(lib, values), 3, bins, 1.0, max_bins)
        writer.add_histogram("np", values[:7] * 3, 4, bins, 2.0, max_bins)

    _write_both(tmp_path, calls)


@needs_torch
@pytest.mark.parametrize(
    "shape, dataformats, dtype",
    [
        ((3, 8, 6), "CHW", np.float32),
        ((8, 6, 3), "HWC", np.uint8),
        ((8, 6, 4), "HWC", np.float64),
        ((1, 8, 6), "CHW", np.float32),
        ((8, 6), "HW", np.float32),
    ],
)
def test_images_match_pytorch(tmp_path, shape, dataformats, dtype):
    rng = np.random.default_rng(1)
    if dtype == np.uint8:
        array = rng.integers(0, 256, size=shape).astype(np.uint8)
    else:  # a little outside [0, 1] too: clipped, as PyTorch clips
        array = rng.uniform(-0.1, 1.1, size=shape).astype(dtype)

    def calls(writer, lib):
        writer.add_image("img", _tensor(lib, array), 1, 3.0, dataformats)
        writer.add_image("np", array, 2, 4.0, dataformats)

    _write_both(tmp_path, calls)


@needs_torch
@pytest.mark.parametrize("count, channels", [(3, 3), (11, 1), (9, 3)])
def test_image_batches_are_gridded_like_pytorch(tmp_path, count, channels):
    array = np.random.default_rng(2).uniform(size=(count, channels, 5, 4)).astype(np.float32)

    def calls(writer, lib):
        writer.add_images("batch", _tensor(lib, array), 0, 1.0)
        writer.add_images("nhwc", array.transpose(0, 2, 3, 1), 1, 2.0, dataformats="NHWC")

    _write_both(tmp_path, calls)


@needs_torch
@pytest.mark.parametrize(
    "dataformats, rescale, labels",
    [("CHW", 1, ["cat", "dog"]), ("HWC", 2, None), ("CHW", 0.5, "one label for two boxes")],
)
def test_images_with_boxes_match_pytorch(tmp_path, dataformats, rescale, labels):
    pytest.importorskip("PIL")
    image = np.random.default_rng(6).uniform(size=(3, 40, 50)).astype(np.float32)
    if dataformats == "HWC":
        image = image.transpose(1, 2, 0)
    boxes = np.array([[2.0, 3.0, 30.0, 25.0], [10.0, 12.0, 45.0, 38.0]])

    def calls(writer, lib):
        writer.add_image_with_boxes("boxes", _tensor(lib, image), _tensor(lib, boxes), 1, 2.0,
                                    rescale, dataformats, labels)  # fmt: skip

    _write_both(tmp_path, calls)


@needs_torch
@pytest.mark.parametrize(
    "dtype", ["float32", "float64", "float16", "bfloat16", "int64", "int8", "uint8", "bool"]
)
def test_whole_tensors_match_pytorch(tmp_path, dtype):
    values = np.array([[0.5, -1.25, 3.0], [2.0, 0.0, 7.75]])

    def calls(writer, lib):
        tensor = lib.tensor(values).to(getattr(lib, dtype))
        writer.add_tensor("t", tensor, 4, walltime=1.0)

    _write_both(tmp_path, calls)


@needs_torch
def test_text_matches_pytorch(tmp_path):
    def calls(writer, lib):
        writer.add_text("notes", "**bold** and `code`, ünïcode", 4, walltime=8.0)

    _write_both(tmp_path, calls)


@needs_torch
@pytest.mark.parametrize("num_thresholds, weighted", [(127, False), (10, True), (300, False)])
def test_pr_curves_match_pytorch(tmp_path, num_thresholds, weighted):
    rng = np.random.default_rng(3)
    labels = rng.integers(0, 2, size=50)
    predictions = rng.uniform(size=50).astype(np.float32)
    weights = rng.uniform(size=50) if weighted else None

    def calls(writer, lib):
        writer.add_pr_curve("cat", _tensor(lib, labels == 1), _tensor(lib, predictions), 2,
                            num_thresholds, weights, walltime=3.0)  # fmt: skip
        writer.add_pr_curve("np", labels, predictions, 3, num_thresholds, weights, 4.0)

    _write_both(tmp_path, calls)


@needs_torch
def test_raw_histograms_and_pr_curves_match_pytorch(tmp_path):
    counts = np.array([3.0, 5.0, 2.0])
    limits = np.array([0.5, 1.0, 2.5])
    curve = np.random.default_rng(5).uniform(size=(6, 4))

    def calls(writer, lib):
        writer.add_histogram_raw("h", 0.1, 2.4, 10, 11.5, 20.25, limits.tolist(),
                                 counts.tolist(), 1, walltime=2.0)  # fmt: skip
        writer.add_pr_curve_raw("pr", *(_tensor(lib, row) for row in curve), 2, 4, walltime=3.0)
        writer.add_pr_curve_raw("pr_np", *curve, global_step=3, walltime=4.0)

    _write_both(tmp_path, calls)


@needs_torch
@pytest.mark.parametrize("amplitude", [0.8, 1.5], ids=["in_range", "clipped"])
def test_audio_matches_pytorch(tmp_path, amplitude):
    wave = amplitude * np.sin(np.linspace(0, 20, 400)).astype(np.float32)

    def calls(writer, lib):
        writer.add_audio("tone", _tensor(lib, wave[None]), 0, 8000, walltime=1.0)
        writer.add_audio("np", wave[:50], 1, walltime=2.0)

    _write_both(tmp_path, calls)


@needs_torch
def test_custom_scalar_layouts_match_pytorch(tmp_path):
    layout = {
        "Taiwan": {"twse": ["Multiline", ["twse/0050", "twse/2330"]]},
        "USA": {"dow": ["Margin", ["dow/aaa", "dow/bbb", "dow/ccc"]]},
    }

    def calls(writer, lib):
        writer.add_custom_scalars(layout)
        writer.add_custom_scalars_multilinechart(["a/x", "a/y"], title="both")
        writer.add_custom_scalars_marginchart(["m/v", "m/lo", "m/hi"], category="margins")

    _write_both(tmp_path, calls, keep_time=False)


def _projector_files(log_dir) -> dict[str, object]:
    """Every file the projector reads, by path: bytes, or a PNG's pixels."""
    found = {}
    for root, _, files in os.walk(log_dir):
        for name in files:
            if name.startswith("events.out.tfevents"):
                continue
            path = os.path.join(root, name)
            data = open(path, "rb").read()
            found[os.path.relpath(path, log_dir)] = _pixels(data) if name.endswith(".png") else data
    return found


@needs_torch
def test_embeddings_write_pytorchs_projector_files(tmp_path):
    rng = np.random.default_rng(4)
    features = rng.normal(size=(10, 4)).astype(np.float32)
    images = rng.uniform(size=(10, 1, 6, 5)).astype(np.float32)
    labels = [f"class {i % 3}" for i in range(10)]

    files = []
    for name, lib, make in (("kiln", kiln, SummaryWriter), ("torch", torch, _torch_writer)):
        with make(log_dir=str(tmp_path / name)) as writer:
            writer.add_embedding(_tensor(lib, features), labels, _tensor(lib, images), tag="a/b")
            writer.add_embedding(features[:3], [[1, "x"], [2, "y"], [3, "z"]], global_step=7,
                                 metadata_header=["id", "name"])  # fmt: skip
        files.append(_projector_files(tmp_path / name))
    ours, theirs = files
    assert ours.keys() == theirs.keys()
    assert "00000/a%2fb/sprite.png" in ours
    for path in ours:
        np.testing.assert_array_equal(np.asarray(ours[path]), np.asarray(theirs[path]), path)


@needs_torch
def test_figures_match_pytorch(tmp_path):
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def calls(writer, lib):
        figures = []
        for scale in (1, 2, 3):
            figure = plt.figure(figsize=(2, 1.5), dpi=40)
            plt.plot([0, 1, 2], [0, scale, 1])
            figures.append(figure)
        writer.add_figure("one", figures[0], 0, walltime=1.0)
        writer.add_figure("grid", figures[1:], 1, walltime=2.0)

    _write_both(tmp_path, calls)


@needs_torch
@pytest.mark.parametrize(
    "hparams, domains",
    [
        ({"lr": 0.1, "batch": 32, "optimizer": "adam", "nesterov": True}, None),
        ({"lr": 0.01, "optimizer": "sgd"}, {"lr": [0.01, 0.1], "optimizer": ["sgd", "adam"]}),
    ],
)
def test_hparams_match_pytorch(tmp_path, hparams, domains):
    def calls(writer, lib):
        writer.add_hparams(hparams, {"accuracy": 0.9, "loss": 0.2}, domains, "trial", 5)

    events = _write_both(tmp_path, calls, keep_time=False)
    assert "trial" in events


@needs_torch
def test_purge_step_matches_pytorch(tmp_path):
    def calls(writer, lib):
        writer.add_scalar("x", 1.0, 11, walltime=1.0)

    _write_both(tmp_path, calls, keep_time=False, purge_step=10)


# ---------------------------------------------------------------- what TensorBoard reads
def test_tensorboard_reads_every_kind(tmp_path):
    values = kiln.randn(200)
    image = kiln.rand(3, 4, 5)
    with SummaryWriter(str(tmp_path)) as writer:
        for step in range(4):
            writer.add_scalar("loss", 2.0 - step, step)
        writer.add_histogram("weights", values, 0)
        writer.add_image("picture", image, 0)
        writer.add_text("note", "hello", 0)
    accumulator = EventAccumulator(str(tmp_path), size_guidance={"scalars": 0, "images": 0})
    accumulator.Reload()
    tags = accumulator.Tags()
    assert [(e.step, e.value) for e in accumulator.Scalars("loss")] == [
        (s, 2.0 - s) for s in range(4)
    ]
    (histogram,) = accumulator.Histograms("weights")
    data = values.numpy().astype(np.float64)
    assert histogram.histogram_value.num == 200
    assert (
        histogram.histogram_value.min == data.min() and histogram.histogram_value.max == data.max()
    )
    assert sum(histogram.histogram_value.bucket) == 200
    (picture,) = accumulator.Images("picture")
    expected = (image.numpy().transpose(1, 2, 0) * 255).clip(0, 255).astype(np.uint8)
    np.testing.assert_array_equal(_pixels(picture.encoded_image_string), expected)
    assert "note/text_summary" in tags["tensors"]


def test_flush_makes_events_readable_before_close(tmp_path):
    writer = SummaryWriter(str(tmp_path), flush_secs=3600)
    writer.add_scalar("x", 3.0, 1)
    writer.flush()
    assert [e.summary.value[0].simple_value for e in _events(tmp_path)["."][1:]] == [3.0]
    writer.close()
    writer.add_scalar("x", 4.0, 2)  # after close a new event file opens, as in PyTorch
    writer.close()
    assert len(list(tmp_path.iterdir())) == 2


def test_default_log_dir_is_runs_date_host_comment(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    writer = SummaryWriter(comment="_lr0.1")
    writer.close()
    assert writer.get_logdir().startswith("runs" + os.sep) and writer.get_logdir().endswith(
        "_lr0.1"
    )
    assert os.listdir(writer.get_logdir())


# ---------------------------------------------------------------- the model graph
def _graph(log_dir) -> graph_pb2.GraphDef:
    (events,) = _events(log_dir).values()
    (event,) = [e for e in events if e.HasField("graph_def")]
    assert any(e.HasField("tagged_run_metadata") for e in events)
    return graph_pb2.GraphDef.FromString(event.graph_def)


@needs_torch
def test_add_graph_shows_pytorchs_ops_and_shapes(tmp_path):
    model = kiln.nn.Sequential(kiln.nn.Linear(3, 4), kiln.nn.ReLU(), kiln.nn.Linear(4, 2))
    reference = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    with SummaryWriter(str(tmp_path / "kiln")) as writer:
        writer.add_graph(model, kiln.randn(5, 3))
    with _torch_writer(str(tmp_path / "torch")) as writer:
        writer.add_graph(reference, torch.randn(5, 3))
    ours, theirs = _graph(tmp_path / "kiln"), _graph(tmp_path / "torch")

    def ops(graph):
        return sorted(n.op for n in graph.node if n.op.startswith("aten::") or n.op == "IO Node")

    def shapes(graph):
        return sorted(
            [list(d.size for d in s.dim) for s in n.attr["_output_shapes"].list.shape]
            for n in graph.node
            if n.op != "prim::GetAttr"
        )

    assert ops(ours) == ops(theirs)
    assert shapes(ours) == shapes(theirs)
    names = {n.name for n in ours.node}
    for node in ours.node:  # every edge ends at a node of the graph
        assert set(node.input) <= names


def test_add_graph_of_a_captured_graph_module(tmp_path):
    graph_module = kiln.ir.trace(lambda x: (x * 2).sum(), kiln.randn(3))
    with SummaryWriter(str(tmp_path)) as writer:
        writer.add_graph(graph_module)
    graph = _graph(tmp_path)
    assert [n.op for n in graph.node] == ["IO Node", "aten::mul", "aten::sum", "IO Node"]
    assert list(graph.node[1].input) == [graph.node[0].name]


# ---------------------------------------------------------------- errors, as PyTorch raises them
@needs_torch
@pytest.mark.parametrize(
    "call",
    [
        lambda w, lib: w.add_scalar("x", _tensor(lib, [1.0, 2.0])),
        lambda w, lib: w.add_histogram("h", np.zeros(0)),
        lambda w, lib: w.add_hparams({"opt": [1, 2]}, {}),
        lambda w, lib: w.add_hparams([1], {}),
        lambda w, lib: w.add_image("i", np.zeros((3, 4)), dataformats="CHW"),
        lambda w, lib: w.add_images("i", np.zeros((2, 4, 3, 3))),
        lambda w, lib: w.add_histogram("h", np.array([9.0]), bins=[0.0, 1.0, 2.0]),
    ],
    ids=[
        "non_scalar",
        "empty_histogram",
        "bad_hparam",
        "hparams_not_dict",
        "wrong_format",
        "rgba_batch",
        "values_outside_bins",
    ],  # fmt: skip
)
def test_bad_values_raise_what_pytorch_raises(tmp_path, call):
    errors = []
    for lib, make in ((kiln, SummaryWriter), (torch, _torch_writer)):
        with make(str(tmp_path / lib.__name__)) as writer:
            with pytest.raises(Exception) as info:
                call(writer, lib)
            errors.append(type(info.value))
    assert errors[0] is errors[1]
