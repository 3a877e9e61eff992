"""The transforms PyTorch pairs with constraints (reshape, correlation and lower Cholesky
factors, positive definite matrices, pieces along a dim, a distribution's cdf) against
PyTorch's: values, inverses, log-det-Jacobians, gradients, shapes, equality, caching and
errors; and ``biject_to``/``transform_to`` for every constraint kiln has: the same transform
(by structure and values) or the same NotImplementedError."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from tests.oracle import assert_raises_alike, needs_torch, raised_by_both, to_numpy, torch

RNG = np.random.default_rng(0)

# name -> (make(D), input, whether it has a log-det)
TRANSFORMS = {
    "Reshape": (lambda D: D.ReshapeTransform((6,), (2, 3)), RNG.normal(size=(4, 6)), True),
    "CorrCholesky": (lambda D: D.CorrCholeskyTransform(), RNG.normal(size=(2, 6)), True),
    "LowerCholesky": (lambda D: D.LowerCholeskyTransform(), RNG.normal(size=(2, 3, 3)), False),
    "PositiveDefinite": (
        lambda D: D.PositiveDefiniteTransform(),
        RNG.normal(size=(2, 3, 3)),
        False,
    ),
    "Cat-batch-dim": (
        lambda D: D.CatTransform(
            [D.ExpTransform(), D.identity_transform, D.AffineTransform(1.0, 2.0)],
            dim=1,
            lengths=[1, 2, 1],
        ),
        RNG.normal(size=(3, 4)),
        True,
    ),
    "Cat-event-dim": (
        lambda D: D.CatTransform(
            [
                D.IndependentTransform(D.ExpTransform(), 1),
                D.IndependentTransform(D.AffineTransform(0.0, 3.0), 1),
            ],
            dim=-1,
            lengths=[2, 3],
        ),
        RNG.normal(size=(3, 5)),
        True,
    ),
    "Stack": (
        lambda D: D.StackTransform(
            [D.ExpTransform(), D.AffineTransform(0.0, 3.0), D.SigmoidTransform()], dim=1
        ),
        RNG.normal(size=(4, 3)),
        True,
    ),
    "CumulativeDistribution": (
        lambda D: D.CumulativeDistributionTransform(D.Normal(0.5, 2.0)),
        RNG.normal(size=(5,)),
        True,
    ),
}


def _apply(lib, name):
    make, x_value, has_log_det = TRANSFORMS[name]
    transform = make(lib.distributions)
    x = lib.tensor(x_value, requires_grad=True)
    y = transform(x)
    out = {"y": y, "x_again": transform.inv(y)}
    weights = np.linspace(0.5, 1.5, y.numel()).reshape(tuple(y.shape))
    objective = (y * lib.tensor(weights)).sum()
    if has_log_det:
        out["log_det"] = transform.log_abs_det_jacobian(x, y)
        objective = objective + (out["log_det"] * 0.7).sum()
    (out["grad"],) = lib.autograd.grad(objective, [x])
    shapes = (
        tuple(transform.forward_shape(tuple(x.shape))),
        tuple(transform.inverse_shape(tuple(y.shape))),
    )
    facts = (
        shapes,
        transform.domain.event_dim,
        transform.codomain.event_dim,
        transform.bijective,
        type(transform.codomain).__name__,
    )
    return {k: to_numpy(v) for k, v in out.items()}, facts


@needs_torch
@pytest.mark.parametrize("name", list(TRANSFORMS))
def test_transform_matches_torch(name):
    ours, our_facts = _apply(kiln, name)
    theirs, their_facts = _apply(torch, name)
    assert our_facts == their_facts
    assert ours.keys() == theirs.keys()
    for key in ours:
        np.testing.assert_allclose(ours[key], theirs[key], rtol=1e-9, atol=1e-12, err_msg=key)
    if our_facts[3]:  # bijective: the inverse recovers the input
        np.testing.assert_allclose(ours["x_again"], TRANSFORMS[name][1], rtol=1e-7, atol=1e-9)


@needs_torch
def test_transforms_compare_equal_as_torchs_do():
    def pairs(D):
        return [
            (D.ExpTransform(), D.ExpTransform()),
            (D.AffineTransform(0.0, 1.0), D.AffineTransform(0.0, 1.0)),
            (D.AffineTransform(0.0, 1.0), D.AffineTransform(0.0, 2.0)),
            (D.transforms.PowerTransform(2.0), D.transforms.PowerTransform(2.0)),
            (D.ComposeTransform([D.ExpTransform()]), D.ComposeTransform([D.ExpTransform()])),
            (D.LowerCholeskyTransform(), D.LowerCholeskyTransform()),
            (D.PositiveDefiniteTransform(), D.LowerCholeskyTransform()),
            (D.ExpTransform().inv, D.ExpTransform().inv),
            (D.StickBreakingTransform(), D.SoftmaxTransform()),
            (D.CorrCholeskyTransform(), D.CorrCholeskyTransform()),
            (D.identity_transform, D.ComposeTransform([])),
        ]

    ours = [a == b for a, b in pairs(kiln.distributions)]
    assert ours == [a == b for a, b in pairs(torch.distributions)]
    assert ours[0] and not ours[2]


def test_cached_transforms_invert_their_last_output_exactly():
    D = kiln.distributions
    for transform in (
        D.CatTransform([D.ExpTransform(), D.SigmoidTransform()], dim=0, cache_size=1),
        D.StackTransform([D.ExpTransform(), D.SigmoidTransform()], dim=0).with_cache(),
        D.ReshapeTransform((2,), (1, 2)).with_cache(1),
        D.CumulativeDistributionTransform(D.Normal(0.0, 1.0)).with_cache(1),
    ):
        x = kiln.tensor([30.0, -40.0])
        y = transform(x)
        assert transform.inv(y) is x


@needs_torch
@pytest.mark.parametrize(
    "call",
    [
        lambda D, lib: D.ReshapeTransform((2, 3), (5,)),
        lambda D, lib: D.ReshapeTransform((6,), (2, 3)).forward_shape((4, 5)),
        lambda D, lib: D.CorrCholeskyTransform().forward_shape((4,)),
        lambda D, lib: D.CorrCholeskyTransform().inverse_shape((3, 4)),
    ],
    ids=["numel", "forward-shape", "not-triangular", "not-square"],
)
def test_shape_errors_match_torch(call):
    ours, theirs = raised_by_both(
        ValueError,
        lambda: call(kiln.distributions, kiln),
        lambda: call(torch.distributions, torch),
    )
    assert str(ours) == str(theirs).replace("torch.Size", "kiln.Size")


@needs_torch
@pytest.mark.parametrize(
    "call",
    [
        lambda D, lib: D.CatTransform([D.ExpTransform()], dim=0, lengths=[2])(lib.ones(3)),
        lambda D, lib: D.CatTransform([D.ExpTransform()], dim=2)(lib.ones(3)),
        lambda D, lib: D.StackTransform([D.ExpTransform()], dim=0).inv(lib.ones(2)),
        lambda D, lib: D.CatTransform([D.ExpTransform()], lengths=[1, 2]),
    ],
    ids=["cat-length", "cat-dim", "stack-length", "cat-lengths"],
)
def test_piecewise_errors_match_torch(call):
    assert_raises_alike(
        AssertionError,
        lambda: call(kiln.distributions, kiln),
        lambda: call(torch.distributions, torch),
    )


# constraint (built from a constraints module and a library) -> the shape of a value in it
CONSTRAINTS = {
    "real": (lambda C, lib: C.real, (3,)),
    "real_vector": (lambda C, lib: C.real_vector, (2, 3)),
    "independent-positive": (lambda C, lib: C.independent(C.positive, 1), (2, 3)),
    "positive": (lambda C, lib: C.positive, (3,)),
    "nonnegative": (lambda C, lib: C.nonnegative, (3,)),
    "greater_than": (lambda C, lib: C.greater_than(2.0), (3,)),
    "greater_than_eq-tensor": (
        lambda C, lib: C.greater_than_eq(lib.tensor([-1.0, 0.0, 4.0])),
        (3,),
    ),
    "less_than": (lambda C, lib: C.less_than(3.0), (3,)),
    "unit_interval": (lambda C, lib: C.unit_interval, (3,)),
    "interval": (lambda C, lib: C.interval(-1.0, 2.0), (3,)),
    "interval-tensor": (
        lambda C, lib: C.interval(lib.tensor([0.0, -1.0, 0.0]), lib.tensor([1.0, 1.0, 5.0])),
        (3,),
    ),
    "half_open_interval": (lambda C, lib: C.half_open_interval(0.0, 5.0), (3,)),
    "simplex": (lambda C, lib: C.simplex, (2, 4)),
    "lower_cholesky": (lambda C, lib: C.lower_cholesky, (2, 3, 3)),
    "positive_definite": (lambda C, lib: C.positive_definite, (2, 3, 3)),
    "positive_semidefinite": (lambda C, lib: C.positive_semidefinite, (2, 3, 3)),
    "corr_cholesky": (lambda C, lib: C.corr_cholesky, (2, 3, 3)),
    "cat": (lambda C, lib: C.cat([C.positive, C.real], dim=0, lengths=[2, 1]), (3,)),
    "stack": (lambda C, lib: C.stack([C.positive, C.unit_interval], dim=-1), (4, 2)),
    "boolean": (lambda C, lib: C.boolean, (3,)),
    "dependent": (lambda C, lib: C.dependent, (3,)),
    "integer_interval": (lambda C, lib: C.integer_interval(0, 3), (3,)),
    "nonnegative_integer": (lambda C, lib: C.nonnegative_integer, (3,)),
    "positive_integer": (lambda C, lib: C.positive_integer, (3,)),
    "one_hot": (lambda C, lib: C.one_hot, (2, 3)),
    "square": (lambda C, lib: C.square, (2, 3, 3)),
    "symmetric": (lambda C, lib: C.symmetric, (2, 3, 3)),
    "lower_triangular": (lambda C, lib: C.lower_triangular, (2, 3, 3)),
    "multinomial": (lambda C, lib: C.multinomial(4), (2, 3)),
}


def _structure(transform) -> tuple:
    """A transform as nested type names and the counts that shape it, library-neutral."""
    name = type(transform).__name__
    if name == "ComposeTransform":
        return (name, tuple(_structure(p) for p in transform.parts))
    if name == "IndependentTransform":
        base = _structure(transform.base_transform)
        return (name, base, transform.reinterpreted_batch_ndims)
    if name in ("CatTransform", "StackTransform"):
        lengths = tuple(getattr(transform, "lengths", ()))
        return (name, tuple(_structure(t) for t in transform.transforms), transform.dim, lengths)
    return (name,)


def _lookup(lib, registry_name, constraint_name):
    make, value_shape = CONSTRAINTS[constraint_name]
    constraint = make(lib.distributions.constraints, lib)
    registry = getattr(lib.distributions, registry_name)
    try:
        transform = registry(constraint)
    except NotImplementedError as error:
        return str(error)
    x_shape = tuple(transform.inverse_shape(value_shape))
    x = lib.tensor(np.random.default_rng(1).normal(size=x_shape))
    y = transform(x)
    assert bool(constraint.check(y).all())
    out = [to_numpy(y)]
    if registry_name == "biject_to":
        assert transform.bijective
        out.append(to_numpy(transform.inv(y)))
        out.append(to_numpy(transform.log_abs_det_jacobian(x, y)))
        np.testing.assert_allclose(out[1], to_numpy(x), rtol=1e-6, atol=1e-8)
    return _structure(transform), out


@needs_torch
@pytest.mark.parametrize("registry", ["biject_to", "transform_to"])
@pytest.mark.parametrize("constraint", list(CONSTRAINTS))
def test_registry_gives_torchs_transform(registry, constraint):
    ours = _lookup(kiln, registry, constraint)
    theirs = _lookup(torch, registry, constraint)
    if isinstance(theirs, str):
        assert ours == theirs  # the same NotImplementedError message
        return
    assert ours[0] == theirs[0]
    for a, b in zip(ours[1], theirs[1]):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)


@needs_torch
def test_registering_a_constraint_extends_the_registry_like_torch():
    for lib in (kiln, torch):
        D = lib.distributions
        registry = D.constraint_registry.ConstraintRegistry()
        with pytest.raises(NotImplementedError, match="Cannot transform _GreaterThan"):
            registry(D.constraints.positive)
        registry.register(D.constraints.positive, lambda c: D.ExpTransform())
        assert type(registry(D.constraints.greater_than(3.0))).__name__ == "ExpTransform"

        @registry.register(D.constraints.interval)
        def _factory(constraint):
            return D.SigmoidTransform()

        assert isinstance(registry(D.constraints.interval(0.0, 2.0)), D.SigmoidTransform)
        with pytest.raises(TypeError, match="Expected constraint to be either"):
            registry.register(3, lambda c: None)
