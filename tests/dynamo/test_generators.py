"""Generators under capture: generator functions and expressions are inlined (fed to
builtins, ``yield from``, ``next``, ``itertools``), their bodies interleave with the consumer,
and generators over module parameters."""

from __future__ import annotations

import itertools

import kiln
import kiln.nn as nn

from .helpers import check


def _chunks(x, n):
    for i in range(0, x.shape[0], n):
        yield x[i : i + n]


def sum_of_chunks(x):
    total = kiln.zeros(x.shape[1])
    for c in _chunks(x, 2):
        total = total + c.sum(0)
    return total


def generator_expression_in_sum(xs):
    return sum(v * i for i, v in enumerate(xs))


def _pairs(xs):
    yield from zip(xs, xs[1:])
    return "done"


def yield_from_and_next(x):
    gen = _pairs([x, x * 2, x * 3])
    a, b = next(gen)
    rest = [u - v for u, v in gen]
    return a + b, rest


def islice_of_generator(x):
    squares = (x * i for i in itertools.count())
    return list(itertools.islice(squares, 3))


def generator_with_side_effect(x, log):
    def numbered(items):
        for i, item in enumerate(items):
            log.append(i)
            yield item * i

    out = []
    for y in numbered([x, x + 1, x + 2]):
        out.append(y)
        log.append("consumed")
    return out


def test_generator_functions_are_inlined():
    check(sum_of_chunks, kiln.randn(6, 3))
    check(generator_expression_in_sum, [kiln.randn(2), kiln.randn(2), kiln.randn(2)])
    check(yield_from_and_next, kiln.randn(3))
    check(islice_of_generator, kiln.randn(2))


def generators_fed_to_builtins(xs):
    sizes = " ".join(str(t.shape[0]) for t in xs)
    return (
        max(t.shape[0] for t in xs), any(t.shape[0] > 2 for t in xs), sorted(t.dim() for t in xs),
        dict((i, t) for i, t in enumerate(xs)), sizes,
        [u + v for u, v in zip((t * 2 for t in xs), xs)],
        sum((t.sum() for t in xs), kiln.tensor(0.0)),
    )  # fmt: skip


def test_generator_expressions_fed_to_builtins():
    check(generators_fed_to_builtins, [kiln.randn(3), kiln.randn(2), kiln.randn(4)])


def test_generator_body_interleaves_with_its_consumer():
    check(generator_with_side_effect, kiln.randn(2), [])


_PENALIZED = nn.Linear(3, 2)


def parameter_norm_penalty(x):
    penalty = sum(p.pow(2).sum() for p in _PENALIZED.parameters())
    return _PENALIZED(x).sum() + 0.01 * penalty


def test_generator_over_module_parameters():
    check(parameter_norm_penalty, kiln.randn(4, 3))
