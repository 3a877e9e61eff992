"""``kiln.export.save`` / ``load``: one file, text graph, safetensors weights, checksums."""

from __future__ import annotations

import hashlib
import io
import json
import struct
import zipfile

import numpy as np
import pytest

import kiln
import kiln.nn as nn
from kiln.export import ExportFileError, export, load, save
from kiln.export.archive import FORMAT_VERSION
from kiln.export.graph_text import FORMAT_VERSION as GRAPH_TEXT_VERSION
from tests.models.models import GPTConfig, models_for
from tests.oracle import assert_close

from .models import export_models

M = export_models(kiln)
MODELS = models_for(kiln)


def _parts(path) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as z:
        return {name: z.read(name) for name in z.namelist()}


def _write(path, parts: dict[str, bytes], fix_checksums: bool = True) -> None:
    """Write a container with these parts, the manifest's checksums made to match them."""
    manifest = json.loads(parts["MANIFEST.json"])
    if fix_checksums:
        for name, data in parts.items():
            if name != "MANIFEST.json":
                manifest["parts"][name] = {
                    "size": len(data), "sha256": hashlib.sha256(data).hexdigest(),
                }  # fmt: skip
    parts = dict(parts, **{"MANIFEST.json": json.dumps(manifest).encode()})
    with zipfile.ZipFile(path, "w") as z:
        for name, data in parts.items():
            z.writestr(name, data)


@pytest.fixture
def saved(tmp_path):
    model = M.WithBuffers().eval()
    x = kiln.randn(3, 4)
    ep = export(model, (x,))
    path = tmp_path / "model.kiln"
    save(ep, path)
    return model, x, path


def test_round_trip_runs_like_eager(saved):
    model, x, path = saved
    loaded = load(path)
    assert_close(loaded.module()(x), model(x))
    assert loaded.graph_signature.buffers == export(model, (x,)).graph_signature.buffers


def test_tiny_gpt_round_trip_through_a_file_object():
    model = MODELS.TinyGPT(GPTConfig()).eval()
    idx = kiln.randint(0, 32, (2, 16))
    buffer = io.BytesIO()
    save(export(model, (idx,)), buffer)
    buffer.seek(0)
    loaded = load(buffer)
    with kiln.no_grad():
        assert_close(loaded.module()(idx)[0], model(idx)[0])
    # tied weights: one tensor, read by both the embedding and the head
    assert list(loaded.state_dict).count("wte.weight") == 1


def test_input_named_like_a_builtin_round_trips(tmp_path):
    """nn.Sequential's forward takes ``input``: its placeholder is ``input_1`` (graph names are
    no Python builtins), and the signature names that placeholder."""
    model = nn.Sequential(nn.Linear(4, 6), nn.GELU(), nn.Linear(6, 2)).eval()
    x = kiln.randn(5, 4)
    ep = export(model, (x,))
    placeholders = [n.name for n in ep.graph.nodes if n.op == "placeholder"]
    assert [s.name for s in ep.graph_signature.input_specs] == placeholders
    assert ep.graph_signature.input_specs[-1].target == "input"
    save(ep, tmp_path / "seq.kiln")
    with kiln.no_grad():
        assert_close(load(tmp_path / "seq.kiln").module()(x), model(x))


def test_cond_round_trip_keeps_both_branches(tmp_path):
    model = M.Branchy()
    save(export(model, (kiln.ones(2, 3),)), tmp_path / "branchy.kiln")
    text = _parts(tmp_path / "branchy.kiln")["graph.txt"].decode()
    assert "def true_graph_0(" in text and "def false_graph_0(" in text
    module = load(tmp_path / "branchy.kiln").module()
    for x in (kiln.ones(2, 3), -kiln.ones(2, 3)):
        assert_close(module(x), model(x))


def test_graph_is_readable_versioned_text(saved):
    _, _, path = saved
    parts = _parts(path)
    assert set(parts) == {"MANIFEST.json", "graph.txt", "program.json", "weights.safetensors"}
    text = parts["graph.txt"].decode()
    assert text.startswith(f"# kiln.export graph, format {GRAPH_TEXT_VERSION}\n")
    assert "kiln.ops.linear(x, p_lin_weight, p_lin_bias)" in text
    manifest = json.loads(parts["MANIFEST.json"])
    assert manifest["format"] == "kiln.exported_program" and manifest["version"] == FORMAT_VERSION


def test_weights_are_in_safetensors_layout(saved):
    """Read the weights part by the safetensors spec alone (header length, JSON, raw bytes)."""
    model, _, path = saved
    blob = _parts(path)["weights.safetensors"]
    (size,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8 : 8 + size])
    data = blob[8 + size :]
    entry = header["lin.weight"]
    assert entry["dtype"] == "F32" and entry["shape"] == [3, 4]
    begin, end = entry["data_offsets"]
    weight = np.frombuffer(data[begin:end], "<f4").reshape(3, 4)
    np.testing.assert_array_equal(weight, model.lin.weight.detach().numpy())
    assert header["bn.num_batches_tracked"]["dtype"] == "I64"
    assert "shift" in header  # non-persistent buffers travel as constants


def test_newer_format_version_is_refused(saved, tmp_path):
    _, _, path = saved
    parts = _parts(path)
    manifest = json.loads(parts["MANIFEST.json"])
    manifest["version"] = FORMAT_VERSION + 1
    parts["MANIFEST.json"] = json.dumps(manifest).encode()
    _write(tmp_path / "newer.kiln", parts)
    newer = f"format version {FORMAT_VERSION + 1}, newer than the {FORMAT_VERSION}"
    with pytest.raises(ExportFileError, match=newer):
        load(tmp_path / "newer.kiln")


def test_newer_graph_text_format_is_refused(saved, tmp_path):
    _, _, path = saved
    parts = _parts(path)
    current = f"format {GRAPH_TEXT_VERSION}".encode()
    parts["graph.txt"] = parts["graph.txt"].replace(current, b"format 7", 1)
    _write(tmp_path / "newer.kiln", parts)
    with pytest.raises(ExportFileError, match="format 7, newer"):
        load(tmp_path / "newer.kiln")


@pytest.mark.parametrize("keep", [0.3, 0.9, 0.999])
def test_truncated_file_is_refused(saved, tmp_path, keep):
    _, _, path = saved
    data = path.read_bytes()
    cut = tmp_path / "cut.kiln"
    cut.write_bytes(data[: int(len(data) * keep)])
    with pytest.raises(ExportFileError, match="not a complete kiln file|damaged"):
        load(cut)


def test_tampered_graph_text_is_refused(saved, tmp_path):
    _, _, path = saved
    parts = _parts(path)
    parts["graph.txt"] = parts["graph.txt"].replace(b"kiln.ops.relu", b"kiln.ops.sigmoid")
    _write(tmp_path / "tampered.kiln", parts, fix_checksums=False)
    with pytest.raises(ExportFileError, match="checksum of part graph.txt does not match"):
        load(tmp_path / "tampered.kiln")


def test_tampered_weight_bytes_are_refused(saved, tmp_path):
    _, _, path = saved
    parts = _parts(path)
    blob = bytearray(parts["weights.safetensors"])
    blob[-3] ^= 0x40  # one bit of the last tensor's data
    parts["weights.safetensors"] = bytes(blob)
    _write(tmp_path / "tampered.kiln", parts, fix_checksums=False)
    with pytest.raises(ExportFileError, match="checksum of part weights.safetensors"):
        load(tmp_path / "tampered.kiln")


def test_bytes_changed_in_place_fail_the_archive_checks(saved, tmp_path):
    """Editing the file's bytes directly (not rebuilding the zip) is caught as well."""
    _, _, path = saved
    data = bytearray(path.read_bytes())
    at = bytes(data).index(b"kiln.ops.relu")
    data[at + len("kiln.ops.")] = ord("x")
    edited = tmp_path / "edited.kiln"
    edited.write_bytes(bytes(data))
    with pytest.raises(ExportFileError, match="damaged|does not match"):
        load(edited)


def test_loading_never_runs_code_from_the_file(saved, tmp_path):
    """A forged file (checksums made to match) that smuggles Python into an argument is
    rejected by the parser; nothing in it runs."""
    _, _, path = saved
    marker = tmp_path / "ran"
    parts = _parts(path)
    text = (
        parts["graph.txt"]
        .decode()
        .replace(
            "kiln.ops.relu(",
            f"kiln.ops.relu(__import__('pathlib').Path({str(marker)!r}).touch() or ",
            1,
        )
    )
    parts["graph.txt"] = text.encode()
    _write(tmp_path / "forged.kiln", parts)
    with pytest.raises(ExportFileError, match="is not a value kiln writes"):
        load(tmp_path / "forged.kiln")
    assert not marker.exists()


@pytest.mark.parametrize(
    "edit, message",
    [
        (("kiln.ops.relu(", "kiln.ops.no_such_op("), "unknown op kiln.ops.no_such_op"),
        (("kiln.ops.mul(", "kiln.ops.sum("), "node mul .kiln.ops.sum. fails on its inputs"),
        (("Tensor(float32, [3, 3])", "Tensor(float32, [3, 2])"), "annotated"),
    ],
)
def test_forged_graph_text_is_checked_against_the_op_registry(saved, tmp_path, edit, message):
    _, _, path = saved
    parts = _parts(path)
    parts["graph.txt"] = parts["graph.txt"].decode().replace(*edit, 1).encode()
    _write(tmp_path / "forged.kiln", parts)
    with pytest.raises(ExportFileError, match=message):
        load(tmp_path / "forged.kiln")


def test_forged_weights_must_fit_the_graph(saved, tmp_path):
    from kiln.serialization import safetensors

    _, _, path = saved
    parts = _parts(path)
    weights = safetensors.load(parts["weights.safetensors"])
    weights["lin.weight"] = kiln.zeros(4, 3)
    parts["weights.safetensors"] = safetensors.save(weights)
    _write(tmp_path / "forged.kiln", parts)
    with pytest.raises(ExportFileError, match=r"weight 'lin.weight' is kiln.float32\[4, 3\]"):
        load(tmp_path / "forged.kiln")


def test_a_package_is_not_loaded_as_a_program(tmp_path):
    path = tmp_path / "not_a_program.kiln"
    path.write_bytes(b"PK\x03\x04 not really")
    with pytest.raises(ExportFileError, match="not a complete kiln file"):
        load(path)
