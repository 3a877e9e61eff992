"""A compiled graph lets go of each of its buffers after the last step that uses it, so a
graph's peak memory is what is alive at once, not every buffer it ever made."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

import kiln
from kiln.runtime.storage import pool

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
