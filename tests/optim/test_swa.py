"""kiln.optim.swa_utils against torch.optim.swa_utils: ``AveragedModel`` (the default running
mean, EMA with ``avg_fn`` / ``multi_avg_fn``, ``use_buffers``), ``update_bn`` and ``SWALR``.

Both libraries train the same small batch-norm model from identical float64 weights with SGD,
fold the weights into the average after each step and must hold the same averages, buffers and
``n_averaged`` (and produce the same state dict keys and outputs).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import kiln
from tests.oracle import needs_torch, torch


def _model(lib):
    """Linear -> BatchNorm1d -> Tanh -> Linear, float64, weights from a fixed numpy stream."""
    nn = lib.nn
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Tanh(), nn.Linear(4, 2)).double()
    rng = np.random.default_rng(0)
    with lib.no_grad():
        for p in model.parameters():
            p.copy_(lib.tensor(rng.standard_normal(tuple(p.shape))))
    return model


def _batches(lib, n: int = 4) -> list:
    rng = np.random.default_rng(1)
    return [
        (lib.tensor(rng.standard_normal((8, 3))), lib.tensor(rng.standard_normal((8, 2))))
        for _ in range(n)
    ]


def _numpy(t):
    return t.detach().numpy()


def _train_and_average(lib, make_averaged, steps: int = 5):
    model = _model(lib)
    averaged = make_averaged(lib, model)
    opt = lib.optim.SGD(model.parameters(), lr=0.1, momentum=0.5)
    for i, (x, y) in enumerate(_batches(lib, steps)):
        opt.zero_grad()
        ((model(x) - y) ** 2).mean().backward()
        opt.step()
        if i != 1:  # skip one, so n_averaged differs from the step count
            averaged.update_parameters(model)
    return model, averaged


AVERAGES = {
    "swa": lambda lib, m: lib.optim.swa_utils.AveragedModel(m),
    "swa_buffers": lambda lib, m: lib.optim.swa_utils.AveragedModel(m, use_buffers=True),
    "ema_multi_buffers": lambda lib, m: lib.optim.swa_utils.AveragedModel(
        m, multi_avg_fn=lib.optim.swa_utils.get_ema_multi_avg_fn(0.9), use_buffers=True
    ),
    "ema_avg_fn": lambda lib, m: lib.optim.swa_utils.AveragedModel(
        m, avg_fn=lib.optim.swa_utils.get_ema_avg_fn(0.8)
    ),
    "swa_multi": lambda lib, m: lib.optim.swa_utils.AveragedModel(
        m, multi_avg_fn=lib.optim.swa_utils.get_swa_multi_avg_fn()
    ),
    "swa_avg_fn": lambda lib, m: lib.optim.swa_utils.AveragedModel(
        m, avg_fn=lib.optim.swa_utils.get_swa_avg_fn()
    ),
    "custom_avg_fn": lambda lib, m: lib.optim.swa_utils.AveragedModel(
        m, avg_fn=lambda avg, new, n: avg * 0.5 + new * 0.5 + n * 0.0
    ),
}


@needs_torch
@pytest.mark.parametrize("name", sorted(AVERAGES))
def test_averaged_weights_buffers_and_outputs_match_torch(name):
    results = []
    for lib in (torch, kiln):
        model, averaged = _train_and_average(lib, AVERAGES[name])
        averaged.eval()
        x = _batches(lib, 6)[5][0]
        results.append((averaged.state_dict(), _numpy(averaged(x)), model))
    (t_sd, t_out, _), (k_sd, k_out, _) = results
    assert list(k_sd) == list(t_sd)
    assert int(k_sd["n_averaged"]) == int(t_sd["n_averaged"]) == 4
    for key, t_value in t_sd.items():
        k_value = k_sd[key]
        assert str(k_value.dtype).split(".")[-1] == str(t_value.dtype).split(".")[-1], key
        np.testing.assert_allclose(_numpy(k_value), _numpy(t_value), rtol=1e-12, err_msg=key)
    np.testing.assert_allclose(k_out, t_out, rtol=1e-12)


def test_first_update_copies_and_default_average_is_the_mean():
    model = kiln.nn.Linear(2, 1, bias=False)
    averaged = kiln.optim.swa_utils.AveragedModel(model)
    seen = []
    for value in (1.0, 2.0, 6.0):
        with kiln.no_grad():
            model.weight.fill_(value)
        averaged.update_parameters(model)
        seen.append(averaged.module.weight.detach().numpy().tolist())
    assert seen == [[[1.0, 1.0]], [[1.5, 1.5]], [[3.0, 3.0]]]
    assert averaged.n_averaged.dtype is kiln.int64 and int(averaged.n_averaged) == 3
    # the copy is independent of the model
    assert averaged.module is not model and model.weight.detach().numpy().tolist() == [[6.0, 6.0]]


def test_without_use_buffers_the_buffers_follow_the_latest_model():
    model = _model(kiln)
    averaged = kiln.optim.swa_utils.AveragedModel(model)
    for x, _ in _batches(kiln, 3):
        model(x)
        averaged.update_parameters(model)
    bn, bn_avg = model[1], averaged.module[1]
    assert bn_avg.running_mean.numpy().tolist() == bn.running_mean.numpy().tolist()
    assert int(bn_avg.num_batches_tracked) == 3


@needs_torch
def test_torch_averaged_model_state_dict_loads_and_keeps_averaging():
    t_model, t_avg = _train_and_average(torch, AVERAGES["swa"])
    k_model = _model(kiln)
    k_model.load_state_dict({k: kiln.tensor(_numpy(v)) for k, v in t_model.state_dict().items()})
    k_avg = kiln.optim.swa_utils.AveragedModel(k_model)
    k_avg.load_state_dict({k: kiln.tensor(_numpy(v)) for k, v in t_avg.state_dict().items()})
    for lib, model, avg in ((torch, t_model, t_avg), (kiln, k_model, k_avg)):
        with lib.no_grad():
            for p in model.parameters():
                p.mul_(0.5)
        avg.update_parameters(model)
    assert int(k_avg.n_averaged) == int(t_avg.n_averaged) == 5
    for k, t in zip(k_avg.parameters(), t_avg.parameters()):
        np.testing.assert_allclose(_numpy(k), _numpy(t), rtol=1e-12)


@needs_torch
def test_errors_match_torch():
    for lib in (torch, kiln):
        utils = lib.optim.swa_utils
        model = lib.nn.Linear(2, 2)
        with pytest.raises(AssertionError, match="Only one of avg_fn and multi_avg_fn"):
            utils.AveragedModel(
                model, avg_fn=utils.get_swa_avg_fn(), multi_avg_fn=utils.get_swa_multi_avg_fn()
            )
        for make in (utils.get_ema_avg_fn, utils.get_ema_multi_avg_fn):
            with pytest.raises(ValueError, match=r"Invalid decay value 1.5 provided"):
                make(1.5)


# ---------------------------------------------------------------------- update_bn


@needs_torch
@pytest.mark.parametrize("with_targets", [False, True])
def test_update_bn_recomputes_statistics_like_torch(with_targets):
    stats = []
    for lib in (torch, kiln):
        model, averaged = _train_and_average(lib, AVERAGES["swa"])
        averaged.eval()
        batches = _batches(lib, 3)
        loader = batches if with_targets else [x for x, _ in batches]
        lib.optim.swa_utils.update_bn(loader, averaged)
        bn = averaged.module[1]
        assert not averaged.training and bn.momentum == 0.1
        stats.append([_numpy(bn.running_mean), _numpy(bn.running_var), int(bn.num_batches_tracked)])
    np.testing.assert_allclose(stats[1][0], stats[0][0], rtol=1e-12)
    np.testing.assert_allclose(stats[1][1], stats[0][1], rtol=1e-12)
    assert stats[1][2] == stats[0][2] == 3


def test_update_bn_is_a_plain_average_over_the_batches():
    bn = kiln.nn.BatchNorm1d(2).double()  # (float32 batches would be refused, as PyTorch's)
    rows = ([[0.0, 1.0], [2.0, 3.0]], [[4.0, 5.0], [6.0, 7.0]])
    batches = [kiln.tensor(r, dtype=kiln.float64) for r in rows]
    kiln.optim.swa_utils.update_bn(batches, bn)
    np.testing.assert_allclose(bn.running_mean.numpy(), [3.0, 4.0])


def test_update_bn_without_batch_norm_does_not_run_the_model():
    calls = []
    model = kiln.nn.Linear(2, 2)
    model.register_forward_hook(lambda *args: calls.append(1))
    kiln.optim.swa_utils.update_bn([kiln.zeros(1, 2)], model)
    assert calls == []


# ---------------------------------------------------------------------- SWALR


def _swalr_sequence(lib, kwargs, epochs: int = 10):
    params = [lib.zeros(2, requires_grad=True) for _ in range(2)]
    opt = lib.optim.SGD([{"params": [params[0]], "lr": 0.5}, {"params": [params[1]], "lr": 0.2}])
    sched = lib.optim.swa_utils.SWALR(opt, **kwargs)
    seen = [sched.get_last_lr()]
    for _ in range(epochs):
        opt.step()
        sched.step()
        seen.append(sched.get_last_lr())
    return seen, sched, opt


SWALR_CASES = [
    {"swa_lr": 0.05},
    {"swa_lr": [0.05, 0.01], "anneal_epochs": 4, "anneal_strategy": "linear"},
    {"swa_lr": 0.1, "anneal_epochs": 0},
    {"swa_lr": 0.3, "anneal_epochs": 3, "anneal_strategy": "cos"},
]


@needs_torch
@pytest.mark.parametrize("kwargs", SWALR_CASES, ids=lambda kw: "-".join(map(str, kw.values())))
def test_swalr_sequence_matches_torch(kwargs):
    t_seen, _, t_opt = _swalr_sequence(torch, kwargs)
    k_seen, _, k_opt = _swalr_sequence(kiln, kwargs)
    assert k_seen == t_seen
    assert [g["swa_lr"] for g in k_opt.param_groups] == [g["swa_lr"] for g in t_opt.param_groups]


@needs_torch
def test_swalr_state_dict_matches_torch_and_resumes():
    kwargs = {"swa_lr": 0.05, "anneal_epochs": 6, "anneal_strategy": "linear"}
    _, t_sched, _ = _swalr_sequence(torch, kwargs, epochs=3)
    _, k_sched, _ = _swalr_sequence(kiln, kwargs, epochs=3)
    assert sorted(k_sched.state_dict()) == sorted(t_sched.state_dict())
    full, _, _ = _swalr_sequence(kiln, kwargs, epochs=6)
    saved = k_sched.state_dict()
    params = [kiln.zeros(2, requires_grad=True) for _ in range(2)]
    opt = kiln.optim.SGD([{"params": [params[0]], "lr": 0.5}, {"params": [params[1]], "lr": 0.2}])
    resumed = kiln.optim.swa_utils.SWALR(opt, swa_lr=1.0, anneal_strategy="cos")
    opt.load_state_dict(k_sched.optimizer.state_dict())
    resumed.load_state_dict(saved)
    assert resumed.anneal_func is kiln.optim.swa_utils.SWALR._linear_anneal
    for expected in full[4:]:
        opt.step()
        resumed.step()
        assert resumed.get_last_lr() == expected


def test_swalr_argument_errors_and_get_lr_warning():
    opt = kiln.optim.SGD([kiln.zeros(2, requires_grad=True)], lr=0.1)
    with pytest.raises(ValueError, match="anneal_strategy must be one of 'cos' or 'linear'"):
        kiln.optim.swa_utils.SWALR(opt, swa_lr=0.01, anneal_strategy="step")
    with pytest.raises(ValueError, match="anneal_epochs must be equal or greater than 0, got -1"):
        kiln.optim.swa_utils.SWALR(opt, swa_lr=0.01, anneal_epochs=-1)
    with pytest.raises(ValueError, match="swa_lr must have the same length"):
        kiln.optim.swa_utils.SWALR(opt, swa_lr=[0.01, 0.02])
    sched = kiln.optim.swa_utils.SWALR(opt, swa_lr=0.01)
    with pytest.warns(UserWarning, match="please use `get_last_lr\\(\\)`"):
        sched.get_lr()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        opt.step()
        sched.step()


# ---------------------------------------------------------------------- kiln.compile


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compiled_averaged_model_matches_eager(backend):
    model, averaged = _train_and_average(kiln, AVERAGES["ema_multi_buffers"])
    averaged.eval()
    x = _batches(kiln, 6)[5][0]
    expected = _numpy(averaged(x))
    got = _numpy(kiln.compile(averaged, backend=backend)(x))
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)
    kiln.dynamo.reset()
