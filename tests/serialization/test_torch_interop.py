"""Checkpoints both ways through real PyTorch: torch.save -> kiln.load and kiln.save ->
torch.load(weights_only=True), for tensors of every dtype, views, Parameters, state dicts,
optimizer states and nested containers."""

from __future__ import annotations

import io
import math
import zipfile
from collections import Counter, OrderedDict

import numpy as np
import pytest

import kiln
from tests.oracle import DTYPE_PAIRS, assert_close, needs_torch, to_numpy, torch

pytestmark = needs_torch

_DTYPES = [kiln.float32, kiln.float64, kiln.float16, kiln.bfloat16, kiln.int64, kiln.int32,
           kiln.int16, kiln.int8, kiln.uint8, kiln.bool, kiln.complex64, kiln.complex128]  # fmt: skip


def _torch_dtype(dtype):
    return DTYPE_PAIRS.get(dtype) or getattr(torch, str(dtype).split(".")[-1])


def _through(writer, reader, obj, **load_kwargs):
    buf = io.BytesIO()
    writer.save(obj, buf)
    buf.seek(0)
    return reader.load(buf, **load_kwargs)


def _values(lib, dtype):
    rng = np.random.default_rng(0)
    data = rng.standard_normal((3, 4)) * 20
    name = str(dtype).split(".")[-1]
    if name.startswith("complex"):
        data = data + 1j * rng.standard_normal((3, 4))
    t = lib.tensor(data)
    return t.to(dtype if lib is kiln else _torch_dtype(dtype))


def _same(got, want):
    assert str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1]
    assert tuple(got.shape) == tuple(want.shape) and tuple(got.stride()) == tuple(want.stride())
    np.testing.assert_array_equal(to_numpy(got), to_numpy(want))


@pytest.mark.parametrize("dtype", _DTYPES, ids=str)
def test_torch_tensors_of_every_dtype_load_in_kiln(dtype):
    want = _values(torch, dtype)
    got = _through(torch, kiln, {"t": want, "col": want[:, 1]})
    _same(got["t"], want)
    _same(got["col"], want[:, 1])
    assert got["col"].storage_offset() == 1


@pytest.mark.parametrize("dtype", _DTYPES, ids=str)
def test_kiln_tensors_of_every_dtype_load_in_torch_weights_only(dtype):
    t = _values(kiln, dtype)
    got = _through(kiln, torch, {"t": t, "col": t[:, 1]}, weights_only=True)
    _same(t, got["t"])
    _same(t[:, 1], got["col"])


def _views(lib):
    base = lib.arange(12.0).reshape(3, 4)
    return {"base": base, "row": base[1], "t": base.t(), "flat": base.view(-1)[3:7]}


@pytest.mark.parametrize("direction", ["torch_to_kiln", "kiln_to_torch"])
def test_views_saved_together_share_one_storage_either_way(direction):
    writer, reader = (torch, kiln) if direction == "torch_to_kiln" else (kiln, torch)
    original = _views(writer)
    loaded = _through(writer, reader, original)
    with zipfile.ZipFile(_saved(writer, original)) as zf:
        assert [n for n in zf.namelist() if "/data/" in n][-1].endswith("data/0")  # one storage
    loaded["base"][1, 1] = 100.0
    assert loaded["row"][1].item() == 100.0 and loaded["t"][1, 1].item() == 100.0
    assert loaded["flat"].storage_offset() == 3


def _saved(lib, obj) -> io.BytesIO:
    buf = io.BytesIO()
    lib.save(obj, buf)
    buf.seek(0)
    return buf


def _linear_net(lib):
    nn = lib.nn
    net = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 3))
    net[1].running_mean.fill_(0.5)
    return net


def test_torch_state_dict_drives_a_kiln_model_to_torchs_outputs():
    torch.manual_seed(0)
    source = _linear_net(torch).eval()
    target = _linear_net(kiln).eval()
    state = _through(torch, kiln, source.state_dict())
    assert type(state) is OrderedDict and state._metadata == source.state_dict()._metadata
    target.load_state_dict(state)
    x = np.random.default_rng(1).standard_normal((5, 4)).astype(np.float32)
    assert_close(target(kiln.from_numpy(x)), source(torch.from_numpy(x)))


def test_kiln_state_dict_drives_a_torch_model_to_kilns_outputs():
    source = _linear_net(kiln).eval()
    target = _linear_net(torch).eval()
    target.load_state_dict(_through(kiln, torch, source.state_dict(), weights_only=True))
    x = np.random.default_rng(1).standard_normal((5, 4)).astype(np.float32)
    assert_close(source(kiln.from_numpy(x)), target(torch.from_numpy(x)))


def _mlp(lib):
    nn = lib.nn
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3))


def _trained_adam(lib):
    net = _mlp(lib)
    with lib.no_grad():
        for i, p in enumerate(net.parameters()):
            p.copy_(lib.linspace(-1, 1, p.numel()).reshape(p.shape) * (i + 1))
    opt = lib.optim.Adam(net.parameters(), lr=0.01)
    x = lib.linspace(-2, 2, 20).reshape(5, 4)
    for _ in range(3):
        opt.zero_grad()
        net(x).pow(2).sum().backward()
        opt.step()
    return net, opt


@pytest.mark.parametrize("direction", ["torch_to_kiln", "kiln_to_torch"])
def test_optimizer_state_resumes_across_frameworks(direction):
    writer, reader = (torch, kiln) if direction == "torch_to_kiln" else (kiln, torch)
    net_w, opt_w = _trained_adam(writer)
    checkpoint = _through(writer, reader, {"model": net_w.state_dict(), "opt": opt_w.state_dict()})
    net_r = _mlp(reader)
    net_r.load_state_dict(checkpoint["model"])
    opt_r = reader.optim.Adam(net_r.parameters(), lr=0.01)
    opt_r.load_state_dict(checkpoint["opt"])
    assert checkpoint["opt"]["param_groups"][0]["betas"] == (0.9, 0.999)
    for net, opt, lib in ((net_w, opt_w, writer), (net_r, opt_r, reader)):
        x = lib.linspace(-2, 2, 20).reshape(5, 4)
        opt.zero_grad()
        net(x).pow(2).sum().backward()
        opt.step()
    for a, b in zip(net_w.parameters(), net_r.parameters()):
        np.testing.assert_allclose(to_numpy(a), to_numpy(b), rtol=1e-6, atol=1e-7)


def _containers(lib):
    return {
        "epoch": 7,
        "loss": 0.25,
        "inf": math.inf,
        "name": "run-3",
        "blob": b"\x00\xff",
        "flags": [True, None, (1, 2.5)],
        "odict": OrderedDict([("z", lib.ones(1)), ("a", lib.zeros(2))]),
        "counter": Counter([3, 3, 5]),
        "set": {1, 2},
        "complex": 1 + 2j,
        "dtype": lib.bfloat16,
        "device": lib.device("cpu"),
        "size": lib.Size([2, 3]),
        "param": lib.nn.Parameter(lib.ones(2)),
        "frozen": lib.nn.Parameter(lib.ones(2), requires_grad=False),
        "leaf": lib.ones(2, requires_grad=True),
        (1, 2): "tuple key",
    }


def _describe(value):
    """A framework-neutral picture of a loaded value (types by name, tensors by values)."""
    if isinstance(value, dict):
        return (type(value).__name__, {k: _describe(v) for k, v in value.items()})
    if isinstance(value, (list, tuple)) and type(value).__name__ != "Size":
        return (type(value).__name__, [_describe(v) for v in value])
    if hasattr(value, "requires_grad") and hasattr(value, "shape"):
        kind = "Parameter" if "Parameter" in type(value).__name__ else "Tensor"
        return (kind, value.requires_grad, to_numpy(value).tolist())
    if type(value).__name__ in ("Size", "device", "dtype"):
        return (type(value).__name__, str(value).replace("kiln", "torch"))
    return (type(value).__name__, value)


@pytest.mark.parametrize("direction", ["torch_to_kiln", "kiln_to_torch"])
def test_nested_containers_load_the_same_either_way(direction):
    writer, reader = (torch, kiln) if direction == "torch_to_kiln" else (kiln, torch)
    loaded = _through(writer, reader, _containers(writer), weights_only=True)
    assert _describe(loaded) == _describe(_containers(reader))


def test_torch_whole_module_loads_as_kilns_module_with_weights_only_false():
    torch.manual_seed(0)
    source = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Tanh())
    model = _through(torch, kiln, source, weights_only=False)
    assert isinstance(model, kiln.nn.Sequential) and isinstance(model[0], kiln.nn.Linear)
    x = np.ones((1, 3), np.float32)
    assert_close(model(kiln.from_numpy(x)), source(torch.from_numpy(x)))


def test_torch_checkpoint_with_mmap_and_map_location(tmp_path):
    path = tmp_path / "t.pt"
    torch.save({"w": torch.arange(6.0), "h": torch.ones(2, dtype=torch.float16)}, path)
    seen = []
    out = kiln.load(path, mmap=True, map_location=lambda s, loc: seen.append(loc) or s)
    assert seen == ["cpu", "cpu"] and out["w"].tolist() == list(range(6))
    assert out["h"].dtype is kiln.float16


@pytest.mark.filterwarnings("ignore:torch.quantize_per_tensor")
def test_torch_tensors_kiln_lacks_are_refused_by_name():
    value = torch.quantize_per_tensor(torch.ones(3), 0.1, 0, torch.qint8)
    with pytest.raises(RuntimeError, match="holds quantized tensors"):
        _through(torch, kiln, {"t": value}, weights_only=False)


def test_torch_compressed_sparse_tensors_are_refused_by_layout():
    value = torch.ones(2, 2).to_sparse_csr()
    with pytest.raises(RuntimeError, match="sparse_csr is not supported"):
        _through(torch, kiln, {"t": value}, weights_only=False)


def _views_in_a_list(lib):
    base = lib.arange(12.0).reshape(3, 4)
    return [base, base[1], base.t(), base[:, 2], base.view(-1)[3:7], {"k": base.view(4, 3)}]


@needs_torch
def test_views_saved_together_load_as_views_of_one_buffer():
    loaded = {lib: _through(lib, lib, _views_in_a_list(lib)) for lib in (kiln, torch)}
    for lib, views in loaded.items():
        views[0][1, 1] = 100.0  # writes through every view of the loaded buffer
    for got, want in zip(loaded[kiln][:5], loaded[torch][:5]):
        assert got.tolist() == want.tolist()
        assert got.stride() == want.stride() and got.storage_offset() == want.storage_offset()
    assert loaded[kiln][5]["k"].tolist() == loaded[torch][5]["k"].tolist()


@needs_torch
def test_a_saved_slice_keeps_its_offset_into_the_saved_buffer():
    got = _through(kiln, kiln, kiln.arange(100.0)[10:13])
    want = _through(torch, torch, torch.arange(100.0)[10:13])
    assert got.tolist() == want.tolist() and got.storage_offset() == want.storage_offset() == 10
