"""Pareto, Weibull, InverseGamma, HalfCauchy, Kumaraswamy (transformed base distributions) and
FisherSnedecor against
PyTorch's: moments, mode, entropy, log_prob and cdf/icdf values and their gradients with respect
to the parameters, sample shapes and support, expand."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from tests.oracle import needs_torch, raised_by_both, torch

# name -> (make(lib, params), parameters, points to evaluate, whether cdf/icdf are compared)
CASES = {
    "Pareto": (lambda D, p: D.Pareto(p[0], p[1]), [[1.0, 2.0], [0.8, 3.5]], [1.5, 4.0], True),
    "Weibull": (lambda D, p: D.Weibull(p[0], p[1]), [[1.0, 2.0], [0.7, 3.0]], [0.3, 2.5], True),
    # (its cdf, whose gradient PyTorch gives in the rate only: test_gamma_family_cdfs)
    "InverseGamma": (
        lambda D, p: D.InverseGamma(p[0], p[1]),
        [[0.8, 3.5], [1.0, 2.0]],
        [0.4, 1.3],
        False,
    ),
    "HalfCauchy": (lambda D, p: D.HalfCauchy(p[0]), [[1.0, 2.0]], [0.2, 3.0], True),
    "Kumaraswamy": (
        lambda D, p: D.Kumaraswamy(p[0], p[1]),
        [[0.7, 3.5], [1.5, 2.0]],
        [0.3, 0.9],
        True,
    ),
    "FisherSnedecor": (
        lambda D, p: D.FisherSnedecor(p[0], p[1]),
        [[3.0, 1.5], [6.0, 4.5]],
        [0.4, 2.5],
        False,
    ),
}
# PyTorch's Kumaraswamy.mode takes log1p(-concentration0): NaN for every valid parameter.
# kiln's is the closed form ((a - 1) / (a b - 1)) ** (1 / a) (NaN where a or b < 1)
_DIVERGES = {("Kumaraswamy", "mode")}
_NOT_IN_TORCH = {("FisherSnedecor", "entropy")}  # NotImplementedError in both


def _params(lib, values):
    return [lib.tensor(v, dtype=lib.float64, requires_grad=True) for v in values]


def _np(t):
    return t.detach().numpy()


_QUANTITIES = ["mean", "variance", "mode", "entropy", "log_prob", "cdf", "icdf"]


@needs_torch
@pytest.mark.parametrize(
    ("name", "what"),
    [
        (n, w)
        for n in CASES
        for w in _QUANTITIES
        if (CASES[n][3] or w not in ("cdf", "icdf")) and (n, w) not in _DIVERGES | _NOT_IN_TORCH
    ],
)
def test_values_and_gradients_match_torch(name, what):
    make, values, points, _ = CASES[name]
    results = []
    for lib in (kiln, torch):
        params = _params(lib, values)
        dist = make(lib.distributions, params)
        if what in ("mean", "variance", "mode"):
            out = getattr(dist, what)
        elif what == "entropy":
            out = dist.entropy()
        else:
            at = [0.3, 0.7] if what == "icdf" else points
            out = getattr(dist, what)(lib.tensor(at, dtype=lib.float64))
        finite = np.isfinite(_np(out))
        grads = None
        if finite.all() and out.requires_grad:
            grads = lib.autograd.grad(out.sum(), params, allow_unused=True)
        results.append((_np(out), grads))
    (kv, kg), (tv, tg) = results
    np.testing.assert_allclose(kv, tv, rtol=1e-9, atol=1e-12, equal_nan=True)
    if tg is not None:
        for a, b in zip(kg, tg):
            if b is None:
                assert a is None or not np.any(_np(a))
            else:
                np.testing.assert_allclose(_np(a), b.numpy(), rtol=1e-7, atol=1e-10)


@pytest.mark.parametrize("name", list(CASES))
def test_samples_lie_in_the_support_and_expand_keeps_the_law(name):
    make, values, _, _ = CASES[name]
    kiln.manual_seed(0)
    dist = make(kiln.distributions, _params(kiln, values))
    sample = dist.rsample((1000,))
    assert tuple(sample.shape) == (1000, 2)
    assert bool(dist.support.check(sample).all())
    wide = dist.expand((3, 2))
    assert tuple(wide.batch_shape) == (3, 2)
    point = kiln.tensor(CASES[name][2], dtype=kiln.float64)
    np.testing.assert_allclose(_np(wide.log_prob(point))[1], _np(dist.log_prob(point)))


GAMMA_CDFS = {
    "Gamma": lambda D, c, r: D.Gamma(c, r),
    "Chi2": lambda D, c, r: D.Chi2(2 * c),
    "InverseGamma": lambda D, c, r: D.InverseGamma(c, r),
}


@needs_torch
@pytest.mark.parametrize("name", sorted(GAMMA_CDFS))
def test_gamma_family_cdfs_match_torch_with_the_rate_gradient(name):
    results = []
    for lib in (kiln, torch):
        concentration = lib.tensor([0.8, 3.5, 20.0], dtype=lib.float64)
        rate = lib.tensor([1.0, 2.0, 0.5], dtype=lib.float64, requires_grad=True)
        value = lib.tensor([0.4, 1.3, 45.0], dtype=lib.float64, requires_grad=True)
        out = GAMMA_CDFS[name](lib.distributions, concentration, rate).cdf(value)
        grads = lib.autograd.grad(out.sum(), [rate, value], allow_unused=True)  # Chi2: no rate
        results.append([_np(out), *(None if g is None else _np(g) for g in grads)])
    for k, t in zip(*results):
        assert (k is None) == (t is None)
        if t is not None:
            np.testing.assert_allclose(k, t, rtol=1e-9, atol=1e-14)


@needs_torch
def test_gamma_cdf_refuses_the_concentration_gradient_like_torch():
    def run(lib):
        concentration = lib.tensor([0.8, 3.5], dtype=lib.float64, requires_grad=True)
        lib.distributions.Gamma(concentration, 1.0).cdf(lib.tensor([0.5, 2.0])).sum().backward()

    got, expected = raised_by_both(NotImplementedError, lambda: run(kiln), lambda: run(torch))
    assert str(got) == str(expected)


def test_kumaraswamy_mode_is_the_density_maximum():
    a = kiln.tensor([3.5, 2.0, 0.7], dtype=kiln.float64)
    b = kiln.tensor([2.0, 5.0, 2.0], dtype=kiln.float64)
    dist = kiln.distributions.Kumaraswamy(a, b)
    grid = kiln.linspace(1e-4, 1 - 1e-4, 20001, dtype=kiln.float64)[:, None]
    argmax = grid[dist.log_prob(grid).argmax(0), 0]
    mode = dist.mode
    np.testing.assert_allclose(_np(mode)[:2], _np(argmax)[:2], atol=1e-4)
    assert np.isnan(_np(mode)[2])  # a < 1: the density is unbounded at 0


@needs_torch
@pytest.mark.parametrize(("name", "what"), sorted(_NOT_IN_TORCH))
def test_what_torch_leaves_unimplemented_raises_in_both(name, what):
    make, values, _, _ = CASES[name]
    raised_by_both(
        NotImplementedError,
        lambda: getattr(make(kiln.distributions, _params(kiln, values)), what)(),
        lambda: getattr(make(torch.distributions, _params(torch, values)), what)(),
    )


@needs_torch
def test_stick_breaking_transform_matches_torch_forward_inverse_log_det_and_gradients():
    results = []
    for lib in (kiln, torch):
        transform = lib.distributions.transforms.StickBreakingTransform()
        x = lib.tensor([[0.1, -0.2, 1.5], [0.0, 0.0, 0.0]], dtype=lib.float64, requires_grad=True)
        y = transform(x)
        log_det = transform.log_abs_det_jacobian(x, y)
        weights = lib.arange(4.0, dtype=lib.float64)
        (grad,) = lib.autograd.grad((y * weights).sum() + log_det.sum(), [x])
        dist = lib.distributions.TransformedDistribution(
            lib.distributions.Normal(lib.zeros(3), lib.ones(3)), [transform]
        )
        point = lib.tensor([0.1, 0.2, 0.3, 0.4])
        shapes = (transform.forward_shape((2, 3)), transform.inverse_shape((2, 4)))
        results.append(
            [_np(y), _np(log_det), _np(transform.inv(y)), _np(grad), _np(dist.log_prob(point))]
        )
        results[-1].append(shapes)
        assert bool(lib.distributions.constraints.simplex.check(y).all())
    (*ours, our_shapes), (*theirs, their_shapes) = results
    assert tuple(map(tuple, our_shapes)) == tuple(map(tuple, their_shapes))
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-9)
