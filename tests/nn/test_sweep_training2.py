"""Training-program idioms against PyTorch (second sweep): checkpoints with allowlisted globals and
shared views, and the optimizers, wrappers and samplers training scripts reach for."""

from __future__ import annotations

import argparse
import io
import pickle

import numpy as np
import pytest

import kiln
from tests.oracle import needs_torch, torch


def _round_trip(lib, obj, **load_kwargs):
    buf = io.BytesIO()
    lib.save(obj, buf)
    buf.seek(0)
    return lib.load(buf, **load_kwargs)


def _load_outcome(lib, obj, **load_kwargs) -> str:
    """What a script would print after loading ``obj`` back: the value, or the error's first line."""
    try:
        value = _round_trip(lib, obj, **load_kwargs)
    except pickle.UnpicklingError as error:
        return "UnpicklingError: " + str(error).splitlines()[0]
    return repr(value)


# ---------------------------------------------------------------------------- checkpoints


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
        assert _round_trip(kiln, obj)["args"].lr == 0.1
    assert kiln.serialization.get_safe_globals() == []
    with pytest.raises(pickle.UnpicklingError, match="GLOBAL argparse.Namespace was not an"):
        _round_trip(kiln, obj)
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
        model = _round_trip(kiln, build(kiln))
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
    loaded = {lib: _round_trip(lib, _views(lib)) for lib in (kiln, torch)}
    for lib, views in loaded.items():
        views[0][1, 1] = 100.0  # writes through every view of the loaded buffer
    for got, want in zip(loaded[kiln][:5], loaded[torch][:5]):
        assert got.tolist() == want.tolist()
        assert got.stride() == want.stride() and got.storage_offset() == want.storage_offset()
    assert loaded[kiln][5]["k"].tolist() == loaded[torch][5]["k"].tolist()


@needs_torch
def test_a_saved_slice_keeps_its_offset_into_the_saved_buffer():
    got = _round_trip(kiln, kiln.arange(100.0)[10:13])
    want = _round_trip(torch, torch.arange(100.0)[10:13])
    assert got.tolist() == want.tolist() and got.storage_offset() == want.storage_offset() == 10


def test_expanded_and_scalar_tensors_round_trip():
    out = _round_trip(kiln, [kiln.ones(3).expand(2, 3), kiln.tensor(5), kiln.zeros(0, 3)])
    assert out[0].tolist() == [[1.0] * 3] * 2 and out[0].stride() == (0, 1)
    assert out[1].item() == 5 and out[1].shape == () and out[2].shape == (0, 3)


# ---------------------------------------------------------------------------- optimizers


def _mlp(lib, bias=True):
    nn = lib.nn
    model = nn.Sequential(nn.Linear(5, 7, bias=bias), nn.Tanh(), nn.Linear(7, 3, bias=bias))
    rng = np.random.default_rng(0)
    with lib.no_grad():
        for p in model.parameters():
            p.copy_(lib.from_numpy((rng.standard_normal(tuple(p.shape)) * 0.4).astype(np.float32)))
    return model


def _train(lib, model, optimizer, steps=20) -> list[float]:
    rng = np.random.default_rng(1)
    x = lib.from_numpy(rng.standard_normal((16, 5)).astype(np.float32))
    y = lib.from_numpy(rng.integers(0, 3, 16))
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = lib.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def _state_layout(optimizer) -> list:
    return [
        {key: (str(v.dtype).split(".")[-1], tuple(v.shape)) for key, v in state.items()}
        for state in optimizer.state_dict()["state"].values()
    ]


@needs_torch
@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"lr": 0.05, "weight_decay": 0.1, "d": 1.5, "beta2_decay": -0.5},
        {"eps": (1e-30, 1e-3), "maximize": True},
    ],
    ids=["defaults", "decay_and_clip", "eps1_maximize"],
)
def test_adafactor_matches_torch(kwargs):
    runs = {}
    for lib in (kiln, torch):
        model = _mlp(lib)
        optimizer = lib.optim.Adafactor(model.parameters(), **kwargs)
        runs[lib] = (_train(lib, model, optimizer), model, optimizer)
    np.testing.assert_allclose(runs[kiln][0], runs[torch][0], rtol=1e-5)
    for got, want in zip(runs[kiln][1].parameters(), runs[torch][1].parameters()):
        np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), atol=1e-5)
    assert _state_layout(runs[kiln][2]) == _state_layout(runs[torch][2])
    assert repr(runs[kiln][2]) == repr(runs[torch][2])


@needs_torch
def test_muon_orthogonalisation_is_bitwise_torch():
    from torch.optim._muon import _zeropower_via_newtonschulz

    from kiln.optim.muon import zeropower_via_newtonschulz

    rng = np.random.default_rng(0)
    for shape in [(7, 5), (5, 7), (33, 8)]:
        g = rng.standard_normal(shape).astype(np.float32)
        coefficients = (3.4445, -4.7750, 2.0315)
        got = zeropower_via_newtonschulz(kiln.from_numpy(g), coefficients, 5, 1e-7)
        want = _zeropower_via_newtonschulz(torch.from_numpy(g), coefficients, 5, 1e-7)
        assert got.dtype is kiln.bfloat16
        np.testing.assert_array_equal(got.float().numpy(), want.float().numpy())


@needs_torch
@pytest.mark.parametrize(
    "kwargs",
    [{"lr": 0.02}, {"lr": 0.02, "nesterov": False, "adjust_lr_fn": "match_rms_adamw"}],
    ids=["nesterov", "plain_match_rms"],
)
def test_muon_training_matches_torch(kwargs):
    runs = {}
    for lib in (kiln, torch):
        model = _mlp(lib, bias=False)
        optimizer = lib.optim.Muon(model.parameters(), **kwargs)
        runs[lib] = (_train(lib, model, optimizer), optimizer)
    # bfloat16 Newton-Schulz magnifies float32 gradient rounding: curves agree to ~1e-3
    np.testing.assert_allclose(runs[kiln][0], runs[torch][0], rtol=2e-3)
    assert repr(runs[kiln][1]) == repr(runs[torch][1])
    assert _state_layout(runs[kiln][1]) == _state_layout(runs[torch][1])


@needs_torch
@pytest.mark.parametrize(
    "make",
    [
        lambda lib: lib.optim.Muon(lib.nn.Linear(2, 2).parameters()),
        lambda lib: lib.optim.Muon([lib.nn.Parameter(lib.ones(2, 2))], adjust_lr_fn="x"),
        lambda lib: lib.optim.Muon([lib.nn.Parameter(lib.ones(2, 2))], momentum=-1),
        lambda lib: lib.optim.Adafactor([lib.nn.Parameter(lib.ones(2))], beta2_decay=0.5),
        lambda lib: lib.optim.Adafactor([lib.nn.Parameter(lib.ones(2))], eps=(None, -1)),
        lambda lib: lib.optim.Adafactor([lib.nn.Parameter(lib.ones(2))], d=0.5),
    ],
)
def test_new_optimizer_option_errors_match_torch(make):
    def outcome(lib):
        try:
            make(lib)
        except ValueError as error:
            return str(error).replace("kiln", "torch")
        return "no error"

    assert outcome(kiln) == outcome(torch)


@needs_torch
@pytest.mark.parametrize("other_dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("self_dtype", ["bfloat16", "float32"])
def test_add_with_alpha_rounds_once_in_the_compute_dtype(self_dtype, other_dtype):
    """``param.add_(update, alpha=-lr)``: alpha * update is not rounded to update's dtype first."""
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((2, 64)).astype(np.float32)
    results = []
    for lib in (kiln, torch):
        a = lib.tensor(x).to(getattr(lib, self_dtype))
        b = lib.tensor(y).to(getattr(lib, other_dtype))
        out = a.add(b, alpha=-0.0123456)
        a.sub_(b, alpha=0.37)
        results.append((out.float().numpy(), a.float().numpy(), str(out.dtype).split(".")[-1]))
    # float32 results may differ in the last bit (PyTorch fuses the multiply-add); a rounding of
    # alpha * other to bfloat16 would show as ~1e-3 relative errors
    rtol = 0 if results[1][2] == "bfloat16" else 1e-6
    np.testing.assert_allclose(results[0][0], results[1][0], rtol=rtol)
    np.testing.assert_allclose(results[0][1], results[1][1], rtol=rtol)
    assert results[0][2] == results[1][2]


@needs_torch
@pytest.mark.parametrize("weight", [0.1, 0.9, -0.3, "tensor"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_lerp_rounds_like_torchs_fused_kernel(weight, dtype):
    rng = np.random.default_rng(0)
    x, y, w = rng.standard_normal((3, 500)).astype(np.float32)
    results = []
    for lib in (kiln, torch):
        a, b = (lib.from_numpy(v).to(getattr(lib, dtype)) for v in (x, y))
        wt = lib.from_numpy(w).to(getattr(lib, dtype)) if weight == "tensor" else weight
        results.append(a.lerp(b, wt).float().numpy())
    np.testing.assert_array_equal(results[0], results[1])


# ---------------------------------------------------------------------------- wrappers and layers


def _bn_net(lib):
    nn = lib.nn
    return nn.Sequential(
        nn.Conv2d(1, 3, 1),
        nn.BatchNorm2d(3, momentum=None),
        nn.InstanceNorm2d(3),
        nn.Sequential(nn.BatchNorm1d(2, affine=False)),
    )


@needs_torch
def test_data_parallel_without_accelerators_wraps_like_torch():
    results = []
    for lib in (kiln, torch):
        inner = lib.nn.Sequential(lib.nn.Linear(2, 3), lib.nn.BatchNorm1d(3))
        wrapped = lib.nn.DataParallel(inner, device_ids=[0])
        out = wrapped(lib.ones(4, 2))
        state = {k.replace("module.", "", 1): v for k, v in wrapped.state_dict().items()}
        fresh = lib.nn.Sequential(lib.nn.Linear(2, 3), lib.nn.BatchNorm1d(3))
        results.append(
            (
                repr(wrapped),
                wrapped.device_ids,
                wrapped.module is inner,
                list(wrapped.state_dict()),
                tuple(out.shape),
                str(fresh.load_state_dict(state)),
            )
        )
    assert results[0] == results[1]
    with pytest.raises(RuntimeError, match="device type could not be determined"):
        kiln.nn.parallel.data_parallel(kiln.nn.Linear(2, 2), kiln.ones(1, 2))


@needs_torch
def test_convert_sync_batchnorm_swaps_batch_norms_only():
    got = kiln.nn.SyncBatchNorm.convert_sync_batchnorm(_bn_net(kiln))
    want = torch.nn.SyncBatchNorm.convert_sync_batchnorm(_bn_net(torch))
    assert repr(got) == repr(want)
    assert got[1].momentum is None and got[3][0].weight is None
    original = kiln.nn.BatchNorm1d(3)
    converted = kiln.nn.SyncBatchNorm.convert_sync_batchnorm(original)
    assert converted.weight is original.weight and converted.running_mean is original.running_mean


@needs_torch
def test_sync_batchnorm_is_batch_norm_in_one_process():
    x = np.linspace(0, 1, 24, dtype=np.float32).reshape(2, 3, 4)
    results = []
    for lib in (kiln, torch):
        norm = lib.nn.SyncBatchNorm(3)
        train_out = norm(lib.from_numpy(x))
        norm.eval()
        eval_out = norm(lib.from_numpy(x[:, :, 0]))
        errors = []
        for bad in (lib.ones(3), lib.ones(2, 0)):
            try:
                norm(bad)
            except ValueError as error:
                errors.append(str(error))
        results.append((train_out.detach().numpy(), eval_out.detach().numpy(), errors))
        results[-1] += (norm.running_var.numpy(), norm.num_batches_tracked.item())
    for got, want in zip(*results):
        if isinstance(got, np.ndarray):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
        else:
            assert got == want


@needs_torch
def test_instance_norms_are_not_batch_norms():
    for lib in (kiln, torch):
        batchnorm = lib.nn.modules.batchnorm
        assert not isinstance(lib.nn.InstanceNorm2d(3), batchnorm._BatchNorm)
        assert isinstance(lib.nn.InstanceNorm2d(3), batchnorm._NormBase)
        assert isinstance(lib.nn.SyncBatchNorm(3), batchnorm._BatchNorm)


@needs_torch
def test_feature_alpha_dropout_module():
    for lib in (kiln, torch):
        layer = lib.nn.FeatureAlphaDropout(0.2)
        assert repr(layer) == "FeatureAlphaDropout(p=0.2, inplace=False)"
        out = layer(lib.ones(4, 6, 5))
        # whole channels share one fate: each (sample, channel) plane is constant
        planes = out.numpy().reshape(24, 5)
        assert np.all(planes == planes[:, :1])
        layer.eval()
        assert layer(lib.ones(1, 2, 2)).tolist() == [[[1.0, 1.0], [1.0, 1.0]]]


# ---------------------------------------------------------------------------- samplers


@needs_torch
@pytest.mark.parametrize(
    ("replicas", "drop_last"), [(3, False), (3, True), (4, False), (2, False), (15, False)]
)
def test_distributed_sampler_splits_like_torch(replicas, drop_last):
    def split(lib, shuffle):
        data = lib.utils.data.TensorDataset(lib.arange(10.0))
        samplers = [
            lib.utils.data.DistributedSampler(
                data, num_replicas=replicas, rank=rank, shuffle=shuffle, seed=3, drop_last=drop_last
            )
            for rank in range(replicas)
        ]
        return [(len(s), s.total_size, list(s)) for s in samplers]

    assert split(kiln, False) == split(torch, False)
    # shuffled orders come from each library's own generator: compare what does not depend on it
    shuffled = [part for _, _, part in split(kiln, True)]
    assert [len(part) for part in shuffled] == [n for n, _, _ in split(torch, True)]
    seen = {i for part in shuffled for i in part}
    assert seen <= set(range(10)) and (drop_last or seen == set(range(10)))
    assert len(seen) == sum(len(part) for part in shuffled) or not drop_last


def test_distributed_sampler_reshuffles_per_epoch_and_checks_its_rank():
    data = kiln.utils.data.TensorDataset(kiln.arange(10.0))
    sampler = kiln.utils.data.DistributedSampler(data, num_replicas=2, rank=1)
    first = list(sampler)
    sampler.set_epoch(1)
    second = list(sampler)
    sampler.set_epoch(0)
    assert list(sampler) == first != second
    with pytest.raises(
        ValueError, match=r"Invalid rank 2, rank should be in the interval \[0, 1\]"
    ):
        kiln.utils.data.DistributedSampler(data, num_replicas=2, rank=2)
    # without num_replicas/rank it asks the default process group, which is not initialized
    with pytest.raises(ValueError, match="Default process group has not been initialized"):
        kiln.utils.data.DistributedSampler(data)


# ---------------------------------------------------------------------------- printed grad_fn names

_GRAD_FN_CASES = {
    "interpolate_nearest_1d": lambda F, t: F.interpolate(t["x1"], scale_factor=2),
    "interpolate_linear": lambda F, t: F.interpolate(t["x1"], scale_factor=2, mode="linear"),
    "interpolate_nearest": lambda F, t: F.interpolate(t["x"], scale_factor=2),
    "interpolate_bilinear": lambda F, t: F.interpolate(t["x"], size=(3, 5), mode="bilinear"),
    "interpolate_bicubic": lambda F, t: F.interpolate(t["x"], scale_factor=2, mode="bicubic"),
    "interpolate_exact": lambda F, t: F.interpolate(t["x"], scale_factor=2, mode="nearest-exact"),
    "interpolate_trilinear": lambda F, t: F.interpolate(t["x3"], scale_factor=2, mode="trilinear"),
    "interpolate_area": lambda F, t: F.interpolate(t["x"], size=2, mode="area"),
    "interpolate_area_1d": lambda F, t: F.interpolate(t["x1"], size=2, mode="area"),
    "adaptive_avg_global": lambda F, t: F.adaptive_avg_pool2d(t["x"], 1),
    "adaptive_avg": lambda F, t: F.adaptive_avg_pool2d(t["x"], (1, 2)),
    "adaptive_avg_3d": lambda F, t: F.adaptive_avg_pool3d(t["x3"], 2),
    "adaptive_avg_1d": lambda F, t: F.adaptive_avg_pool1d(t["x1"], 2),
    "adaptive_max": lambda F, t: F.adaptive_max_pool2d(t["x"], 1),
    "adaptive_max_1d": lambda F, t: F.adaptive_max_pool1d(t["x1"], 2),
    "pixel_shuffle": lambda F, t: F.pixel_shuffle(t["x4"], 2),
    "pixel_unshuffle": lambda F, t: F.pixel_unshuffle(t["x"], 2),
    "channel_shuffle": lambda F, t: F.channel_shuffle(t["x4"], 2),
    "grid_sample": lambda F, t: F.grid_sample(t["x"], t["grid"], align_corners=False),
    "affine_grid": lambda F, t: F.affine_grid(t["theta"], [1, 1, 2, 2], align_corners=False),
    "rms_norm": lambda F, t: F.rms_norm(t["x"], (4,)),
    "glu": lambda F, t: F.glu(t["x"], 1),
    "reflect_pad": lambda F, t: F.pad(t["x"], (1, 1, 1, 1), mode="reflect"),
    "replicate_pad_1d": lambda F, t: F.pad(t["x1"], (1, 2), mode="replicate"),
    "unfold": lambda F, t: F.unfold(t["x"], 2),
    "fold": lambda F, t: F.fold(t["cols"], (4, 4), 2, stride=2),
    "soft_margin": lambda F, t: F.soft_margin_loss(t["x"], t["x"].detach().sign()),
    "soft_target_ce": lambda F, t: F.cross_entropy(t["logits"], t["probs"]),
    "soft_target_ce_sum": lambda F, t: F.cross_entropy(t["logits"], t["probs"], reduction="sum"),
    "embedding_bag": lambda F, t: F.embedding_bag(t["idx"], t["table"], t["offsets"]),
}


def _grad_fn_inputs(lib) -> dict:
    def leaf(*shape):
        return lib.ones(*shape, requires_grad=True)

    return {
        "x1": leaf(1, 2, 4),
        "x": leaf(1, 2, 4, 4),
        "x3": leaf(1, 1, 2, 4, 4),
        "x4": leaf(1, 4, 2, 2),
        "grid": lib.zeros(1, 2, 2, 2),
        "theta": leaf(1, 2, 3),
        "cols": leaf(1, 8, 4),
        "logits": leaf(2, 4),
        "probs": lib.ones(2, 4).softmax(1),
        "idx": lib.tensor([1, 2, 4, 5]),
        "offsets": lib.tensor([0, 2]),
        "table": leaf(6, 3),
    }


@needs_torch
@pytest.mark.parametrize("case", list(_GRAD_FN_CASES))
def test_functional_grad_fn_names_print_like_torch(case):
    names = []
    for lib in (kiln, torch):
        out = _GRAD_FN_CASES[case](lib.nn.functional, _grad_fn_inputs(lib))
        names.append(out.grad_fn.name())
    assert names[0] == names[1]


_RNN_OPTIONS = [{}, {"num_layers": 2}, {"bidirectional": True}, {"batch_first": True}]


@needs_torch
@pytest.mark.parametrize(
    ("kind", "kwargs"),
    [("LSTM", o) for o in [*_RNN_OPTIONS, {"proj_size": 2}]] + [("GRU", o) for o in _RNN_OPTIONS],
)
def test_recurrent_output_grad_fn_names_print_like_torch(kind, kwargs):
    names = []
    for lib in (kiln, torch):
        out, _ = getattr(lib.nn, kind)(3, 4, **kwargs)(lib.ones(5, 2, 3))
        names.append(out.grad_fn.name())
    assert names[0] == names[1]


# ---------------------------------------------------------------------------- meta-device models


def test_device_context_sets_the_factory_default_and_nests():
    with kiln.device("meta"):
        model = kiln.nn.Sequential(kiln.nn.Linear(3, 4), kiln.nn.BatchNorm1d(4))
        with kiln.device("cpu"):
            assert kiln.ones(1).device == kiln.device("cpu")
        assert kiln.zeros(2).device == kiln.device("meta")
    assert kiln.ones(1).device == kiln.device("cpu")
    assert model[0].weight.device == kiln.device("meta") and model[1].running_mean.is_meta


@needs_torch
def test_meta_model_gets_memory_with_to_empty_then_initialises():
    results = []
    for lib in (kiln, torch):
        nn = lib.nn
        with lib.device("meta"):
            model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 2))
        assert model.to_empty(device="cpu") is model

        def init(m, nn=nn):
            if isinstance(m, nn.Linear):
                nn.init.constant_(m.weight, 0.5)
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.BatchNorm1d):
                m.reset_parameters()

        model.apply(init)
        model.eval()
        out = model(lib.linspace(0, 1, 6).reshape(2, 3))
        weight = model[0].weight
        results.append(
            (
                out.tolist(),
                str(weight.device),
                type(weight).__name__,
                weight.requires_grad,
                str(model[1].num_batches_tracked.dtype).split(".")[-1],
            )
        )
    assert results[0] == results[1]


@needs_torch
def test_meta_model_loads_a_state_dict_with_assign():
    for lib in (kiln, torch):
        with lib.device("meta"):
            model = lib.nn.Linear(3, 4)
        state = lib.nn.Linear(3, 4).state_dict()
        assert str(model.load_state_dict(state, assign=True)) == "<All keys matched successfully>"
        assert model.weight.device == lib.device("cpu") and lib.equal(model.weight, state["weight"])
        assert isinstance(model.weight, lib.nn.Parameter)


@needs_torch
def test_cyclic_lr_load_state_dict_consumes_the_custom_scale_entry_like_torch():
    keys = []
    for lib in (kiln, torch):
        opt = lib.optim.SGD([lib.nn.Parameter(lib.ones(1))], lr=0.1, momentum=0.9)
        sched = lib.optim.lr_scheduler.CyclicLR(opt, 0.01, 0.1, step_size_up=2)
        state = sched.state_dict()
        sched.load_state_dict(state)
        keys.append(sorted(state))
    assert keys[0] == keys[1]


# ---------------------------------------------------------------------------- messages and warnings


def _outcome(fn) -> tuple[str, str]:
    try:
        fn()
    except Exception as error:  # noqa: BLE001 - the type and text are what is compared
        return type(error).__name__, str(error).replace("kiln", "torch")
    return "no error", ""


@needs_torch
@pytest.mark.parametrize(
    ("input_shape", "target_shape"),
    [
        ((2, 3, 4), (2, 5)),
        ((2, 3, 4), (2,)),
        ((2, 3, 4, 5), (2, 4)),
        ((2, 3, 4, 5), (2, 4, 6)),
        ((2, 3, 4, 5, 6), (2, 4, 5, 7)),
        ((3,), (2,)),
        ((2, 3), (2, 2)),
    ],
)
def test_class_target_shape_errors_match_torch(input_shape, target_shape):
    def call(lib):
        return lambda: lib.nn.functional.nll_loss(
            lib.ones(*input_shape), lib.zeros(*target_shape, dtype=lib.long)
        )

    assert _outcome(call(kiln)) == _outcome(call(torch))


@needs_torch
def test_bce_with_logits_shape_error_names_sizes_like_torch():
    def call(lib):
        return lambda: lib.nn.functional.binary_cross_entropy_with_logits(
            lib.ones(2, 1), lib.ones(2)
        )

    assert _outcome(call(kiln)) == _outcome(call(torch))


def _warnings_of(fn) -> list[tuple[str, str]]:
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn()
    return [(str(w.message).replace("kiln", "torch"), w.filename) for w in caught]


@needs_torch
@pytest.mark.parametrize(
    ("name", "shape"),
    [
        ("dropout1d", (2,)),
        ("dropout1d", (2, 3)),
        ("dropout2d", (2,)),
        ("dropout2d", (2, 3)),
        ("dropout2d", (2, 3, 4)),
        ("dropout2d", (2, 3, 4, 5, 6)),
        ("dropout3d", (2, 3)),
        ("dropout3d", (2, 3, 4, 5)),
    ],
)
def test_feature_dropout_ranks_warn_and_fail_like_torch(name, shape):
    results = []
    for lib in (kiln, torch):
        fn = getattr(lib.nn.functional, name)
        caught = []

        def call(fn=fn, caught=caught):
            caught.extend(_warnings_of(lambda: fn(lib.ones(*shape), 0.5)))

        results.append((_outcome(call), [message for message, _ in caught]))
    assert results[0] == results[1]
    for message, filename in _warnings_of(lambda: kiln.nn.functional.dropout2d(kiln.ones(2, 3))):
        assert filename == __file__, message  # reported at the caller, as PyTorch does


def test_feature_dropout_drops_whole_channels_in_place():
    x = kiln.ones(4, 6, 5, 2)
    out = kiln.nn.functional.dropout2d(x, 0.5, inplace=True)
    assert out is x
    planes = x.numpy().reshape(24, 10)
    assert np.all(planes == planes[:, :1]) and set(np.unique(planes)) <= {0.0, 2.0}


@needs_torch
@pytest.mark.parametrize("name", ["upsample", "upsample_nearest", "upsample_bilinear"])
def test_upsample_aliases_warn_that_they_are_deprecated(name):
    got = _warnings_of(lambda: getattr(kiln.nn.functional, name)(kiln.ones(1, 1, 2, 2), None, 2))
    want = _warnings_of(lambda: getattr(torch.nn.functional, name)(torch.ones(1, 1, 2, 2), None, 2))
    assert got == want and got[0][1] == __file__


def test_size_mismatch_warning_points_at_the_loss_call():
    caught = _warnings_of(lambda: kiln.nn.functional.mse_loss(kiln.ones(2, 1), kiln.ones(2)))
    assert len(caught) == 1 and caught[0][1] == __file__


def _per_sample_batches(loader) -> list:
    data = loader.dataset
    collate = kiln.utils.data.default_collate
    return [collate([data[i] for i in batch]) for batch in loader.batch_sampler]


def _same_batches(got, want) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert type(g) is type(w) and len(g) == len(w)
        for a, b in zip(g, w):
            assert a.dtype is b.dtype and a.shape == b.shape and a.is_contiguous()
            np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_tensor_dataset_batches_equal_the_per_sample_collation():
    data = kiln.utils.data
    table = data.TensorDataset(
        kiln.arange(60.0).reshape(20, 3), kiln.arange(20) % 3, kiln.ones(20, 2, dtype=kiln.bfloat16)
    )
    train, _ = data.random_split(table, [15, 5], generator=kiln.Generator().manual_seed(0))
    nested = data.Subset(train, [4, 0, 2, 14, 7])
    for dataset in (table, train, nested):
        assert data.dataset.tensor_rows(dataset, [1, 0]) is not None  # the one-gather route
        for kwargs in ({"batch_size": 4}, {"batch_size": 3, "drop_last": True, "shuffle": True}):
            loader = data.DataLoader(dataset, **kwargs)
            batches = [list(b) for b in loader]
            assert all(type(b) is list for b in loader)
            sampler = loader.batch_sampler
            if not kwargs.get("shuffle"):
                _same_batches(batches, _per_sample_batches(loader))
            assert len(batches) == len(list(sampler))


def test_custom_getitem_and_collate_still_run_per_sample():
    data = kiln.utils.data
    seen = []

    class Logged(data.TensorDataset):
        def __getitem__(self, index):
            seen.append(index)
            return super().__getitem__(index)

    list(data.DataLoader(Logged(kiln.arange(6.0)), batch_size=4))
    assert seen == [0, 1, 2, 3, 4, 5]
    batches = list(data.DataLoader(data.TensorDataset(kiln.arange(4.0)), batch_size=2,
                                   collate_fn=lambda samples: len(samples)))  # fmt: skip
    assert batches == [2, 2]


@needs_torch
def test_out_of_range_sampler_index_fails_like_torch():
    def run(lib):
        data = lib.utils.data
        loader = data.DataLoader(data.TensorDataset(lib.arange(4.0)), batch_sampler=[[0, 7]])
        return lambda: list(loader)

    assert _outcome(run(kiln)) == _outcome(run(torch))


# ---------------------------------------------------------------------------- eager optimizer speed

_FAST_CONFIGS = [
    ("SGD", {"lr": 0.1}),
    ("SGD", {"lr": 0.1, "momentum": 0.9, "dampening": 0.3, "weight_decay": 0.01}),
    ("SGD", {"lr": 0.1, "momentum": 0.9, "nesterov": True, "maximize": True, "weight_decay": 0.1}),
    ("Adam", {"lr": 0.01}),
    ("Adam", {"lr": 0.01, "amsgrad": True, "weight_decay": 0.1, "maximize": True}),
    ("Adam", {"lr": 0.01, "betas": (0.6, 0.99), "eps": 1e-6}),
    ("AdamW", {"lr": 0.01, "amsgrad": True, "weight_decay": 0.5}),
]


def _trained(name, kwargs, dtype, numpy_path: bool, monkeypatch):
    from kiln.optim import _numpy_step

    monkeypatch.setattr(_numpy_step, "available", lambda: numpy_path)
    kiln.manual_seed(0)
    model = kiln.nn.Sequential(kiln.nn.Linear(5, 7), kiln.nn.Tanh(), kiln.nn.Linear(7, 3))
    model = model.to(dtype)
    scale = kiln.nn.Parameter(kiln.tensor(1.5, dtype=dtype))  # a 0-d parameter too
    x, y = kiln.randn(16, 5, dtype=dtype), kiln.randint(0, 3, (16,))
    opt = getattr(kiln.optim, name)([*model.parameters(), scale], **kwargs)
    for _ in range(6):
        opt.zero_grad()
        kiln.nn.functional.cross_entropy(model(x) * scale, y).backward()
        opt.step()
    return [p.detach().numpy().copy() for p in opt.param_groups[0]["params"]], opt.state_dict()


@pytest.mark.parametrize("dtype", [kiln.float32, kiln.float64])
@pytest.mark.parametrize(("name", "kwargs"), _FAST_CONFIGS)
def test_numpy_optimizer_step_is_bitwise_the_op_path(name, kwargs, dtype, monkeypatch):
    fast, fast_state = _trained(name, kwargs, dtype, True, monkeypatch)
    ops, ops_state = _trained(name, kwargs, dtype, False, monkeypatch)
    for a, b in zip(fast, ops):
        np.testing.assert_array_equal(a, b)
    assert fast_state["state"].keys() == ops_state["state"].keys()
    for index, state in ops_state["state"].items():
        assert list(fast_state["state"][index]) == list(state)
        for key, value in state.items():
            got = fast_state["state"][index][key]
            assert got.dtype is value.dtype and got.shape == value.shape
            np.testing.assert_array_equal(got.numpy(), value.numpy())


@pytest.mark.parametrize("name", ["SGD", "Adam"])
def test_numpy_optimizer_step_still_invalidates_saved_tensors(name):
    weight = kiln.nn.Parameter(kiln.ones(3))
    opt = getattr(kiln.optim, name)([weight], lr=0.1)
    loss = (weight * weight).sum()
    weight.grad = kiln.ones(3)
    opt.step()
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()
