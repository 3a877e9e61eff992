"""Statistics, running extremes, quantiles, differences and tensor-assembly methods (in kiln/ops:
shape/assembly.py, reductions/differences.py, reductions/statistics.py, core/tensor_methods.py)
under ``kiln.compile``: whole user functions captured by dynamo, compiled by ``aot_eager`` and
``inductor``, give eager's values and gradients; ops that read data (the Python escapes) fall
back to eager and still give eager's values."""

from __future__ import annotations

import numpy as np
import pytest

import kiln

BACKENDS = ["aot_eager", "inductor"]


def _inputs(*shapes, seed=0, requires_grad=True):
    rng = np.random.default_rng(seed)
    return [
        kiln.tensor(rng.uniform(-2, 2, size=s), dtype=kiln.float32).requires_grad_(requires_grad)
        for s in shapes
    ]


def _check(fn, backend, *shapes):
    """Run ``fn`` eagerly and compiled on equal inputs; compare outputs and input gradients."""
    eager_inputs, compiled_inputs = _inputs(*shapes), _inputs(*shapes)
    expected = fn(*eager_inputs)
    got = kiln.compile(fn, backend=backend)(*compiled_inputs)
    expected = expected if isinstance(expected, tuple) else (expected,)
    got = got if isinstance(got, tuple) else (got,)
    for g, e in zip(got, expected, strict=True):
        assert g.dtype is e.dtype and tuple(g.shape) == tuple(e.shape)
        np.testing.assert_allclose(g.detach().numpy(), e.detach().numpy(), rtol=2e-5, atol=2e-5)
    floats = [e for e in expected if e.dtype.is_floating_point]
    sum(e.sum() for e in floats).backward()
    sum(g.sum() for g in got if g.dtype.is_floating_point).backward()
    for g, e in zip(compiled_inputs, eager_inputs):
        np.testing.assert_allclose(g.grad.numpy(), e.grad.numpy(), rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_running_extremes_and_quantiles_compile(backend):
    def fn(x):
        values, indices = kiln.cummax(x, 1)
        low = x.cummin(0).values
        q = kiln.quantile(x, kiln.tensor([0.25, 0.75]), dim=1, keepdim=True)
        return values * 2 + low, indices, q.sum(0)

    _check(fn, backend, (4, 6))


@pytest.mark.parametrize("backend", BACKENDS)
def test_differences_and_statistics_compile(backend):
    def fn(x, w):
        slopes = kiln.gradient(x, spacing=0.5, dim=1, edge_order=2)[0]
        area = kiln.trapezoid(x, dx=0.25)
        steps = kiln.diff(x, n=2, dim=0)
        return kiln.cov(x) + kiln.corrcoef(x), slopes, area, steps, kiln.renorm(w, 2, 0, 1.0)

    _check(fn, backend, (3, 5), (4, 3))


@pytest.mark.parametrize("backend", BACKENDS)
def test_assembly_and_inplace_methods_compile(backend):
    def fn(a, b, m):
        blocks = kiln.block_diag(a, b)
        out = m.clone().addmm_(a, b.t(), beta=0.5, alpha=2.0)
        out.fill_diagonal_(1.0)
        return blocks, out, kiln.diagflat(a[0], 1), kiln.cartesian_prod(a[0], b[1])

    _check(fn, backend, (2, 3), (2, 3), (2, 2))


@pytest.mark.parametrize("backend", BACKENDS)
def test_python_escapes_fall_back_to_eager_under_compile(backend):
    def fn(x):
        y = (x * 2).apply_(lambda v: v + 1)
        return y.sum() + x.sum()

    x = _inputs((3,), requires_grad=False)[0]
    expected = fn(x)
    got = kiln.compile(fn, backend=backend)(x)
    np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-6)


def test_cummax_compiles_to_one_graph():
    counts = []

    def count_graphs(gm, example_inputs):
        counts.append(gm)
        return gm

    x = _inputs((3, 5), requires_grad=False)[0]
    compiled = kiln.compile(lambda t: kiln.cummax(t, 1).indices + 1, backend=count_graphs)
    np.testing.assert_array_equal(compiled(x).numpy(), kiln.cummax(x, 1).indices.numpy() + 1)
    assert len(counts) == 1
