"""kiln.serialization.safetensors against the safetensors package: files written by either load
in the other, with the package's checks (contiguous, unshared) and its refusal of bad headers."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest

import kiln
from kiln.serialization import safetensors as kst
from tests.oracle import needs_torch, to_numpy, to_torch, torch

st = pytest.importorskip("safetensors")
import safetensors.numpy  # noqa: E402

_DTYPES = [kiln.float32, kiln.float64, kiln.float16, kiln.bfloat16, kiln.int64, kiln.int32,
           kiln.int16, kiln.int8, kiln.uint8, kiln.bool]  # fmt: skip


def _tensors(dtypes=_DTYPES):
    rng = np.random.default_rng(0)
    out = {}
    for i, dtype in enumerate(dtypes):
        shape = [(), (0,), (3,), (2, 3, 4)][i % 4]
        out[f"t{i}.{dtype}"] = kiln.tensor(rng.standard_normal(shape) * 30).to(dtype)
    return out


@needs_torch
def test_kiln_file_loads_in_the_safetensors_package(tmp_path):
    from safetensors.torch import load_file, safe_open

    path = tmp_path / "k.safetensors"
    tensors = _tensors()
    kst.save_file(tensors, path, metadata={"format": "pt", "step": "3"})
    loaded = load_file(path)
    assert sorted(loaded) == sorted(tensors)
    for name, t in tensors.items():
        want = to_torch(t)
        assert loaded[name].dtype == want.dtype and loaded[name].shape == want.shape
        assert torch.equal(loaded[name], want)
    with safe_open(str(path), framework="pt") as f:
        assert f.metadata() == {"format": "pt", "step": "3"}


@needs_torch
def test_safetensors_package_file_loads_in_kiln(tmp_path):
    from safetensors.torch import save_file

    path = tmp_path / "t.safetensors"
    tensors = {name: to_torch(t) for name, t in _tensors().items()}
    tensors["complex"] = torch.tensor([1 + 2j, 3 - 1j], dtype=torch.complex64)
    save_file(tensors, str(path), metadata={"a": "b"})
    loaded = kst.load_file(path)
    for name, want in tensors.items():
        assert str(loaded[name].dtype).split(".")[-1] == str(want.dtype).split(".")[-1]
        np.testing.assert_array_equal(to_numpy(loaded[name]), to_numpy(want))
    with kst.safe_open(path, framework="pt") as f:
        assert f.metadata() == {"a": "b"} and f.keys() == sorted(tensors)
        part = f.get_slice("complex")
        assert part.get_shape() == [2] and part.get_dtype() == "C64"
        assert part[1:].tolist() == [3 - 1j]


def test_bytes_round_trip_with_the_numpy_api():
    tensors = _tensors([kiln.float32, kiln.int64, kiln.float16])
    arrays = safetensors.numpy.load(kst.save(tensors))
    for name, t in tensors.items():
        np.testing.assert_array_equal(arrays[name], t.numpy())
    back = kst.load(safetensors.numpy.save({k: np.asarray(v * 2) for k, v in arrays.items()}))
    for name, t in tensors.items():
        np.testing.assert_array_equal(back[name].numpy(), t.numpy() * 2)


def test_loaded_tensors_are_writable_and_leave_the_file_alone(tmp_path):
    path = tmp_path / "w.safetensors"
    kst.save_file({"w": kiln.arange(4.0)}, path)
    before = path.read_bytes()
    w = kst.load_file(path)["w"]
    w.add_(1)
    assert w.tolist() == [1.0, 2.0, 3.0, 4.0] and path.read_bytes() == before
    with kst.safe_open(path, framework="numpy") as f:
        assert f.get_tensor("w").tolist() == [0.0, 1.0, 2.0, 3.0]


def test_non_contiguous_and_shared_tensors_are_refused_like_the_package(tmp_path):
    base = kiln.arange(6.0).reshape(2, 3)
    with pytest.raises(ValueError, match="non contiguous tensor: `t`"):
        kst.save({"t": base.t()})
    with pytest.raises(RuntimeError, match="Some tensors share memory"):
        kst.save({"a": base, "b": base[1]})
    kst.save({"a": base[0], "b": base[1]})  # views of one buffer that do not overlap are fine
    with pytest.raises(ValueError, match="expected kiln.Tensor"):
        kst.save({"a": [1.0]})
    with pytest.raises(ValueError, match="metadata must be a dict of str to str"):
        kst.save({"a": base}, metadata={"n": 1})


def _with_header(header: dict | bytes, buffer: bytes = b"") -> bytes:
    text = header if isinstance(header, bytes) else json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + buffer


_F32x2 = {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}


@pytest.mark.parametrize(
    "data, message",
    [
        (b"\x01\x00", "header too small"),
        (struct.pack("<Q", 200_000_000) + b"{}", "header too large"),
        (struct.pack("<Q", 50) + b"{}", "invalid header length"),
        (_with_header(b"[1, 2]"), "invalid header start"),
        (_with_header(b"{not json"), "invalid header deserialization"),
        (_with_header({"w": _F32x2}, b"\x00" * 4), "cover 8 bytes of a 4-byte buffer"),
        (_with_header({"w": {**_F32x2, "data_offsets": [4, 12]}}, b"\x00" * 12), "starts at"),
        (_with_header({"w": {**_F32x2, "shape": [3]}}, b"\x00" * 8), "should span 12 bytes"),
        (_with_header({"w": {**_F32x2, "dtype": "X9"}}, b"\x00" * 8), "unknown dtype"),
        (_with_header({"w": {**_F32x2, "shape": [-2]}}, b"\x00" * 8), "bad shape"),
    ],
    ids=["small", "large", "length", "start", "json", "short", "gap", "size", "dtype", "shape"],
)
def test_malformed_files_are_refused_by_both_readers(data, message):
    with pytest.raises(kst.SafetensorError, match=message):
        kst.load(data)
    with pytest.raises(Exception):  # noqa: B017 - the package raises its own error types
        safetensors.numpy.load(data)


@needs_torch
def test_tied_weights_round_trip_through_save_model_and_the_package(tmp_path):
    from safetensors.torch import load_model as torch_load_model

    def tied(lib):
        nn = lib.nn
        net = nn.Sequential(nn.Embedding(5, 3), nn.Linear(3, 5, bias=False))
        net[1].weight = net[0].weight
        return net

    source = tied(kiln)
    path = tmp_path / "tied.safetensors"
    kst.save_model(source, path)
    with kst.safe_open(path) as f:
        assert f.keys() == ["0.weight"] and f.metadata() == {"1.weight": "0.weight"}
    target = tied(kiln)
    assert kst.load_model(target, path) == ([], [])
    assert target[1].weight is target[0].weight
    np.testing.assert_array_equal(target[0].weight.detach().numpy(),
                                  source[0].weight.detach().numpy())  # fmt: skip
    mirror = tied(torch)
    torch_load_model(mirror, str(path))
    np.testing.assert_array_equal(to_numpy(mirror[1].weight), source[0].weight.detach().numpy())
