"""Training-program idioms against PyTorch: state-dict metadata and hooks, init helpers, the
error messages training scripts print, and loss curves from identical starting weights."""

from __future__ import annotations

import io
import warnings
from collections import OrderedDict

import numpy as np
import pytest

import kiln
from tests.oracle import needs_torch, torch


def _message(fn) -> tuple[str, str]:
    try:
        fn()
    except Exception as error:  # noqa: BLE001 - the type and text are what is compared
        return type(error).__name__, str(error)
    return "no error", ""


def _same_error(kiln_fn, torch_fn) -> None:
    assert _message(kiln_fn) == _message(torch_fn)


# ---------------------------------------------------------------------------- state dicts


def _norm_net(lib):
    nn = lib.nn
    return nn.Sequential(nn.Linear(2, 3), nn.Sequential(nn.BatchNorm1d(3), nn.ReLU()))


@needs_torch
def test_state_dict_metadata_records_each_module_version():
    got = _norm_net(kiln).state_dict()._metadata
    want = _norm_net(torch).state_dict()._metadata
    assert isinstance(got, OrderedDict) and dict(got) == dict(want)


@needs_torch
@pytest.mark.parametrize("with_metadata", [True, False])
def test_batchnorm_missing_num_batches_tracked_depends_on_version(with_metadata):
    def result(lib):
        state = _norm_net(lib).state_dict()
        del state["1.0.num_batches_tracked"]
        if not with_metadata:
            state = dict(state)
        return repr(_norm_net(lib).load_state_dict(state, strict=False))

    assert result(kiln) == result(torch)


def _renaming_module(lib, seen):
    class Legacy(lib.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = lib.nn.Linear(2, 2)
            self.register_buffer("running", lib.zeros(2))

        def _load_from_state_dict(self, state_dict, prefix, local_metadata, *args):
            seen.append((prefix, dict(local_metadata)))
            if prefix + "old_running" in state_dict:
                state_dict[prefix + "running"] = state_dict.pop(prefix + "old_running")
            super()._load_from_state_dict(state_dict, prefix, local_metadata, *args)

    wrapper = lib.nn.Module()
    wrapper.legacy = Legacy()
    return wrapper


@needs_torch
def test_load_from_state_dict_override_sees_metadata_and_renames_keys():
    def run(lib):
        seen = []
        model = _renaming_module(lib, seen)
        state = model.state_dict()
        user_state = OrderedDict((k.replace("running", "old_running"), v) for k, v in state.items())
        user_state._metadata = state._metadata
        result = model.load_state_dict(user_state)
        return repr(result), seen, list(user_state)  # the caller's dict is not edited

    assert run(kiln) == run(torch)


@needs_torch
def test_state_dict_and_load_hooks_run_like_torch():
    def run(lib):
        log = []
        model = _norm_net(lib)
        model[0].register_state_dict_pre_hook(lambda m, p, kv: log.append(("pre", p, kv)))

        def post(module, state, prefix, meta):
            log.append(("post", prefix, dict(meta)))
            state[prefix + "extra"] = lib.zeros(1)

        model[0].register_state_dict_post_hook(post)
        keys = list(model.state_dict(prefix="m."))

        def load_pre(module, state, prefix, meta, strict, missing, unexpected, errors):
            log.append(("load_pre", type(module).__name__, prefix, strict))
            state.pop(prefix + "junk", None)

        def load_post(module, incompatible):
            log.append(("load_post", list(incompatible.missing_keys)))
            incompatible.missing_keys.clear()

        model[0].register_load_state_dict_pre_hook(load_pre)
        model.register_load_state_dict_post_hook(load_post)
        state = model.state_dict()
        state["0.junk"] = lib.ones(1)
        del state["0.extra"], state["1.0.bias"]
        return keys, log, repr(model.load_state_dict(state))

    assert run(kiln) == run(torch)


@needs_torch
def test_private_state_dict_hook_result_replaces_the_dict():
    def keys(lib):
        model = lib.nn.Linear(2, 2)
        model._register_state_dict_hook(
            lambda m, state, prefix, meta: {"renamed." + k: v for k, v in state.items()}
        )
        return list(model.state_dict())

    assert keys(kiln) == keys(torch)


@needs_torch
def test_extra_state_without_setter_is_an_unexpected_key():
    def result(lib):
        state = lib.nn.Linear(1, 1).state_dict()
        state["_extra_state"] = 3
        return repr(lib.nn.Linear(1, 1).load_state_dict(state, strict=False))

    assert result(kiln) == result(torch)


def test_saved_state_dict_keeps_its_metadata():
    buffer = io.BytesIO()
    kiln.save(_norm_net(kiln).state_dict(), buffer)
    buffer.seek(0)
    loaded = kiln.load(buffer)
    assert dict(loaded._metadata) == {
        "": {"version": 1},
        "0": {"version": 1},
        "1": {"version": 1},
        "1.0": {"version": 2},
        "1.1": {"version": 1},
    }


# ---------------------------------------------------------------------------- init


def test_sparse_init_zeroes_a_fraction_of_each_column():
    weight = kiln.nn.init.sparse_(kiln.empty(100, 40), sparsity=0.3, std=0.05)
    assert ((weight == 0).sum(0) >= 30).all().item()
    assert abs(weight[weight != 0].std().item() - 0.05) < 0.01
    with pytest.raises(ValueError, match="Only tensors with 2 dimensions are supported"):
        kiln.nn.init.sparse_(kiln.empty(3), 0.1)


def test_deprecated_init_names_warn_and_still_fill():
    with pytest.warns(FutureWarning, match=r"`nn.init.xavier_uniform` is now deprecated"):
        weight = kiln.nn.init.xavier_uniform(kiln.zeros(30, 30))
    assert weight.abs().max().item() <= np.sqrt(6 / 60) and weight.std().item() > 0
    with pytest.warns(FutureWarning, match=r"`nn.init.constant` is now deprecated"):
        assert kiln.nn.init.constant(kiln.zeros(2), 0.5).tolist() == [0.5, 0.5]


# ---------------------------------------------------------------------------- printed errors


@needs_torch
def test_optimizer_given_a_tensor_names_its_type():
    def build(lib):
        return lambda: lib.optim.SGD(lib.nn.Parameter(lib.ones(2)), lr=0.1)

    kind, text = _message(build(kiln))
    assert (kind, text.replace("kiln.", "torch.")) == _message(build(torch))


@needs_torch
def test_scheduler_resumed_without_initial_lr_explains_why():
    def build(lib):
        opt = lib.optim.SGD([lib.nn.Parameter(lib.ones(1))], lr=0.1)
        return lambda: lib.optim.lr_scheduler.StepLR(opt, 1, last_epoch=3)

    _same_error(build(kiln), build(torch))


@needs_torch
@pytest.mark.parametrize("x_shape", [(2, 3), (3,), (4, 2, 3)])
@pytest.mark.parametrize("w_dtype", ["float64", "float16", "bfloat16"])
@pytest.mark.parametrize("bias", [True, False])
def test_linear_dtype_mismatch_message(x_shape, w_dtype, bias):
    def build(lib):
        dtype = getattr(lib, w_dtype)
        b = lib.ones(2, dtype=dtype) if bias else None
        return lambda: lib.nn.functional.linear(lib.ones(*x_shape), lib.ones(2, 3, dtype=dtype), b)

    _same_error(build(kiln), build(torch))


@needs_torch
def test_linear_bias_dtype_mismatch_message():
    def build(lib):
        b = lib.ones(2, dtype=lib.float64)
        return lambda: lib.nn.functional.linear(lib.ones(2, 3), lib.ones(2, 3), b)

    _same_error(build(kiln), build(torch))


@needs_torch
@pytest.mark.parametrize(
    "make",
    [
        lambda lib: (lib.nn.Conv2d(3, 4, 3), lib.float64),
        lambda lib: (lib.nn.Conv2d(3, 4, 3, bias=False), lib.float64),
        lambda lib: (lib.nn.Conv2d(3, 4, 3).double(), lib.float32),
        lambda lib: (lib.nn.Conv1d(3, 4, 3), lib.int64),
    ],
)
def test_conv_dtype_mismatch_message(make):
    def build(lib):
        conv, dtype = make(lib)
        shape = (1, 3, 6, 6) if isinstance(conv, lib.nn.Conv2d) else (1, 3, 6)
        return lambda: conv(lib.ones(*shape, dtype=dtype))

    _same_error(build(kiln), build(torch))


@needs_torch
@pytest.mark.parametrize(
    "kwargs", [{}, {"affine": False}, {"track_running_stats": False}, {"eval": True}]
)
def test_batchnorm_channel_mismatch_message(kwargs):
    def build(lib):
        options = dict(kwargs)
        bn = lib.nn.BatchNorm2d(4, **{k: v for k, v in options.items() if k != "eval"})
        if options.get("eval"):
            bn.eval()
        return lambda: bn(lib.ones(2, 3, 4, 4))

    _same_error(build(kiln), build(torch))


@needs_torch
def test_embedding_index_errors():
    for indices in ([5], [-6]):
        _same_error(
            lambda: kiln.nn.Embedding(5, 2)(kiln.tensor(indices)),
            lambda: torch.nn.Embedding(5, 2)(torch.tensor(indices)),
        )
    kind, text = _message(lambda: kiln.nn.Embedding(5, 2)(kiln.tensor([1.0])))
    want = _message(lambda: torch.nn.Embedding(5, 2)(torch.tensor([1.0])))
    assert (kind, text.replace("kiln.", "torch.")) == want


@needs_torch
@pytest.mark.parametrize(
    "shapes", [((6, 5), (6,)), ((2, 3), (4, 5)), ((3, 1, 5), (4, 6)), ((2, 1), (3, 4, 5))]
)
def test_broadcast_error_names_the_dimension_like_torch(shapes):
    a, b = shapes
    _same_error(lambda: kiln.ones(*a) + kiln.ones(*b), lambda: torch.ones(*a) + torch.ones(*b))


@needs_torch
def test_class_index_loss_with_float_target_message():
    _same_error(
        lambda: kiln.nn.functional.cross_entropy(kiln.ones(2, 3), kiln.zeros(2)),
        lambda: torch.nn.functional.cross_entropy(torch.ones(2, 3), torch.zeros(2)),
    )


# ---------------------------------------------------------------------------- loss curves


def _copy_weights(kiln_model, torch_model) -> None:
    with torch.no_grad():
        for name, value in kiln_model.state_dict().items():
            torch_model.state_dict()[name].copy_(torch.from_numpy(np.array(value.numpy())))


def _curve(lib, model, make_optimizer, batches, loss_fn) -> list[float]:
    optimizer = make_optimizer(lib, model)
    losses = []
    for x, y in batches:
        optimizer.zero_grad()
        loss = loss_fn(lib, model(lib.from_numpy(x)), lib.from_numpy(y))
        loss.backward()
        lib.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        optimizer.step()
        losses.append(loss.item())
    return losses


def _cnn(lib):
    nn = lib.nn
    return nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1),
        nn.BatchNorm2d(4),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(4 * 4 * 4, 3),
    )


class _CharModel:
    """An LSTM language model built from either library's layers."""

    @staticmethod
    def build(lib):
        nn = lib.nn

        class CharLSTM(nn.Module):
            def __init__(self):
                super().__init__()
                self.embed = nn.Embedding(7, 5)
                self.lstm = nn.LSTM(5, 8, num_layers=2, batch_first=True)
                self.head = nn.Linear(8, 7)

            def forward(self, tokens):
                out, _ = self.lstm(self.embed(tokens))
                return self.head(out).transpose(1, 2)

        return CharLSTM()


@needs_torch
@pytest.mark.parametrize(
    "case",
    [
        (
            _cnn,
            lambda lib, m: lib.optim.SGD(m.parameters(), lr=0.1, momentum=0.9, nesterov=True),
            lambda lib, out, y: lib.nn.functional.cross_entropy(
                out, y, weight=lib.tensor([1.0, 2.0, 0.5]), label_smoothing=0.1
            ),
            lambda rng: (
                rng.standard_normal((8, 1, 8, 8)).astype(np.float32),
                rng.integers(0, 3, 8),
            ),
        ),
        (
            _CharModel.build,
            lambda lib, m: lib.optim.Adam(m.parameters(), lr=1e-2),
            lambda lib, out, y: lib.nn.functional.cross_entropy(out, y),
            lambda rng: (rng.integers(0, 7, (4, 6)), rng.integers(0, 7, (4, 6))),
        ),
    ],
    ids=["cnn_sgd_weighted_smoothed_ce", "char_lstm_adam"],
)
def test_loss_curve_matches_torch_from_the_same_weights(case):
    build, make_optimizer, loss_fn, make_batch = case
    rng = np.random.default_rng(0)
    batches = [make_batch(rng) for _ in range(6)]
    kiln.manual_seed(0)
    kiln_model = build(kiln)
    torch_model = build(torch)
    _copy_weights(kiln_model, torch_model)
    got = _curve(kiln, kiln_model, make_optimizer, batches, loss_fn)
    want = _curve(torch, torch_model, make_optimizer, batches, loss_fn)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_no_warning_for_plain_state_dict_round_trip():
    model = _norm_net(kiln)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert repr(model.load_state_dict(model.state_dict())) == "<All keys matched successfully>"


# ---------------------------------------------------------------------------- module hooks


def _relu_net(lib):
    nn = lib.nn
    model = nn.Sequential(nn.Linear(4, 5), nn.ReLU(), nn.Linear(5, 5), nn.ReLU(), nn.Linear(5, 2))
    with lib.no_grad():
        for i, p in enumerate(model.parameters()):
            p.copy_(lib.from_numpy(np.cos(np.arange(p.numel()) + i).reshape(p.shape) / 2))
    return model


@needs_torch
def test_old_backward_hook_clamps_relu_gradients_like_torch():
    """Guided backprop: ``register_backward_hook`` on ReLUs replaces their input gradients."""

    def saliency(lib):
        model = _relu_net(lib)
        seen = []

        def guided(module, grad_in, grad_out):
            seen.append((len(grad_in), tuple(grad_out[0].shape)))
            return (lib.clamp(grad_in[0], min=0.0),)

        for layer in model:
            if isinstance(layer, lib.nn.ReLU):
                layer.register_backward_hook(guided)
        x = lib.from_numpy(np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4))
        x.requires_grad_()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            model(x)[:, 1].sum().backward()
        return x.grad.numpy().tolist(), seen, sorted({str(w.message)[:60] for w in caught})

    got, want = saliency(kiln), saliency(torch)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6)
    assert got[1:] == want[1:]


@needs_torch
def test_full_backward_hook_warns_when_no_input_requires_grad():
    def run(lib):
        layer = lib.nn.Linear(2, 2)
        calls = []
        layer.register_full_backward_hook(lambda m, gi, go: calls.append(gi))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            layer(lib.ones(1, 2)).sum().backward()
        return calls, [str(w.message) for w in caught], [w.filename for w in caught]

    got, want = run(kiln), run(torch)
    assert got[:2] == want[:2] and got[2] == [__file__]


@needs_torch
def test_old_and_full_backward_hooks_do_not_mix():
    def build(lib):
        layer = lib.nn.Linear(2, 2)
        layer.register_full_backward_hook(lambda *a: None)
        return lambda: layer.register_backward_hook(lambda *a: None)

    _same_error(build(kiln), build(torch))


@needs_torch
@pytest.mark.parametrize(
    "target,strict", [("2.0", False), ("2.5", False), ("2.5", True), ("1.x", False), ("", False)]
)
def test_set_submodule_like_torch(target, strict):
    def run(lib):
        nn = lib.nn
        model = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Sequential(nn.Linear(3, 1)))
        outcome = _message(lambda: model.set_submodule(target, nn.Tanh(), strict=strict))
        return outcome, [name for name, _ in model.named_modules()]

    assert run(kiln) == run(torch)


def test_share_memory_returns_the_module():
    model = kiln.nn.Linear(2, 2)
    assert model.share_memory() is model


# ---------------------------------------------------------------------------- pruning

if torch is not None:
    import torch.nn.utils.prune  # noqa: F401  (PyTorch does not import it with nn.utils)


def _prunable(lib):
    nn = lib.nn
    model = nn.Sequential(nn.Conv2d(2, 4, 3), nn.Flatten(), nn.Linear(16, 5))
    with lib.no_grad():
        for i, p in enumerate(model.parameters()):
            values = np.sin(np.arange(p.numel()) * 1.7 + i) * (1 + np.arange(p.numel()) / 50)
            p.copy_(lib.from_numpy(values.astype(np.float32).reshape(p.shape)))
    return model


@needs_torch
def test_pruning_masks_and_reparametrization_match_torch():
    def run(lib):
        prune = lib.nn.utils.prune
        model = _prunable(lib)
        conv, linear = model[0], model[2]
        prune.l1_unstructured(conv, "weight", amount=0.3)
        prune.ln_structured(conv, "weight", amount=1, n=2, dim=0)  # composes with the first
        prune.l1_unstructured(linear, "bias", amount=2)
        container = next(iter(conv._forward_pre_hooks.values()))
        record = [
            [n for n, _ in model.named_parameters()],
            [n for n, _ in model.named_buffers()],
            [type(m).__name__ for m in container],
            conv.weight_mask.numpy().tolist(),
            linear.bias.detach().numpy().tolist(),
        ]
        model(lib.ones(1, 2, 4, 4)).sum().backward()
        record.append(bool((conv.weight_orig.grad[conv.weight_mask == 0] == 0).all()))
        prune.remove(conv, "weight")
        record += [[n for n, _ in conv.named_parameters()], prune.is_pruned(conv)]
        record.append(prune.is_pruned(model))
        return record

    assert run(kiln) == run(torch)


@needs_torch
def test_global_unstructured_pruning_matches_torch():
    def run(lib):
        prune = lib.nn.utils.prune
        model = _prunable(lib)
        pairs = [(model[0], "weight"), (model[2], "weight")]
        prune.global_unstructured(pairs, pruning_method=prune.L1Unstructured, amount=0.4)
        return [int((m.weight == 0).sum()) for m, _ in pairs], model[2].weight_mask.tolist()

    assert run(kiln) == run(torch)


@needs_torch
@pytest.mark.parametrize(
    "call",
    [
        lambda p, m: p.l1_unstructured(m, "weight", 1.5),
        lambda p, m: p.l1_unstructured(m, "weight", 10_000),
        lambda p, m: p.l1_unstructured(m, "weight", "half"),
        lambda p, m: p.ln_structured(m, "bias", 1, n=2, dim=0),
        lambda p, m: p.remove(m, "weight"),
    ],
)
def test_pruning_errors_match_torch(call):
    def run(lib):
        model = _prunable(lib)[2]
        kind, text = _message(lambda: call(lib.nn.utils.prune, model))
        text = text.split(" of module")[0].replace("kiln.", "torch.")
        return kind, text, [n for n, _ in model.named_parameters()]

    assert run(kiln) == run(torch)


@needs_torch
@pytest.mark.parametrize(
    "make",
    [
        lambda lib: (lib.nn.Conv2d(2, 3, 3), (1, 2, 5, 5)),
        lambda lib: (lib.nn.MaxPool2d(2), (1, 1, 4, 4)),
        lambda lib: (lib.nn.Sigmoid(), (2, 3)),
    ],
    ids=["conv", "max_pool", "sigmoid"],
)
def test_old_backward_hook_gradient_shapes_match_torch(make):
    def shapes(lib):
        module, shape = make(lib)
        seen = []

        def record(mod, grad_in, grad_out):
            seen.append([None if g is None else tuple(g.shape) for g in grad_in])
            seen.append([tuple(g.shape) for g in grad_out])

        module.register_backward_hook(record)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            module(lib.ones(*shape, requires_grad=True)).sum().backward()
        return seen

    assert shapes(kiln) == shapes(torch)
