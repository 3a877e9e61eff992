"""SGD's eager update (``optim/_numpy_step.sgd_update``): one machine-code pass for float32
(``llvm/eager_optimizers.py``) and sliced numpy otherwise, against the op path's bits (the
fast path switched off) and PyTorch's values, over every flag: momentum with and without
dampening, nesterov, weight decay, maximize; NaN and infinite gradients; parameters longer
than a slice."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.optim import _numpy_step
from kiln.runtime import machine_code
from tests.oracle import needs_torch, torch

_SETTINGS = [
    {},
    {"momentum": 0.9},
    {"momentum": 0.9, "weight_decay": 1e-2},
    {"momentum": 0.8, "dampening": 0.3, "maximize": True},
    {"momentum": 0.9, "nesterov": True, "weight_decay": 0.1},
    {"weight_decay": 0.5, "maximize": True},
]
# a vector tail after whole vectors, and one parameter of several numpy slices
_SHAPES = ((5, 7), (16,), (_numpy_step._CHUNK + 37,))


def _train(lib, options, dtype=np.float32, steps=4, special=False):
    """Parameters and momentum buffers after ``steps`` updates of seeded parameters with seeded
    gradients; ``special`` puts NaN and infinities in one gradient."""
    rng = np.random.default_rng(7)
    params = [lib.tensor(rng.standard_normal(s).astype(dtype), requires_grad=True) for s in _SHAPES]
    opt = lib.optim.SGD(params, **{"lr": 1e-2, **options})
    for step in range(steps):
        for p in params:
            grad = rng.standard_normal(tuple(p.shape)).astype(dtype)
            if special and step == 2 and p.ndim == 1:
                grad[:3] = [np.nan, np.inf, -np.inf]
            p.grad = lib.tensor(grad)
        opt.step()
    buffers = [opt.state[p].get("momentum_buffer") for p in params]
    return [p.detach().numpy().copy() for p in params] + [
        b.numpy().copy() for b in buffers if b is not None
    ]


def _ids(settings):
    return [",".join(f"{k}={v}" for k, v in s.items()) or "plain" for s in settings]


@pytest.mark.parametrize("options", _SETTINGS, ids=_ids(_SETTINGS))
@pytest.mark.parametrize("special", [False, True], ids=["finite", "nan-inf"])
@pytest.mark.parametrize("path", ["machine-code", "numpy"])
def test_fast_paths_give_the_op_paths_bits(options, special, path, monkeypatch):
    dtype = np.float32
    if path == "machine-code":
        assert machine_code.get("optimizers") is not None
    else:
        monkeypatch.setitem(machine_code._built, "optimizers", False)
    fast = _train(kiln, options, dtype, special=special)
    monkeypatch.setattr(_numpy_step, "available", lambda: False)
    ops = _train(kiln, options, dtype, special=special)
    assert len(fast) == len(ops)
    for got, want in zip(fast, ops):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("options", _SETTINGS[1:3], ids=_ids(_SETTINGS[1:3]))
def test_float64_slices_give_the_op_paths_bits(options, monkeypatch):
    fast = _train(kiln, options, np.float64)
    monkeypatch.setattr(_numpy_step, "available", lambda: False)
    for got, want in zip(fast, _train(kiln, options, np.float64)):
        np.testing.assert_array_equal(got, want)


@needs_torch
@pytest.mark.parametrize("options", _SETTINGS, ids=_ids(_SETTINGS))
def test_sgd_matches_torch(options):
    for got, want in zip(_train(kiln, options), _train(torch, options)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_versions_bump_as_in_place_ops_do():
    p = kiln.ones(4, requires_grad=True)
    opt = kiln.optim.SGD([p], lr=0.1, momentum=0.9)
    p.grad = kiln.ones(4)
    before = p._version
    opt.step()
    buf = opt.state[p]["momentum_buffer"]
    made = buf._version
    opt.step()
    assert p._version == before + 2
    assert buf._version == made + 1
