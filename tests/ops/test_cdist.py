"""cdist between many rows takes PyTorch's product form for p = 2 (``compute_mode``'s default
beyond 25 rows): distances and gradients against PyTorch, batch dims broadcast, the compiled
graph against eager, and the exact-duplicate rows of ``cdist(x, x)`` whose product-form
distance is rounding noise (their pair's gradient must vanish, not blow up)."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from tests.oracle import assert_close, needs_torch, torch

pytestmark = needs_torch

SHAPES = {
    "many-rows": ((30, 8), (40, 8)),
    "batched-broadcast": ((2, 5, 3), (1, 60, 3)),
    "few-rows-differences": ((10, 4), (12, 4)),
}


@pytest.mark.parametrize(
    "mode",
    [
        "use_mm_for_euclid_dist_if_necessary",
        "use_mm_for_euclid_dist",
        "donot_use_mm_for_euclid_dist",
    ],
)
@pytest.mark.parametrize("name", list(SHAPES))
def test_cdist_values_and_gradients_match_pytorch(name, mode):
    rng = np.random.default_rng(3)
    s1, s2 = SHAPES[name]
    a, b = (rng.standard_normal(s).astype(np.float32) for s in (s1, s2))
    results = []
    weights = None
    for lib in (kiln, torch):
        x1, x2 = lib.tensor(a, requires_grad=True), lib.tensor(b, requires_grad=True)
        d = lib.cdist(x1, x2, compute_mode=mode)
        if weights is None:
            weights = rng.standard_normal(tuple(d.shape)).astype(np.float32)
        (d * lib.tensor(weights)).sum().backward()
        results.append((d, x1.grad, x2.grad))
    assert_close(results[0], results[1], rtol=1e-4, atol=1e-4)


def test_cdist_of_a_set_with_itself_has_no_diagonal_blowup():
    x = np.random.default_rng(4).standard_normal((64, 16)).astype(np.float32) * 10
    grads = []
    for lib in (kiln, torch):
        t = lib.tensor(x, requires_grad=True)
        lib.cdist(t, t).sum().backward()
        grads.append(t.grad)
    assert_close(grads[0], grads[1], rtol=1e-3, atol=1e-2)


def test_compiled_product_form_matches_eager():
    x = kiln.tensor(np.random.default_rng(5).standard_normal((40, 5)).astype(np.float32))
    x.requires_grad_(True)
    compiled = kiln.compile(lambda v: (kiln.cdist(v, v * 0.5 + 1) ** 2).sum())
    compiled(x).backward()
    got = x.grad.clone()
    x.grad = None
    (kiln.cdist(x, x * 0.5 + 1) ** 2).sum().backward()
    assert_close(got, x.grad, rtol=1e-4, atol=1e-4)


def test_an_unknown_compute_mode_is_refused():
    for lib in (kiln, torch):
        with pytest.raises(ValueError, match="not a valid value for compute_mode"):
            lib.cdist(lib.ones(2, 3), lib.ones(2, 3), compute_mode="fast")
