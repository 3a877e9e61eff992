"""``torch.cond`` and ``torch._assert`` under capture: a tensor predicate keeps both
branches in one graph, gradients flow to the taken branch, branches with side effects fall back,
and results and errors match PyTorch's."""

from __future__ import annotations

import pytest

import kiln
from tests.oracle import needs_torch

from .helpers import assert_same, check, same_as_torch

BACKENDS = ["eager", "aot_eager", "inductor"]


def _true_branch(x, y):
    return x + y, x * y


def _false_branch(x, y):
    return x - y, x / y


def _uses_cond(x, y):
    a, b = kiln.cond(x.mean() > y.mean(), _true_branch, _false_branch, (x, y))
    return a.sum() + b.sum()


@pytest.mark.parametrize("backend", BACKENDS)
def test_cond_with_a_tensor_predicate_is_one_graph(backend):
    compiled = kiln.compile(_uses_cond, backend=backend, fullgraph=True)
    for x in (kiln.ones(3), kiln.ones(3) * 5):
        y = kiln.full((3,), 2.0)
        assert_same(compiled(x, y), _uses_cond(x, y))
    check(_uses_cond, kiln.ones(3), kiln.full((3,), 2.0), graphs=1, breaks=0)


def test_cond_gradients_flow_to_the_taken_branch_only():
    def fn(x):
        return kiln.cond(x.sum() > 0, lambda v: (v * v).sum(), lambda v: v.exp().sum(), (x,))

    for sign in (1.0, -1.0):
        x1 = kiln.tensor([1.0, 2.0]) * sign
        x1.requires_grad_()
        x2 = x1.detach().clone().requires_grad_()
        kiln.compile(fn, backend="aot_eager")(x1).backward()
        fn(x2).backward()
        assert_same(x1.grad, x2.grad)


def test_cond_with_side_effects_or_mutation_falls_back_to_eager():
    calls = []

    def noisy(x):
        calls.append(1)
        return x + 1

    def with_side_effect(x):
        return kiln.cond(x.sum() > 0, noisy, lambda x: x - 1, (x,))

    def with_mutation(x):
        return kiln.cond(x.sum() > 0, lambda x: x.add_(1), lambda x: x - 1, (x,))

    def with_local_mutation(x):
        return kiln.cond(x.sum() > 0, lambda x: (x * 2).add_(1), lambda x: x - 1, (x,))

    check(with_side_effect, kiln.ones(2), graphs=1, breaks=1)
    check(with_mutation, kiln.ones(2), graphs=1, breaks=1)
    check(with_mutation, -kiln.ones(2), graphs=1, breaks=1)
    check(with_local_mutation, kiln.ones(2), graphs=1, breaks=0)


def test_cond_with_a_constant_predicate_inlines_the_branch():
    def fn(x, flag):
        return kiln.cond(flag, lambda x: x.sin(), lambda x: x.cos(), [x])

    check(fn, kiln.ones(2), True)
    check(fn, kiln.ones(2), False)


@needs_torch
@pytest.mark.parametrize(
    "snippet",
    [
        lambda lib: lib.cond(lib.tensor(True), lambda x: x + 1, lambda x: x - 1, (lib.ones(2),)),
        lambda lib: lib.cond(False, lambda: lib.ones(1), lambda: lib.zeros(1)),
        lambda lib: lib.cond(True, lambda x: x * 2, lambda x: x - 1, lib.ones(1)),
        lambda lib: lib.cond(lib.ones(2) > 0, lambda x: x, lambda x: x, (lib.ones(1),)),
        lambda lib: lib.cond(True, lambda x, n: x, lambda x, n: x, (lib.ones(2), 3)),
        lambda lib: lib.cond(
            lib.tensor(True),
            lambda x, y: (x + 1, {"a": y + 0}),
            lambda x, y: (x - 1, {"a": y * 2}),
            (lib.ones(2), lib.zeros(1)),
        ),
        lambda lib: lib.compile(
            lambda x: lib.cond(x.sum() > 0, lambda v: v.sin(), lambda v: v.cos(), (x,)),
            backend="aot_eager",
        )(-lib.ones(2)),
    ],
)
def test_cond_matches_torch(snippet):
    same_as_torch(snippet)


def _checks_rank(x):
    kiln._assert(x.dim() == 1, "expected a vector")
    return x.log()


def _checks_values(x):
    kiln._assert(x.sum() > 0, "must be positive")
    return x.log()


def test_assert_function_under_compile():
    check(_checks_rank, kiln.ones(2), graphs=1, breaks=0)
    check(_checks_rank, kiln.ones(2, 2), graphs=0, breaks=1)  # raises, as eagerly
    check(_checks_values, kiln.ones(2), graphs=2, breaks=1)
    check(_checks_values, -kiln.ones(2), graphs=1, breaks=1)


@needs_torch
@pytest.mark.parametrize(
    "snippet",
    [
        lambda lib: lib._assert(False, "msg"),
        lambda lib: lib._assert(lib.tensor(False), "msg2"),
        lambda lib: lib._assert(lib.tensor([True]), "msg3"),
        lambda lib: lib.compile(_checks_rank, backend="eager")(lib.ones(2, 2)),
    ],
)
def test_assert_function_matches_torch(snippet):
    same_as_torch(snippet)
