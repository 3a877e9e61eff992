"""Helpers the distribution tests share: one quantity of a distribution and its gradients with
respect to the parameters, evaluated in kiln and in PyTorch on the same float64 parameters;
sample moments against analytic ones; rsample gradients against central differences under a
fixed seed."""

from __future__ import annotations

import numpy as np

import kiln
from tests.oracle import to_numpy, torch

PROPERTIES = ("mean", "variance", "stddev", "mode")


def evaluate(lib, make, params, quantity, at=None):
    """``make(lib.distributions, *params)``'s ``quantity`` (a property, ``entropy``, a method
    applied to ``at``, ``kl_divergence`` of the pair ``make`` returns, or a function of the
    distribution) and the gradients of its sum with respect to the parameters."""
    tensors = [lib.tensor(np.asarray(p, dtype=np.float64), requires_grad=True) for p in params]
    dist = make(lib.distributions, *tensors)
    if callable(quantity):
        out = quantity(dist)
    elif quantity in PROPERTIES:
        out = getattr(dist, quantity)
    elif quantity == "entropy":
        out = dist.entropy()
    elif quantity == "kl_divergence":
        out = lib.distributions.kl_divergence(*dist)
    else:
        out = getattr(dist, quantity)(lib.tensor(np.asarray(at, dtype=np.float64)))
    grads = [None] * len(tensors)
    if out.requires_grad and np.isfinite(to_numpy(out)).all():
        grads = lib.autograd.grad(out.sum(), tensors, allow_unused=True)
    return to_numpy(out), [None if g is None else to_numpy(g) for g in grads]


def assert_matches_torch(
    make,
    params,
    quantity,
    at=None,
    rtol=1e-9,
    atol=1e-12,
    grad_rtol=1e-7,
    grad_atol=1e-10,
    project_grads=None,
):
    """Values and parameter gradients equal PyTorch's; a gradient PyTorch does not give
    (no path to that parameter) is absent or zero in kiln. ``project_grads`` maps a
    parameter's index to a function applied to both gradients before comparing (the lower
    triangle of a triangular factor's)."""
    ours, our_grads = evaluate(kiln, make, params, quantity, at)
    theirs, their_grads = evaluate(torch, make, params, quantity, at)
    assert ours.shape == theirs.shape
    np.testing.assert_allclose(ours, theirs, rtol=rtol, atol=atol, equal_nan=True)
    for index, (ours_g, theirs_g) in enumerate(zip(our_grads, their_grads)):
        if theirs_g is None:
            assert ours_g is None or not np.any(ours_g), f"gradient of parameter {index}"
        else:
            assert ours_g is not None, f"no gradient for parameter {index}"
            if project_grads and index in project_grads:
                ours_g, theirs_g = project_grads[index](ours_g), project_grads[index](theirs_g)
            np.testing.assert_allclose(
                ours_g, theirs_g, rtol=grad_rtol, atol=grad_atol, err_msg=f"parameter {index}"
            )


def assert_moments(samples, mean, variance, sigmas: float = 5.0, variance_rtol: float = 0.1):
    """The sample mean within ``sigmas`` standard errors of ``mean``, the sample variance
    within ``variance_rtol`` of ``variance`` (both analytic, over the leading sample dim)."""
    samples = to_numpy(samples).astype(np.float64)
    mean, variance = to_numpy(mean), to_numpy(variance)
    n = samples.shape[0]
    standard_error = np.sqrt(variance / n)
    assert np.all(np.abs(samples.mean(0) - mean) <= sigmas * standard_error + 1e-12), (
        samples.mean(0),
        mean,
    )
    np.testing.assert_allclose(samples.var(0), variance, rtol=variance_rtol)


def assert_rsample_gradient_is_the_derivative(make, params, shape=(5,), eps=1e-6, rtol=1e-5):
    """The gradient of sum(rsample * weights) equals its central difference in each parameter
    entry, the noise held fixed by reseeding (so the sample is a function of the parameters)."""
    params = [np.asarray(p, dtype=np.float64) for p in params]

    def draw(values, requires_grad=False):
        kiln.manual_seed(1234)
        tensors = [kiln.tensor(v, requires_grad=requires_grad) for v in values]
        return make(kiln.distributions, *tensors).rsample(shape), tensors

    sample, tensors = draw(params, requires_grad=True)
    weights = kiln.tensor(np.linspace(0.5, 1.5, sample.numel()).reshape(tuple(sample.shape)))
    grads = kiln.autograd.grad((sample * weights).sum(), tensors, allow_unused=True)
    for index, value in enumerate(params):
        numeric = np.zeros_like(value)
        for position in np.ndindex(value.shape):
            up, down = [p.copy() for p in params], [p.copy() for p in params]
            up[index][position] += eps
            down[index][position] -= eps
            difference = (draw(up)[0] - draw(down)[0]) * weights
            numeric[position] = float(difference.sum()) / (2 * eps)
        analytic = np.zeros_like(value) if grads[index] is None else to_numpy(grads[index])
        np.testing.assert_allclose(analytic, numeric, rtol=rtol, atol=1e-6)
