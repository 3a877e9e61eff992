"""LR schedulers beyond tests/optim/test_lr_scheduler.py, against torch.optim.lr_scheduler:
``CyclicLR`` in every mode (rates and cycled momenta), ``CosineAnnealingWarmRestarts`` stepped
with fractional epochs, state dicts of every scheduler (same keys as PyTorch's, resumable, and
loadable from PyTorch's), tensor learning rates, argument errors, the ``get_lr`` warning,
user subclasses, and schedulers driving a ``kiln.compile``d training step.
"""

from __future__ import annotations

import copy
import warnings

import numpy as np
import pytest

import kiln
import kiln.nn as nn
from kiln.dynamo.testing import CompileCounter
from tests.oracle import needs_torch, torch

STEPS = 30


def _optimizer(lib, name: str = "SGD", groups: int = 1, lr=None):
    params = [lib.zeros(2, requires_grad=True) for _ in range(groups)]
    spec = [{"params": [p], "lr": 0.1 * (i + 1)} for i, p in enumerate(params)]
    if lr is not None:
        spec = [{"params": params, "lr": lr}]
    if name == "SGD":
        return lib.optim.SGD(spec, lr=0.1, momentum=0.9)
    if name == "Adam":
        return lib.optim.Adam(spec, lr=0.1)
    return getattr(lib.optim, name)(spec)


def _momenta(opt) -> list:
    return [g.get("momentum", g.get("betas")) for g in opt.param_groups]


def _run(lib, opt, sched, steps: int = STEPS, metrics=None) -> list:
    seen = [(list(sched.get_last_lr()), _momenta(opt))]
    for i in range(steps):
        opt.step()
        if metrics is None:
            sched.step()
        else:
            sched.step(metrics[i % len(metrics)])
        seen.append((list(sched.get_last_lr()), _momenta(opt)))
        assert [g["lr"] for g in opt.param_groups] == seen[-1][0]
    return seen


# ---------------------------------------------------------------------- CyclicLR


def _inverse(x):
    return 1 / (1 + 0.1 * x)


def _halving(cycle):
    return 0.5**cycle


CYCLIC = {
    "triangular": (1, {"base_lr": 0.01, "max_lr": 0.1, "step_size_up": 4}),
    "triangular2_asymmetric": (
        2,
        {
            "base_lr": [0.01, 0.02],
            "max_lr": [0.1, 0.3],
            "step_size_up": 3,
            "step_size_down": 5,
            "mode": "triangular2",
        },
    ),
    "exp_range": (
        1,
        {"base_lr": 0.01, "max_lr": 0.1, "step_size_up": 3, "mode": "exp_range", "gamma": 0.95},
    ),
    "custom_iterations": (
        1,
        {
            "base_lr": 0.001,
            "max_lr": 0.01,
            "step_size_up": 5,
            "scale_fn": _inverse,
            "scale_mode": "iterations",
        },
    ),  # fmt: skip
    "custom_cycle_momenta": (
        2,
        {
            "base_lr": 0.01,
            "max_lr": 0.05,
            "step_size_up": 2,
            "scale_fn": _halving,
            "base_momentum": [0.7, 0.8],
            "max_momentum": 0.95,
        },
    ),  # fmt: skip
    "no_momentum": (
        1,
        {"base_lr": 0.05, "max_lr": 0.5, "step_size_up": 6, "cycle_momentum": False},
    ),
}


@needs_torch
@pytest.mark.parametrize("opt_name", ["SGD", "Adam"])
@pytest.mark.parametrize("case", sorted(CYCLIC))
def test_cyclic_lr_and_momentum_match_torch(case, opt_name):
    groups, kwargs = CYCLIC[case]
    sequences = []
    for lib in (torch, kiln):
        opt = _optimizer(lib, opt_name, groups)
        sched = lib.optim.lr_scheduler.CyclicLR(opt, **kwargs)
        sequences.append(_run(lib, opt, sched))
        if kwargs.get("cycle_momentum", True):
            assert {"max_momentum", "base_momentum"} <= set(opt.param_groups[0])
    assert sequences[1] == sequences[0]


@needs_torch
@pytest.mark.parametrize(
    "build",
    [
        lambda lib, o: lib.optim.lr_scheduler.CyclicLR(o, 0.1, 1.0, mode="sine"),
        lambda lib, o: lib.optim.lr_scheduler.CyclicLR(o, [0.1, 0.2], 1.0),
        lambda lib, o: lib.optim.lr_scheduler.CyclicLR(o, 0.1, 1.0, max_momentum=[0.9, 0.8]),
        lambda lib, o: lib.optim.lr_scheduler.CyclicLR(lib.optim.Adagrad(o.param_groups), 0.1, 1.0),
        lambda lib, o: lib.optim.lr_scheduler.CosineAnnealingWarmRestarts(o, T_0=0),
        lambda lib, o: lib.optim.lr_scheduler.CosineAnnealingWarmRestarts(o, T_0=2.0),
        lambda lib, o: lib.optim.lr_scheduler.CosineAnnealingWarmRestarts(o, T_0=2, T_mult=0),
        lambda lib, o: lib.optim.lr_scheduler.CosineAnnealingWarmRestarts(o, 2, eta_min="0"),
        lambda lib, o: lib.optim.lr_scheduler.CosineAnnealingWarmRestarts(o, 2).step(-1),
    ],
    ids=["mode", "base_lr_length", "momentum_length", "no_momentum_optimizer", "T_0",
         "T_0_float", "T_mult", "eta_min", "negative_epoch"],
)  # fmt: skip
def test_argument_errors_match_torch(build):
    raised = []
    for lib in (torch, kiln):
        with pytest.raises((ValueError, TypeError)) as info:
            build(lib, _optimizer(lib))
        raised.append((info.type, str(info.value)))
    assert raised[1] == raised[0]


# ---------------------------------------------------------------------- warm restarts


@needs_torch
@pytest.mark.parametrize("T_mult", [1, 2])
def test_warm_restarts_with_fractional_epochs_match_torch(T_mult):
    """The documented per-batch use: ``step(epoch + i / iters)``, then plain steps again."""
    sequences = []
    for lib in (torch, kiln):
        opt = _optimizer(lib, groups=2)
        sched = lib.optim.lr_scheduler.CosineAnnealingWarmRestarts(
            opt, T_0=3, T_mult=T_mult, eta_min=0.001
        )
        seen = []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for epoch in range(8):
                for i in range(5):
                    opt.step()
                    sched.step(epoch + i / 5)
                    seen.append((sched.get_last_lr(), sched.T_cur, sched.T_i, sched.last_epoch))
            for _ in range(4):
                sched.step()
                seen.append((sched.get_last_lr(), sched.T_cur, sched.T_i, sched.last_epoch))
        sequences.append(seen)
    assert sequences[1] == sequences[0]


# ---------------------------------------------------------------------- state dicts


def _plain(epoch):
    return 0.9**epoch


class _Decay:
    """A callable object: its ``__dict__`` is saved with LambdaLR's and CyclicLR's state."""

    def __init__(self, rate: float) -> None:
        self.rate = rate

    def __call__(self, x):
        return self.rate**x


SCHEDULERS = {
    "LambdaLR": lambda lib, o: lib.optim.lr_scheduler.LambdaLR(o, [_plain, _Decay(0.8)]),
    "MultiplicativeLR": lambda lib, o: lib.optim.lr_scheduler.MultiplicativeLR(o, _Decay(0.95)),
    "StepLR": lambda lib, o: lib.optim.lr_scheduler.StepLR(o, 3, gamma=0.5),
    "MultiStepLR": lambda lib, o: lib.optim.lr_scheduler.MultiStepLR(o, [2, 5, 9], gamma=0.3),
    "ConstantLR": lambda lib, o: lib.optim.lr_scheduler.ConstantLR(o, factor=0.3, total_iters=7),
    "LinearLR": lambda lib, o: lib.optim.lr_scheduler.LinearLR(o, 0.2, 1.0, total_iters=8),
    "ExponentialLR": lambda lib, o: lib.optim.lr_scheduler.ExponentialLR(o, 0.9),
    "PolynomialLR": lambda lib, o: lib.optim.lr_scheduler.PolynomialLR(o, 10, power=1.5),
    "CosineAnnealingLR": lambda lib, o: lib.optim.lr_scheduler.CosineAnnealingLR(o, 7, 0.01),
    "CosineAnnealingWarmRestarts": lambda lib, o: (
        lib.optim.lr_scheduler.CosineAnnealingWarmRestarts(o, 3, T_mult=2, eta_min=0.01)
    ),
    "CyclicLR": lambda lib, o: lib.optim.lr_scheduler.CyclicLR(
        o, 0.01, 0.2, step_size_up=4, scale_fn=_Decay(0.7)
    ),
    "OneCycleLR": lambda lib, o: lib.optim.lr_scheduler.OneCycleLR(
        o, [0.5, 1.0], total_steps=20, three_phase=True
    ),
    "ReduceLROnPlateau": lambda lib, o: lib.optim.lr_scheduler.ReduceLROnPlateau(
        o, patience=1, factor=0.5, cooldown=1
    ),
    "SequentialLR": lambda lib, o: lib.optim.lr_scheduler.SequentialLR(
        o,
        [
            lib.optim.lr_scheduler.LinearLR(o, 0.1, total_iters=4),
            lib.optim.lr_scheduler.ExponentialLR(o, 0.9),
        ],
        milestones=[4],
    ),
    "ChainedScheduler": lambda lib, o: lib.optim.lr_scheduler.ChainedScheduler(
        [
            lib.optim.lr_scheduler.ConstantLR(o, factor=0.5, total_iters=4),
            lib.optim.lr_scheduler.CosineAnnealingLR(o, 9),
        ]
    ),
    "SWALR": lambda lib, o: lib.optim.swa_utils.SWALR(o, [0.05, 0.02], anneal_epochs=5),
}
METRICS = [1.0, 0.9, 0.95, 0.97, 0.5, 0.6, 0.6, 0.7, 0.4, 0.45, 0.5, 0.55]


def _metrics(name: str):
    return METRICS if name == "ReduceLROnPlateau" else None


def _convert(value, lib):
    """Scheduler state (or a part of it) with every tensor moved to ``lib``."""
    if isinstance(value, (kiln.Tensor, torch.Tensor)):
        return lib.tensor(value.detach().numpy().copy())
    if isinstance(value, dict):
        return {k: _convert(v, lib) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_convert(v, lib) for v in value)
    return value


@needs_torch
@pytest.mark.parametrize("name", sorted(SCHEDULERS))
def test_state_dict_keys_and_values_match_torch(name):
    states = []
    for lib in (torch, kiln):
        opt = _optimizer(lib, groups=2)
        sched = SCHEDULERS[name](lib, opt)
        _run(lib, opt, sched, steps=5, metrics=_metrics(name))
        states.append(sched.state_dict())
    t_state, k_state = states
    assert sorted(k_state) == sorted(t_state)
    for key, t_value in t_state.items():
        if key == "_scale_fn_ref" or callable(t_value):
            continue
        assert _convert(k_state[key], torch) == t_value, key


@pytest.mark.parametrize("name", sorted(SCHEDULERS))
def test_state_dict_resumes_the_schedule(name):
    metrics = _metrics(name)
    opt = _optimizer(kiln, groups=2)
    sched = SCHEDULERS[name](kiln, opt)
    _run(kiln, opt, sched, steps=6, metrics=metrics)
    saved_sched, saved_opt = copy.deepcopy(sched.state_dict()), opt.state_dict()
    expected = _run(kiln, opt, sched, steps=6, metrics=metrics)
    opt2 = _optimizer(kiln, groups=2)
    sched2 = SCHEDULERS[name](kiln, opt2)
    opt2.load_state_dict(saved_opt)
    sched2.load_state_dict(saved_sched)
    assert _run(kiln, opt2, sched2, steps=6, metrics=metrics) == expected


@needs_torch
@pytest.mark.parametrize("name", sorted(SCHEDULERS))
def test_torch_state_dict_loads_and_continues_torch_schedule(name):
    metrics = _metrics(name)
    t_opt = _optimizer(torch, groups=2)
    t_sched = SCHEDULERS[name](torch, t_opt)
    _run(torch, t_opt, t_sched, steps=6, metrics=metrics)
    k_opt = _optimizer(kiln, groups=2)
    k_sched = SCHEDULERS[name](kiln, k_opt)
    k_opt.load_state_dict(_convert(t_opt.state_dict(), kiln))
    k_sched.load_state_dict(_convert(copy.deepcopy(t_sched.state_dict()), kiln))
    expected = _run(torch, t_opt, t_sched, steps=8, metrics=metrics)
    assert _run(kiln, k_opt, k_sched, steps=8, metrics=metrics) == expected


def test_callable_object_state_is_saved_and_restored():
    opt = _optimizer(kiln)
    sched = kiln.optim.lr_scheduler.CyclicLR(opt, 0.01, 0.1, scale_fn=_Decay(0.5))
    state = sched.state_dict()
    assert state["_scale_fn_custom"] == {"rate": 0.5}
    other = kiln.optim.lr_scheduler.CyclicLR(opt, 0.01, 0.1, scale_fn=_Decay(0.9))
    other.load_state_dict(state)
    assert other._scale_fn_custom.rate == 0.5
    plain = kiln.optim.lr_scheduler.CyclicLR(opt, 0.01, 0.1, scale_fn=_plain)
    assert plain.state_dict()["_scale_fn_custom"] is None


# ---------------------------------------------------------------------- tensors, warnings


@needs_torch
@pytest.mark.parametrize("name", ["StepLR", "CyclicLR", "OneCycleLR", "CosineAnnealingLR"])
def test_tensor_lr_is_updated_in_place_like_torch(name):
    sequences = []
    for lib in (torch, kiln):
        lr = lib.tensor(0.1, dtype=lib.float64)
        opt = _optimizer(lib, lr=lr)
        sched = SCHEDULERS[name](lib, opt) if name != "OneCycleLR" else (
            lib.optim.lr_scheduler.OneCycleLR(opt, 1.0, total_steps=20)
        )  # fmt: skip
        values = []
        for _ in range(10):
            opt.step()
            sched.step()
            group_lr = opt.param_groups[0]["lr"]
            assert isinstance(group_lr, lib.Tensor)
            assert group_lr is lr or name == "OneCycleLR"
            values.append(float(group_lr))
        sequences.append(values)
    np.testing.assert_allclose(sequences[1], sequences[0], rtol=1e-15)


@needs_torch
@pytest.mark.parametrize("name", sorted(set(SCHEDULERS) - {"ReduceLROnPlateau"}))
def test_get_lr_outside_step_warns_like_torch(name):
    warned = []
    for lib in (torch, kiln):
        opt = _optimizer(lib, groups=2)
        sched = SCHEDULERS[name](lib, opt)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if hasattr(sched, "_schedulers"):
                sched._schedulers[0].get_lr()
            else:
                sched.get_lr()
        warned.append(any("get_last_lr()" in str(w.message) for w in caught))
    assert warned[1] == warned[0]


@needs_torch
@pytest.mark.parametrize("base", ["LRScheduler", "_LRScheduler"])
def test_user_subclass_of_the_base_class_matches_torch(base):
    sequences = []
    for lib in (torch, kiln):

        class Halving(getattr(lib.optim.lr_scheduler, base)):
            def get_lr(self):
                return [b * 0.5 ** (self.last_epoch // 2) for b in self.base_lrs]

        opt = _optimizer(lib, groups=2)
        sequences.append(_run(lib, opt, Halving(opt), steps=8))
    assert sequences[1] == sequences[0]


# ---------------------------------------------------------------------- kiln.compile


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("scheduler", ["CyclicLR", "OneCycleLR"])
def test_scheduler_drives_a_compiled_optimizer_step(scheduler, backend):
    """The scheduler changes ``lr`` (and momentum) between compiled steps; the compiled step
    must see each new value (guards recompile it), following an eager twin."""
    kiln.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    twin = copy.deepcopy(model)
    runs = []
    for net, compiled in ((model, True), (twin, False)):
        opt = kiln.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
        if scheduler == "CyclicLR":
            sched = kiln.optim.lr_scheduler.CyclicLR(opt, 0.01, 0.1, step_size_up=2)
        else:
            sched = kiln.optim.lr_scheduler.OneCycleLR(opt, 0.1, total_steps=6)
        counter = CompileCounter(backend)
        step = kiln.compile(opt.step, backend=counter) if compiled else opt.step
        runs.append((net, opt, sched, step, counter))
    x, y = kiln.randn(16, 4), kiln.randn(16, 1)
    for _ in range(5):
        for net, opt, sched, step, _ in runs:
            opt.zero_grad()
            ((net(x) - y) ** 2).mean().backward()
            step()
            sched.step()
    assert runs[0][4].frame_count > 1
    assert runs[0][2].get_last_lr() == runs[1][2].get_last_lr()
    for p, q in zip(model.parameters(), twin.parameters()):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-6, atol=1e-7)
    kiln.dynamo.reset()
