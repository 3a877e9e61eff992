"""Optimizers written against ``torch.optim.optimizer``'s private helpers (as Lion, Sophia and
schedule-free implementations are) run under kiln and follow PyTorch's trajectory."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

import kiln
from tests.oracle import needs_torch, torch

pytestmark = needs_torch


def _lion(lib):
    helpers = importlib.import_module(f"{lib.__name__}.optim.optimizer")

    class Lion(helpers.Optimizer):
        def __init__(self, params: helpers.ParamsT, lr=1e-2, betas=(0.9, 0.99), weight_decay=0.1):
            defaults = dict(lr=lr, betas=betas, weight_decay=weight_decay, differentiable=False)
            super().__init__(params, defaults)

        @helpers._use_grad_for_differentiable
        def step(self, closure=None):
            for group in self.param_groups:
                params = [p for p in group["params"] if p.grad is not None]
                fused, foreach = helpers._default_to_fused_or_foreach(params, False)
                assert not fused and not foreach  # CPU tensors: neither, as in PyTorch
                beta1, beta2 = group["betas"]
                for p in params:
                    state = self.state[p]
                    if not state:
                        state["step"] = lib.tensor(0.0, dtype=helpers._get_scalar_dtype())
                        state["exp_avg"] = lib.zeros_like(p)
                    state["step"] += 1
                    exp_avg = state["exp_avg"]
                    p.mul_(1 - group["lr"] * group["weight_decay"])
                    update = exp_avg * beta1 + p.grad * (1 - beta1)
                    p.add_(update.sign(), alpha=-group["lr"] / helpers._get_value(state["step"]))
                    exp_avg.mul_(beta2).add_(p.grad, alpha=1 - beta2)
            return None

    return Lion


def _trajectory(lib, steps: int = 5) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    weight = lib.tensor(rng.normal(size=(3, 4)).astype(np.float32), requires_grad=True)
    x = lib.tensor(rng.normal(size=(5, 4)).astype(np.float32))
    optimizer = _lion(lib)([weight])
    seen = []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = (x @ weight.T).tanh().pow(2).sum()
        loss.backward()
        assert loss.grad_fn is not None and lib.is_grad_enabled()
        optimizer.step()
        seen.append(weight.detach().numpy().copy())
    return seen


def test_an_optimizer_on_torchs_private_helpers_follows_torch():
    for ours, theirs in zip(_trajectory(kiln), _trajectory(torch), strict=True):
        np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("use_fused, differentiable", [(True, False), (False, True)])
def test_fused_or_foreach_choice_matches_torch(use_fused, differentiable):
    ours = importlib.import_module("kiln.optim.optimizer")._default_to_fused_or_foreach
    theirs = importlib.import_module("torch.optim.optimizer")._default_to_fused_or_foreach
    params = [kiln.zeros(2), kiln.zeros(2, dtype=kiln.float64)]
    torch_params = [torch.zeros(2), torch.zeros(2, dtype=torch.float64)]
    assert ours(params, differentiable, use_fused) == theirs(
        torch_params, differentiable, use_fused
    )
