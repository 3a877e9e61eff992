"""kiln.save / kiln.load: exact round trips of tensors, nested containers and model / optimizer /
scheduler state, in PyTorch's zip layout (records checked here; torch reading them is
test_torch_interop's)."""

from __future__ import annotations

import dataclasses
import io
import math
import pickle
import struct
import sys
import zipfile
from collections import Counter, OrderedDict

import numpy as np
import pytest

import kiln


def _round_trip(obj, **load_kwargs):
    buf = io.BytesIO()
    kiln.save(obj, buf)
    buf.seek(0)
    return kiln.load(buf, **load_kwargs)


@pytest.mark.parametrize(
    "dtype",
    [kiln.float32, kiln.float64, kiln.float16, kiln.bfloat16, kiln.int64, kiln.int32,
     kiln.int16, kiln.int8, kiln.uint8, kiln.bool],
)  # fmt: skip
@pytest.mark.parametrize("shape", [(), (0,), (3,), (2, 3, 4)])
def test_tensor_round_trip_is_exact(dtype, shape):
    rng = np.random.default_rng(0)
    values = (rng.standard_normal(shape) * 50).astype(np.float64)
    t = kiln.tensor(values).to(dtype)
    out = _round_trip(t)
    assert out.dtype is dtype and tuple(out.shape) == shape
    np.testing.assert_array_equal(out.numpy(), t.numpy())


def test_loaded_tensors_are_writable_and_independent():
    t = kiln.arange(6.0)
    out = _round_trip(t)
    out.add_(1)
    assert t.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]


def test_non_contiguous_views_are_saved_by_value():
    base = kiln.arange(12.0).reshape(3, 4)
    obj = {"t": base.t(), "col": base[:, 1], "base": base}
    out = _round_trip(obj)
    np.testing.assert_array_equal(out["t"].numpy(), base.t().numpy())
    np.testing.assert_array_equal(out["col"].numpy(), [1.0, 5.0, 9.0])


def test_same_tensor_loads_as_one_object_and_views_share_its_storage():
    w = kiln.randn(3, 3)
    out = _round_trip({"a": w, "b": w, "c": w.detach(), "d": w[0]})
    assert out["a"] is out["b"]  # one object saved twice (pickle's memo)
    assert out["c"] is not out["a"] and out["d"] is not out["a"]  # as torch.load gives them
    out["a"][0, 0] = 100.0
    assert out["c"][0, 0].item() == 100.0 and out["d"][0].item() == 100.0


def test_containers_and_scalars_round_trip():
    obj = {
        "int": 3,
        "float": 0.1,
        "inf": math.inf,
        "ninf": -math.inf,
        "str": "héllo",
        "bytes": b"\x00\xff",
        "none": None,
        "bool": True,
        "list": [1, [2.5, "x"]],
        "tuple": (1, (2, None)),
        "odict": OrderedDict([("z", 1), ("a", 2)]),
        "counter": Counter([3, 3, 5]),
        "dtype": kiln.bfloat16,
        "device": kiln.device("cpu"),
        "size": kiln.Size([2, 3]),
        7: "int key",
        (1, 2): "tuple key",
        0.5: "float key",
    }
    out = _round_trip(obj)
    assert out == obj
    assert type(out["odict"]) is OrderedDict and list(out["odict"]) == ["z", "a"]
    assert type(out["counter"]) is Counter and type(out["tuple"]) is tuple
    assert out["dtype"] is kiln.bfloat16 and isinstance(out["size"], kiln.Size)
    assert math.isnan(_round_trip(float("nan")))


def test_parameters_and_requires_grad_survive():
    p = kiln.nn.Parameter(kiln.ones(2))
    frozen = kiln.nn.Parameter(kiln.ones(2), requires_grad=False)
    leaf = kiln.ones(2, requires_grad=True)
    out = _round_trip([p, frozen, leaf, kiln.ones(1)])
    assert isinstance(out[0], kiln.nn.Parameter) and out[0].requires_grad
    assert isinstance(out[1], kiln.nn.Parameter) and not out[1].requires_grad
    assert type(out[2]) is kiln.Tensor and out[2].requires_grad and not out[3].requires_grad


def test_model_state_dict_via_file_path(tmp_path):
    model = kiln.nn.Sequential(kiln.nn.Linear(3, 4), kiln.nn.BatchNorm1d(4), kiln.nn.Linear(4, 2))
    model(kiln.randn(5, 3))
    path = tmp_path / "model.pt"
    kiln.save(model.state_dict(), path)
    clone = kiln.nn.Sequential(kiln.nn.Linear(3, 4), kiln.nn.BatchNorm1d(4), kiln.nn.Linear(4, 2))
    clone.load_state_dict(kiln.load(str(path)))
    for (name, a), (_, b) in zip(model.state_dict().items(), clone.state_dict().items()):
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=name)
        assert a.dtype is b.dtype


def test_optimizer_and_scheduler_state_resume_after_reload():
    def setup():
        kiln.manual_seed(0)
        model = kiln.nn.Linear(3, 1)
        opt = kiln.optim.AdamW(model.parameters(), lr=0.05)
        sched = kiln.optim.lr_scheduler.MultiStepLR(opt, milestones=[2, 4], gamma=0.5)
        return model, opt, sched

    def train(model, opt, sched, steps, start):
        for i in range(start, start + steps):
            opt.zero_grad()
            x = kiln.arange(3.0).reshape(1, 3) * (i + 1)
            (model(x) ** 2).sum().backward()
            opt.step()
            sched.step()

    model, opt, sched = setup()
    train(model, opt, sched, 3, 0)
    checkpoint = _round_trip(
        {"model": model.state_dict(), "opt": opt.state_dict(), "sched": sched.state_dict()}
    )
    assert sorted(checkpoint["opt"]["state"]) == [0, 1]
    assert checkpoint["opt"]["param_groups"][0]["betas"] == (0.9, 0.999)
    train(model, opt, sched, 3, 3)
    model2, opt2, sched2 = setup()
    model2.load_state_dict(checkpoint["model"])
    opt2.load_state_dict(checkpoint["opt"])
    sched2.load_state_dict(checkpoint["sched"])
    train(model2, opt2, sched2, 3, 3)
    np.testing.assert_array_equal(model.weight.detach().numpy(), model2.weight.detach().numpy())
    assert sched.get_last_lr() == sched2.get_last_lr()


def test_plateau_scheduler_state_with_infinity():
    opt = kiln.optim.SGD([kiln.zeros(1, requires_grad=True)], lr=0.1)
    state = kiln.optim.lr_scheduler.ReduceLROnPlateau(opt).state_dict()
    assert _round_trip(state)["best"] == math.inf


def test_file_has_pytorchs_records_each_aligned_to_64_bytes(tmp_path):
    path = tmp_path / "w.pt"
    kiln.save({"w": kiln.ones(2, 2), "b": kiln.zeros(3, dtype=kiln.int64)}, path)
    with zipfile.ZipFile(path) as zf:
        names = sorted(zf.namelist())
        assert zf.read("archive/version") == b"3\n"
        assert zf.read("archive/byteorder") == sys.byteorder.encode()
        assert zf.read("archive/data/0") == np.ones(4, np.float32).tobytes()
        infos = zf.infolist()
    assert names == sorted(
        "archive/" + n
        for n in ["data.pkl", ".format_version", ".storage_alignment", "byteorder", "data/0",
                  "data/1", "version", ".data/serialization_id"]
    )  # fmt: skip
    raw = path.read_bytes()
    for info in infos:
        name_length, extra_length = struct.unpack("<HH", raw[info.header_offset + 26 :][:4])
        assert (info.header_offset + 30 + name_length + extra_length) % 64 == 0, info.filename


def test_views_of_a_large_pooled_buffer_save_only_the_bytes_they_cover():
    big = kiln.randn(512, 1024) + 1  # a pooled result: its buffer may be larger than its values
    buf = io.BytesIO()
    kiln.save({"all": big, "row": big[3]}, buf)
    buf.seek(0)
    with zipfile.ZipFile(buf) as zf:
        assert zf.getinfo("archive/data/0").file_size == big.numel() * 4
        assert [n for n in zf.namelist() if "/data/" in n] == ["archive/data/0"]
    buf.seek(0)
    out = kiln.load(buf)
    assert out["row"].storage_offset() == 3 * 1024
    np.testing.assert_array_equal(out["row"].numpy(), big[3].numpy())


@dataclasses.dataclass
class _Settings:
    lr: float
    scale: object


def test_sets_and_complex_numbers_load_with_weights_only():
    obj = {"s": {1, 2}, "c": complex(1.5, float("inf"))}
    assert _round_trip(obj, weights_only=True) == obj


def test_arbitrary_objects_are_pickled_and_need_weights_only_false():
    model = kiln.nn.Sequential(kiln.nn.Linear(3, 4), kiln.nn.BatchNorm1d(4))
    shared = kiln.arange(6.0)
    obj = {"model": model, "cfg": _Settings(0.1, shared), "view": shared[2:4]}
    buf = io.BytesIO()
    kiln.save(obj, buf)
    buf.seek(0)
    with pytest.raises(pickle.UnpicklingError, match="Weights only load failed"):
        kiln.load(buf)
    buf.seek(0)
    out = kiln.load(buf, weights_only=False)
    x = kiln.randn(5, 3)
    assert (out["model"](x) - model(x)).abs().max().item() == 0
    assert isinstance(out["model"][0].weight, kiln.nn.Parameter)
    assert out["cfg"].lr == 0.1 and out["cfg"].scale.tolist() == shared.tolist()
    # a stored view keeps its values (stored as its own buffer)
    assert out["view"].tolist() == [2.0, 3.0]
    with pytest.raises((pickle.PicklingError, AttributeError)):
        kiln.save({"f": lambda: 0}, io.BytesIO())


def test_map_location_forms_and_weights_only_flag():
    obj = {"w": kiln.ones(2)}
    for loc in (None, "cpu", kiln.device("cpu"), {"cpu": "cpu"}):
        assert _round_trip(obj, map_location=loc)["w"].device == kiln.device("cpu")
    seen = []
    out = _round_trip(obj, map_location=lambda storage, where: seen.append(where) or storage)
    assert seen == ["cpu"] and out["w"].tolist() == [1.0, 1.0]
    assert _round_trip(obj, map_location=lambda storage, where: None)["w"].tolist() == [1.0, 1.0]
    assert _round_trip(obj, weights_only=False)["w"].tolist() == [1.0, 1.0]


@pytest.mark.skipif(kiln.cuda.is_available(), reason="checks the message of a CPU-only machine")
def test_cuda_location_without_cuda_explains_map_location():
    buf = io.BytesIO()
    kiln.save({"w": kiln.ones(2)}, buf)
    for map_location in ("cuda", {"cpu": "cuda:0"}, lambda storage, where: storage.cuda()):
        buf.seek(0)
        with pytest.raises(RuntimeError, match="map_location=kiln.device\\('cpu'\\)"):
            kiln.load(buf, map_location=map_location)


def test_mmap_load_views_the_file_copy_on_write(tmp_path):
    path = tmp_path / "w.pt"
    base = kiln.arange(8.0)
    kiln.save({"base": base, "tail": base[4:]}, path)
    before = path.read_bytes()
    out = kiln.load(path, mmap=True)
    out["tail"][0] = -1.0  # writes through the loaded views, not into the file
    assert out["base"].tolist() == [0.0, 1.0, 2.0, 3.0, -1.0, 5.0, 6.0, 7.0]
    assert path.read_bytes() == before
    with pytest.raises(ValueError, match="mmap=True needs a file path"):
        kiln.load(io.BytesIO(before), mmap=True)


def test_explicit_pickle_module_turns_weights_only_off():
    assert _round_trip({"args": _Settings(0.1, 2)}, pickle_module=pickle)["args"].lr == 0.1
    with pytest.raises(RuntimeError, match="Can not safely load weights when explicit"):
        _round_trip({"w": kiln.ones(1)}, pickle_module=pickle, weights_only=True)


def test_meta_tensors_round_trip_as_meta():
    out = _round_trip({"m": kiln.empty(2, 3, device="meta")})["m"]
    assert out.is_meta and tuple(out.shape) == (2, 3) and out.dtype is kiln.float32


def test_non_seekable_file_objects_are_read():
    class Stream(io.RawIOBase):
        def __init__(self, data):
            self._inner = io.BytesIO(data)

        def readable(self):
            return True

        def seekable(self):
            return False

        def readinto(self, b):
            return self._inner.readinto(b)

    buf = io.BytesIO()
    kiln.save([kiln.tensor([1, 2, 3])], buf)
    assert kiln.load(Stream(buf.getvalue()))[0].tolist() == [1, 2, 3]


def test_big_endian_checkpoints_are_byteswapped_on_load():
    values = np.array([1.5, -2.25, 3.0], dtype=np.float32)
    little = io.BytesIO()
    kiln.save({"w": kiln.tensor(values), "c": kiln.tensor([1 + 2j], dtype=kiln.complex64)}, little)
    big = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(little.getvalue())) as src, zipfile.ZipFile(big, "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            if info.filename.endswith("byteorder"):
                data = b"big"
            elif "/data/" in info.filename:  # each storage's elements in big-endian order
                dtype = ">f4" if info.filename.endswith("/0") else ">c8"
                data = np.frombuffer(data, dtype.replace(">", "<")).astype(dtype).tobytes()
            dst.writestr(info.filename, data)
    big.seek(0)
    out = kiln.load(big)
    assert out["w"].tolist() == values.tolist() and out["c"].tolist() == [1 + 2j]


def test_cuda_tensors_save_from_the_device_and_load_where_asked(gpu):
    x = kiln.arange(6.0, device="cuda")
    buf = io.BytesIO()
    kiln.save({"x": x, "tail": x[3:]}, buf)
    buf.seek(0)
    back = kiln.load(buf)
    assert back["x"].device.type == "cuda" and back["x"].cpu().tolist() == list(range(6))
    buf.seek(0)
    on_cpu = kiln.load(buf, map_location="cpu")
    assert on_cpu["tail"].device.type == "cpu" and on_cpu["tail"].tolist() == [3.0, 4.0, 5.0]
    buf.seek(0)
    moved = kiln.load(buf, map_location=lambda storage, where: storage.cpu())
    assert moved["x"].device.type == "cpu"


def test_expanded_and_scalar_tensors_round_trip():
    out = _round_trip([kiln.ones(3).expand(2, 3), kiln.tensor(5), kiln.zeros(0, 3)])
    assert out[0].tolist() == [[1.0] * 3] * 2 and out[0].stride() == (0, 1)
    assert out[1].item() == 5 and out[1].shape == () and out[2].shape == (0, 3)
