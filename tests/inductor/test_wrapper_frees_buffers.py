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
