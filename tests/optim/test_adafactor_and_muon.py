"""Adafactor and Muon against torch.optim: trajectories and state layout, Muon's
orthogonalisation bit for bit, and the new optimizers' option errors."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from tests.oracle import needs_torch, torch


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
