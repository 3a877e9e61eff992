"""kiln.distributions against torch.distributions: densities, moments, entropies, cdfs,
gradients of log_prob with respect to the parameters, KL divergences, sample shapes and sample
statistics, validation errors, and capture under kiln.compile."""

from __future__ import annotations

import math

import numpy as np
import pytest

import kiln
import kiln.distributions as KD
from tests.oracle import needs_torch as requires_torch


def _t(lib, a, grad=False):
    t = lib.tensor(np.asarray(a, dtype=np.float64))
    return t.requires_grad_() if grad else t


def _np(t):
    return t.detach().cpu().numpy() if hasattr(t, "detach") else np.asarray(t)


# name, constructor (lib, params) -> distribution, parameter arrays, a value array inside support
CASES = [
    ("Normal", lambda D, p: D.Normal(p[0], p[1]), [[0.3, -1.0, 2.0], [0.5, 1.5, 2.0]], [0.1, -2.0, 3.0]),
    ("LogNormal", lambda D, p: D.LogNormal(p[0], p[1]), [[0.3, -1.0, 2.0], [0.5, 1.5, 2.0]], [0.7, 0.2, 3.0]),
    ("Laplace", lambda D, p: D.Laplace(p[0], p[1]), [[0.3, -1.0, 2.0], [0.5, 1.5, 2.0]], [0.1, -2.0, 3.0]),
    ("Cauchy", lambda D, p: D.Cauchy(p[0], p[1]), [[0.3, -1.0, 2.0], [0.5, 1.5, 2.0]], [0.1, -2.0, 3.0]),
    ("Gumbel", lambda D, p: D.Gumbel(p[0], p[1]), [[0.3, -1.0, 2.0], [0.5, 1.5, 2.0]], [0.1, -2.0, 3.0]),
    ("HalfNormal", lambda D, p: D.HalfNormal(p[0]), [[0.5, 1.5, 2.0]], [0.1, 2.0, 3.0]),
    ("Uniform", lambda D, p: D.Uniform(p[0], p[1]), [[0.0, -1.0, 2.0], [0.5, 1.5, 4.0]], [0.1, 0.2, 3.0]),
    ("Exponential", lambda D, p: D.Exponential(p[0]), [[0.5, 1.5, 2.0]], [0.1, 2.0, 3.0]),
    ("Gamma", lambda D, p: D.Gamma(p[0], p[1]), [[0.5, 1.5, 3.0], [1.0, 2.0, 0.5]], [0.1, 2.0, 3.0]),
    ("Chi2", lambda D, p: D.Chi2(p[0]), [[1.5, 3.0, 5.0]], [0.1, 2.0, 3.0]),
    ("Beta", lambda D, p: D.Beta(p[0], p[1]), [[0.5, 1.5, 3.0], [1.0, 2.0, 0.7]], [0.1, 0.5, 0.9]),
    ("StudentT", lambda D, p: D.StudentT(p[0], p[1], p[2]), [[3.0, 5.0, 2.5], [0.1, -1.0, 0.0], [1.0, 2.0, 0.5]], [0.1, -2.0, 3.0]),
    ("Bernoulli", lambda D, p: D.Bernoulli(probs=p[0]), [[0.2, 0.5, 0.9]], [1.0, 0.0, 1.0]),
    ("Bernoulli-logits", lambda D, p: D.Bernoulli(logits=p[0]), [[-1.0, 0.3, 2.0]], [1.0, 0.0, 1.0]),
    ("Geometric", lambda D, p: D.Geometric(probs=p[0]), [[0.2, 0.5, 0.9]], [1.0, 0.0, 4.0]),
    ("NegativeBinomial", lambda D, p: D.NegativeBinomial(p[0], probs=p[1]), [[2.0, 0.5, 3.5], [0.2, 0.5, 0.7]], [1.0, 0.0, 4.0]),
    ("NegativeBinomial-logits", lambda D, p: D.NegativeBinomial(p[0], logits=p[1]), [[2.0, 0.0, 3.5], [-1.0, 0.3, 0.5]], [1.0, 0.0, 4.0]),
    ("Poisson", lambda D, p: D.Poisson(p[0]), [[0.5, 2.0, 7.0]], [1.0, 0.0, 4.0]),
    ("Binomial", lambda D, p: D.Binomial(5, probs=p[0]), [[0.2, 0.5, 0.9]], [1.0, 0.0, 5.0]),
    ("Binomial-logits", lambda D, p: D.Binomial(4, logits=p[0]), [[-1.0, 0.3, 2.0]], [1.0, 0.0, 4.0]),
    ("Categorical", lambda D, p: D.Categorical(probs=p[0]), [[[0.2, 0.3, 0.5], [0.6, 0.1, 0.3]]], [2.0, 0.0]),
    ("Categorical-logits", lambda D, p: D.Categorical(logits=p[0]), [[[0.2, -1.3, 0.5], [2.0, 0.1, 0.3]]], [1.0, 2.0]),
    ("OneHotCategorical", lambda D, p: D.OneHotCategorical(logits=p[0]), [[[0.2, -1.3, 0.5], [2.0, 0.1, 0.3]]], [[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]]),
    ("Dirichlet", lambda D, p: D.Dirichlet(p[0]), [[[0.5, 1.5, 3.0], [2.0, 2.0, 1.0]]], [[0.2, 0.3, 0.5], [0.6, 0.1, 0.3]]),
    ("MultivariateNormal-cov", lambda D, p: D.MultivariateNormal(p[0], covariance_matrix=p[1]), [[0.1, -0.5], [[2.0, 0.3], [0.3, 1.0]]], [[0.5, 0.2], [-1.0, 2.0]]),
    ("MultivariateNormal-tril", lambda D, p: D.MultivariateNormal(p[0], scale_tril=p[1]), [[0.1, -0.5], [[1.5, 0.0], [0.3, 0.8]]], [[0.5, 0.2], [-1.0, 2.0]]),
    ("MultivariateNormal-prec", lambda D, p: D.MultivariateNormal(p[0], precision_matrix=p[1]), [[0.1, -0.5], [[2.0, 0.3], [0.3, 1.0]]], [[0.5, 0.2], [-1.0, 2.0]]),
    ("LowRankMultivariateNormal", lambda D, p: D.LowRankMultivariateNormal(p[0], p[1], p[2]), [[0.1, -0.5, 0.3], [[1.0, 0.2], [0.3, -0.5], [0.0, 0.4]], [0.5, 1.5, 0.8]], [[0.5, 0.2, 0.1], [-1.0, 2.0, 0.0]]),
    ("Independent-Normal", lambda D, p: D.Independent(D.Normal(p[0], p[1]), 1), [[0.3, -1.0, 2.0], [0.5, 1.5, 2.0]], [0.1, -2.0, 3.0]),
]  # fmt: skip
_IDS = [c[0] for c in CASES]
DISCRETE = {"Bernoulli", "Bernoulli-logits", "Geometric", "NegativeBinomial", "NegativeBinomial-logits", "Poisson", "Binomial", "Binomial-logits", "Categorical", "Categorical-logits", "OneHotCategorical"}  # fmt: skip


def _both(case, grad=False):
    name, make, params, value = case
    import torch

    kp = [_t(kiln, p, grad) for p in params]
    tp = [_t(torch, p, grad) for p in params]
    return (make(KD, kp), kp, _t(kiln, value)), (
        make(torch.distributions, tp),
        tp,
        _t(torch, value),
    )


def _close(a, b, rtol=1e-9, atol=1e-12):
    np.testing.assert_allclose(_np(a), _np(b), rtol=rtol, atol=atol, equal_nan=True)


@requires_torch
@pytest.mark.parametrize("case", CASES, ids=_IDS)
def test_log_prob_and_its_gradients_match_torch(case):
    (kd, kp, kv), (td, tp, tv) = _both(case, grad=True)
    kl, tl = kd.log_prob(kv), td.log_prob(tv)
    _close(kl, tl)
    assert tuple(kd.batch_shape) == tuple(td.batch_shape)
    assert tuple(kd.event_shape) == tuple(td.event_shape)
    kg = kiln.autograd.grad(kl.sum(), kp, allow_unused=True)
    tg = torch_grad(tl.sum(), tp)
    for a, b in zip(kg, tg):
        if b is None:
            continue
        _close(a, b, rtol=1e-7, atol=1e-10)


def torch_grad(out, params):
    import torch

    return torch.autograd.grad(out, params, allow_unused=True)


@requires_torch
@pytest.mark.parametrize("case", CASES, ids=_IDS)
def test_moments_and_entropy_match_torch(case):
    (kd, _, _), (td, _, _) = _both(case)
    for attr in ("mean", "variance", "stddev", "mode"):
        try:
            expected = getattr(td, attr)
        except NotImplementedError:
            continue
        _close(getattr(kd, attr), expected, rtol=1e-9)
    try:
        expected = td.entropy()
    except NotImplementedError:
        return
    _close(kd.entropy(), expected, rtol=1e-7, atol=1e-10)


CDF_CASES = [c for c in CASES if c[0] in {"Normal", "LogNormal", "Laplace", "Cauchy", "Gumbel", "HalfNormal", "Uniform", "Exponential"}]  # fmt: skip


@requires_torch
@pytest.mark.parametrize("case", CDF_CASES, ids=[c[0] for c in CDF_CASES])
def test_cdf_and_icdf_match_torch(case):
    (kd, _, kv), (td, _, tv) = _both(case)
    _close(kd.cdf(kv), td.cdf(tv), rtol=1e-8)
    q = [0.1, 0.5, 0.8]
    try:
        expected = td.icdf(_t(__import__("torch"), q))
    except NotImplementedError:
        return
    _close(kd.icdf(_t(kiln, q)), expected, rtol=1e-8)


@pytest.mark.parametrize("case", CASES, ids=_IDS)
def test_sample_shapes_and_support(case):
    name, make, params, _ = case
    d = make(KD, [_t(kiln, p) for p in params])
    for shape in ((), (4,), (2, 3)):
        s = d.sample(shape)
        assert tuple(s.shape) == tuple(shape) + tuple(d.batch_shape) + tuple(d.event_shape)
        if not (name.startswith("Independent") or name.startswith("Multivariate")):
            assert bool(d.support.check(s).all()), name
    if d.has_rsample:
        assert tuple(d.rsample((5,)).shape) == (5,) + tuple(d.batch_shape) + tuple(d.event_shape)


@pytest.mark.parametrize("case", CASES, ids=_IDS)
def test_sample_statistics_match_the_mean(case):
    name, make, params, _ = case
    if name in ("Cauchy",):
        return  # no mean
    kiln.manual_seed(0)
    d = make(KD, [_t(kiln, p) for p in params])
    s = d.sample((20000,))
    mean = d.mean
    sd = (
        d.stddev
        if name not in DISCRETE
        or name.startswith(("Poisson", "Binomial", "Geometric", "Bernoulli", "NegativeBinomial"))
        else None
    )
    got = _np(s.double().mean(0))
    want = _np(mean)
    if sd is None:
        np.testing.assert_allclose(
            got, _np(d.probs) if name.startswith("OneHot") else got, atol=0.03
        )
        return
    tol = 5 * _np(sd) / math.sqrt(20000) + 1e-3
    assert np.all(np.abs(got - want) <= tol), (name, got, want)


def test_categorical_sample_frequencies():
    kiln.manual_seed(1)
    probs = kiln.tensor([0.1, 0.6, 0.3])
    s = KD.Categorical(probs).sample((30000,))
    freq = np.bincount(s.numpy(), minlength=3) / 30000
    np.testing.assert_allclose(freq, probs.numpy(), atol=0.02)


def test_sampling_is_reproducible_under_manual_seed():
    for make in (lambda: KD.Normal(0.0, 1.0), lambda: KD.Gamma(2.0, 1.0), lambda: KD.Poisson(3.0)):
        kiln.manual_seed(7)
        a = make().sample((5,))
        kiln.manual_seed(7)
        b = make().sample((5,))
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_rsample_gradients_are_the_reparameterization():
    loc = kiln.tensor([0.5, -1.0], requires_grad=True)
    scale = kiln.tensor([2.0, 0.5], requires_grad=True)
    kiln.manual_seed(3)
    s = KD.Normal(loc, scale).rsample((1000,))
    gl, gs = kiln.autograd.grad(s.sum(), [loc, scale])
    eps = (s - loc) / scale
    np.testing.assert_allclose(gl.numpy(), [1000.0, 1000.0])
    np.testing.assert_allclose(gs.numpy(), eps.sum(0).detach().numpy(), rtol=1e-5)
    # a tanh-squashed Gaussian (SAC's policy) differentiates through the transform too
    d = KD.TransformedDistribution(KD.Normal(loc, scale), [KD.TanhTransform(cache_size=1)])
    a = d.rsample()
    lp = d.log_prob(a)
    g = kiln.autograd.grad(lp.sum() + a.sum(), [loc, scale])
    assert all(bool(kiln.isfinite(t).all()) for t in g)


KL_PAIRS = [
    ("Normal", lambda D, p: D.Normal(p[0], p[1]), [[0.3, -1.0], [0.5, 1.5]], [[0.0, 1.0], [1.0, 0.7]]),
    ("LogNormal", lambda D, p: D.LogNormal(p[0], p[1]), [[0.3, -1.0], [0.5, 1.5]], [[0.0, 1.0], [1.0, 0.7]]),
    ("Bernoulli", lambda D, p: D.Bernoulli(probs=p[0]), [[0.3, 0.9]], [[0.5, 0.2]]),
    ("Categorical", lambda D, p: D.Categorical(logits=p[0]), [[[0.3, 0.9, -1.0]]], [[[0.5, 0.2, 0.1]]]),
    ("OneHotCategorical", lambda D, p: D.OneHotCategorical(probs=p[0]), [[[0.3, 0.5, 0.2]]], [[[0.1, 0.2, 0.7]]]),
    ("Uniform", lambda D, p: D.Uniform(p[0], p[1]), [[0.0, 1.0], [1.0, 2.0]], [[-1.0, 1.5], [2.0, 3.0]]),
    ("Exponential", lambda D, p: D.Exponential(p[0]), [[0.5, 2.0]], [[1.0, 0.3]]),
    ("Laplace", lambda D, p: D.Laplace(p[0], p[1]), [[0.3, -1.0], [0.5, 1.5]], [[0.0, 1.0], [1.0, 0.7]]),
    ("Gumbel", lambda D, p: D.Gumbel(p[0], p[1]), [[0.3, -1.0], [0.5, 1.5]], [[0.0, 1.0], [1.0, 0.7]]),
    ("Gamma", lambda D, p: D.Gamma(p[0], p[1]), [[0.5, 3.0], [1.0, 2.0]], [[2.0, 1.0], [0.5, 1.5]]),
    ("Beta", lambda D, p: D.Beta(p[0], p[1]), [[0.5, 3.0], [1.0, 2.0]], [[2.0, 1.0], [0.5, 1.5]]),
    ("Dirichlet", lambda D, p: D.Dirichlet(p[0]), [[[0.5, 3.0, 1.0]]], [[[2.0, 1.0, 1.0]]]),
    ("Poisson", lambda D, p: D.Poisson(p[0]), [[0.5, 3.0]], [[2.0, 1.0]]),
    ("MultivariateNormal", lambda D, p: D.MultivariateNormal(p[0], scale_tril=p[1]), [[0.1, -0.5], [[1.5, 0.0], [0.3, 0.8]]], [[0.0, 0.2], [[1.0, 0.0], [-0.4, 1.2]]]),
    ("Independent", lambda D, p: D.Independent(D.Normal(p[0], p[1]), 1), [[0.3, -1.0], [0.5, 1.5]], [[0.0, 1.0], [1.0, 0.7]]),
    ("HalfNormal", lambda D, p: D.HalfNormal(p[0]), [[1.0, 2.0]], [[2.0, 0.5]]),
    ("Cauchy", lambda D, p: D.Cauchy(p[0], p[1]), [[0.0, 1.0], [1.0, 2.0]], [[1.0, -1.0], [2.0, 0.5]]),
    ("Geometric", lambda D, p: D.Geometric(p[0]), [[0.3, 0.7]], [[0.5, 0.2]]),
    ("Binomial", lambda D, p: D.Binomial(5, p[0]), [[0.3, 0.6]], [[0.5, 0.4]]),
]  # fmt: skip

# (name, p's maker, q's maker, p's parameters, q's parameters): pairs of different families
KL_CROSS_PAIRS = [
    ("Uniform-Normal", lambda D, p: D.Uniform(p[0], p[1]), lambda D, p: D.Normal(p[0], p[1]), [[0.0, -1.0], [1.0, 2.0]], [[0.0, 1.0], [1.0, 3.0]]),
    ("Normal-Laplace", lambda D, p: D.Normal(p[0], p[1]), lambda D, p: D.Laplace(p[0], p[1]), [[0.0, 1.0], [1.0, 0.5]], [[0.0, -1.0], [1.0, 2.0]]),
    ("Exponential-Normal", lambda D, p: D.Exponential(p[0]), lambda D, p: D.Normal(p[0], p[1]), [[1.0, 3.0]], [[0.0, 1.0], [1.0, 2.0]]),
    ("Exponential-Gamma", lambda D, p: D.Exponential(p[0]), lambda D, p: D.Gamma(p[0], p[1]), [[1.0, 3.0]], [[2.0, 0.5], [1.0, 3.0]]),
    ("Gamma-Exponential", lambda D, p: D.Gamma(p[0], p[1]), lambda D, p: D.Exponential(p[0]), [[2.0, 0.5], [1.0, 3.0]], [[1.0, 3.0]]),
]  # fmt: skip


@requires_torch
@pytest.mark.parametrize(
    "pair",
    KL_PAIRS + KL_CROSS_PAIRS,
    ids=[p[0] for p in KL_PAIRS + KL_CROSS_PAIRS],
)
def test_kl_divergence_and_its_gradient_match_torch(pair):
    import torch

    if len(pair) == 4:
        _, make, pp, qp = pair
        make_q = make
    else:
        _, make, make_q, pp, qp = pair
    kpp = [_t(kiln, a, True) for a in pp]
    tpp = [_t(torch, a, True) for a in pp]
    k = KD.kl_divergence(make(KD, kpp), make_q(KD, [_t(kiln, a) for a in qp]))
    t = torch.distributions.kl_divergence(
        make(torch.distributions, tpp), make_q(torch.distributions, [_t(torch, a) for a in qp])
    )
    _close(k, t, rtol=1e-8)
    for a, b in zip(kiln.autograd.grad(k.sum(), kpp), torch.autograd.grad(t.sum(), tpp)):
        _close(a, b, rtol=1e-6, atol=1e-10)


def test_kl_dispatch_and_registration():
    with pytest.raises(NotImplementedError, match="Normal.*StudentT"):
        KD.kl_divergence(KD.Normal(0.0, 1.0), KD.StudentT(3.0))
    # two exponential families with no closed form between them reach the Bregman fallback
    with pytest.raises(NotImplementedError, match="different exponential families"):
        KD.kl_divergence(KD.Poisson(1.0), KD.Normal(0.0, 1.0))

    class MyNormal(KD.Normal):
        pass

    # subclasses use the closest registered pair until a more specific one is registered
    assert float(KD.kl_divergence(MyNormal(0.0, 1.0), KD.Normal(0.0, 1.0))) == 0.0

    @KD.register_kl(MyNormal, KD.Normal)
    def _kl(p, q):
        return kiln.tensor(42.0)

    assert float(KD.kl_divergence(MyNormal(0.0, 1.0), KD.Normal(0.0, 1.0))) == 42.0


@requires_torch
@pytest.mark.parametrize(
    "make",
    [
        lambda L: L.distributions.Normal(L.tensor([0.5]), L.tensor(1.0)),
        lambda L: L.distributions.ContinuousBernoulli(logits=L.tensor([0.3])),
        lambda L: L.distributions.Pareto(L.tensor(1.0), L.tensor([2.0, 3.0])),
        lambda L: L.distributions.LogisticNormal(L.zeros(2), L.ones(2)),
        lambda L: L.distributions.TransformedDistribution(
            L.distributions.Normal(0.0, 1.0), [L.distributions.ExpTransform()]
        ),
    ],
    ids=["one-element", "logits", "sizes", "logistic-normal", "transformed"],
)
def test_repr_matches_torch(make):
    import torch

    assert repr(make(kiln)) == repr(make(torch)).replace("torch.Size", "kiln.Size")


@requires_torch
def test_validation_messages_match_torch():
    import torch

    for make, lib in ((lambda D: D.Normal(0.0, -1.0, validate_args=True), None),):
        with pytest.raises(ValueError) as ke:
            make(KD)
        with pytest.raises(ValueError) as te:
            make(torch.distributions)
        assert str(ke.value) == str(te.value)
    with pytest.raises(ValueError, match="within the support"):
        KD.Normal(0.0, 1.0).log_prob(kiln.tensor([math.nan]))
    with pytest.raises(ValueError, match="within the support"):
        KD.Bernoulli(0.3).log_prob(kiln.tensor([0.5]))
    with pytest.raises(ValueError, match="Either `probs` or `logits`"):
        KD.Categorical()
    assert KD.Normal(0.0, -1.0, validate_args=False).scale.item() == -1.0
    assert repr(KD.Normal(0.0, 1.0)) == repr(torch.distributions.Normal(0.0, 1.0))
    assert (
        repr(KD.Normal(kiln.zeros(2), kiln.ones(2)))
        == "Normal(loc: kiln.Size([2]), scale: kiln.Size([2]))"
    )


@requires_torch
def test_expand_and_enumerate_support_match_torch():
    import torch

    kd = KD.Bernoulli(kiln.tensor([0.3, 0.6])).expand((4, 2))
    td = torch.distributions.Bernoulli(torch.tensor([0.3, 0.6])).expand((4, 2))
    assert tuple(kd.batch_shape) == tuple(td.batch_shape)
    _close(kd.log_prob(kiln.ones(4, 2)), td.log_prob(torch.ones(4, 2)), rtol=1e-6)
    kc = KD.Categorical(logits=kiln.zeros(2, 3))
    tc = torch.distributions.Categorical(logits=torch.zeros(2, 3))
    np.testing.assert_array_equal(_np(kc.enumerate_support()), _np(tc.enumerate_support()))
    _close(kc.expand((5, 2)).entropy(), tc.expand((5, 2)).entropy(), rtol=1e-6)
    kn = KD.Normal(kiln.zeros(3), kiln.ones(3)).expand((2, 3))
    assert tuple(kn.sample().shape) == (2, 3)


@requires_torch
def test_transformed_distribution_log_prob_matches_torch():
    import torch

    def build(D, T, loc, scale):
        return D.TransformedDistribution(
            D.Normal(loc, scale), [T.AffineTransform(1.0, 2.0), T.SigmoidTransform()]
        )

    kd = build(
        KD,
        KD.transforms,
        kiln.tensor([0.1, -0.3], dtype=kiln.float64),
        kiln.tensor([1.0, 0.5], dtype=kiln.float64),
    )
    td = build(
        torch.distributions,
        torch.distributions.transforms,
        torch.tensor([0.1, -0.3], dtype=torch.float64),
        torch.tensor([1.0, 0.5], dtype=torch.float64),
    )
    v = [0.3, 0.8]
    _close(kd.log_prob(_t(kiln, v)), td.log_prob(_t(torch, v)), rtol=1e-9)
    _close(kd.cdf(_t(kiln, v)), td.cdf(_t(torch, v)), rtol=1e-9)
    tanh_k = KD.TransformedDistribution(KD.Normal(0.2, 0.9), KD.TanhTransform())
    tanh_t = torch.distributions.TransformedDistribution(
        torch.distributions.Normal(0.2, 0.9), torch.distributions.transforms.TanhTransform()
    )
    _close(
        tanh_k.log_prob(kiln.tensor([0.5, -0.9])),
        tanh_t.log_prob(torch.tensor([0.5, -0.9])),
        rtol=1e-5,
    )
    exp_k = KD.TransformedDistribution(KD.Normal(0.2, 0.9), KD.ExpTransform())
    _close(
        exp_k.log_prob(kiln.tensor([0.5, 2.0])),
        KD.LogNormal(0.2, 0.9).log_prob(kiln.tensor([0.5, 2.0])),
        rtol=1e-6,
    )


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_bounded_and_circular_families_capture_in_one_graph(backend):
    def loss(probs, value, loc, concentration):
        cb = KD.ContinuousBernoulli(probs)
        return (
            cb.log_prob(value[1]).sum()
            + cb.entropy().sum()
            + KD.kl_divergence(cb, KD.ContinuousBernoulli(1 - probs)).sum()
            + KD.VonMises(loc, concentration).log_prob(value).sum()
            + KD.GeneralizedPareto(loc, concentration, probs[:2] - 0.5).log_prob(value + 1).sum()
            + KD.LogisticNormal(loc, concentration).log_prob(probs / probs.sum()).sum()
        )

    # float64: near probs = 1/2 the float32 gradient cancels to a few digits either way
    args = [
        kiln.tensor([0.2, 0.4995, 0.7], dtype=kiln.float64),
        kiln.tensor([0.3, 0.6], dtype=kiln.float64),
        kiln.tensor([0.1, 0.2], dtype=kiln.float64),
        kiln.tensor([1.0, 2.0], dtype=kiln.float64),
    ]
    explanation = kiln._dynamo.explain(loss)(*args)
    assert explanation.graph_count == 1 and explanation.graph_break_count == 0
    leaves = [a.clone().requires_grad_() for a in args]
    leaves_c = [a.clone().requires_grad_() for a in args]
    expected = loss(*leaves)
    got = kiln.compile(loss, backend=backend)(*leaves_c)
    np.testing.assert_allclose(got.item(), expected.item(), rtol=1e-10)
    for a, b in zip(kiln.autograd.grad(got, leaves_c), kiln.autograd.grad(expected, leaves)):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_log_prob_entropy_and_kl_compile(backend):
    def loss(mu, log_sigma, x, logits, target):
        d = KD.Normal(mu, log_sigma.exp())
        prior = KD.Normal(kiln.zeros_like(mu), kiln.ones_like(mu))
        cat = KD.Categorical(logits=logits)
        return (
            -d.log_prob(x).sum()
            + KD.kl_divergence(d, prior).sum()
            - cat.log_prob(target).mean()
            - 0.01 * cat.entropy().mean()
        )

    args = [
        kiln.randn(4, 3),
        kiln.randn(4, 3) * 0.1,
        kiln.randn(4, 3),
        kiln.randn(4, 5),
        kiln.randint(0, 5, (4,)),
    ]
    # the distributions' objects are built inside the captured code: one graph, no break
    explanation = kiln._dynamo.explain(loss)(*args)
    assert explanation.graph_count == 1 and explanation.graph_break_count == 0
    leaves = [a.clone().requires_grad_() for a in args[:2]] + args[2:]
    leaves_c = [a.clone().requires_grad_() for a in args[:2]] + args[2:]
    expected = loss(*leaves)
    got = kiln.compile(loss, backend=backend)(*leaves_c)
    np.testing.assert_allclose(got.item(), expected.item(), rtol=1e-5)
    ge = kiln.autograd.grad(expected, leaves[:2])
    gg = kiln.autograd.grad(got, leaves_c[:2])
    for a, b in zip(gg, ge):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)


def _gaussian_mixture(D, logits, loc, scale):
    """A batch of two 2-d Gaussian mixtures with three components each."""
    return D.MixtureSameFamily(D.Categorical(logits=logits), D.Independent(D.Normal(loc, scale), 1))


_MIXTURE_PARAMS = [
    [[0.2, -1.0, 0.5], [1.0, 0.0, -0.3]],
    [[[0.1, -0.5], [1.0, 0.3], [-2.0, 0.0]], [[0.0, 0.0], [0.5, -1.5], [2.0, 1.0]]],
    [[[0.5, 1.0], [0.8, 1.2], [1.5, 0.3]], [[1.0, 0.7], [0.4, 0.9], [2.0, 1.1]]],
]


@requires_torch
def test_mixture_same_family_log_prob_moments_and_gradients_match_torch():
    import torch

    kp = [_t(kiln, p, grad=True) for p in _MIXTURE_PARAMS]
    tp = [_t(torch, p, grad=True) for p in _MIXTURE_PARAMS]
    kd, td = _gaussian_mixture(KD, *kp), _gaussian_mixture(torch.distributions, *tp)
    assert kd.batch_shape == td.batch_shape and kd.event_shape == td.event_shape
    value = [[[0.3, -0.2], [1.0, 2.0]], [[-1.0, 0.5], [0.0, 0.0]], [[2.0, 1.0], [0.5, -0.5]]]
    kl, tl = kd.log_prob(_t(kiln, value)), td.log_prob(_t(torch, value))
    _close(kl, tl)
    _close(kd.mean, td.mean)
    _close(kd.variance, td.variance)
    for g_k, g_t in zip(kiln.autograd.grad(kl.sum(), kp), torch.autograd.grad(tl.sum(), tp)):
        _close(g_k, g_t, rtol=1e-9, atol=1e-12)
    k1 = KD.MixtureSameFamily(
        KD.Categorical(logits=kp[0][0]), KD.Normal(kp[1][0, :, 0], kp[2][0, :, 0])
    )
    t1 = torch.distributions.MixtureSameFamily(
        torch.distributions.Categorical(logits=tp[0][0]),
        torch.distributions.Normal(tp[1][0, :, 0], tp[2][0, :, 0]),
    )
    _close(k1.cdf(_t(kiln, [0.3, -1.0])), t1.cdf(_t(torch, [0.3, -1.0])))
    _close(
        kd.expand((4, 2)).log_prob(_t(kiln, value[0])),
        td.expand((4, 2)).log_prob(_t(torch, value[0])),
    )


def test_mixture_same_family_samples_one_component_per_draw():
    logits = kiln.tensor([[-30.0, 30.0, -30.0], [30.0, -30.0, -30.0]])
    loc = kiln.tensor(
        [[[0.0, 0.0], [5.0, -5.0], [9.0, 9.0]], [[-3.0, 3.0], [9.0, 9.0], [9.0, 9.0]]]
    )
    mixture = _gaussian_mixture(KD, logits, loc, kiln.full((2, 3, 2), 1e-3))
    draws = mixture.sample((6,))
    assert tuple(draws.shape) == (6, 2, 2)
    np.testing.assert_allclose(draws.mean(0).numpy(), [[5.0, -5.0], [-3.0, 3.0]], atol=1e-2)
    with pytest.raises(ValueError, match="does not equal"):
        KD.MixtureSameFamily(KD.Categorical(logits=kiln.zeros(4)), KD.Normal(loc[0, :, 0], 1.0))
    with pytest.raises(ValueError, match="Categorical"):
        KD.MixtureSameFamily(KD.Normal(0.0, 1.0), KD.Normal(loc[0, :, 0], 1.0))


@requires_torch
def test_softplus_transform_matches_torch():
    import torch

    x = [-30.0, -1.5, 0.0, 2.0, 25.0]
    kt, tt = KD.transforms.SoftplusTransform(), torch.distributions.transforms.SoftplusTransform()
    ky, ty = kt(_t(kiln, x)), tt(_t(torch, x))
    _close(ky, ty)
    _close(kt.inv(ky), tt.inv(ty))
    _close(kt.log_abs_det_jacobian(_t(kiln, x), ky), tt.log_abs_det_jacobian(_t(torch, x), ty))
    assert kt == KD.SoftplusTransform()
    kd = KD.TransformedDistribution(KD.Normal(0.3, 0.7), [kt])
    td = torch.distributions.TransformedDistribution(torch.distributions.Normal(0.3, 0.7), [tt])
    _close(kd.log_prob(kiln.tensor([0.2, 3.0])), td.log_prob(torch.tensor([0.2, 3.0])), rtol=1e-6)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_mixture_density_loss_compiles_to_one_graph(backend):
    def nll(logits, loc, log_scale, target):
        mixture = _gaussian_mixture(KD, logits, loc, log_scale.exp())
        return -mixture.log_prob(target).mean()

    args = [kiln.randn(2, 3), kiln.randn(2, 3, 2), kiln.randn(2, 3, 2) * 0.1, kiln.randn(5, 2, 2)]
    explanation = kiln._dynamo.explain(nll)(*args)
    assert explanation.graph_count == 1 and not explanation.break_reasons
    leaves = [a.clone().requires_grad_() for a in args[:3]] + args[3:]
    leaves_c = [a.clone().requires_grad_() for a in args[:3]] + args[3:]
    expected = nll(*leaves)
    got = kiln.compile(nll, backend=backend)(*leaves_c)
    np.testing.assert_allclose(got.item(), expected.item(), rtol=1e-5)
    for a, b in zip(
        kiln.autograd.grad(got, leaves_c[:3]), kiln.autograd.grad(expected, leaves[:3])
    ):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)


@requires_torch
def test_low_rank_normal_matrices_match_torch():
    """Its covariance, precision and Cholesky factor (from the m x m capacitance), batched."""
    import torch

    loc = [[0.1, -0.5, 0.3], [0.0, 1.0, 2.0]]
    factor = [[1.0, 0.2], [0.3, -0.5], [0.0, 0.4]]
    diag = [0.5, 1.5, 0.8]
    kd = KD.LowRankMultivariateNormal(_t(kiln, loc), _t(kiln, factor), _t(kiln, diag))
    td = torch.distributions.LowRankMultivariateNormal(
        _t(torch, loc), _t(torch, factor), _t(torch, diag)
    )
    for attr in ("covariance_matrix", "precision_matrix", "scale_tril", "variance"):
        _close(getattr(kd, attr), getattr(td, attr), rtol=1e-9)
    _close(kd.entropy(), td.entropy(), rtol=1e-9)
    _close(
        kd.expand((3, 2)).log_prob(_t(kiln, loc[0])), td.expand((3, 2)).log_prob(_t(torch, loc[0]))
    )


def _matrix_constraints(lib):
    c = lib.distributions.constraints
    return {
        "lower_triangular": c.lower_triangular,
        "square": c.square,
        "symmetric": c.symmetric,
        "corr_cholesky": c.corr_cholesky,
        "cat": c.cat([c.positive, c.real, c.unit_interval], dim=-1, lengths=[1, 1, 2]),
        "stack": c.stack([c.positive, c.real, c.nonnegative, c.unit_interval], dim=-1),
        "mixture": c.MixtureSameFamilyConstraint(c.positive),
    }


@requires_torch
@pytest.mark.parametrize("name", sorted(_matrix_constraints(kiln)))
def test_matrix_and_composed_constraints_check_like_pytorch(name):
    rng = np.random.default_rng(0)
    tril = np.tril(rng.uniform(0.1, 1.0, size=(3, 4, 4))).astype(np.float32)
    tril[1] /= np.linalg.norm(tril[1], axis=-1, keepdims=True)  # a correlation Cholesky factor
    symmetric = (tril + tril.transpose(0, 2, 1)).astype(np.float32)
    values = [tril, symmetric, rng.normal(size=(3, 4, 4)).astype(np.float32), tril[..., :3]]
    import torch

    ours, theirs = _matrix_constraints(kiln)[name], _matrix_constraints(torch)[name]
    assert (ours.event_dim, ours.is_discrete) == (theirs.event_dim, theirs.is_discrete)
    for value in values:
        outcomes = []
        for constraint, lib in ((ours, kiln), (theirs, torch)):
            try:
                outcomes.append(constraint.check(lib.tensor(value)).tolist())
            except RuntimeError as error:  # a block that does not fit: the same error
                outcomes.append(type(error))
        assert outcomes[0] == outcomes[1], (name, value.shape)


@requires_torch
def test_mixture_support_is_pytorchs_constraint_class():
    D = kiln.distributions
    mix = D.MixtureSameFamily(D.Categorical(logits=kiln.zeros(2)), D.Normal(kiln.zeros(2), 1.0))
    assert type(mix.support) is D.constraints.MixtureSameFamilyConstraint
    assert repr(mix.support) == "MixtureSameFamilyConstraint(Real())"
