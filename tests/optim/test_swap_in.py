"""``optim.swap_in_optimizer_params_and_state`` against PyTorch: a step inside the block updates
the swapped-in parameters and state exactly as PyTorch's does, the live optimizer is untouched
and restored afterwards (after an error too), and malformed state is refused with PyTorch's
errors."""

from __future__ import annotations

import copy

import numpy as np
import pytest

import kiln
from tests.oracle import assert_close, first_lines_of_errors, needs_torch, torch

pytestmark = needs_torch


_OPTIONS = {"Adam": {}, "SGD": {"momentum": 0.9}}


def _setup(lib, optimizer_name="Adam", step=True):
    """A two-group optimizer over a small model whose state a first step has made."""
    rng = np.random.default_rng(0)
    weight = lib.nn.Parameter(lib.tensor(rng.standard_normal((3, 2)).astype(np.float32)))
    bias = lib.nn.Parameter(lib.tensor(rng.standard_normal(3).astype(np.float32)))
    optimizer = getattr(lib.optim, optimizer_name)(
        [{"params": [weight]}, {"params": [bias], "lr": 0.05}], lr=0.1, **_OPTIONS[optimizer_name]
    )
    if step:
        weight.grad = lib.ones(3, 2)
        bias.grad = lib.full((3,), 0.5)
        optimizer.step()
    return optimizer, {"weight": weight, "bias": bias}


def _swap_in_values(lib, params):
    rng = np.random.default_rng(1)
    out = {}
    for name, p in params.items():
        clone = lib.tensor(rng.standard_normal(tuple(p.shape)).astype(np.float32))
        clone.requires_grad_(True)
        clone.grad = lib.full(tuple(p.shape), -0.25)
        out[name] = clone
    return out


@pytest.mark.parametrize("optimizer_name", ["Adam", "SGD"])
def test_a_step_inside_acts_on_the_swapped_in_values_like_pytorchs(optimizer_name):
    results = []
    for lib in (kiln, torch):
        optimizer, params = _setup(lib, optimizer_name)
        live = {n: p.detach().clone() for n, p in params.items()}
        live_state = copy.deepcopy(optimizer.state_dict())
        swap_params = _swap_in_values(lib, params)
        swap_state = copy.deepcopy(optimizer.state_dict())
        swap_state["param_groups"][1]["lr"] = 0.2
        groups_before = [g["params"] for g in optimizer.param_groups]
        with lib.optim.swap_in_optimizer_params_and_state(optimizer, swap_params, swap_state):
            optimizer.step()
            inside_lr = optimizer.param_groups[1]["lr"]
        assert inside_lr == 0.2 and optimizer.param_groups[1]["lr"] == 0.05
        assert [g["params"] for g in optimizer.param_groups] == groups_before
        assert all(a is b for a, b in zip(optimizer.param_groups, optimizer.param_groups))
        for name, p in params.items():
            assert np.array_equal(p.detach().numpy(), live[name].numpy())
        assert _state_arrays(optimizer.state_dict()) == _state_arrays(live_state)
        results.append(
            ({n: p.detach().numpy() for n, p in swap_params.items()}, _state_arrays(swap_state))
        )
    (ours_params, ours_state), (theirs_params, theirs_state) = results
    for name in ours_params:
        assert_close(ours_params[name], theirs_params[name])
    assert ours_state.keys() == theirs_state.keys()
    for key in ours_state:
        assert_close(np.array(ours_state[key]), np.array(theirs_state[key]))


def _state_arrays(state_dict):
    """Every state value as a plain list, keyed by (param id, name)."""
    return {
        (pid, name): np.asarray(value.numpy() if hasattr(value, "numpy") else value).tolist()
        for pid, entry in state_dict["state"].items()
        for name, value in entry.items()
    }


def test_the_live_optimizer_comes_back_after_an_error():
    optimizer, params = _setup(kiln)
    own_state = optimizer.state
    with pytest.raises(ValueError, match="inside"):
        with kiln.optim.swap_in_optimizer_params_and_state(
            optimizer, _swap_in_values(kiln, params), copy.deepcopy(optimizer.state_dict())
        ):
            raise ValueError("inside")
    assert optimizer.state is own_state
    assert optimizer.param_groups[0]["params"][0] is params["weight"]


def _malformed(lib, case):
    optimizer, params = _setup(lib, step=case != "no-state")
    state = copy.deepcopy(optimizer.state_dict())
    if case == "not-a-dict":
        state = [state]
    elif case == "state-not-dict":
        state["state"] = []
    elif case == "tensor-keys":
        state["state"] = {params["weight"]: {}}
    elif case == "groups-count":
        state["param_groups"] = state["param_groups"][:1]
    elif case == "group-keys":
        del state["param_groups"][0]["lr"]
    elif case == "extra-id":
        state["state"][7] = {}
    elif case == "few-params":
        params = {"weight": params["weight"]}
    return optimizer, params, state


@pytest.mark.parametrize(
    "case",
    [
        "no-state",
        "not-a-dict",
        "state-not-dict",
        "tensor-keys",
        "groups-count",
        "group-keys",
        "extra-id",
        "few-params",
    ],
)
def test_malformed_swap_ins_are_refused_with_pytorchs_errors(case):
    def enter(lib):
        optimizer, params, state = _malformed(lib, case)
        with lib.optim.swap_in_optimizer_params_and_state(optimizer, params, state):
            pass

    got, want = first_lines_of_errors(lambda: enter(kiln), lambda: enter(torch))
    assert got == want
