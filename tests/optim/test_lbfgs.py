"""LBFGS against torch.optim.LBFGS: the same iterates, closure evaluations and state (curvature
pairs, step, counters) with the fixed step and with the strong-Wolfe line search; state dicts
exchanged both ways; the stopping rules; argument errors; and a closure whose model runs under
``kiln.compile``.

L-BFGS feeds every rounding difference back into its curvature pairs, so over tens of
iterations float64 runs agree to ~1e-9, not bit for bit (kiln's matmul rounds differently).
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

import kiln
import kiln.nn as nn
from tests.oracle import needs_torch, torch

CONFIGS = [
    {},
    {"line_search_fn": "strong_wolfe"},
    {"lr": 0.5, "max_iter": 7, "history_size": 3},
    {"line_search_fn": "strong_wolfe", "max_iter": 10, "history_size": 2},
    {"max_iter": 30, "max_eval": 12, "line_search_fn": "strong_wolfe"},
]


def _ids(kwargs: dict) -> str:
    return "-".join(f"{k}={v}" for k, v in kwargs.items()) or "defaults"


def _data(seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    shapes = {"w1": (5, 3), "b1": (5,), "w2": (2, 5), "b2": (2,), "x": (6, 3), "y": (6, 2)}
    return {k: rng.standard_normal(s) for k, s in shapes.items()}


def _model_params(lib, data: dict, dtype: str = "float64") -> list:
    return [lib.tensor(data[k].astype(dtype), requires_grad=True) for k in ("w1", "b1", "w2", "b2")]


def _model_loss(lib, params, data):
    w1, b1, w2, b2 = params
    x, y = lib.tensor(data["x"], dtype=w1.dtype), lib.tensor(data["y"], dtype=w1.dtype)
    out = (x @ w1.t() + b1).tanh() @ w2.t() + b2
    return ((out - y) ** 2).mean() + (w1 * w1).sum() * 0.01


def _closure(opt, loss_fn, calls: list | None = None):
    def closure():
        if calls is not None:
            calls.append(1)
        opt.zero_grad()
        loss = loss_fn()
        loss.backward()
        return loss

    return closure


def _optimize(lib, kwargs, data, steps: int = 3, dtype: str = "float64"):
    params = _model_params(lib, data, dtype)
    opt = lib.optim.LBFGS(params, **kwargs)
    calls: list = []
    closure = _closure(opt, lambda: _model_loss(lib, params, data), calls)
    losses = [float(opt.step(closure).detach()) for _ in range(steps)]
    return opt, params, losses, len(calls)


def _numpy(value):
    return value.detach().numpy() if isinstance(value, (kiln.Tensor, torch.Tensor)) else value


def _assert_same_lbfgs_state(k_state: dict, t_state: dict, rtol: float) -> None:
    assert list(k_state) == list(t_state)
    for key in ("func_evals", "n_iter"):
        assert k_state[key] == t_state[key], key
    for key in ("old_dirs", "old_stps", "ro", "al"):
        assert len(k_state[key]) == len(t_state[key]), key
        assert [v is None for v in k_state[key]] == [v is None for v in t_state[key]], key
    for key in ("d", "t", "H_diag", "prev_flat_grad", "prev_loss"):
        assert type(k_state[key]).__name__ == type(t_state[key]).__name__, key
        # absolute: float64 products sum in another order in PyTorch's BLAS (MKL picks its
        # kernels per CPU), and after a few line searches a direction's small entries differ
        # by ~1e-8 of its norm (2e-10 in a 2e-2 direction on an AVX-512 host)
        np.testing.assert_allclose(
            _numpy(k_state[key]), _numpy(t_state[key]), rtol=rtol, atol=1e-9, err_msg=key
        )


@needs_torch
@pytest.mark.parametrize("kwargs", CONFIGS, ids=_ids)
def test_float64_iterates_evaluations_and_state_match_torch(kwargs):
    data = _data()
    t_opt, t_params, t_losses, t_calls = _optimize(torch, kwargs, data)
    k_opt, k_params, k_losses, k_calls = _optimize(kiln, kwargs, data)
    assert k_calls == t_calls
    np.testing.assert_allclose(k_losses, t_losses, rtol=1e-9)
    for k, t in zip(k_params, t_params):
        np.testing.assert_allclose(_numpy(k), _numpy(t), rtol=1e-7, atol=1e-9)
    _assert_same_lbfgs_state(k_opt.state[k_params[0]], t_opt.state[t_params[0]], rtol=1e-6)
    assert _numpy(k_opt.state_dict()["param_groups"]) == t_opt.state_dict()["param_groups"]


def _quadratic(lib, dtype):
    """A convex least-squares problem, so float32 runs stay together."""
    rng = np.random.default_rng(1)
    a = lib.tensor(rng.standard_normal((8, 4)).astype(dtype))
    b = lib.tensor(rng.standard_normal(8).astype(dtype))
    x = lib.zeros(4, dtype=a.dtype, requires_grad=True)
    return x, lambda: ((a @ x - b) ** 2).sum()


@needs_torch
@pytest.mark.parametrize("line_search_fn", [None, "strong_wolfe"])
def test_float32_minimises_like_torch(line_search_fn):
    results = []
    for lib in (torch, kiln):
        x, loss_fn = _quadratic(lib, "float32")
        opt = lib.optim.LBFGS([x], line_search_fn=line_search_fn, max_iter=6)
        closure = _closure(opt, loss_fn)
        results.append([float(opt.step(closure).detach()) for _ in range(2)] + [_numpy(x)])
    np.testing.assert_allclose(results[1][:2], results[0][:2], rtol=1e-5)
    np.testing.assert_allclose(results[1][2], results[0][2], rtol=1e-4, atol=1e-5)


@needs_torch
def test_parameters_without_gradient_count_as_zero_gradients():
    """A parameter the loss does not use keeps its value; its slice of the direction is 0."""
    data = _data(2)
    results = []
    for lib in (torch, kiln):
        params = _model_params(lib, data)
        unused = lib.ones(3, dtype=params[0].dtype, requires_grad=True)
        opt = lib.optim.LBFGS([params[0], unused, *params[1:]], max_iter=5)
        opt.step(_closure(opt, lambda: _model_loss(lib, params, data)))  # noqa: B023
        assert unused.grad is None and _numpy(unused).tolist() == [1.0, 1.0, 1.0]
        results.append((_numpy(params[0]), _numpy(opt.state[params[0]]["d"])))
    np.testing.assert_allclose(results[1][0], results[0][0], rtol=1e-9)
    np.testing.assert_allclose(results[1][1], results[0][1], rtol=1e-7, atol=1e-12)
    assert results[1][1][15:18].tolist() == [0.0, 0.0, 0.0]


# ---------------------------------------------------------------------- state dicts


def _convert(value, lib):
    if isinstance(value, (kiln.Tensor, torch.Tensor)):
        return lib.tensor(_numpy(value).copy())
    if isinstance(value, dict):
        return {k: _convert(v, lib) for k, v in value.items()}
    if isinstance(value, list):
        return [_convert(v, lib) for v in value]
    return value


@needs_torch
@pytest.mark.parametrize("direction", ["torch_to_kiln", "kiln_to_torch"])
def test_state_dict_from_the_other_library_continues_its_run(direction):
    """The history of curvature pairs moves across: the next step continues the same run."""
    kwargs = {"line_search_fn": "strong_wolfe", "history_size": 4, "max_iter": 4}
    data = _data(3)
    source, target = (torch, kiln) if direction == "torch_to_kiln" else (kiln, torch)
    src_opt, src_params, _, _ = _optimize(source, kwargs, data, steps=2)
    dst_params = [target.tensor(_numpy(p).copy(), requires_grad=True) for p in src_params]
    dst_opt = target.optim.LBFGS(dst_params, **kwargs)
    dst_opt.load_state_dict(_convert(src_opt.state_dict(), target))
    assert dst_opt.state[dst_params[0]]["n_iter"] == src_opt.state[src_params[0]]["n_iter"]
    for lib, opt, params in ((source, src_opt, src_params), (target, dst_opt, dst_params)):
        opt.step(_closure(opt, lambda: _model_loss(lib, params, data)))  # noqa: B023
    for a, b in zip(src_params, dst_params):
        np.testing.assert_allclose(_numpy(b), _numpy(a), rtol=1e-8, atol=1e-10)


def test_state_dict_round_trip_resumes_bit_for_bit():
    kwargs = {"line_search_fn": "strong_wolfe", "history_size": 5, "max_iter": 5}
    data = _data(4)
    _, full, _, _ = _optimize(kiln, kwargs, data, steps=4)
    first, params, _, _ = _optimize(kiln, kwargs, data, steps=2)
    resumed = kiln.optim.LBFGS(params, **kwargs)
    resumed.load_state_dict(copy.deepcopy(first.state_dict()))
    closure = _closure(resumed, lambda: _model_loss(kiln, params, data))
    for _ in range(2):
        resumed.step(closure)
    for a, b in zip(params, full):
        np.testing.assert_array_equal(_numpy(a), _numpy(b))


# ---------------------------------------------------------------------- stopping and errors


@needs_torch
def test_returns_at_once_when_the_gradient_is_below_tolerance_grad():
    for lib in (torch, kiln):
        x = lib.tensor([1.0, -2.0], requires_grad=True)
        opt = lib.optim.LBFGS([x], tolerance_grad=1e-3)
        calls: list = []
        loss = opt.step(_closure(opt, lambda: ((x - x.detach()) ** 2).sum() + 7.0, calls))  # noqa: B023
        assert float(loss.detach()) == 7.0 and len(calls) == 1
        assert _numpy(x).tolist() == [1.0, -2.0]
        assert opt.state[x] == {"func_evals": 1, "n_iter": 0}


@needs_torch
@pytest.mark.parametrize("max_eval", [3, 8])
def test_max_eval_bounds_the_closure_calls_as_in_torch(max_eval):
    counts = []
    for lib in (torch, kiln):
        x, loss_fn = _quadratic(lib, "float64")
        opt = lib.optim.LBFGS([x], max_iter=50, max_eval=max_eval, line_search_fn="strong_wolfe")
        calls: list = []
        opt.step(_closure(opt, loss_fn, calls))
        counts.append((len(calls), opt.state[x]["func_evals"], opt.state[x]["n_iter"]))
    assert counts[1] == counts[0]


@needs_torch
@pytest.mark.parametrize("line_search_fn", [None, "strong_wolfe"])
def test_tensor_lr_keeps_the_step_a_tensor(line_search_fn):
    states = []
    for lib in (torch, kiln):
        x, loss_fn = _quadratic(lib, "float64")
        opt = lib.optim.LBFGS([x], lr=lib.tensor([0.5]), line_search_fn=line_search_fn)
        opt.step(_closure(opt, loss_fn))
        t = opt.state[x]["t"]
        states.append((type(t).__name__, str(t.dtype).split(".")[-1], float(t), _numpy(x)))
    assert states[1][:2] == states[0][:2]
    np.testing.assert_allclose(states[1][2], states[0][2], rtol=1e-9)
    np.testing.assert_allclose(states[1][3], states[0][3], rtol=1e-8, atol=1e-10)


@needs_torch
@pytest.mark.parametrize(
    "build",
    [
        lambda lib, ps: lib.optim.LBFGS([{"params": ps[:1]}, {"params": ps[1:], "lr": 0.1}]),
        lambda lib, ps: lib.optim.LBFGS(ps, lr=-0.5),
        lambda lib, ps: lib.optim.LBFGS(ps, lr=lib.tensor([0.1, 0.2])),
    ],
    ids=["param_groups", "negative_lr", "tensor_lr_shape"],
)
def test_construction_errors_match_torch(build):
    raised = []
    for lib in (torch, kiln):
        params = [lib.zeros(2, requires_grad=True), lib.zeros(3, requires_grad=True)]
        with pytest.raises(ValueError) as info:
            build(lib, params)
        raised.append(str(info.value))
    assert raised[1] == raised[0]


@needs_torch
def test_unknown_line_search_is_a_runtime_error_like_torch():
    raised = []
    for lib in (torch, kiln):
        x, loss_fn = _quadratic(lib, "float64")
        opt = lib.optim.LBFGS([x], line_search_fn="armijo")
        with pytest.raises(RuntimeError) as info:
            opt.step(_closure(opt, loss_fn))
        raised.append(str(info.value))
    assert raised[1] == raised[0] == "only 'strong_wolfe' is supported"


# ---------------------------------------------------------------------- kiln.compile


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compiled_model_in_the_closure_follows_eager(backend):
    """The optimizer loop runs eagerly (it branches on values); the model it evaluates may be
    compiled, and the line search then sees the same losses and gradients."""
    kiln.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    twin = copy.deepcopy(model)
    compiled = kiln.compile(model, backend=backend)
    x, y = kiln.randn(16, 4), kiln.randn(16, 1)
    opts = []
    for net, params in ((compiled, model.parameters()), (twin, twin.parameters())):
        opt = kiln.optim.LBFGS(list(params), max_iter=8, line_search_fn="strong_wolfe")
        closure = _closure(opt, lambda net=net: ((net(x) - y) ** 2).mean())
        for _ in range(2):
            opt.step(closure)
        opts.append(opt)
    tol = 1e-6 if backend == "aot_eager" else 1e-4
    for p, q in zip(model.parameters(), twin.parameters()):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=tol, atol=tol)
    first = next(iter(model.parameters()))
    assert opts[0].state[first]["func_evals"] > 2
    kiln.dynamo.reset()
