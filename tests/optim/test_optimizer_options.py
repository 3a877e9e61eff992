"""Adamax, NAdam, RAdam, Adadelta, ASGD, Rprop and SparseAdam, and every optimizer's
options, against torch.optim (its single-tensor implementations, which CPU runs use).

A small two-layer model starts from identical float64 parameters in both libraries; after each
of 20 steps the parameters must agree, and at the end the per-parameter state (keys, order,
dtypes, values) and the state-dict layout. State dicts are exchanged with PyTorch in both
directions. Also: constructor signatures and argument errors, ``capturable`` (no host reads),
``differentiable`` (gradients through the step, checked by finite differences), ``foreach``,
``fused``, tensor ``lr`` and the scalar-state dtype. (Compiled steps: test_compiled_steps.py.)"""

from __future__ import annotations

import copy
import inspect

import numpy as np
import pytest

import kiln
from tests.optim.helpers import assert_same_trajectory, run_steps, state_to
from tests.oracle import needs_torch, torch

STEPS = 20


NEW = ["Adamax", "NAdam", "RAdam", "Adadelta", "ASGD", "Rprop"]


EXISTING = ["SGD", "Adam", "AdamW", "RMSprop", "Adagrad"]


CONFIGS = [
    ("Adamax", {}),
    ("Adamax", {"lr": 0.01, "betas": (0.8, 0.99), "weight_decay": 0.1, "maximize": True}),
    ("NAdam", {"lr": 0.01}),
    ("NAdam", {"lr": 0.01, "weight_decay": 0.1, "momentum_decay": 0.01}),
    ("NAdam", {"lr": 0.01, "weight_decay": 0.1, "decoupled_weight_decay": True, "eps": 1e-6}),
    ("NAdam", {"lr": 0.02, "betas": (0.5, 0.9), "maximize": True}),
    ("RAdam", {"lr": 0.01}),
    ("RAdam", {"lr": 0.01, "betas": (0.9, 0.9), "weight_decay": 0.1}),
    ("RAdam", {"lr": 0.01, "weight_decay": 0.1, "decoupled_weight_decay": True, "maximize": True}),
    ("Adadelta", {}),
    ("Adadelta", {"lr": 0.5, "rho": 0.8, "eps": 1e-5, "weight_decay": 0.1, "maximize": True}),
    ("ASGD", {"lr": 0.05}),
    ("ASGD", {"lr": 0.05, "lambd": 0.01, "alpha": 0.5, "t0": 5, "weight_decay": 0.1}),
    ("ASGD", {"lr": 0.05, "t0": 0, "maximize": True}),
    ("Rprop", {}),
    ("Rprop", {"lr": 0.05, "etas": (0.3, 1.5), "step_sizes": (1e-3, 0.2), "maximize": True}),
    # options of the optimizers kiln already had, beyond tests/optim/test_optim.py's
    ("SGD", {"lr": 0.05, "momentum": 0.9, "dampening": 0.5, "weight_decay": 0.1}),
    # (gradient ascent grows the loss: a small rate keeps rounding differences from growing)
    ("SGD", {"lr": 0.01, "momentum": 0.5, "nesterov": True, "maximize": True, "foreach": False}),
    ("Adam", {"lr": 0.01, "amsgrad": True, "maximize": True, "weight_decay": 0.1}),
    ("Adam", {"lr": 0.01, "decoupled_weight_decay": True, "weight_decay": 0.1}),
    ("AdamW", {"lr": 0.01, "betas": (0.5, 0.6), "amsgrad": True}),
    ("RMSprop", {"lr": 0.01, "momentum": 0.5, "centered": True, "maximize": True}),
    ("Adagrad", {"lr": 0.1, "lr_decay": 0.05, "initial_accumulator_value": 0.5, "eps": 1e-6}),
    ("Adagrad", {"lr": 0.1, "weight_decay": 0.1, "maximize": True}),
]


def _config_id(config) -> str:
    name, kwargs = config
    return name + "".join(f"-{k}={v}" for k, v in kwargs.items())


def _initial(seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    shapes = {"w1": (5, 3), "b1": (5,), "w2": (2, 5), "b2": (2,), "x": (6, 3), "y": (6, 2)}
    return {k: rng.standard_normal(s) for k, s in shapes.items()}


def _params(lib, data: dict, dtype: str = "float64") -> list:
    return [lib.tensor(data[k].astype(dtype), requires_grad=True) for k in ("w1", "b1", "w2", "b2")]


def _loss(lib, params, data: dict, step: int):
    """A tanh layer and a linear layer on inputs that drift with the step, so the gradients
    keep changing (and change sign, which Rprop and ASGD's averaging need)."""
    w1, b1, w2, b2 = params
    x = lib.tensor(data["x"] * (1 + 0.05 * step), dtype=w1.dtype)
    y = lib.tensor(data["y"] * (-1) ** (step // 4), dtype=w1.dtype)
    out = (x @ w1.t() + b1).tanh() @ w2.t() + b2
    return ((out - y) ** 2).mean() + (w1 * w1).sum() * 0.01


def _run(lib, opt, params, data, steps: range) -> list:
    return run_steps(opt, params, lambda step: _loss(lib, params, data, step), steps)


def _train(lib, name, kwargs, data, steps=STEPS, dtype="float64"):
    params = _params(lib, data, dtype)
    opt = getattr(lib.optim, name)(params, **kwargs)
    return opt, params, _run(lib, opt, params, data, range(steps))


def _assert_same_state(k_sd: dict, t_sd: dict, rtol: float, atol: float) -> None:
    """Same groups (options and parameter ids) and per-parameter state: keys in the same order,
    tensors of the same dtype and shape, values within tolerance."""
    assert state_to(k_sd["param_groups"], torch) == t_sd["param_groups"]
    assert sorted(k_sd["state"]) == sorted(t_sd["state"])
    for index, t_state in t_sd["state"].items():
        k_state = k_sd["state"][index]
        assert list(k_state) == list(t_state), index
        for key, t_value in t_state.items():
            k_value = k_state[key]
            assert str(k_value.dtype).split(".")[-1] == str(t_value.dtype).split(".")[-1], key
            assert tuple(k_value.shape) == tuple(t_value.shape), key
            np.testing.assert_allclose(
                k_value.numpy(), t_value.numpy(), rtol=rtol, atol=atol, err_msg=f"{index} {key}"
            )


# ---------------------------------------------------------------------- trajectories


@needs_torch
@pytest.mark.parametrize("config", CONFIGS, ids=_config_id)
def test_float64_trajectory_and_state_match_torch(config):
    name, kwargs = config
    data = _initial()
    t_opt, _, t_hist = _train(torch, name, kwargs, data)
    k_opt, _, k_hist = _train(kiln, name, kwargs, data)
    assert_same_trajectory(k_hist, t_hist, rtol=1e-10, atol=1e-12)
    _assert_same_state(k_opt.state_dict(), t_opt.state_dict(), rtol=1e-9, atol=1e-12)


@needs_torch
@pytest.mark.parametrize("name", NEW)
def test_float32_trajectory_matches_torch(name):
    data = _initial(1)
    t_opt, _, t_hist = _train(torch, name, {}, data, dtype="float32")
    k_opt, _, k_hist = _train(kiln, name, {}, data, dtype="float32")
    for k, t in zip(k_hist[-1], t_hist[-1]):
        np.testing.assert_allclose(k, t, rtol=1e-5, atol=1e-6)
    _assert_same_state(k_opt.state_dict(), t_opt.state_dict(), rtol=1e-4, atol=1e-5)


def test_rprop_skips_the_update_where_the_gradient_changed_sign():
    p = kiln.tensor([1.0, 1.0], dtype=kiln.float64, requires_grad=True)
    opt = kiln.optim.Rprop([p], lr=0.1, etas=(0.5, 2.0))
    for grad in ([1.0, 1.0], [1.0, -1.0]):
        p.grad = kiln.tensor(grad, dtype=kiln.float64)
        opt.step()
    # first element: same sign, step size doubled; second: flipped, halved, no move
    assert p.detach().numpy().tolist() == [1.0 - 0.1 - 0.2, 0.9]
    assert opt.state[p]["step_size"].numpy().tolist() == [0.2, 0.05]
    assert opt.state[p]["prev"].numpy().tolist() == [1.0, 0.0]


def test_asgd_average_copies_the_parameter_until_t0_then_averages():
    p = kiln.tensor([0.0], dtype=kiln.float64, requires_grad=True)
    opt = kiln.optim.ASGD([p], lr=0.5, lambd=0.0, t0=2)
    seen = []
    for _ in range(5):
        p.grad = kiln.tensor([1.0], dtype=kiln.float64)
        opt.step()
        seen.append((float(p.detach()[0]), float(opt.state[p]["ax"][0])))
    # eta stays 0.5 (lambd=0); after step t, mu = 1 / max(1, t - t0) serves the next step
    assert seen == [(-0.5, -0.5), (-1.0, -1.0), (-1.5, -1.5), (-2.0, -2.0), (-2.5, -2.25)]
    assert float(opt.state[p]["mu"]) == np.float32(1 / 3)


# ---------------------------------------------------------------------- state dicts


@needs_torch
@pytest.mark.parametrize("name", NEW + EXISTING)
def test_torch_state_dict_loads_and_continues_torch_trajectory(name):
    data = _initial(2)
    kwargs = {"lr": 0.01} if name in ("NAdam", "RAdam", "Adam", "AdamW") else {}
    t_opt, t_params, _ = _train(torch, name, kwargs, data, steps=5)
    k_params = [kiln.tensor(p.detach().numpy().copy(), requires_grad=True) for p in t_params]
    k_opt = getattr(kiln.optim, name)(k_params, **kwargs)
    k_opt.load_state_dict(state_to(t_opt.state_dict(), kiln))
    t_hist = _run(torch, t_opt, t_params, data, range(5, 10))
    k_hist = _run(kiln, k_opt, k_params, data, range(5, 10))
    for k, t in zip(k_hist[-1], t_hist[-1]):
        np.testing.assert_allclose(k, t, rtol=1e-10, atol=1e-12)


@needs_torch
@pytest.mark.parametrize("name", NEW + EXISTING)
def test_kiln_state_dict_loads_into_torch_and_continues(name):
    data = _initial(3)
    k_opt, k_params, _ = _train(kiln, name, {}, data, steps=5)
    t_params = [torch.tensor(p.detach().numpy().copy(), requires_grad=True) for p in k_params]
    t_opt = getattr(torch.optim, name)(t_params)
    t_opt.load_state_dict(state_to(k_opt.state_dict(), torch))
    t_hist = _run(torch, t_opt, t_params, data, range(5, 10))
    k_hist = _run(kiln, k_opt, k_params, data, range(5, 10))
    for k, t in zip(k_hist[-1], t_hist[-1]):
        np.testing.assert_allclose(k, t, rtol=1e-10, atol=1e-12)


def _round_trip(lib, name, dtype):
    """(uninterrupted run, run resumed from a state dict saved after 4 of its 8 steps)."""
    data = _initial(4)
    _, _, full = _train(lib, name, {}, data, steps=8, dtype=dtype)
    first, params, _ = _train(lib, name, {}, data, steps=4, dtype=dtype)
    resumed = getattr(lib.optim, name)(params, lr=123.0)
    resumed.load_state_dict(copy.deepcopy(first.state_dict()))
    assert resumed.param_groups[0]["lr"] == first.param_groups[0]["lr"]
    return full[-1], _run(lib, resumed, params, data, range(4, 8))[-1]


@pytest.mark.parametrize("name", NEW)
def test_state_dict_round_trip_resumes_bit_for_bit(name):
    """With float32 parameters loading casts nothing, so resuming changes no bit."""
    full, resumed = _round_trip(kiln, name, "float32")
    for a, b in zip(resumed, full):
        np.testing.assert_array_equal(a, b)


@needs_torch
@pytest.mark.parametrize("name", NEW)
def test_float64_round_trip_resumes_as_torch_does(name):
    """Loading casts scalar float state (NAdam's ``mu_product``, ASGD's ``eta`` and ``mu``) to a
    float64 parameter's dtype, as PyTorch does: NAdam then continues in float64 and leaves the
    uninterrupted run by rounding exactly as PyTorch does, while ASGD (which stores its scalars
    rounded to the default dtype) and the others resume bit for bit."""
    k_full, k_resumed = _round_trip(kiln, name, "float64")
    t_full, t_resumed = _round_trip(torch, name, "float64")
    for k, t in zip(k_resumed, t_resumed):
        np.testing.assert_allclose(k, t, rtol=1e-13, atol=1e-15)
    for k_gap, t_gap in zip(
        (a - b for a, b in zip(k_resumed, k_full)), (a - b for a, b in zip(t_resumed, t_full))
    ):
        assert (np.abs(k_gap).max() == 0) == (np.abs(t_gap).max() == 0)


@pytest.mark.parametrize(
    "name,keys", [("NAdam", ("step", "mu_product")), ("ASGD", ("step", "eta", "mu")), ("Rprop", ("step",))]
)  # fmt: skip
def test_old_state_dicts_with_number_scalars_load_as_tensors(name, keys):
    data = _initial(5)
    opt, params, _ = _train(kiln, name, {}, data, steps=2)
    saved = opt.state_dict()
    for state in saved["state"].values():
        for key in keys:
            state[key] = float(state[key])
    fresh = getattr(kiln.optim, name)(params)
    fresh.load_state_dict(saved)
    for key in keys:
        value = fresh.state[params[0]][key]
        assert isinstance(value, kiln.Tensor) and value.dtype is kiln.float32 and value.dim() == 0


@needs_torch
@pytest.mark.parametrize("name", NEW + ["Adam", "RMSprop", "Adagrad"])
def test_scalar_state_is_float64_when_the_default_dtype_is(name):
    dtypes = []
    for lib in (kiln, torch):
        previous = lib.get_default_dtype()
        lib.set_default_dtype(lib.float64)
        try:
            opt, _, _ = _train(lib, name, {}, _initial(6), steps=1)
        finally:
            lib.set_default_dtype(previous)
        state = opt.state_dict()["state"][0]
        dtypes.append({k: str(v.dtype).split(".")[-1] for k, v in state.items() if v.dim() == 0})
    assert dtypes[0] == dtypes[1] and dtypes[0]["step"] == "float64"


# ---------------------------------------------------------------------- options


ALL = [*EXISTING, *NEW, "LBFGS", "SparseAdam"]


@needs_torch
@pytest.mark.parametrize("name", ALL)
def test_constructor_signature_matches_torch(name):
    def described(cls):
        return [
            (p.name, p.kind, p.default) for p in inspect.signature(cls.__init__).parameters.values()
        ]

    assert described(getattr(kiln.optim, name)) == described(getattr(torch.optim, name))


ERRORS = [
    ("Adamax", {"lr": -1.0}),
    ("Adamax", {"eps": -1.0}),
    ("Adamax", {"betas": (1.0, 0.9)}),
    ("Adamax", {"betas": (0.9, -0.1)}),
    ("Adamax", {"weight_decay": -1.0}),
    ("NAdam", {"momentum_decay": -1.0}),
    ("NAdam", {"betas": (0.9, 1.0)}),
    ("RAdam", {"weight_decay": -0.5}),
    ("Adadelta", {"rho": 1.5}),
    ("Adadelta", {"eps": -1.0}),
    ("ASGD", {"lr": -0.1}),
    ("ASGD", {"weight_decay": -0.1}),
    ("Rprop", {"etas": (1.2, 0.5)}),
    ("Rprop", {"etas": (0.0, 1.2)}),
    ("SparseAdam", {"lr": 0.0}),
    ("SparseAdam", {"eps": 0.0}),
    ("SparseAdam", {"betas": (0.9, 1.0)}),
    ("LBFGS", {"lr": -1.0}),
    ("Adam", {"betas": (0.9, 0)}),
    ("Adam", {"fused": True, "foreach": True}),
    ("AdamW", {"fused": True, "differentiable": True}),
    ("SGD", {"lr": 0.1, "fused": True, "differentiable": True}),
    ("Adagrad", {"fused": True, "foreach": True}),
    ("Adagrad", {"lr_decay": -1.0}),
    ("RMSprop", {"alpha": -1.0}),
]


@needs_torch
@pytest.mark.parametrize("name,kwargs", ERRORS, ids=[_config_id(c) for c in ERRORS])
def test_argument_errors_match_torch(name, kwargs):
    raised = []
    for lib in (torch, kiln):
        with pytest.raises((ValueError, RuntimeError, TypeError)) as info:
            getattr(lib.optim, name)([lib.zeros(2, requires_grad=True)], **kwargs)
        raised.append((info.type, str(info.value)))
    assert raised[1] == raised[0]


@needs_torch
@pytest.mark.parametrize("name", ["SGD", "Adam", "Adamax", "NAdam", "RAdam", "Rprop", "LBFGS"])
def test_tensor_lr_must_have_one_element_and_steps_like_a_float(name):
    for lib in (torch, kiln):
        with pytest.raises(ValueError, match="Tensor lr must be 1-element"):
            getattr(lib.optim, name)([lib.zeros(2, requires_grad=True)], lr=lib.tensor([0.1, 0.2]))
    if name == "LBFGS":
        return
    data = _initial(7)
    _, _, expected = _train(kiln, name, {"lr": 0.01}, data, steps=5)
    opt, _, got = _train(kiln, name, {"lr": kiln.tensor(0.01, dtype=kiln.float64)}, data, steps=5)
    assert isinstance(opt.param_groups[0]["lr"], kiln.Tensor)
    for a, b in zip(got[-1], expected[-1]):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize(
    "name,option",
    [("SGD", "foreach"), ("Adam", "foreach"), ("Adam", "fused"), ("AdamW", "fused"),
     ("SGD", "fused"), ("Adagrad", "fused"), *[(n, "foreach") for n in NEW]],
)  # fmt: skip
def test_foreach_and_fused_are_accepted_and_change_nothing(name, option):
    data = _initial(8)
    kwargs = {"lr": 0.05} if name == "SGD" else {}
    _, _, expected = _train(kiln, name, kwargs, data, steps=4)
    opt, _, got = _train(kiln, name, {**kwargs, option: True}, data, steps=4)
    assert opt.param_groups[0][option] is True
    for a, b in zip(got[-1], expected[-1]):
        np.testing.assert_array_equal(a, b)


@needs_torch
@pytest.mark.parametrize(
    "name, options",
    [
        *[(name, {}) for name in ("Adamax", "NAdam", "RAdam", "Adadelta", "ASGD", "Rprop", "Adam")],
        ("AdamW", {"amsgrad": True}),
    ],
)
def test_capturable_step_never_reads_tensor_values(name, options, monkeypatch):
    """Bias corrections and step-size schedules stay tensors (float32 step counts, as in
    PyTorch's capturable path), so the result agrees with the float64 reference to float32
    rounding of those scalars."""
    data = _initial(9)
    kwargs = {"lr": 0.01, **options}
    _, _, expected = _train(torch, name, kwargs, data)
    params = _params(kiln, data)
    opt = getattr(kiln.optim, name)(params, capturable=True, **kwargs)

    def no_item(self):
        raise AssertionError("a capturable step read a tensor value on the host")

    for step in range(STEPS):
        opt.zero_grad()
        _loss(kiln, params, data, step).backward()
        with monkeypatch.context() as patch:
            patch.setattr(kiln.Tensor, "item", no_item)
            patch.setattr(kiln.Tensor, "__float__", no_item)
            patch.setattr(kiln.Tensor, "__bool__", no_item)
            opt.step()
    for p, t in zip(params, expected[-1]):
        np.testing.assert_allclose(p.detach().numpy(), t, rtol=1e-4, atol=1e-4)


@needs_torch
def test_state_dict_hooks_run_in_torchs_order_and_may_replace_the_dict():
    results = []
    for lib in (torch, kiln):
        calls = []
        opt = lib.optim.SGD([lib.zeros(2, requires_grad=True)], lr=0.1)
        opt.register_state_dict_pre_hook(lambda o: calls.append("pre"))  # noqa: B023
        opt.register_state_dict_pre_hook(lambda o: calls.append("pre first"), prepend=True)  # noqa: B023
        handle = opt.register_state_dict_post_hook(lambda o, sd: {**sd, "extra": 1})
        saved = opt.state_dict()
        handle.remove()
        calls.append("extra" in saved and "extra" not in opt.state_dict())

        def load_pre(o, sd, calls=calls):
            calls.append(sorted(sd))
            return {**sd, "param_groups": [{**sd["param_groups"][0], "lr": 0.5}]}

        opt.register_load_state_dict_pre_hook(load_pre)
        opt.register_load_state_dict_post_hook(lambda o: calls.append("post"))  # noqa: B023
        opt.register_load_state_dict_post_hook(lambda o: calls.append("post first"), prepend=True)  # noqa: B023
        opt.load_state_dict(saved)
        results.append((calls, opt.param_groups[0]["lr"], "extra" in saved))
    assert results[1] == results[0]


# ---------------------------------------------------------------------- differentiable

DIFFERENTIABLE = [
    ("Adam", {"lr": 0.1}),
    ("AdamW", {"lr": 0.1, "amsgrad": True}),
    ("RMSprop", {"lr": 0.1, "centered": True, "momentum": 0.5}),
    ("Adagrad", {"lr": 0.1}),
    ("Adamax", {"lr": 0.1, "weight_decay": 0.1}),
    ("NAdam", {"lr": 0.1}),
    ("NAdam", {"lr": 0.1, "weight_decay": 0.1, "decoupled_weight_decay": True}),
    ("RAdam", {"lr": 0.1}),
    ("Adadelta", {"weight_decay": 0.1}),
    ("ASGD", {"lr": 0.1, "t0": 2}),
    ("Rprop", {"lr": 0.1}),
]


def _differentiable_steps(lib, name, kwargs, start, grads):
    """The parameter after one step per gradient, starting from a non-leaf copy of ``start``."""
    param = start.clone()
    opt = getattr(lib.optim, name)([param], differentiable=True, **kwargs)
    for grad in grads:
        param.grad = grad * 1.0
        opt.step()
    return param


@pytest.mark.parametrize("name,kwargs", DIFFERENTIABLE, ids=[_config_id(c) for c in DIFFERENTIABLE])
def test_differentiable_step_gradients_match_finite_differences(name, kwargs):
    rng = np.random.default_rng(10)
    inputs = [rng.standard_normal(3) for _ in range(5)]  # the start, then four gradients

    def objective(*tensors):
        param = _differentiable_steps(kiln, name, kwargs, tensors[0], tensors[1:])
        return (param * param).sum()

    leaves = [kiln.tensor(x, requires_grad=True) for x in inputs]
    objective(*leaves).backward()
    analytic = np.concatenate([t.grad.numpy() for t in leaves])
    numeric, eps = [], 1e-6
    for i, x in enumerate(inputs):
        for j in range(x.size):
            values = []
            for sign in (1, -1):
                shifted = [y.copy() for y in inputs]
                shifted[i][j] += sign * eps
                values.append(float(objective(*[kiln.tensor(y) for y in shifted])))
            numeric.append((values[0] - values[1]) / (2 * eps))
    np.testing.assert_allclose(analytic, numeric, rtol=1e-6, atol=1e-7)


@needs_torch
@pytest.mark.parametrize(
    "name,kwargs",
    [("SGD", {"lr": 0.1, "momentum": 0.9}), ("Adam", {"lr": 0.1}), ("Adagrad", {"lr": 0.1}),
     ("NAdam", {"lr": 0.1}), ("RAdam", {"lr": 0.1}), ("Adadelta", {}), ("ASGD", {"lr": 0.1}),
     # eight steps: rho_t passes 5 at the sixth, and the rectified update runs
     ("RAdam", {"lr": 0.1, "steps": 8})],
)  # fmt: skip
def test_differentiable_step_gradients_match_torch(name, kwargs):
    """Where PyTorch's differentiable step runs several steps (it keeps some saved state
    tensors in place, which fails for the others), kiln gives its gradients — including
    SGD's, whose momentum buffer starts as a detached copy of the first gradient."""
    kwargs = dict(kwargs)
    steps = kwargs.pop("steps", 3)
    rng = np.random.default_rng(11)
    inputs = [rng.standard_normal(3) for _ in range(steps + 1)]
    grads = []
    for lib in (torch, kiln):
        leaves = [lib.tensor(x, requires_grad=True) for x in inputs]
        param = _differentiable_steps(lib, name, kwargs, leaves[0], leaves[1:])
        (param * param).sum().backward()
        grads.append([None if t.grad is None else t.grad.numpy() for t in leaves])
    for t, k in zip(*grads):
        assert (t is None) == (k is None)
        if t is not None:
            # PyTorch divides a number by a tensor as reciprocal-then-multiply (one more
            # float32 rounding in the tensor bias corrections)
            np.testing.assert_allclose(k, t, rtol=1e-6, atol=1e-7)


# ---------------------------------------------------------------------- SparseAdam


def _row_sparse_gradients(dtype: str, steps: int = 8, rows: int = 6) -> list:
    """Gradients that are zero outside a few rows per step, as an embedding lookup gives."""
    rng = np.random.default_rng(12)
    grads = []
    for _ in range(steps):
        grad = rng.standard_normal((rows, 3)).astype(dtype)
        grad[rng.choice(rows, size=rows // 2, replace=False)] = 0
        grads.append(grad)
    return grads


@needs_torch
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize(
    "kwargs", [{"lr": 0.1}, {"lr": 0.05, "betas": (0.5, 0.8), "maximize": True}]
)
def test_sparse_adam_on_dense_gradients_follows_torch_on_sparse_ones(kwargs, dtype):
    """kiln's dense gradient stands for PyTorch's row-sparse one: the same rows (and only they)
    move, with the same arithmetic. float32 differs by PyTorch's float32 ``sqrt``, which is not
    correctly rounded on the CPU."""
    start = np.random.default_rng(13).standard_normal((6, 3)).astype(dtype)
    results = []
    for lib in (torch, kiln):
        param = lib.tensor(start.copy(), requires_grad=True)
        opt = lib.optim.SparseAdam([param], **kwargs)
        for grad in _row_sparse_gradients(dtype):
            param.grad = lib.tensor(grad).to_sparse(1) if lib is torch else lib.tensor(grad)
            opt.step()
        state = opt.state_dict()["state"][0]
        results.append((param.detach().numpy(), state))
    (t_param, t_state), (k_param, k_state) = results
    tol = 0 if dtype == "float64" else 1e-6
    np.testing.assert_allclose(k_param, t_param, rtol=tol, atol=tol)
    assert list(k_state) == list(t_state) and k_state["step"] == t_state["step"] == 8
    for key in ("exp_avg", "exp_avg_sq"):
        np.testing.assert_allclose(k_state[key].numpy(), t_state[key].numpy(), rtol=tol, atol=0)


def test_sparse_adam_leaves_rows_without_gradient_alone():
    param = kiln.ones(3, 2, requires_grad=True)
    opt = kiln.optim.SparseAdam([param], lr=0.1)
    opt.step()  # no gradient yet: nothing to do, no state
    assert opt.state_dict()["state"] == {}
    param.grad = kiln.tensor([[1.0, 0.0], [0.0, 0.0], [-2.0, 3.0]])
    opt.step()
    values = param.detach().numpy()
    # a row with any non-zero entry is updated whole (its zero entry's moments decay too)
    np.testing.assert_allclose(values[0], [0.9, 1.0], rtol=1e-6)
    assert values[1].tolist() == [1.0, 1.0]
    assert opt.state[param]["exp_avg"].numpy()[1].tolist() == [0.0, 0.0]
    np.testing.assert_allclose(values[2], [1.1, 0.9], rtol=1e-6)


@needs_torch
def test_adagrad_steps_a_param_group_added_after_construction_like_torch():
    def run(lib):
        w, b = lib.nn.Parameter(lib.ones(2)), lib.nn.Parameter(lib.ones(2) * 2)
        opt = lib.optim.Adagrad([w], lr=0.1, initial_accumulator_value=0.5)
        opt.add_param_group({"params": [b], "lr": 0.2})
        for _ in range(3):
            opt.zero_grad()
            (w.pow(2).sum() + b.pow(3).sum()).backward()
            opt.step()
        state = opt.state_dict()["state"]
        return w.tolist(), b.tolist(), sorted(state), sorted(state[1])

    got, want = run(kiln), run(torch)
    np.testing.assert_allclose(got[0] + got[1], want[0] + want[1], rtol=1e-6)
    assert got[2:] == want[2:]
