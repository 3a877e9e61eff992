"""User functions with ``assert`` statements, kept out of test modules (pytest rewrites those)."""

from __future__ import annotations


def assert_on_constants(x):
    assert x.dim() == 2, "expects a matrix"
    assert x.shape[1] > 0
    return x.t()


def assert_fails(x):
    assert x.shape[0] == 100, "needs 100 rows"
    return x
