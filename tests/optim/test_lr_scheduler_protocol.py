"""What every LR scheduler shares with PyTorch's: state dicts (same keys, resumable,
loadable from PyTorch's, callable objects saved), tensor learning rates updated in place, the
``get_lr`` warning, and user subclasses of the base classes."""

from __future__ import annotations

import copy
import warnings

import numpy as np
import pytest

import kiln
from tests.optim.helpers import make_optimizer, run_schedule, state_to
from tests.oracle import needs_torch, torch

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


def _two_group_schedule(lib, name: str):
    """A fresh two-group optimizer and the scheduler ``name`` driving it, in ``lib``."""
    opt = make_optimizer(lib, groups=2)
    return opt, SCHEDULERS[name](lib, opt)


@needs_torch
@pytest.mark.parametrize("name", sorted(SCHEDULERS))
def test_state_dict_keys_and_values_match_torch(name):
    states = []
    for lib in (torch, kiln):
        opt, sched = _two_group_schedule(lib, name)
        run_schedule(lib, opt, sched, steps=5, metrics=_metrics(name))
        states.append(sched.state_dict())
    t_state, k_state = states
    assert sorted(k_state) == sorted(t_state)
    for key, t_value in t_state.items():
        if key == "_scale_fn_ref" or callable(t_value):
            continue
        assert state_to(k_state[key], torch) == t_value, key


@pytest.mark.parametrize("name", sorted(SCHEDULERS))
def test_state_dict_resumes_the_schedule(name):
    metrics = _metrics(name)
    opt, sched = _two_group_schedule(kiln, name)
    run_schedule(kiln, opt, sched, steps=6, metrics=metrics)
    saved_sched, saved_opt = copy.deepcopy(sched.state_dict()), opt.state_dict()
    expected = run_schedule(kiln, opt, sched, steps=6, metrics=metrics)
    opt2, sched2 = _two_group_schedule(kiln, name)
    opt2.load_state_dict(saved_opt)
    sched2.load_state_dict(saved_sched)
    assert run_schedule(kiln, opt2, sched2, steps=6, metrics=metrics) == expected


@needs_torch
@pytest.mark.parametrize("name", sorted(SCHEDULERS))
def test_torch_state_dict_loads_and_continues_torch_schedule(name):
    metrics = _metrics(name)
    t_opt, t_sched = _two_group_schedule(torch, name)
    run_schedule(torch, t_opt, t_sched, steps=6, metrics=metrics)
    k_opt, k_sched = _two_group_schedule(kiln, name)
    k_opt.load_state_dict(state_to(t_opt.state_dict(), kiln))
    k_sched.load_state_dict(state_to(copy.deepcopy(t_sched.state_dict()), kiln))
    expected = run_schedule(torch, t_opt, t_sched, steps=8, metrics=metrics)
    assert run_schedule(kiln, k_opt, k_sched, steps=8, metrics=metrics) == expected


def test_callable_object_state_is_saved_and_restored():
    opt = make_optimizer(kiln)
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
        opt = make_optimizer(lib, lr=lr)
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
        sched = _two_group_schedule(lib, name)[1]
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

        opt = make_optimizer(lib, groups=2)
        sequences.append(run_schedule(lib, opt, Halving(opt), steps=8))
    assert sequences[1] == sequences[0]
