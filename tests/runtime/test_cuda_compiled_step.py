"""A compiled training step on the CUDA stand-in (Triton's interpreter): a learning rate that a
scheduler changes every step is a graph input, so the step stops compiling after the first
change, and its values equal eager CPU kiln's."""

from __future__ import annotations

import numpy as np

import kiln
from kiln.inductor.codegen.triton_wrapper import graphs_compiled
from kiln.runtime import devices

F = kiln.nn.functional


def _training(device: str, compiled: bool, steps: int):
    kiln.manual_seed(0)
    model = kiln.nn.Sequential(kiln.nn.Linear(6, 8), kiln.nn.Tanh(), kiln.nn.Linear(8, 3))
    model.to(device)
    opt = kiln.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.05)
    sched = kiln.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.7)
    x, y = kiln.randn(5, 6).to(device), kiln.randn(5, 3).to(device)

    def step(x, y):
        loss = F.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    run = kiln.compile(step) if compiled else step
    losses, compiles = [], []
    for _ in range(steps):
        losses.append(run(x, y).item())
        sched.step()
        compiles.append((graphs_compiled(), devices.op_cache_info()["compiles"]))
    return losses, [p.detach().cpu() for p in model.parameters()], compiles


def test_compiled_step_with_a_changing_lr_stops_compiling(gpu):
    losses, params, compiles = _training("cuda", compiled=True, steps=6)
    # step 0 compiles; the first new lr recompiles the optimizer's graph with lr as an input;
    # from then on nothing compiles, neither graphs nor eager kernels
    assert compiles[2:] == [compiles[1]] * 4
    expected_losses, expected, _ = _training("cpu", compiled=False, steps=6)
    np.testing.assert_allclose(losses, expected_losses, rtol=1e-5)
    for got, want in zip(params, expected):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)


def test_a_changing_float_passed_to_a_tensor_method_is_a_graph_input():
    """``x.mul_(1 - lr * wd)`` with a changing lr: one recompile, then the same graph (CPU)."""
    state = {"lr": 0.1}
    x = kiln.ones(3)
    graphs = []

    def counting_backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    def update(x):
        return x.clone().mul_(1 - state["lr"] * 0.5)

    fn = kiln.compile(update, backend=counting_backend)
    for lr in (0.1, 0.2, 0.3, 0.4):
        state["lr"] = lr
        np.testing.assert_allclose(fn(x).numpy(), np.full(3, 1 - lr * 0.5, np.float32))
    assert len(graphs) == 2


def test_reduce_overhead_falls_back_with_a_logged_reason(gpu, capfd):
    """mode="reduce-overhead" asks for CUDA graphs; without capture (no GPU here) the graph's
    launches run one by one, the reason is logged, and the values are the default mode's."""
    from kiln.runtime import logs as klog

    x, w = kiln.randn(4, 6), kiln.randn(6)

    def fn(x, w):
        return F.gelu(x * w).sum(-1)

    klog.set_logs(cudagraphs=True)
    try:
        got = kiln.compile(fn, mode="reduce-overhead")(x.cuda(), w.cuda())
        on_cpu = kiln.compile(fn, mode="reduce-overhead")(x, w)
    finally:
        klog.set_logs(cudagraphs=False)
    err = capfd.readouterr().err
    assert "skipping cudagraphs due to no CUDA graph capture without a GPU" in err
    assert "skipping cudagraphs due to cpu device" in err
    expected = kiln.compile(fn)(x.cuda(), w.cuda())
    np.testing.assert_allclose(got.cpu().numpy(), expected.cpu().numpy(), rtol=1e-6)
    np.testing.assert_allclose(got.cpu().numpy(), fn(x, w).numpy(), rtol=1e-5)
    np.testing.assert_allclose(on_cpu.numpy(), fn(x, w).numpy(), rtol=1e-5)
