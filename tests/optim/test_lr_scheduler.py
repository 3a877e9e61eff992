"""LR schedulers against torch.optim.lr_scheduler: the same learning rates (and momenta, for
OneCycleLR) at every step, to float64 rounding; plus state-dict resumption and warnings."""

from __future__ import annotations

import math
import warnings

import pytest

import kiln
from tests.oracle import needs_torch, torch

EPOCHS = 40


def _optimizer(lib, name="SGD", groups=1):
    params = [lib.zeros(2, requires_grad=True) for _ in range(groups)]
    spec = [{"params": [p], "lr": 0.1 * (i + 1)} for i, p in enumerate(params)]
    if name == "SGD":
        return lib.optim.SGD(spec, lr=0.1, momentum=0.9)
    return lib.optim.Adam(spec, lr=0.1)


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
    opt = _optimizer(lib, opt_name, groups)
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
        opt = _optimizer(lib, groups=2)
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
        opt = _optimizer(lib)
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
    opt = _optimizer(kiln, groups=groups)
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
    opt2 = _optimizer(kiln, groups=groups)
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
    opt = _optimizer(kiln)
    sched = kiln.optim.lr_scheduler.StepLR(opt, 2)
    with pytest.warns(UserWarning, match="Detected call of `lr_scheduler.step\\(\\)` before"):
        sched.step()


def test_initial_lr_required_when_resuming_with_last_epoch():
    opt = _optimizer(kiln)
    with pytest.raises(
        KeyError, match="param 'initial_lr' is not specified in param_groups\\[0\\]"
    ):
        kiln.optim.lr_scheduler.StepLR(opt, 2, last_epoch=3)


def test_argument_errors():
    opt = _optimizer(kiln)
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
