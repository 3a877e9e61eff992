"""Gamma-family rsample differentiable in the concentration (implicit reparameterization, as
PyTorch's): the slope dx/dalpha at a fixed quantile against the derivative of the incomplete
gamma function at 40 digits and against PyTorch's _standard_gamma_grad, in the tails where that
function underflows too; and the mean gradient of samples against the derivative of the
analytic mean for Gamma, Chi2, Beta, Dirichlet, Wishart's df and StudentT's second moment."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.distributions.continuous import _gamma_sample_slope
from tests.oracle import needs_torch, to_numpy, torch

F64 = kiln.float64


# (alpha, x) from far in the lower tail to far in the upper one
SLOPE_POINTS = [
    (alpha, alpha * factor + shift)
    for alpha in (0.05, 0.3, 1.0, 3.0, 20.0, 150.0)
    for factor, shift in ((1e-3, 0.0), (0.2, 0.0), (1.0, 0.0), (2.0, 0.0), (1.0, 12.0))
]
# where the incomplete gamma function underflows (P far below the mode, Q far above it)
FAR_TAIL_POINTS = [(150.0, 0.15), (5.0, 1e-300), (0.3, 800.0), (3.0, 900.0)]


def _implicit_slopes(points):
    """-(dP/dalpha) / density at 40 digits (mpmath, which comes with PyTorch), the derivative
    taken on the upper tail above the mean so it keeps its digits."""
    import mpmath

    mpmath.mp.dps = 40
    slopes = []
    for alpha, x in points:
        if x > alpha:
            upper = lambda a, x=x: mpmath.gammainc(a, x, mpmath.inf, regularized=True)  # noqa: E731
            d_cdf = -mpmath.diff(upper, alpha)
        else:
            lower = lambda a, x=x: mpmath.gammainc(a, 0, x, regularized=True)  # noqa: E731
            d_cdf = mpmath.diff(lower, alpha)
        density = mpmath.mpf(x) ** (alpha - 1) * mpmath.exp(-x) / mpmath.gamma(alpha)
        slopes.append(float(-d_cdf / density))
    return slopes


def _kiln_slopes(points):
    alpha, x = (np.array(column, dtype=np.float64) for column in zip(*points))
    return to_numpy(_gamma_sample_slope(kiln.tensor(alpha), kiln.tensor(x)))


@needs_torch
def test_the_sample_slope_is_the_implicit_derivative():
    """A central difference of the float64 incomplete gamma function is good to ~1e-6 (its
    rounding over the step); PyTorch's _standard_gamma_grad is an approximation good to a few
    1e-3."""
    ours = _kiln_slopes(SLOPE_POINTS)
    np.testing.assert_allclose(ours, _implicit_slopes(SLOPE_POINTS), rtol=3e-6)
    alpha, x = (torch.tensor(column, dtype=torch.float64) for column in zip(*SLOPE_POINTS))
    np.testing.assert_allclose(ours, torch._standard_gamma_grad(alpha, x).numpy(), rtol=5e-3)


@needs_torch
def test_the_slope_in_the_underflowing_tails_is_finite_and_close():
    ours = _kiln_slopes(FAR_TAIL_POINTS)
    np.testing.assert_allclose(ours, _implicit_slopes(FAR_TAIL_POINTS), rtol=1e-5)


def _mean_gradient(make, params, n=20000, reduce=lambda s: s):
    kiln.manual_seed(0)
    tensors = [kiln.tensor(np.asarray(p, dtype=np.float64), requires_grad=True) for p in params]
    samples = make(kiln.distributions, *tensors).rsample((n,))
    grads = kiln.autograd.grad(reduce(samples).sum() / n, tensors)
    return [to_numpy(g) for g in grads]


def _analytic_gradient(make, params, reduce=lambda s: s):
    tensors = [kiln.tensor(np.asarray(p, dtype=np.float64), requires_grad=True) for p in params]
    mean = reduce(make(kiln.distributions, *tensors).mean)
    return [to_numpy(g) for g in kiln.autograd.grad(mean.sum(), tensors)]


CASES = {
    "Gamma": (lambda D, c, r: D.Gamma(c, r), [[0.3, 2.0, 20.0], [2.0, 0.5, 1.0]], None),
    "Chi2": (lambda D, df: D.Chi2(df), [[0.7, 3.0, 10.0]], None),
    "Beta": (lambda D, a, b: D.Beta(a, b), [[0.5, 2.0, 6.0], [1.5, 0.7, 3.0]], None),
    "Dirichlet": (lambda D, c: D.Dirichlet(c), [[[0.5, 2.0, 1.0], [3.0, 0.4, 1.2]]], None),
    "Wishart-df": (
        lambda D, df: D.Wishart(
            df, covariance_matrix=kiln.tensor([[2.0, 0.3], [0.3, 1.0]], dtype=F64)
        ),
        [[3.5, 6.0]],
        lambda s: s.diagonal(dim1=-2, dim2=-1),
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_mean_of_sample_gradients_is_the_gradient_of_the_mean(name):
    make, params, reduce = CASES[name]
    reduce = reduce or (lambda s: s)
    sampled = _mean_gradient(make, params, reduce=reduce)
    analytic = _analytic_gradient(make, params, reduce=reduce)
    for ours, expected in zip(sampled, analytic):
        np.testing.assert_allclose(ours, expected, rtol=0.05, atol=0.01)


def test_student_t_variance_gradient_reaches_the_degrees_of_freedom():
    """E[x^2] = scale^2 df / (df - 2): the squared samples' gradient in df goes through the
    chi-square draw's concentration."""
    kiln.manual_seed(0)
    df = kiln.tensor([7.0, 12.0], dtype=F64, requires_grad=True)
    samples = kiln.distributions.StudentT(df).rsample((40000,))
    (grad,) = kiln.autograd.grad(samples.pow(2).mean(0).sum(), [df])
    expected = -2 / (to_numpy(df) - 2) ** 2
    np.testing.assert_allclose(to_numpy(grad), expected, rtol=0.1)


def test_no_gradient_is_built_when_the_concentration_needs_none():
    sample = kiln.distributions.Gamma(kiln.tensor([2.0]), kiln.tensor([1.0])).rsample((3,))
    assert not sample.requires_grad
