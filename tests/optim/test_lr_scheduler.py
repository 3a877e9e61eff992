"""LR schedulers against torch.optim.lr_scheduler: the same learning rates (and momenta, for
OneCycleLR) at every step, to float64 rounding; plus state-dict resumption and warnings."""

from __future__ import annotations

import math
import warnings

import pytest

import kiln
from tests.optim.helpers import make_optimizer, run_schedule
from tests.oracle import assert_same_error, needs_torch, torch

EPOCHS = 40


CASES = {
    "step": (1, lambda lib, o: lib.optim.lr_scheduler.StepLR(o, step_size=3, gamma=0.5)),
    "multistep": (
        2,
        lambda lib, o: lib.optim.lr_scheduler.MultiStepLR(o, milestones=[2, 5, 5, 8], gamma=0.1),
    ),
    "exponential": (1, lambda lib, o: lib.optim.lr_scheduler.ExponentialLR(o, gamma=0.9)),
    "cosine": (
        2,
        lambda lib, o: lib.optim.lr_scheduler.CosineAnnealingLR(o, T_max=10, eta_min=0.001),
    ),
    "lambda": (1, lambda lib, o: lib.optim.lr_scheduler.LambdaLR(o, lambda e: 0.95**e)),
    "lambda_per_group": (
        2,
        lambda lib, o: lib.optim.lr_scheduler.LambdaLR(
            o, [lambda e: 1 / (e + 1), lambda e: math.cos(e / 7)]
        ),
    ),
    "multiplicative": (
        1,
        lambda lib, o: lib.optim.lr_scheduler.MultiplicativeLR(o, lambda e: 0.9 if e % 2 else 1.0),
    ),
    "linear": (
        2,
        lambda lib, o: lib.optim.lr_scheduler.LinearLR(o, start_factor=0.25, total_iters=4),
    ),
    "constant": (1, lambda lib, o: lib.optim.lr_scheduler.ConstantLR(o, factor=0.5, total_iters=3)),
    "polynomial": (
        1,
        lambda lib, o: lib.optim.lr_scheduler.PolynomialLR(o, total_iters=6, power=2.0),
    ),
    "one_cycle_cos": (
        2,
        lambda lib, o: lib.optim.lr_scheduler.OneCycleLR(o, max_lr=[0.5, 1.0], total_steps=EPOCHS),
    ),
    "one_cycle_linear_three_phase": (
        1,
        lambda lib, o: lib.optim.lr_scheduler.OneCycleLR(
            o, max_lr=0.3, epochs=4, steps_per_epoch=10, anneal_strategy="linear", three_phase=True
        ),
    ),
    "warm_restarts": (
        1,
        lambda lib, o: lib.optim.lr_scheduler.CosineAnnealingWarmRestarts(
            o, T_0=4, T_mult=2, eta_min=0.01
        ),
    ),
    "sequential": (
        1,
        lambda lib, o: lib.optim.lr_scheduler.SequentialLR(
            o,
            [
                lib.optim.lr_scheduler.LinearLR(o, start_factor=0.1, total_iters=5),
                lib.optim.lr_scheduler.CosineAnnealingLR(o, T_max=20),
            ],
            milestones=[5],
        ),
    ),
    "chained": (
        1,
        lambda lib, o: lib.optim.lr_scheduler.ChainedScheduler(
            [
                lib.optim.lr_scheduler.ConstantLR(o, factor=0.5, total_iters=4),
                lib.optim.lr_scheduler.ExponentialLR(o, gamma=0.95),
            ]
        ),
    ),
}


def _sequence(lib, build, groups, opt_name="SGD"):
    opt = make_optimizer(lib, opt_name, groups)
    sched = build(lib, opt)
    seen = [(list(sched.get_last_lr()), _momenta(opt))]
    for _ in range(EPOCHS):
        opt.step()
        sched.step()
        seen.append((list(sched.get_last_lr()), _momenta(opt)))
        assert [g["lr"] for g in opt.param_groups] == seen[-1][0]
    return seen


def _momenta(opt):
    return [g.get("momentum", g.get("betas")) for g in opt.param_groups]


@needs_torch
@pytest.mark.parametrize("opt_name", ["SGD", "Adam"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_lr_sequence_matches_torch(case, opt_name):
    groups, build = CASES[case]
    assert _sequence(kiln, build, groups, opt_name) == _sequence(torch, build, groups, opt_name)


@needs_torch
def test_reduce_on_plateau_matches_torch():
    metrics = [1.0, 0.9, 0.95, 0.95, 0.96, 0.97, 0.5, 0.6, 0.6, 0.6, 0.7, 0.8, 0.9, 0.4]
    results = []
    for lib in (kiln, torch):
        opt = make_optimizer(lib, groups=2)
        sched = lib.optim.lr_scheduler.ReduceLROnPlateau(
            opt, patience=1, factor=0.5, cooldown=1, min_lr=[0.02, 0.0], threshold=0.01
        )
        seq = []
        for m in metrics:
            opt.step()
            sched.step(m)
            seq.append((sched.get_last_lr(), sched.num_bad_epochs, sched.best))
        results.append(seq)
    assert results[0] == results[1]


@needs_torch
def test_closed_form_step_with_epoch_matches_torch():
    out = []
    for lib in (kiln, torch):
        opt = make_optimizer(lib)
        sched = lib.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=8)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            opt.step()
            sched.step(5)
        out.append(sched.get_last_lr())
    assert out[0] == out[1]


@pytest.mark.parametrize("case", ["cosine", "one_cycle_cos", "sequential", "lambda", "chained"])
def test_state_dict_resume_continues_sequence(case):
    groups, build = CASES[case]
    opt = make_optimizer(kiln, groups=groups)
    sched = build(kiln, opt)
    for _ in range(7):
        opt.step()
        sched.step()
    saved_sched = sched.state_dict()
    saved_opt = opt.state_dict()
    expected = []
    for _ in range(5):
        opt.step()
        sched.step()
        expected.append(sched.get_last_lr())
    opt2 = make_optimizer(kiln, groups=groups)
    sched2 = build(kiln, opt2)
    opt2.load_state_dict(saved_opt)
    sched2.load_state_dict(saved_sched)
    resumed = []
    for _ in range(5):
        opt2.step()
        sched2.step()
        resumed.append(sched2.get_last_lr())
    assert resumed == expected


def test_scheduler_step_before_optimizer_step_warns():
    opt = make_optimizer(kiln)
    sched = kiln.optim.lr_scheduler.StepLR(opt, 2)
    with pytest.warns(UserWarning, match="Detected call of `lr_scheduler.step\\(\\)` before"):
        sched.step()


def test_initial_lr_required_when_resuming_with_last_epoch():
    opt = make_optimizer(kiln)
    with pytest.raises(
        KeyError, match="param 'initial_lr' is not specified in param_groups\\[0\\]"
    ):
        kiln.optim.lr_scheduler.StepLR(opt, 2, last_epoch=3)


def test_argument_errors():
    opt = make_optimizer(kiln)
    with pytest.raises(TypeError, match="list is not an Optimizer"):
        kiln.optim.lr_scheduler.StepLR([], 2)
    with pytest.raises(ValueError, match="Starting multiplicative factor expected"):
        kiln.optim.lr_scheduler.LinearLR(opt, start_factor=0)
    with pytest.raises(ValueError, match="You must define either total_steps OR"):
        kiln.optim.lr_scheduler.OneCycleLR(opt, max_lr=1.0)
    with pytest.raises(ValueError, match="Factor should be < 1.0."):
        kiln.optim.lr_scheduler.ReduceLROnPlateau(opt, factor=2.0)
    sched = kiln.optim.lr_scheduler.OneCycleLR(opt, max_lr=1.0, total_steps=2)
    opt.step()
    sched.step()
    sched.step()
    with pytest.raises(ValueError, match="Tried to step 3 times"):
        sched.step()


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
        opt = make_optimizer(lib, opt_name, groups)
        sched = lib.optim.lr_scheduler.CyclicLR(opt, **kwargs)
        sequences.append(run_schedule(lib, opt, sched))
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
            build(lib, make_optimizer(lib))
        raised.append((info.type, str(info.value)))
    assert raised[1] == raised[0]


# ---------------------------------------------------------------------- warm restarts


@needs_torch
@pytest.mark.parametrize("T_mult", [1, 2])
def test_warm_restarts_with_fractional_epochs_match_torch(T_mult):
    """The documented per-batch use: ``step(epoch + i / iters)``, then plain steps again."""
    sequences = []
    for lib in (torch, kiln):
        opt = make_optimizer(lib, groups=2)
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


@needs_torch
def test_scheduler_resumed_without_initial_lr_explains_why():
    def build(lib):
        opt = lib.optim.SGD([lib.nn.Parameter(lib.ones(1))], lr=0.1)
        return lambda: lib.optim.lr_scheduler.StepLR(opt, 1, last_epoch=3)

    assert_same_error(build(kiln), build(torch))


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
