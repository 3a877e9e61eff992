"""A compiled graph's elementwise step writes its result over a buffer it reads for the last
time, when it reads that buffer only at the elements it writes (a tied weight's two gradient
parts summed, a residual added), graph outputs included; a step reading another element (a
transposed operand) gets memory of its own."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

import kiln
from kiln.bench.dumps import observe_compiled_graphs
from kiln.runtime.storage import pool
from tests.oracle import needs_torch, torch

pytestmark = pytest.mark.usefixtures("cache_dir")


def two_products(x, a, b):
    return (x @ a) + (x @ b)


def product_plus_transpose(x, a):
    y = x @ a
    return y + y.t()


def _peak(fn, *args) -> int:
    """The most memory a call holds at once (numpy reports its buffers to tracemalloc)."""
    pool.clear()
    tracemalloc.start()
    try:
        fn(*args)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_sum_of_two_dying_products_is_written_over_one(monkeypatch):
    rng = np.random.default_rng(0)
    x, a, b = (kiln.tensor(rng.standard_normal((1024, 1024), dtype=np.float32)) for _ in "xab")
    with observe_compiled_graphs() as observed:
        compiled = kiln.compile(two_products)
        np.testing.assert_allclose(
            compiled(x, a, b).numpy(), two_products(x, a, b).numpy(), rtol=1e-4, atol=1e-3
        )
    (graph,) = [o.graph for o in observed]
    assert "written over" in graph.source
    monkeypatch.setattr(pool, "max_free_bytes", 0)  # freed buffers leave the pool at once
    size = 1024 * 1024 * 4
    # the two products, the sum in one of them: two buffers (three before, with the sum's own)
    assert _peak(compiled, x, a, b) < 2.5 * size


@needs_torch
def test_a_step_reading_other_elements_keeps_its_own_memory():
    rng = np.random.default_rng(1)
    data = rng.standard_normal((512, 512), dtype=np.float32)
    mat = rng.standard_normal((512, 512), dtype=np.float32)
    with observe_compiled_graphs() as observed:
        out = kiln.compile(product_plus_transpose)(kiln.tensor(data), kiln.tensor(mat))
    (graph,) = [o.graph for o in observed]
    assert "written over" not in graph.source
    expected = product_plus_transpose(torch.tensor(data), torch.tensor(mat)).numpy()
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-4, atol=1e-3)


@needs_torch
def test_tied_weight_gradient_is_summed_over_a_part():
    rng = np.random.default_rng(2)
    vocab, width = 512, 64
    weight = rng.standard_normal((vocab, width), dtype=np.float32) / 8
    tokens = rng.integers(0, vocab, (2, 16))

    def loss_of(lib, w, idx):
        hidden = lib.nn.functional.embedding(idx, w).tanh()
        logits = lib.nn.functional.linear(hidden, w)
        return lib.nn.functional.cross_entropy(logits.reshape(-1, vocab), idx.reshape(-1))

    w = kiln.tensor(weight, requires_grad=True)
    with observe_compiled_graphs() as observed:
        kiln.compile(loss_of)(kiln, w, kiln.tensor(tokens)).backward()
    backward = observed[-1].graph
    assert "written over" in backward.source
    tw = torch.tensor(weight, requires_grad=True)
    loss_of(torch, tw, torch.tensor(tokens)).backward()
    np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy(), rtol=1e-5, atol=1e-6)
