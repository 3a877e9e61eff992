"""The numpy fast path of eager optimizer steps gives the op path's bits and still
invalidates tensors saved for backward."""

from __future__ import annotations

import numpy as np
import pytest

import kiln

_FAST_CONFIGS = [
    ("SGD", {"lr": 0.1}),
    ("SGD", {"lr": 0.1, "momentum": 0.9, "dampening": 0.3, "weight_decay": 0.01}),
    ("SGD", {"lr": 0.1, "momentum": 0.9, "nesterov": True, "maximize": True, "weight_decay": 0.1}),
    ("Adam", {"lr": 0.01}),
    ("Adam", {"lr": 0.01, "amsgrad": True, "weight_decay": 0.1, "maximize": True}),
    ("Adam", {"lr": 0.01, "betas": (0.6, 0.99), "eps": 1e-6}),
    ("AdamW", {"lr": 0.01, "amsgrad": True, "weight_decay": 0.5}),
]


def _trained(name, kwargs, dtype, numpy_path: bool, monkeypatch):
    from kiln.optim import _numpy_step

    monkeypatch.setattr(_numpy_step, "available", lambda: numpy_path)
    kiln.manual_seed(0)
    model = kiln.nn.Sequential(kiln.nn.Linear(5, 7), kiln.nn.Tanh(), kiln.nn.Linear(7, 3))
    model = model.to(dtype)
    scale = kiln.nn.Parameter(kiln.tensor(1.5, dtype=dtype))  # a 0-d parameter too
    x, y = kiln.randn(16, 5, dtype=dtype), kiln.randint(0, 3, (16,))
    opt = getattr(kiln.optim, name)([*model.parameters(), scale], **kwargs)
    for _ in range(6):
        opt.zero_grad()
        kiln.nn.functional.cross_entropy(model(x) * scale, y).backward()
        opt.step()
    return [p.detach().numpy().copy() for p in opt.param_groups[0]["params"]], opt.state_dict()


@pytest.mark.parametrize("dtype", [kiln.float32, kiln.float64])
@pytest.mark.parametrize(("name", "kwargs"), _FAST_CONFIGS)
def test_numpy_optimizer_step_is_bitwise_the_op_path(name, kwargs, dtype, monkeypatch):
    fast, fast_state = _trained(name, kwargs, dtype, True, monkeypatch)
    ops, ops_state = _trained(name, kwargs, dtype, False, monkeypatch)
    for a, b in zip(fast, ops):
        np.testing.assert_array_equal(a, b)
    assert fast_state["state"].keys() == ops_state["state"].keys()
    for index, state in ops_state["state"].items():
        assert list(fast_state["state"][index]) == list(state)
        for key, value in state.items():
            got = fast_state["state"][index][key]
            assert got.dtype is value.dtype and got.shape == value.shape
            np.testing.assert_array_equal(got.numpy(), value.numpy())


@pytest.mark.parametrize("name", ["SGD", "Adam"])
def test_numpy_optimizer_step_still_invalidates_saved_tensors(name):
    weight = kiln.nn.Parameter(kiln.ones(3))
    opt = getattr(kiln.optim, name)([weight], lr=0.1)
    loss = (weight * weight).sum()
    weight.grad = kiln.ones(3)
    opt.step()
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()


@pytest.mark.parametrize("name", ["Adam", "AdamW"])
def test_numpy_adam_step_in_slices_is_bitwise_the_op_path(name, monkeypatch):
    from kiln.optim import _numpy_step

    monkeypatch.setattr(_numpy_step, "_CHUNK", 4)  # every parameter spans several slices
    kwargs = {"lr": 0.01, "amsgrad": True, "weight_decay": 0.1}
    fast, _ = _trained(name, kwargs, kiln.float32, True, monkeypatch)
    ops, _ = _trained(name, kwargs, kiln.float32, False, monkeypatch)
    for a, b in zip(fast, ops):
        np.testing.assert_array_equal(a, b)


def test_numpy_adam_step_temporaries_stay_small():
    """The step's transient memory is a slice's, not several parameter-sized arrays (numpy
    reports its buffers to tracemalloc)."""
    import tracemalloc

    weight = kiln.nn.Parameter(kiln.randn(1024, 1024))  # 4 MB
    opt = kiln.optim.AdamW([weight], lr=0.01)
    weight.grad = kiln.randn(1024, 1024)
    opt.step()  # creates the state
    tracemalloc.start()
    try:
        opt.step()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2 << 20, peak  # whole-array temporaries took over 16 MB (a float64 copy)
