"""Adam and AdamW's eager float32 update as one machine-code pass (``llvm/eager_optimizers.py``):
the numpy path's bits over every flag (maximize, coupled and decoupled weight decay, amsgrad,
a first-moment weight above and below 0.5), NaN and infinite gradients, and PyTorch's values."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.runtime import machine_code
from tests.oracle import needs_torch, torch

_SETTINGS = [
    ("Adam", {}),
    ("Adam", {"weight_decay": 0.1, "maximize": True}),
    ("Adam", {"amsgrad": True, "betas": (0.3, 0.9)}),
    ("AdamW", {}),
    ("AdamW", {"weight_decay": 0.5, "amsgrad": True, "eps": 1e-3}),
    ("AdamW", {"betas": (0.6, 0.95), "lr": 0.1}),
]


def _train(lib, name, options, steps=4, special=False):
    """Parameters and optimizer state after ``steps`` updates of two seeded parameters (one
    with a vector tail) with seeded gradients; ``special`` puts NaN and infinities in one."""
    rng = np.random.default_rng(3)
    params = [
        lib.tensor(rng.standard_normal(shape).astype(np.float32), requires_grad=True)
        for shape in ((5, 7), (16,))
    ]
    opt = getattr(lib.optim, name)(params, **{"lr": 1e-2, **options})
    for step in range(steps):
        for p in params:
            grad = rng.standard_normal(tuple(p.shape)).astype(np.float32)
            if special and step == 2 and p.ndim == 1:
                grad[:3] = [np.nan, np.inf, -np.inf]
            p.grad = lib.tensor(grad)
        opt.step()
    state = [opt.state[p] for p in params]
    kept = ("exp_avg", "exp_avg_sq", "max_exp_avg_sq")
    return [p.detach().numpy().copy() for p in params] + [
        s[k].numpy().copy() for s in state for k in kept if k in s
    ]


@pytest.mark.parametrize("name, options", _SETTINGS, ids=[f"{n}-{o}" for n, o in _SETTINGS])
@pytest.mark.parametrize("special", [False, True], ids=["finite", "nan-inf"])
def test_machine_code_gives_the_numpy_paths_bits(name, options, special, monkeypatch):
    assert machine_code.get("optimizers") is not None
    native = _train(kiln, name, options, special=special)
    monkeypatch.setitem(machine_code._built, "optimizers", False)
    numpy = _train(kiln, name, options, special=special)
    for got, want in zip(native, numpy):
        np.testing.assert_array_equal(got, want)


@needs_torch
@pytest.mark.parametrize("name, options", _SETTINGS, ids=[f"{n}-{o}" for n, o in _SETTINGS])
def test_adam_matches_torch(name, options):
    for got, want in zip(_train(kiln, name, options), _train(torch, name, options)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def _mixed_group(lib, name, options, steps=5):
    """One group mixing what the fast path takes and what it hands to the op path: float32
    and float64 parameters, a transposed (non-contiguous) one, a 0-d one, and one whose
    gradient is None every other step, so the group's parameters reach different step counts
    (each count gets its own bias corrections)."""
    rng = np.random.default_rng(5)
    values = [
        rng.standard_normal((4, 6)).astype(np.float32),
        rng.standard_normal((9,)).astype(np.float64),
        rng.standard_normal((6, 3)).astype(np.float32),
        np.float32(rng.standard_normal()),
        rng.standard_normal((5,)).astype(np.float32),
    ]
    params = [lib.tensor(v, requires_grad=True) for v in values]
    with lib.no_grad():  # a parameter that is a transposed view of its storage
        params[2] = lib.tensor(values[2]).t().requires_grad_()
    opt = getattr(lib.optim, name)(params, **{"lr": 1e-2, **options})
    for step in range(steps):
        for i, p in enumerate(params):
            grad = rng.standard_normal(tuple(p.shape)).astype(p.detach().numpy().dtype)
            p.grad = None if i == 4 and step % 2 else lib.tensor(grad).reshape(p.shape)
        opt.step()
    return [p.detach().numpy().copy() for p in params] + [
        v.numpy().copy() for p in params for v in opt.state[p].values()
    ]


@needs_torch
@pytest.mark.parametrize("name, options", _SETTINGS, ids=[f"{n}-{o}" for n, o in _SETTINGS])
def test_adam_group_of_mixed_parameters_matches_torch(name, options):
    got, want = _mixed_group(kiln, name, options), _mixed_group(torch, name, options)
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert a.dtype == b.dtype
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
