"""A compiled graph lets go of each of its buffers after the last step that uses it, so a
graph's peak memory is what is alive at once, not every buffer it ever made; a compiled
backward does the same with the activations saved for it (boxed arguments)."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

import kiln
from kiln.runtime.storage import pool
from tests.oracle import needs_torch, torch

pytestmark = pytest.mark.usefixtures("cache_dir")

WIDTHS = [1000, 1300, 1700, 2200, 2800, 3500]  # every intermediate a size of its own


def chain(x, *weights):
    for w in weights:
        x = (x @ w).relu()
    return x.sum(1)


def test_compiled_chain_frees_intermediates_as_it_goes(monkeypatch):
    rng = np.random.default_rng(0)
    x = kiln.tensor(rng.standard_normal((256, WIDTHS[0]), dtype=np.float32))
    weights = [
        kiln.tensor((rng.standard_normal((a, b)) / np.sqrt(a)).astype(np.float32))
        for a, b in zip(WIDTHS, WIDTHS[1:])
    ]
    compiled = kiln.compile(chain)
    np.testing.assert_allclose(
        compiled(x, *weights).numpy(), chain(x, *weights).numpy(), rtol=1e-4, atol=1e-3
    )
    monkeypatch.setattr(pool, "max_free_bytes", 0)  # freed buffers leave the pool at once
    pool.clear()
    tracemalloc.start()  # numpy reports its buffers to tracemalloc
    try:
        compiled(x, *weights)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    sizes = [256 * w * 4 for w in WIDTHS[1:]]
    # every intermediate (a product and its relu per layer) alive until the return: about
    # 2 * sum(sizes) (22 MB measured); freed after their last use: the last layer's buffers,
    # the product's temporaries and pool rounding (14 MB)
    assert peak < 1.5 * sum(sizes), (peak, sum(sizes))


def deep_tanh(x, *weights):
    for w in weights:
        x = (x @ w).tanh()
    return x.sum()


def _backward_peak(step, retain_graph: bool) -> int:
    """The most memory the backward of ``step()`` adds on top of what is alive when it
    starts (the forward's allocations are traced too, so freeing saved activations counts)."""
    pool.clear()
    tracemalloc.start()
    try:
        loss = step()
        start = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        loss.backward(retain_graph=retain_graph)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return peak - start


@needs_torch
@pytest.mark.parametrize("codegen", ["llvm", "numpy", "triton"])
def test_compiled_backward_frees_each_saved_activation_after_its_last_use(monkeypatch, codegen):
    rng = np.random.default_rng(0)
    rows, width, layers = 512, 128, 6  # activations of 256 KiB, weights of 64 KiB
    data = rng.standard_normal((rows, width), dtype=np.float32)
    mats = [(rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32)] * layers
    x = kiln.tensor(data)
    weights = [kiln.tensor(m).requires_grad_() for m in mats]
    compiled = kiln.compile(deep_tanh, options={"cpu_codegen": codegen})
    compiled(x, *weights).backward()  # compiles
    monkeypatch.setattr(pool, "max_free_bytes", 0)  # freed buffers leave the pool at once
    kept = _backward_peak(lambda: compiled(x, *weights), retain_graph=True)
    for w in weights:
        w.grad = None
    freed = _backward_peak(lambda: compiled(x, *weights), retain_graph=False)

    tx = torch.tensor(data)
    tw = [torch.tensor(m, requires_grad=True) for m in mats]
    deep_tanh(tx, *tw).backward()
    for w, t in zip(weights, tw):
        np.testing.assert_allclose(w.grad.numpy(), t.grad.numpy(), rtol=1e-4, atol=1e-3)
    grad = width * width * 4
    # the weights' gradients (outputs) accumulate as the backward goes down the layers; kept:
    # every layer's saved activation stays until it returns, so it adds all the gradients;
    # freed: each layer's activation (bigger than its gradient) goes once read, so it adds
    # about one gradient and the temporaries
    assert freed < kept - (layers - 3) * grad, (freed, kept)


def _mlp(lib, weights):
    """Two linear layers with gelu between, their weights set from ``weights``."""
    model = lib.nn.Sequential(lib.nn.Linear(512, 2048), lib.nn.GELU(), lib.nn.Linear(2048, 512))
    with lib.no_grad():
        for p, value in zip(model.parameters(), weights):
            p.copy_(lib.tensor(value))
    return model


def _train_step(lib, model, optimizer):
    def step(x, y):
        optimizer.zero_grad(set_to_none=True)
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        optimizer.step()
        return loss

    return step


@needs_torch
def test_compiled_training_step_leaves_no_more_free_pool_memory_than_its_budget(monkeypatch):
    """The temporaries a compiled backward frees at its end (2-8 MB here) do not stay in the
    pool until some later allocation trims it: the optimizer's graph, returning, hands back
    what was free when the backward returned and nobody was given since, so between steps
    the pool keeps at most its budget free (after the first step, one buffer freed after its
    backward returned waits one more stretch). The steps still train as PyTorch's do."""
    rng = np.random.default_rng(0)
    shapes = [(2048, 512), (2048,), (512, 2048), (512,)]
    weights = [(rng.standard_normal(s) / np.sqrt(s[-1])).astype(np.float32) for s in shapes]
    x, y = (rng.standard_normal((256, 512), dtype=np.float32) for _ in "xy")
    model = _mlp(kiln, weights)
    step = kiln.compile(_train_step(kiln, model, kiln.optim.SGD(model.parameters(), lr=0.1)))
    monkeypatch.setattr(pool, "max_free_bytes", 1 << 20)
    losses = []
    for k in range(3):
        losses.append(step(kiln.tensor(x), kiln.tensor(y)).item())
        assert k == 0 or pool.free_bytes <= pool.max_free_bytes, pool.free_bytes

    reference = _mlp(torch, weights)
    torch_step = _train_step(torch, reference, torch.optim.SGD(reference.parameters(), lr=0.1))
    expected = [torch_step(torch.tensor(x), torch.tensor(y)).item() for _ in range(3)]
    np.testing.assert_allclose(losses, expected, rtol=1e-5)
    for p, q in zip(model.parameters(), reference.parameters()):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-4, atol=1e-5)


def scaled_tanh(x, w):
    return ((x @ w).tanh() * 2).sum(0)


@needs_torch
def test_a_compiled_graph_called_in_a_loop_reuses_its_temporaries_over_the_budget(monkeypatch):
    """A graph's temporaries (4 MB each) stay pooled between its calls even with no budget:
    each call hands them out again, so releasing idle buffers at its return never takes them
    and later calls fault in no fresh memory."""
    rng = np.random.default_rng(1)
    data = rng.standard_normal((1024, 1024), dtype=np.float32)
    mat = (rng.standard_normal((1024, 1024)) / 32).astype(np.float32)
    x, w = kiln.tensor(data), kiln.tensor(mat)
    compiled = kiln.compile(scaled_tanh)
    compiled(x, w)
    monkeypatch.setattr(pool, "max_free_bytes", 0)
    compiled(x, w)  # the first call under no budget settles what the pool keeps
    made = pool.fresh_bytes
    for _ in range(3):
        out = compiled(x, w)
    assert pool.fresh_bytes == made
    expected = scaled_tanh(torch.tensor(data), torch.tensor(mat)).numpy()
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-4, atol=1e-4)
