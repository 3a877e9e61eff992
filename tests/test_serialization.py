"""kiln.save / kiln.load: exact round trips of tensors, nested containers and model / optimizer /
scheduler state; a zip with a JSON header and raw buffers, pickle only for other objects."""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import math
import pickle
import zipfile
from collections import Counter, OrderedDict

import numpy as np
import pytest

import kiln
from tests.oracle import needs_torch, torch


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


def test_same_tensor_and_same_layout_aliases_load_as_one_object():
    w = kiln.randn(3, 3)
    out = _round_trip({"a": w, "b": w, "c": w.detach(), "d": w[0]})
    assert out["a"] is out["b"] is out["c"]
    assert out["d"] is not out["a"]


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


def test_file_is_a_zip_with_json_header_and_no_pickle():
    buf = io.BytesIO()
    kiln.save({"w": kiln.ones(2, 2)}, buf)
    buf.seek(0)
    with zipfile.ZipFile(buf) as zf:
        names = zf.namelist()
        header = json.loads(zf.read("kiln_archive/data.json"))
    assert names == ["kiln_archive/data.json", "kiln_archive/tensors/0"]
    assert header["format"] == "kiln" and header["tensors"][0]["shape"] == [2, 2]
    assert header["tensors"][0]["dtype"] == "float32"


@dataclasses.dataclass
class _Settings:
    lr: float
    scale: object


def test_sets_and_complex_numbers_stay_in_the_safe_tree():
    obj = {"s": {1, 2}, "f": frozenset({"a"}), "c": complex(1.5, float("inf"))}
    buf = io.BytesIO()
    kiln.save(obj, buf)
    buf.seek(0)
    with zipfile.ZipFile(buf) as zf:
        assert "kiln_archive/data.pkl" not in zf.namelist()
    buf.seek(0)
    assert kiln.load(buf) == obj


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


def test_loading_something_else_explains():
    with pytest.raises(RuntimeError, match="not a kiln checkpoint"):
        kiln.load(io.BytesIO(b"not a zip"))
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("archive/data.pkl", b"")
    buf.seek(0)
    with pytest.raises(RuntimeError, match="zip archive but not a kiln checkpoint"):
        kiln.load(buf)


@needs_torch
def test_pytorch_checkpoint_is_refused_with_a_hint():
    buf = io.BytesIO()
    torch.save({"w": torch.ones(2)}, buf)
    buf.seek(0)
    with pytest.raises(RuntimeError, match="PyTorch checkpoints must be converted"):
        kiln.load(buf)


def test_map_location_forms_and_weights_only_flag():
    obj = {"w": kiln.ones(2)}
    for loc in (None, "cpu", kiln.device("cpu"), {"cpu": "cpu"}):
        assert _round_trip(obj, map_location=loc)["w"].device == kiln.device("cpu")
    seen = []
    out = _round_trip(obj, map_location=lambda t, where: seen.append(where) or t * 2)
    assert seen == ["cpu"] and out["w"].tolist() == [2.0, 2.0]
    assert _round_trip(obj, weights_only=False)["w"].tolist() == [1.0, 1.0]


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


def _saved_and_loaded(lib, obj, **load_kwargs):
    buf = io.BytesIO()
    lib.save(obj, buf)
    buf.seek(0)
    return lib.load(buf, **load_kwargs)


def _load_outcome(lib, obj, **load_kwargs) -> str:
    """What a script would print after loading ``obj`` back: the value, or the error's first line."""
    try:
        value = _saved_and_loaded(lib, obj, **load_kwargs)
    except pickle.UnpicklingError as error:
        return "UnpicklingError: " + str(error).splitlines()[0]
    return repr(value)


@pytest.fixture
def clean_safe_globals():
    yield
    kiln.serialization.clear_safe_globals()
    if torch is not None:
        torch.serialization.clear_safe_globals()


@needs_torch
@pytest.mark.parametrize(
    "make",
    [
        lambda lib: {"args": argparse.Namespace(lr=0.1, epochs=3), "w": lib.ones(2)},
        lambda lib: {"best": np.float32(1.5), "step": np.int64(3)},
        lambda lib: np.float64(2.5),
        lambda lib: {"a": np.arange(3)},
        lambda lib: bytearray(b"ab"),
        lambda lib: {"s": {1, 2}, "c": 1 + 2j, "b": b"\x00"},
        lambda lib: {"slice": slice(1, 2)},
    ],
    ids=["namespace", "numpy_scalars", "numpy_float64", "numpy_array", "bytearray", "builtins",
         "slice"],
)  # fmt: skip
@pytest.mark.parametrize("weights_only", [None, False])
def test_weights_only_load_accepts_and_refuses_like_torch(make, weights_only, clean_safe_globals):
    kwargs = {} if weights_only is None else {"weights_only": weights_only}
    got = _load_outcome(kiln, make(kiln), **kwargs)
    want = _load_outcome(torch, make(torch), **kwargs)
    assert got.replace("kiln", "torch") == want


@needs_torch
def test_add_safe_globals_lets_a_namespace_checkpoint_load(clean_safe_globals):
    for lib in (kiln, torch):
        lib.serialization.add_safe_globals([argparse.Namespace])
        assert argparse.Namespace in lib.serialization.get_safe_globals()
    obj = {"args": argparse.Namespace(lr=0.1), "epoch": 3}
    assert _load_outcome(kiln, obj) == _load_outcome(torch, obj) != ""
    for lib in (kiln, torch):
        lib.serialization.clear_safe_globals()
        assert lib.serialization.get_safe_globals() == []
    assert _load_outcome(kiln, obj).startswith("UnpicklingError: Weights only load failed.")


def test_safe_globals_context_and_named_pairs(clean_safe_globals):
    obj = {"args": argparse.Namespace(lr=0.1)}
    with kiln.serialization.safe_globals([(argparse.Namespace, "argparse.Namespace")]):
        assert _saved_and_loaded(kiln, obj)["args"].lr == 0.1
    assert kiln.serialization.get_safe_globals() == []
    with pytest.raises(pickle.UnpicklingError, match="GLOBAL argparse.Namespace was not an"):
        _saved_and_loaded(kiln, obj)
    with pytest.raises(ValueError, match="Expected tuple of length 2"):
        kiln.serialization.add_safe_globals([(argparse.Namespace,)])


@needs_torch
def test_whole_module_loads_once_its_classes_are_allowlisted(clean_safe_globals):
    def build(lib):
        nn = lib.nn
        return nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.BatchNorm1d(3))

    unsafe = {}
    for lib in (kiln, torch):
        buf = io.BytesIO()
        lib.save(build(lib), buf)
        buf.seek(0)
        unsafe[lib] = sorted(lib.serialization.get_unsafe_globals_in_checkpoint(buf))
    assert [name.replace("kiln", "torch") for name in unsafe[kiln]] == unsafe[torch]
    nn = kiln.nn
    with kiln.serialization.safe_globals([nn.Sequential, nn.Linear, nn.ReLU, nn.BatchNorm1d]):
        model = _saved_and_loaded(kiln, build(kiln))
    assert isinstance(model[0].weight, nn.Parameter) and model[2].running_var.tolist() == [1.0] * 3


def test_unsafe_globals_are_found_with_any_pickle_protocol():
    obj = {"args": argparse.Namespace(x=1), "t": kiln.ones(1)}
    for protocol in (2, 4, 5):
        buf = io.BytesIO()
        kiln.save(obj, buf, pickle_protocol=protocol)
        buf.seek(0)
        assert kiln.serialization.get_unsafe_globals_in_checkpoint(buf) == ["argparse.Namespace"]
    buf = io.BytesIO()
    kiln.save({"w": kiln.ones(2)}, buf)
    buf.seek(0)
    assert kiln.serialization.get_unsafe_globals_in_checkpoint(buf) == []


def _views(lib):
    base = lib.arange(12.0).reshape(3, 4)
    return [base, base[1], base.t(), base[:, 2], base.view(-1)[3:7], {"k": base.view(4, 3)}]


@needs_torch
def test_views_saved_together_load_as_views_of_one_buffer():
    loaded = {lib: _saved_and_loaded(lib, _views(lib)) for lib in (kiln, torch)}
    for lib, views in loaded.items():
        views[0][1, 1] = 100.0  # writes through every view of the loaded buffer
    for got, want in zip(loaded[kiln][:5], loaded[torch][:5]):
        assert got.tolist() == want.tolist()
        assert got.stride() == want.stride() and got.storage_offset() == want.storage_offset()
    assert loaded[kiln][5]["k"].tolist() == loaded[torch][5]["k"].tolist()


@needs_torch
def test_a_saved_slice_keeps_its_offset_into_the_saved_buffer():
    got = _saved_and_loaded(kiln, kiln.arange(100.0)[10:13])
    want = _saved_and_loaded(torch, torch.arange(100.0)[10:13])
    assert got.tolist() == want.tolist() and got.storage_offset() == want.storage_offset() == 10


def test_expanded_and_scalar_tensors_round_trip():
    out = _saved_and_loaded(kiln, [kiln.ones(3).expand(2, 3), kiln.tensor(5), kiln.zeros(0, 3)])
    assert out[0].tolist() == [[1.0] * 3] * 2 and out[0].stride() == (0, 1)
    assert out[1].item() == 5 and out[1].shape == () and out[2].shape == (0, 3)
