"""``KILN_LOGS=aot`` prints the AOT graphs with shapes and the saved bytes; ``KILN_DEBUG_DIR``
writes the graphs to files."""

from __future__ import annotations

import re

import pytest

import kiln
from kiln.runtime import logs as klog


@pytest.fixture
def aot_logs():
    klog.set_logs("aot")
    yield
    klog.set_logs("")


def _train_step(model, x):
    compiled = kiln.compile(model, backend="aot_eager")
    compiled(x).sum().backward()


def _model():
    return kiln.nn.Sequential(kiln.nn.Linear(5, 7), kiln.nn.Tanh(), kiln.nn.Linear(7, 2))


def test_aot_logs_print_joint_forward_and_backward_graphs_with_shapes(aot_logs, capfd):
    _train_step(_model(), kiln.randn(3, 5))
    err = capfd.readouterr().err
    sections = re.split(r"\[kiln\.aot\] ===== (\w+) graph =====", err)
    names = sections[1::2]
    assert names == ["joint", "forward", "backward"]
    joint, forward, backward = (sections[i] for i in (2, 4, 6))
    assert "tangents_1,  # f32[3, 2]" in joint and "primals_1,  # f32[3, 5]" in joint
    assert "kiln.ops.mm(" in forward and "# f32[3, 7]" in forward
    assert "tangents_1" in backward and "tangents_1" not in forward
    assert "[kiln.aot] saved for backward: default_partition: saves" in err


def test_aot_logs_print_only_an_inference_graph_under_no_grad(aot_logs, capfd):
    with kiln.no_grad():
        kiln.compile(_model(), backend="aot_eager")(kiln.randn(3, 5))
    err = capfd.readouterr().err
    assert re.findall(r"===== (\w+) graph =====", err) == ["inference"]
    assert "saved for backward" not in err


def test_nothing_is_printed_without_the_aot_artifact(capfd):
    _train_step(_model(), kiln.randn(3, 5))
    assert "[kiln.aot]" not in capfd.readouterr().err


def test_debug_dir_receives_the_aot_graphs(tmp_path, monkeypatch):
    monkeypatch.setenv("KILN_DEBUG_DIR", str(tmp_path))
    _train_step(_model(), kiln.randn(3, 5))
    files = {re.sub(r"^\d+_", "", p.name): p.read_text() for p in tmp_path.iterdir()}
    for stage in ("joint", "forward", "backward"):
        text = files[f"aot_{stage}.py"]
        assert "def forward(" in text and "# f32[" in text
    assert "tangents_1" in files["aot_backward.py"]
    assert "tangents_1" not in files["aot_forward.py"]
