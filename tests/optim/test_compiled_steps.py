"""Optimizer steps under ``kiln.compile``: a whole ``step()`` is one graph that follows
the eager step, and a scheduler changing ``lr`` between compiled steps is seen by them."""

from __future__ import annotations

import copy

import numpy as np
import pytest

import kiln
import kiln.nn as nn
from kiln.dynamo import config as dynamo_config
from kiln.dynamo.testing import CompileCounter


@pytest.fixture
def strict_capture(monkeypatch):
    """Capture errors surface (users would get an eager fallback) and caches start clean."""
    monkeypatch.setattr(dynamo_config, "suppress_errors", False)
    yield
    kiln.dynamo.reset()


COMPILED = {
    "nadam": lambda ps: kiln.optim.NAdam(ps, lr=1e-2, weight_decay=0.1),
    # rho_t passes 5 at the sixth step: both regimes run in the same graph
    "radam": lambda ps: kiln.optim.RAdam(ps, lr=1e-2),
    # mu stays 1 until t0, then averaging starts: one graph for both
    "asgd": lambda ps: kiln.optim.ASGD(ps, lr=1e-2, t0=4),
    "rprop": lambda ps: kiln.optim.Rprop(ps, lr=1e-2),
}


# eager runs the captured ops with eager's kernels (same bits); inductor fuses and rounds
# float32 differently
TOLERANCE = {"eager": 0.0, "aot_eager": 1e-7, "inductor": 2e-6}


@pytest.mark.usefixtures("strict_capture")
@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
@pytest.mark.parametrize("name", list(COMPILED))
def test_compiled_step_is_one_graph_and_follows_eager(name, backend):
    kiln.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 4))
    twin = copy.deepcopy(model)
    opt, twin_opt = COMPILED[name](model.parameters()), COMPILED[name](twin.parameters())
    counter = CompileCounter(backend)
    step = kiln.compile(opt.step, backend=counter, fullgraph=True)
    x = kiln.randn(5, 8)
    graphs = []
    for i in range(10):
        for m, o, do_step in ((model, opt, step), (twin, twin_opt, twin_opt.step)):
            o.zero_grad()
            (m(x * (1 + 0.1 * i)).tanh().pow(2).sum() * (-1) ** (i // 3)).backward()
            do_step()
        graphs.append(counter.frame_count)
    # the state is made before the first step is traced: one capture serves every step
    assert graphs == [1] * 10
    tol = TOLERANCE[backend]
    for p, q in zip(model.parameters(), twin.parameters()):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=tol, atol=tol)
        assert list(opt.state[p]) == list(twin_opt.state[q])
        for key, expected in twin_opt.state[q].items():
            got = opt.state[p][key]
            assert got.dtype == expected.dtype and got.grad_fn is None
            np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=tol, atol=tol)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("scheduler", ["CyclicLR", "OneCycleLR"])
def test_scheduler_drives_a_compiled_optimizer_step(scheduler, backend):
    """The scheduler changes ``lr`` (and momentum) between compiled steps; the compiled step
    must see each new value (a guard, or the value as a graph input), following an eager
    twin."""
    kiln.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    twin = copy.deepcopy(model)
    runs = []
    for net, compiled in ((model, True), (twin, False)):
        opt = kiln.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
        if scheduler == "CyclicLR":
            sched = kiln.optim.lr_scheduler.CyclicLR(opt, 0.01, 0.1, step_size_up=2)
        else:
            sched = kiln.optim.lr_scheduler.OneCycleLR(opt, 0.1, total_steps=6)
        counter = CompileCounter(backend)
        step = kiln.compile(opt.step, backend=counter) if compiled else opt.step
        runs.append((net, opt, sched, step, counter))
    x, y = kiln.randn(16, 4), kiln.randn(16, 1)
    for _ in range(5):
        for net, opt, sched, step, _ in runs:
            opt.zero_grad()
            ((net(x) - y) ** 2).mean().backward()
            step()
            sched.step()
    # compiled at least once: the first step (SGD makes its momentum buffers) runs eagerly, and
    # lr stops being baked in at its first change, so one graph then serves every later lr
    assert runs[0][4].frame_count >= 1
    assert runs[0][2].get_last_lr() == runs[1][2].get_last_lr()
    for p, q in zip(model.parameters(), twin.parameters()):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-6, atol=1e-7)
    kiln.dynamo.reset()


@pytest.mark.usefixtures("strict_capture")
def test_two_optimizers_with_different_weight_decays_compile_without_a_break():
    """An actor's and a critic's Adam share ``Optimizer.step``'s code: their weight decays
    alternate between calls, but each is one object's constant (a value an earlier entry was
    made for), not a number that changes every call, so neither step breaks its graph."""
    kiln.manual_seed(0)
    nets = [nn.Linear(5, 4), nn.Linear(5, 1)]
    twins = copy.deepcopy(nets)
    decays = [0.0, 1e-2]
    opts = [kiln.optim.Adam(n.parameters(), lr=1e-2, weight_decay=d) for n, d in zip(nets, decays)]
    twin_opts = [kiln.optim.Adam(n.parameters(), lr=1e-2, weight_decay=d)
                 for n, d in zip(twins, decays)]  # fmt: skip
    counter = CompileCounter("eager")
    steps = [kiln.compile(o.step, backend=counter, fullgraph=True) for o in opts]
    x = kiln.randn(8, 5)
    for _ in range(6):
        for group, do_steps in ((nets, steps), (twins, [o.step for o in twin_opts])):
            for o in opts + twin_opts:
                o.zero_grad()
            (group[0](x).pow(2).sum() + group[1](x).sum()).backward()
            for do_step in do_steps:
                do_step()  # fullgraph: a break would raise
    # one capture per optimizer: its state is made before its first step is traced
    assert counter.frame_count == 2
    for p, q in zip([*nets[0].parameters(), *nets[1].parameters()],
                    [*twins[0].parameters(), *twins[1].parameters()]):  # fmt: skip
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-6, atol=1e-7)
