"""Shared pieces of the optimizer and scheduler tests: moving state dicts between kiln and
PyTorch, and a small optimizer whose learning rates a scheduler drives step by step."""

from __future__ import annotations

import numpy as np

import kiln
from tests.oracle import torch


def state_to(value, lib):
    """A state dict (or part of one) with every tensor moved to ``lib``, dtype kept."""
    if isinstance(value, (kiln.Tensor, torch.Tensor)):
        return lib.tensor(value.detach().numpy().copy())
    if isinstance(value, dict):
        return {k: state_to(v, lib) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(state_to(v, lib) for v in value)
    return value


def make_optimizer(lib, name: str = "SGD", groups: int = 1, lr=None):
    """An optimizer over ``groups`` zero parameters, group ``i`` at lr ``0.1 * (i + 1)`` (or all
    at ``lr``); SGD with momentum 0.9 so schedulers that cycle momentum have one."""
    params = [lib.zeros(2, requires_grad=True) for _ in range(groups)]
    spec = [{"params": [p], "lr": 0.1 * (i + 1)} for i, p in enumerate(params)]
    if lr is not None:
        spec = [{"params": params, "lr": lr}]
    if name == "SGD":
        return lib.optim.SGD(spec, lr=0.1, momentum=0.9)
    if name == "Adam":
        return lib.optim.Adam(spec, lr=0.1)
    return getattr(lib.optim, name)(spec)


def momenta(opt) -> list:
    """Each group's momentum (or Adam's betas)."""
    return [g.get("momentum", g.get("betas")) for g in opt.param_groups]


def run_schedule(lib, opt, sched, steps: int = 30, metrics=None) -> list:
    """The (learning rates, momenta) a scheduler sets before and after each of ``steps`` steps;
    ``metrics`` feed ReduceLROnPlateau-style schedulers in turn."""
    seen = [(list(sched.get_last_lr()), momenta(opt))]
    for i in range(steps):
        opt.step()
        if metrics is None:
            sched.step()
        else:
            sched.step(metrics[i % len(metrics)])
        seen.append((list(sched.get_last_lr()), momenta(opt)))
        assert [g["lr"] for g in opt.param_groups] == seen[-1][0]
    return seen


def run_steps(opt, params: list, loss, steps: range) -> list:
    """Step ``opt`` once per entry of ``steps`` on ``loss(step)``'s gradients; the parameters'
    values (numpy copies) after each step."""
    history = []
    for step in steps:
        opt.zero_grad()
        loss(step).backward()
        opt.step()
        history.append([p.detach().numpy().copy() for p in params])
    return history


def assert_same_trajectory(k_history: list, t_history: list, rtol: float, atol: float) -> None:
    """Every parameter agrees after every step (``run_steps`` histories of kiln and torch)."""
    for step, (k_values, t_values) in enumerate(zip(k_history, t_history)):
        for k, t in zip(k_values, t_values):
            np.testing.assert_allclose(k, t, rtol=rtol, atol=atol, err_msg=f"step {step}")
