"""Python operators, type promotion of binary ops, unary ops on integer and bool
inputs, and bool-tensor arithmetic against PyTorch."""

from __future__ import annotations

from tests.oracle import needs_torch
from tests.runtime.helpers import cases, same_as_torch

pytestmark = needs_torch


OPERATORS = {
    "contains-in-2d": lambda lib: 4 in lib.arange(6).reshape(2, 3),
    "contains-missing": lambda lib: 9 in lib.arange(6).reshape(2, 3),
    "contains-string": lambda lib: "a" in lib.tensor([1, 2]),
    "bool-of-empty": lambda lib: bool(lib.tensor([])),
    "bool-of-many": lambda lib: bool(lib.tensor([1, 2])),
    "int-of-many": lambda lib: int(lib.tensor([1.0, 2.0])),
    "float-of-many": lambda lib: float(lib.tensor([1.0, 2.0])),
    "int-lshift-tensor": lambda lib: 1 << lib.tensor([1, 2]),
    "int-rshift-tensor": lambda lib: 16 >> lib.tensor([1, 2]),
    "invert-float": lambda lib: ~lib.tensor([1.0]),
    "and-float": lambda lib: lib.tensor([1.0]) & lib.tensor([1.0]),
    "bool-minus-bool": lambda lib: lib.tensor([True]) - lib.tensor([True]),
    "bool-minus-int": lambda lib: lib.tensor([True]) - 1,
    "int-minus-bool": lambda lib: 1 - lib.tensor([True]),
    "negate-bool": lambda lib: -lib.tensor([True, False]),
    "int-pow-negative-tensor": lambda lib: (
        lib.tensor([1, 2, -1, -1, 0]) ** lib.tensor([-1, -2, -1, -2, 2])
    ),
    "int-pow-negative-scalar": lambda lib: lib.tensor([1, 2]) ** -1,
    "rsub-function": lambda lib: lib.rsub(lib.tensor([1.0, 2.0]), 1, alpha=2),
    "iadd-float-into-int": lambda lib: lib.tensor([1]).add_(1.5),
    "imul-float-into-int32": lambda lib: lib.tensor([1], dtype=lib.int32).mul_(1.5),
    "iadd-int8-into-bool": lambda lib: lib.tensor([True]).add_(lib.tensor([1], dtype=lib.int8)),
    "iadd-broadcast-out": lambda lib: lib.zeros(3).add_(lib.ones(2, 3)),
    "matvec-mismatch": lambda lib: lib.ones(2, 3) @ lib.ones(2),
    "batched-matvec-mismatch": lambda lib: lib.ones(4, 2, 3) @ lib.ones(2),
    "batched-matmul-mismatch": lambda lib: lib.ones(4, 2, 3) @ lib.ones(4, 2, 3),
    "batch-times-matrix-mismatch": lambda lib: lib.ones(4, 2, 3) @ lib.ones(2, 3),
    "vector-dot-mismatch": lambda lib: lib.ones(2) @ lib.ones(3),
}


@cases(OPERATORS)
def test_python_operators_match_torch(case):
    same_as_torch(case)


BINARY_PROMOTION = {
    "xlogy-half-int": lambda lib: lib.xlogy(
        lib.tensor([1.5, 0.0], dtype=lib.float16), lib.tensor([2, 0], dtype=lib.int8)
    ),
    "xlogy-0d-float64": lambda lib: lib.xlogy(
        lib.tensor([1.5]), lib.tensor(2.0, dtype=lib.float64)
    ),
    "logaddexp-bool": lambda lib: lib.logaddexp(lib.tensor([1.0, 2.0]), lib.tensor([True, False])),
    "ldexp-half-int8": lambda lib: lib.ldexp(
        lib.tensor([1.5, 2.0], dtype=lib.float16), lib.tensor([1, 2], dtype=lib.int8)
    ),
    "ldexp-0d-half-exponent": lambda lib: lib.ldexp(
        lib.tensor([1.0, 2], dtype=lib.float64), lib.tensor(0.7, dtype=lib.float16)
    ),
    "bool-floor-divide": lambda lib: lib.tensor([True]) // lib.tensor([True]),
}


@cases(BINARY_PROMOTION)
def test_binary_promotion_matches_torch(case):
    same_as_torch(case)


UNARY = {
    "nan-to-num-bfloat16": lambda lib: lib.nan_to_num(
        lib.tensor([float("nan"), float("inf"), -float("inf"), 1.5], dtype=lib.bfloat16)
    ),
    "nan-to-num-half-posinf": lambda lib: lib.tensor(
        [float("inf"), float("nan")], dtype=lib.float16
    ).nan_to_num(posinf=100.0),
    "logit-uint8": lambda lib: lib.logit(lib.tensor([0, 1, 2], dtype=lib.uint8)),
    "logit-bool": lambda lib: lib.logit(lib.tensor([True, False])),
}


@cases(UNARY)
def test_unary_ops_match_torch(case):
    same_as_torch(case)


BOOL_OPS = {
    "bool-sign": lambda lib: lib.tensor([True, False]).sign(),
    "bool-square": lambda lib: lib.tensor([True, False]).square(),
    "float-bitwise-not": lambda lib: lib.bitwise_not(lib.tensor([1.5])),
}


@cases(BOOL_OPS)
def test_bool_ops_match_torch(case):
    same_as_torch(case)
