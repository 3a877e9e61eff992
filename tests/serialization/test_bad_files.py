"""Files kiln.load must refuse with a clear error of PyTorch's type -- truncated, corrupt or
foreign files, malformed headers, and pickles that try to run code -- plus checkpoints in
kiln's first format, which still load."""

from __future__ import annotations

import io
import json
import os
import pickle
import zipfile

import numpy as np
import pytest

import kiln
from tests.oracle import needs_torch, torch


def _saved(obj=None) -> bytes:
    buf = io.BytesIO()
    kiln.save({"w": kiln.arange(4.0)} if obj is None else obj, buf)
    return buf.getvalue()


def _load(data: bytes, **kwargs):
    return kiln.load(io.BytesIO(data), **kwargs)


def _archive(pickled: bytes, storages: dict | None = None, version: bool = True) -> bytes:
    """A PyTorch-layout zip with the given data.pkl and data/<key> records."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("archive/data.pkl", pickled)
        if version:
            zf.writestr("archive/version", "3\n")
        for key, raw in (storages or {}).items():
            zf.writestr(f"archive/data/{key}", raw)
    return buf.getvalue()


def _tensor_pickle(numel: int, size: tuple, stride: tuple, offset: int = 0) -> bytes:
    """data.pkl for one float32 tensor over storage '0' (what torch.save writes)."""
    return (
        b"\x80\x02ctorch._utils\n_rebuild_tensor_v2\n((X\x07\x00\x00\x00storage"
        b"ctorch\nFloatStorage\nX\x01\x00\x00\x000X\x03\x00\x00\x00cpu"
        + pickle.dumps(numel, protocol=2)[2:-1]
        + b"tQ"
        + pickle.dumps(offset, protocol=2)[2:-1]
        + pickle.dumps(size, protocol=2)[2:-1]
        + pickle.dumps(stride, protocol=2)[2:-1]
        + b"\x89ccollections\nOrderedDict\n)RtR."
    )


def test_a_hand_written_tensor_pickle_loads():
    raw = np.arange(6, dtype=np.float32).tobytes()
    out = _load(_archive(_tensor_pickle(6, (2, 2), (1, 2), offset=1), {"0": raw}))
    assert out.tolist() == [[1.0, 3.0], [2.0, 4.0]] and out.storage_offset() == 1


def test_empty_file_is_an_eof_error():
    with pytest.raises(EOFError, match="is empty"):
        _load(b"")


@pytest.mark.parametrize("data", [b"not a zip", b"PK-not-really-a-zip", b"\x80\x04K\x01."])
def test_wrong_magic_is_an_unpickling_error_naming_the_formats(data):
    with pytest.raises(pickle.UnpicklingError, match="is not a checkpoint"):
        _load(data)


@pytest.mark.parametrize("keep", [0.1, 0.5, 0.9, -22])
def test_truncated_file_is_reported_as_damaged(keep):
    data = _saved()
    cut = int(len(data) * keep) if keep > 0 else len(data) + keep
    with pytest.raises(RuntimeError, match="damaged or truncated zip archive"):
        _load(data[:cut])


@pytest.mark.parametrize("record", ["data.pkl", "data/0"])
def test_corrupt_record_fails_its_checksum(record):
    data = bytearray(_saved())
    with zipfile.ZipFile(io.BytesIO(bytes(data))) as zf:
        info = zf.getinfo(f"archive/{record}")
    start = info.header_offset + 30 + len(info.filename) + len(info.extra)
    data[start + 1] ^= 0xFF
    with pytest.raises(RuntimeError, match="cannot be read .*Bad CRC"):
        _load(bytes(data))


def test_missing_storage_record_is_named():
    raw = np.zeros(4, np.float32).tobytes()
    with pytest.raises(RuntimeError, match="has no record archive/data/0"):
        _load(_archive(_tensor_pickle(4, (4,), (1,))))
    with pytest.raises(RuntimeError, match="should hold 40 bytes .* has 16"):
        _load(_archive(_tensor_pickle(10, (4,), (1,)), {"0": raw}))
    with pytest.raises(RuntimeError, match="needs 32 bytes of kiln.float32, but storage '0'"):
        _load(_archive(_tensor_pickle(4, (8,), (1,)), {"0": raw}))


def test_zip_that_is_not_a_checkpoint_says_what_is_missing():
    with pytest.raises(RuntimeError, match="not a checkpoint: it has no version record"):
        _load(_archive(b"", version=False))
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("model/constants.pkl", b"")
        zf.writestr("model/code/__torch__.py", b"")
        zf.writestr("model/data.pkl", b"")
    with pytest.raises(RuntimeError, match="TorchScript archive"):
        _load(buf.getvalue())


@pytest.mark.parametrize(
    "pickled",
    [b"\x80\x02", b"\x80\x02)R.", b"\x80\x02ccollections\nOrderedDict\n(K\x01tR.", b"\xff\xfe."],
    ids=["no_stop", "reduce_on_empty_stack", "wrong_arguments", "bad_opcode"],
)
def test_malformed_pickles_are_unpickling_errors(pickled):
    with pytest.raises(pickle.UnpicklingError, match="Weights only load failed"):
        _load(_archive(pickled))


_TOUCHED = []


def _side_effect(*args):
    _TOUCHED.append(args)


class _RunsCode:
    def __init__(self, func, *args):
        self.func, self.args = func, args

    def __reduce__(self):
        return (self.func, self.args)


@pytest.mark.parametrize(
    "func, refusal",
    [
        (os.system, "GLOBAL posix.system whose module posix is blocked"),
        (eval, "Unsupported global: GLOBAL eval was not an allowed global by default"),
        (_side_effect, "GLOBAL tests.serialization.test_bad_files._side_effect was not"),
    ],
    ids=["os_system", "eval", "module_function"],
)
def test_a_pickle_with_a_malicious_reduce_is_refused_without_running(tmp_path, func, refusal):
    marker = tmp_path / "ran"
    args = (f"touch {marker}",) if func is os.system else ("__import__('os')",)
    _TOUCHED.clear()
    data = _saved({"payload": _RunsCode(func, *args)})
    with pytest.raises(pickle.UnpicklingError, match=refusal):
        _load(data)
    assert not marker.exists() and not _TOUCHED


@needs_torch
def test_torch_written_malicious_pickle_is_refused_like_torch(tmp_path):
    buf = io.BytesIO()
    torch.save({"x": _RunsCode(eval, "1 + 1")}, buf)
    messages = []
    for lib in (kiln, torch):
        buf.seek(0)
        with pytest.raises(pickle.UnpicklingError) as error:
            lib.load(buf)
        messages.append(str(error.value).splitlines()[0])
    assert messages[0].replace("kiln", "torch") == messages[1]


def test_build_on_a_global_object_cannot_change_it():
    evil = b"\x80\x02ctorch\nfloat32\n}X\x04\x00\x00\x00nameX\x04\x00\x00\x00evilsb."
    with pytest.raises(pickle.UnpicklingError, match="Can only build"):
        _load(_archive(evil))
    assert kiln.float32.name == "float32"


@needs_torch
def test_legacy_pytorch_format_explains_how_to_convert():
    buf = io.BytesIO()
    torch.save({"w": torch.ones(2)}, buf, _use_new_zipfile_serialization=False)
    with pytest.raises(RuntimeError, match="PyTorch's legacy format"):
        _load(buf.getvalue())


# ---------------------------------------------------------------------------- kiln's first format


def _kiln_v2(header: dict | str, buffers: dict | None = None, pickled: bytes | None = None):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("kiln_archive/data.json", header if isinstance(header, str) else
                    json.dumps(header))  # fmt: skip
        if pickled is not None:
            zf.writestr("kiln_archive/data.pkl", pickled)
        for index, raw in (buffers or {}).items():
            zf.writestr(f"kiln_archive/tensors/{index}", raw)
    return buf.getvalue()


_RECORD = {"dtype": "float32", "shape": [2], "device": "cpu", "requires_grad": False,
           "parameter": True, "storage": 0, "offset": 4, "strides": [4]}  # fmt: skip
_BUFFERS = {0: np.arange(3, dtype=np.float32).tobytes()}


def test_kiln_first_format_tree_still_loads():
    root = {"$type": "odict", "items": [["w", {"$type": "tensor", "index": 0}],
                                        ["n", {"$type": "tuple", "items": [1, 2]}]]}  # fmt: skip
    header = {"format": "kiln", "version": 2, "tensors": [_RECORD], "root": root}
    out = _load(_kiln_v2(header, _BUFFERS))
    assert list(out) == ["w", "n"] and out["n"] == (1, 2)
    assert isinstance(out["w"], kiln.nn.Parameter) and out["w"].tolist() == [1.0, 2.0]


class _LegacyPickler(pickle.Pickler):
    def persistent_id(self, obj):
        return ("tensor", 0) if obj == "the tensor" else None


def test_kiln_first_format_pickle_still_loads():
    stream = io.BytesIO()
    _LegacyPickler(stream, protocol=2).dump({"w": "the tensor", "step": 3})
    header = {"format": "kiln", "version": 2, "tensors": [_RECORD], "root": {"$type": "pickle"}}
    out = _load(_kiln_v2(header, _BUFFERS, stream.getvalue()))
    assert out["step"] == 3 and out["w"].tolist() == [1.0, 2.0]


_DEEP = (
    '{"format": "kiln", "version": 2, "tensors": [], "root": ' + "[" * 100000 + "]" * 100000 + "}"
)


@pytest.mark.parametrize(
    "header, message",
    [
        ("{not json", "not valid JSON"),
        ({"format": "kiln", "version": 2, "root": 1}, "lacks the tensor list"),
        ({"format": "kiln", "version": 2, "tensors": [], "root": {"$type": "tensor", "index": 3}},
         "IndexError"),
        ({"format": "kiln", "version": 2, "tensors": [{}], "root": {"$type": "tensor", "index": 0}},
         "KeyError"),
        ({"format": "kiln", "version": 2, "tensors": [], "root": {"$type": "nope"}},
         "unknown record type"),
        (_DEEP, "RecursionError|not valid JSON"),
        ({"format": "kiln", "version": 9, "tensors": [], "root": 1}, "reads versions up to 2"),
    ],
    ids=["json", "no_tensors", "index", "record_keys", "type", "deep", "version"],
)  # fmt: skip
def test_kiln_first_format_with_a_malformed_header_is_reported_as_damaged(header, message):
    with pytest.raises(RuntimeError, match=message):
        _load(_kiln_v2(header))


def test_safetensors_file_given_to_load_points_at_the_right_reader(tmp_path):
    from kiln.serialization import safetensors

    path = tmp_path / "w.safetensors"
    safetensors.save_file({"w": kiln.ones(2)}, path)
    with pytest.raises(pickle.UnpicklingError, match="safetensors.load_file"):
        kiln.load(path)
