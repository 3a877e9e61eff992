"""Optimizers against torch.optim (single-tensor implementations): identical parameters and
losses in both libraries, then the parameter trajectories must agree step by step; plus state
dicts (layout, round trips, loading PyTorch's), groups, hooks, closures and argument errors."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from tests.optim.helpers import assert_same_trajectory, run_steps
from tests.oracle import assert_close, error_of, needs_torch, torch

STEPS = 8

CONFIGS = [
    ("SGD", {"lr": 0.1}),
    ("SGD", {"lr": 0.05, "momentum": 0.9}),
    ("SGD", {"lr": 0.05, "momentum": 0.9, "dampening": 0.1, "weight_decay": 0.01}),
    ("SGD", {"lr": 0.05, "momentum": 0.8, "nesterov": True}),
    ("SGD", {"lr": 0.05, "momentum": 0.5, "maximize": True}),
    ("Adam", {}),
    ("Adam", {"lr": 0.01, "weight_decay": 0.1, "amsgrad": True}),
    ("Adam", {"lr": 0.02, "betas": (0.8, 0.9), "maximize": True}),
    ("AdamW", {"lr": 0.01}),
    ("AdamW", {"lr": 0.01, "weight_decay": 0.5, "amsgrad": True, "eps": 1e-6}),
    ("RMSprop", {"lr": 0.01}),
    ("RMSprop", {"lr": 0.01, "centered": True, "momentum": 0.9, "weight_decay": 0.1}),
    ("RMSprop", {"lr": 0.01, "alpha": 0.9, "maximize": True}),
    ("Adagrad", {"lr": 0.1}),
    (
        "Adagrad",
        {"lr": 0.1, "lr_decay": 0.01, "weight_decay": 0.1, "initial_accumulator_value": 0.1},
    ),
]


def _initial(seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return {
        "w": rng.standard_normal((4, 3)).astype(np.float32),
        "b": rng.standard_normal(4).astype(np.float32),
        "s": rng.standard_normal(()).astype(np.float32),
        "x": rng.standard_normal((5, 3)).astype(np.float32),
        "y": rng.standard_normal((5, 4)).astype(np.float32),
    }


def _params(lib, data: dict) -> list:
    return [lib.tensor(data[k].copy(), requires_grad=True) for k in ("w", "b", "s")]


def _loss(lib, params, data, step: int):
    """A loss whose gradients depend on the parameters, so trajectories feed back."""
    w, b, s = params
    x = lib.tensor(data["x"] * (1 + 0.1 * step))
    pred = x @ w.t() + b
    return ((pred - lib.tensor(data["y"])) ** 2).mean() + (s * s * s) * 0.1 + (w * w).sum() * 0.01


def _train(lib, name, kwargs, data, steps=STEPS, groups=None):
    params = _params(lib, data)
    arg = params if groups is None else groups(params)
    opt = getattr(lib.optim, name)(arg, **kwargs)
    history = run_steps(opt, params, lambda step: _loss(lib, params, data, step), range(steps))
    return opt, params, history


@needs_torch
@pytest.mark.parametrize(
    "name,kwargs", CONFIGS, ids=[f"{n}-{'-'.join(map(str, k.items()))}" for n, k in CONFIGS]
)
def test_trajectory_matches_torch(name, kwargs):
    data = _initial()
    t_opt, _, t_hist = _train(torch, name, kwargs, data)
    k_opt, _, k_hist = _train(kiln, name, kwargs, data)
    assert_same_trajectory(k_hist, t_hist, rtol=2e-5, atol=2e-6)
    _assert_state_dicts_match(k_opt.state_dict(), t_opt.state_dict())


def _assert_state_dicts_match(k_sd: dict, t_sd: dict) -> None:
    assert k_sd["param_groups"] == t_sd["param_groups"]
    assert sorted(k_sd["state"]) == sorted(t_sd["state"])
    for idx, t_state in t_sd["state"].items():
        k_state = k_sd["state"][idx]
        assert list(k_state) == list(t_state)
        for key, t_val in t_state.items():
            assert_close(k_state[key], t_val, rtol=2e-5, atol=2e-6)


@needs_torch
def test_param_groups_with_their_own_options_match_torch():
    data = _initial(1)

    def groups(params):
        return [{"params": params[:2], "lr": 0.05}, {"params": params[2:], "momentum": 0.5}]

    t_opt, _, t_hist = _train(torch, "SGD", {"lr": 0.1, "momentum": 0.9}, data, groups=groups)
    k_opt, _, k_hist = _train(kiln, "SGD", {"lr": 0.1, "momentum": 0.9}, data, groups=groups)
    np.testing.assert_allclose(np.concatenate([a.ravel() for a in k_hist[-1]]),
                               np.concatenate([a.ravel() for a in t_hist[-1]]), rtol=2e-5, atol=2e-6)  # fmt: skip
    _assert_state_dicts_match(k_opt.state_dict(), t_opt.state_dict())


def _to_kiln(value):
    if isinstance(value, torch.Tensor):
        return kiln.tensor(value.detach().numpy().copy())
    if isinstance(value, dict):
        return {k: _to_kiln(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_to_kiln(v) for v in value]
    return value


@needs_torch
@pytest.mark.parametrize("name,kwargs", [("Adam", {"lr": 0.01, "amsgrad": True}), ("SGD", {"lr": 0.1, "momentum": 0.9}), ("RMSprop", {"centered": True})])  # fmt: skip
def test_resuming_from_torch_state_dict_continues_torch_trajectory(name, kwargs):
    data = _initial(2)
    t_params = _params(torch, data)
    t_opt = getattr(torch.optim, name)(t_params, **kwargs)
    for step in range(3):
        t_opt.zero_grad()
        _loss(torch, t_params, data, step).backward()
        t_opt.step()
    k_params = [kiln.tensor(p.detach().numpy().copy(), requires_grad=True) for p in t_params]
    k_opt = getattr(kiln.optim, name)(k_params, **kwargs)
    k_opt.load_state_dict(_to_kiln(t_opt.state_dict()))
    for step in range(3, 6):
        for lib, opt, params in ((torch, t_opt, t_params), (kiln, k_opt, k_params)):
            opt.zero_grad()
            _loss(lib, params, data, step).backward()
            opt.step()
    for k, t in zip(k_params, t_params):
        assert_close(k, t, rtol=2e-5, atol=2e-6)


def test_state_dict_round_trip_resumes_exactly():
    data = _initial(3)
    _, full_params, _ = _train(kiln, "Adam", {"lr": 0.01}, data, steps=6)
    first_opt, params, _ = _train(kiln, "Adam", {"lr": 0.01}, data, steps=3)
    saved = first_opt.state_dict()
    resumed = kiln.optim.Adam(params, lr=0.5)
    resumed.load_state_dict(saved)
    assert resumed.param_groups[0]["lr"] == 0.01 and resumed.param_groups[0]["params"] == params
    for step in range(3, 6):
        resumed.zero_grad()
        _loss(kiln, params, data, step).backward()
        resumed.step()
    for a, b in zip(params, full_params):
        np.testing.assert_array_equal(a.detach().numpy(), b.detach().numpy())


def test_state_dict_layout_uses_integer_ids_in_group_order():
    a, b, c = (kiln.zeros(2, requires_grad=True) for _ in range(3))
    opt = kiln.optim.SGD([{"params": [a, b]}, {"params": [c], "lr": 0.5}], lr=0.1, momentum=0.9)
    for p in (a, b, c):
        p.grad = kiln.ones(2)
    opt.step()
    sd = opt.state_dict()
    assert [g["params"] for g in sd["param_groups"]] == [[0, 1], [2]]
    assert sorted(sd["state"]) == [0, 1, 2] and "momentum_buffer" in sd["state"][2]
    assert sd["param_groups"][1]["lr"] == 0.5 and sd["param_groups"][0]["momentum"] == 0.9


def test_load_state_dict_checks_group_sizes():
    a, b = kiln.zeros(2, requires_grad=True), kiln.zeros(2, requires_grad=True)
    sd = kiln.optim.SGD([a, b], lr=0.1).state_dict()
    with pytest.raises(ValueError, match="different number of parameter groups"):
        kiln.optim.SGD([{"params": [a]}, {"params": [b]}], lr=0.1).load_state_dict(sd)
    with pytest.raises(ValueError, match="doesn't match the size of optimizer's group"):
        kiln.optim.SGD([a], lr=0.1).load_state_dict(sd)


def test_loaded_state_is_cast_to_parameter_dtype_except_step():
    p = kiln.zeros(3, dtype=kiln.float64, requires_grad=True)
    opt = kiln.optim.Adam([p])
    sd = {
        "state": {
            0: {"step": kiln.tensor(2.0), "exp_avg": kiln.ones(3), "exp_avg_sq": kiln.ones(3)}
        },
        "param_groups": opt.state_dict()["param_groups"],
    }
    opt.load_state_dict(sd)
    assert (
        opt.state[p]["exp_avg"].dtype is kiln.float64 and opt.state[p]["step"].dtype is kiln.float32
    )


def test_zero_grad_modes():
    p = kiln.ones(2, requires_grad=True)
    opt = kiln.optim.SGD([p], lr=0.1)
    (p * 2).sum().backward()
    opt.zero_grad(set_to_none=False)
    assert p.grad is not None and float(p.grad.abs().sum()) == 0.0
    opt.zero_grad()
    assert p.grad is None


def test_step_skips_params_without_grad_and_keeps_leaves():
    a, b = kiln.ones(2, requires_grad=True), kiln.ones(2, requires_grad=True)
    opt = kiln.optim.Adam([a, b], lr=0.1)
    (a * 3).sum().backward()
    opt.step()
    assert b not in opt.state and a in opt.state
    assert a.is_leaf and a.grad_fn is None and a.requires_grad
    assert b.numpy(force=True).tolist() == [1.0, 1.0]


def test_closure_is_evaluated_with_grad_and_loss_returned():
    p = kiln.tensor([2.0], requires_grad=True)
    opt = kiln.optim.SGD([p], lr=0.25)

    def closure():
        opt.zero_grad()
        loss = (p * p).sum()
        loss.backward()
        return loss

    with kiln.no_grad():
        loss = opt.step(closure)
    assert float(loss) == 4.0 and float(p.detach()) == 1.0


def test_add_param_group_fills_defaults_and_rejects_overlap():
    a, b = kiln.ones(1, requires_grad=True), kiln.ones(1, requires_grad=True)
    opt = kiln.optim.Adam([a], lr=0.1, betas=(0.5, 0.6))
    opt.add_param_group({"params": b, "lr": 0.2})
    assert opt.param_groups[1]["betas"] == (0.5, 0.6) and opt.param_groups[1]["lr"] == 0.2
    with pytest.raises(ValueError, match="some parameters appear in more than one parameter group"):
        opt.add_param_group({"params": [a]})


def test_argument_errors():
    p = kiln.ones(1, requires_grad=True)
    with pytest.raises(ValueError, match="Invalid learning rate: -1"):
        kiln.optim.SGD([p], lr=-1)
    with pytest.raises(
        ValueError, match="Nesterov momentum requires a momentum and zero dampening"
    ):
        kiln.optim.SGD([p], lr=0.1, nesterov=True)
    with pytest.raises(ValueError, match="Invalid beta parameter at index 1: 1.0"):
        kiln.optim.Adam([p], betas=(0.9, 1.0))
    with pytest.raises(ValueError, match="optimizer got an empty parameter list"):
        kiln.optim.AdamW([])
    with pytest.raises(TypeError, match="should be an iterable of Tensors or dicts"):
        kiln.optim.SGD(p, lr=0.1)
    with pytest.raises(ValueError, match="can't optimize a non-leaf Tensor"):
        kiln.optim.SGD([p * 2], lr=0.1)
    with pytest.raises(TypeError, match="ordered collections"):
        kiln.optim.SGD([{"params": {p}}], lr=0.1)
    with pytest.raises(ValueError, match="Invalid initial_accumulator_value value: -1"):
        kiln.optim.Adagrad([p], initial_accumulator_value=-1)


def test_step_hooks_run_around_step():
    p = kiln.ones(1, requires_grad=True)
    opt = kiln.optim.SGD([p], lr=0.1)
    calls = []
    opt.register_step_pre_hook(lambda o, a, k: calls.append("pre"))
    handle = opt.register_step_post_hook(lambda o, a, k: calls.append("post"))
    p.grad = kiln.ones(1)
    opt.step()
    handle.remove()
    opt.step()
    assert calls == ["pre", "post", "pre"]


def test_named_parameters_are_accepted_and_named_in_state_dict():
    lin = kiln.nn.Linear(2, 2)
    opt = kiln.optim.SGD(lin.named_parameters(), lr=0.1)
    assert opt.param_groups[0]["param_names"] == ["weight", "bias"]
    assert opt.state_dict()["param_groups"][0]["param_names"] == ["weight", "bias"]


def test_updates_are_in_place_on_the_parameter_storage():
    p = kiln.ones(3, requires_grad=True)
    data = p._data
    opt = kiln.optim.AdamW([p], lr=0.1)
    p.grad = kiln.ones(3)
    opt.step()
    assert p._data is data and float(p.detach()[0]) < 1.0


@needs_torch
def test_repr_matches_torch():
    for lib in (kiln, torch):
        a, b = lib.zeros(1, requires_grad=True), lib.zeros(1, requires_grad=True)
        opt = lib.optim.SGD([{"params": [a]}, {"params": [b], "lr": 0.5}], lr=0.1)
        if lib is kiln:
            k_repr = repr(opt)
    assert k_repr == repr(opt)


@needs_torch
def test_optimizer_given_a_tensor_names_its_type():
    def build(lib):
        return lambda: lib.optim.SGD(lib.nn.Parameter(lib.ones(2)), lr=0.1)

    kind, text = error_of(build(kiln))
    assert (kind, text.replace("kiln.", "torch.")) == error_of(build(torch))
