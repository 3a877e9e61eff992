"""1-d pooling runs, as in PyTorch, as 2-d pooling of ``input.unsqueeze(-2)`` squeezed after:
a transposed (N, L, C) input is a channels-last one-row image, so its pooled result is laid
out channels-last too, eagerly and compiled (max pooling without indices keeps its own
row-major loop unless a gradient is recorded). Strides are compared in dims longer than 1, as
``view`` and the fuzzer read them."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from tests.oracle import needs_torch, torch

pytestmark = needs_torch


def _pools(lib) -> dict:
    F = lib.nn.functional
    return {
        "avg_pool1d": lambda x: F.avg_pool1d(x, 2),
        "avg_pool1d-padded-ceil": lambda x: F.avg_pool1d(x, 3, 2, 1, ceil_mode=True),
        "lp_pool1d": lambda x: F.lp_pool1d(x, 2, 2),
        "max_pool1d": lambda x: F.max_pool1d(x, 2),
        "max_pool1d-dilated": lambda x: F.max_pool1d(x, 2, 1, 1, dilation=2),
        "max_pool1d-indices": lambda x: F.max_pool1d(x, 2, return_indices=True),
        "adaptive_avg_pool1d": lambda x: F.adaptive_avg_pool1d(x, 3),
        "adaptive_avg_pool1d-equal-windows": lambda x: F.adaptive_avg_pool1d(x, 2),
        "adaptive_avg_pool1d-global": lambda x: F.adaptive_avg_pool1d(x, 1),
        "adaptive_max_pool1d": lambda x: F.adaptive_max_pool1d(x, 3),
        "adaptive_max_pool1d-indices": lambda x: F.adaptive_max_pool1d(x, 3, return_indices=True),
    }


# (stored shape, permutation): the pooled input is ``tensor(stored).permute(permutation)``
LAYOUTS = {
    "row-major": ((2, 3, 4), (0, 1, 2)),
    "transposed": ((2, 4, 3), (0, 2, 1)),
    "transposed-one-channel": ((2, 4, 1), (0, 2, 1)),
    "batch-inside": ((3, 2, 4), (1, 0, 2)),
    "unbatched-transposed": ((4, 3), (1, 0)),
}


def _input(lib, layout: str, requires_grad: bool):
    stored, permutation = LAYOUTS[layout]
    data = np.random.default_rng(0).standard_normal(stored).astype(np.float32)
    leaf = lib.tensor(data, requires_grad=requires_grad)
    return leaf.permute(permutation)


def _layout(t) -> list:
    return [(d, s) for d, (n, s) in enumerate(zip(t.shape, t.stride())) if n > 1]


def _assert_like_torch(got, expected) -> None:
    got = list(got) if isinstance(got, tuple) else [got]
    expected = list(expected) if isinstance(expected, tuple) else [expected]
    assert [tuple(g.shape) for g in got] == [tuple(e.shape) for e in expected]
    assert [_layout(g) for g in got] == [_layout(e) for e in expected]
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g.detach().numpy(), e.detach().numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("requires_grad", [False, True], ids=["no-grad", "grad"])
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("pool", sorted(_pools(kiln)))
def test_1d_pool_results_are_laid_out_as_torch(pool, layout, requires_grad):
    got = _pools(kiln)[pool](_input(kiln, layout, requires_grad))
    expected = _pools(torch)[pool](_input(torch, layout, requires_grad))
    _assert_like_torch(got, expected)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("pool", sorted(_pools(kiln)))
def test_compiled_1d_pool_of_a_transposed_input_is_laid_out_as_torch(pool, backend):
    compiled = kiln.compile(_pools(kiln)[pool], backend=backend, dynamic=False)
    got = compiled(_input(kiln, "transposed", requires_grad=True))
    expected = _pools(torch)[pool](_input(torch, "transposed", requires_grad=True))
    _assert_like_torch(got, expected)


@pytest.mark.parametrize("pool", ["avg_pool1d", "max_pool1d-indices", "adaptive_max_pool1d"])
def test_1d_pool_gradient_node_is_torchs_squeeze(pool):
    got = _pools(kiln)[pool](_input(kiln, "transposed", requires_grad=True))
    expected = _pools(torch)[pool](_input(torch, "transposed", requires_grad=True))
    got, expected = (got[0], expected[0]) if isinstance(got, tuple) else (got, expected)
    assert type(got.grad_fn).__name__ == type(expected.grad_fn).__name__
    (got_inner,) = [type(f).__name__ for f, _ in got.grad_fn.next_functions if f is not None]
    (expected_inner,) = [type(f).__name__ for f, _ in expected.grad_fn.next_functions]
    assert got_inner == expected_inner


def test_1d_pool_gradient_matches_torch():
    x = _input(kiln, "transposed", requires_grad=True)
    tx = _input(torch, "transposed", requires_grad=True)
    for name in ("avg_pool1d", "max_pool1d", "adaptive_avg_pool1d", "adaptive_max_pool1d"):
        (g,) = kiln.autograd.grad(_pools(kiln)[name](x).sum(), x)
        (e,) = torch.autograd.grad(_pools(torch)[name](tx).sum(), tx)
        np.testing.assert_allclose(g.numpy(), e.numpy(), rtol=1e-5, atol=1e-6)
