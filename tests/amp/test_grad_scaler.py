"""``kiln.amp.GradScaler`` against ``torch.amp.GradScaler("cpu")``: a scaled mixed-precision
training loop, skipped steps on inf/NaN gradients, scale growth and backoff (float32
arithmetic), unscale_ before clipping, state dicts, misuse errors and the disabled scaler."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

import kiln
from tests.oracle import assert_close, needs_torch, torch

pytestmark = needs_torch


def _values(shape, offset: float, scale: float = 0.3) -> np.ndarray:
    n = int(np.prod(shape))
    return (np.sin(np.arange(n) * 0.7 + offset) * scale).reshape(shape).astype(np.float32)


def _model(lib):
    model = lib.nn.Sequential(lib.nn.Linear(6, 16), lib.nn.ReLU(), lib.nn.Linear(16, 3))
    with lib.no_grad():
        for i, p in enumerate(model.parameters()):
            p.copy_(lib.tensor(_values(tuple(p.shape), i)))
    return model


def _train(lib, steps: int, clip: bool, optim: str):
    model = _model(lib)
    opt_cls = lib.optim.SGD if optim == "sgd" else lib.optim.Adam
    opt = opt_cls(model.parameters(), lr=0.05)
    scaler = lib.amp.GradScaler("cpu", init_scale=2.0**8, growth_interval=2)
    x = lib.tensor(_values((12, 6), 5.0, 1.0))
    y = lib.arange(12) % 3
    log = []
    for step in range(steps):
        opt.zero_grad()
        with lib.autocast("cpu", dtype=lib.bfloat16):
            loss = lib.nn.functional.cross_entropy(model(x), y)
        if step == 2:
            loss = loss * float("inf")  # an overflowing step: skipped, scale backs off
        scaler.scale(loss).backward()
        if clip:
            scaler.unscale_(opt)
            lib.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        scaler.step(opt)
        scaler.update()
        log.append((loss.item(), scaler.get_scale(), scaler._get_growth_tracker()))
    return log, [p.detach() for p in model.parameters()], scaler.state_dict()


@pytest.mark.parametrize("optim", ["sgd", "adam"])
@pytest.mark.parametrize("clip", [False, True])
def test_scaled_training_loop_matches_torch(clip, optim):
    log, params, state = _train(kiln, 6, clip, optim)
    t_log, t_params, t_state = _train(torch, 6, clip, optim)
    assert [entry[1:] for entry in log] == [entry[1:] for entry in t_log]
    np.testing.assert_allclose([e[0] for e in log], [e[0] for e in t_log], rtol=1e-4)
    assert state == t_state
    for p, ref in zip(params, t_params):
        assert_close(p, ref, rtol=1e-4, atol=1e-5)


def _scale_history(lib, factors: dict, pattern: list[bool]) -> list:
    w = lib.nn.Parameter(lib.ones(3))
    opt = lib.optim.SGD([w], lr=0.25)
    scaler = lib.amp.GradScaler("cpu", **factors)
    history = []
    for bad in pattern:
        opt.zero_grad()
        loss = (w * w).sum() * (float("nan") if bad else 1.0)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        history.append((scaler.get_scale(), scaler._get_growth_tracker(), w.tolist()))
    return history


@pytest.mark.parametrize(
    "factors",
    [
        {"init_scale": 4.0, "growth_interval": 2},
        {"init_scale": 3.0, "growth_factor": 1.7, "backoff_factor": 0.3, "growth_interval": 1},
        {"init_scale": 3.0e38, "growth_factor": 3.0, "growth_interval": 1},
    ],
)
def test_scale_updates_use_float32_arithmetic_like_torch(factors):
    pattern = [False, True, False, False, False, True, False]
    assert _scale_history(kiln, factors, pattern) == _scale_history(torch, factors, pattern)


def test_inf_gradients_skip_the_optimizer_step():
    w = kiln.nn.Parameter(kiln.ones(2))
    opt = kiln.optim.SGD([w], lr=1.0)
    scaler = kiln.amp.GradScaler("cpu", init_scale=8.0)
    (scaler.scale(w.sum()) * float("inf")).backward()
    assert scaler.step(opt) is None
    assert w.tolist() == [1.0, 1.0]
    scaler.update()
    assert scaler.get_scale() == 4.0


def test_unscale_divides_gradients_by_the_scale():
    w = kiln.nn.Parameter(kiln.tensor([1.0, 2.0]))
    opt = kiln.optim.SGD([w], lr=1.0)
    scaler = kiln.amp.GradScaler("cpu", init_scale=1024.0)
    scaler.scale((w * w).sum()).backward()
    assert w.grad.tolist() == [2048.0, 4096.0]
    scaler.unscale_(opt)
    assert w.grad.tolist() == [2.0, 4.0]
    with pytest.raises(RuntimeError, match="already been called"):
        scaler.unscale_(opt)
    scaler.step(opt)
    with pytest.raises(RuntimeError, match="step\\(\\) has already been called"):
        scaler.step(opt)
    with pytest.raises(RuntimeError, match="after step"):
        scaler.unscale_(opt)
    scaler.update()
    with pytest.raises(AssertionError, match="No inf checks"):
        scaler.update()


def test_update_before_scale_and_bad_factors_raise():
    scaler = kiln.amp.GradScaler("cpu")
    with pytest.raises(AssertionError, match="_scale is None"):
        scaler.update()
    with pytest.raises(AssertionError, match="growth factor"):
        kiln.amp.GradScaler("cpu", growth_factor=1.0)
    with pytest.raises(AssertionError, match="backoff factor"):
        kiln.amp.GradScaler("cpu", backoff_factor=1.0)


def test_update_with_an_explicit_new_scale():
    scaler = kiln.amp.GradScaler("cpu")
    scaler.scale(kiln.tensor(1.0))
    scaler.update(10.0)
    assert scaler.get_scale() == 10.0
    scaler.update(kiln.tensor(7.0))
    assert scaler.get_scale() == 7.0
    with pytest.raises(AssertionError, match="new_scale should be"):
        scaler.update(kiln.tensor([1.0, 2.0]))


def test_scale_maps_over_nested_containers():
    scaler = kiln.amp.GradScaler("cpu", init_scale=4.0)
    out = scaler.scale([kiln.tensor(1.0), (kiln.tensor(2.0), kiln.tensor(3.0))])
    assert isinstance(out, list) and isinstance(out[1], tuple)
    assert [out[0].item(), out[1][0].item(), out[1][1].item()] == [4.0, 8.0, 12.0]
    low = scaler.scale(kiln.tensor([1.5], dtype=kiln.bfloat16))
    assert low.dtype is kiln.bfloat16  # a 0-dim scale does not promote


def test_state_dict_round_trip_and_pickle():
    scaler = kiln.amp.GradScaler("cpu", init_scale=32.0, growth_interval=3)
    w = kiln.nn.Parameter(kiln.ones(1))
    opt = kiln.optim.SGD([w], lr=0.1)
    for _ in range(2):
        opt.zero_grad()
        scaler.scale(w.sum()).backward()
        scaler.step(opt)
        scaler.update()
    state = scaler.state_dict()
    assert state == {
        "scale": 32.0,
        "growth_factor": 2.0,
        "backoff_factor": 0.5,
        "growth_interval": 3,
        "_growth_tracker": 2,
    }
    other = kiln.amp.GradScaler("cpu")
    other.load_state_dict(state)
    assert other.state_dict() == state
    copy = pickle.loads(pickle.dumps(scaler))
    assert copy.state_dict() == state
    with pytest.raises(RuntimeError, match="source state dict is empty"):
        other.load_state_dict({})


def test_disabled_scaler_passes_through():
    scaler = kiln.amp.GradScaler("cpu", enabled=False)
    loss = kiln.tensor(2.0)
    assert scaler.scale(loss) is loss
    assert scaler.get_scale() == 1.0 and scaler.state_dict() == {} and not scaler.is_enabled()
    w = kiln.nn.Parameter(kiln.ones(1))
    opt = kiln.optim.SGD([w], lr=1.0)
    w.sum().backward()
    scaler.step(opt)
    scaler.update()
    assert w.tolist() == [0.0]


def test_cuda_scaler_without_gpu_warns_and_disables():
    if kiln.cuda.is_available():
        pytest.skip("a GPU is present: the CUDA scaler is really enabled")
    with pytest.warns(UserWarning, match="CUDA is not available"):
        scaler = kiln.amp.GradScaler()
    assert not scaler.is_enabled()
    with pytest.warns(FutureWarning, match="torch.cuda.amp.GradScaler"):
        legacy = kiln.cuda.amp.GradScaler(enabled=False)
    assert not legacy.is_enabled()
