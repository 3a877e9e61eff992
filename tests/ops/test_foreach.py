"""``kiln._foreach_*`` against PyTorch's: each form of second operand (number, list of numbers,
tensor list, one tensor), alpha and value keywords, in-place forms returning their list, norms,
and gradients through the out-of-place forms."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from tests.oracle import assert_close, needs_torch, torch

pytestmark = needs_torch

VALUES = [np.arange(1, 4, dtype=np.float32), np.array([[0.5, 2.0], [3.0, 4.5]], np.float32)]
OTHERS = [np.full(3, 2.0, np.float32), np.array([[1.0, -1.0], [0.25, 2.0]], np.float32)]

CASES = {
    "add-list-alpha": lambda lib, a, b: lib._foreach_add(a, b, alpha=0.5),
    "sub-number": lambda lib, a, b: lib._foreach_sub(a, 1.5),
    "mul-numbers": lambda lib, a, b: lib._foreach_mul(a, [2.0, -1.0]),
    "mul-tensor": lambda lib, a, b: lib._foreach_mul(a, lib.tensor(3.0)),
    "div-list": lambda lib, a, b: lib._foreach_div(a, b),
    "maximum": lambda lib, a, b: lib._foreach_maximum(a, b),
    "clamp-min": lambda lib, a, b: lib._foreach_clamp_min(a, 1.0),
    "pow": lambda lib, a, b: lib._foreach_pow(a, 2.0),
    "sqrt": lambda lib, a, b: lib._foreach_sqrt(a),
    "neg": lambda lib, a, b: lib._foreach_neg(a),
    "addcmul": lambda lib, a, b: lib._foreach_addcmul(a, b, b, value=0.1),
    "addcdiv-values": lambda lib, a, b: lib._foreach_addcdiv(a, b, a, [0.5, 2.0]),
    "lerp": lambda lib, a, b: lib._foreach_lerp(a, b, 0.25),
    "norm": lambda lib, a, b: lib._foreach_norm(a),
    "norm-inf": lambda lib, a, b: lib._foreach_norm(a, float("inf")),
}


@pytest.mark.parametrize("name", list(CASES))
def test_foreach_out_of_place_matches_pytorch(name):
    results = []
    for lib in (kiln, torch):
        a = [lib.tensor(v, requires_grad=True) for v in VALUES]
        b = [lib.tensor(v) for v in OTHERS]
        out = CASES[name](lib, a, b)
        sum(o.sum() for o in out).backward()
        results.append(([o.detach() for o in out], [t.grad for t in a]))
    assert_close(results[0], results[1])


IN_PLACE = {
    "mul_": lambda lib, a, b: lib._foreach_mul_(a, 0.5),
    "add_-alpha": lambda lib, a, b: lib._foreach_add_(a, b, alpha=0.5),
    "lerp_": lambda lib, a, b: lib._foreach_lerp_(a, b, 0.5),
    "addcdiv_": lambda lib, a, b: lib._foreach_addcdiv_(a, b, b, value=-0.1),
    "zero_": lambda lib, a, b: lib._foreach_zero_(a),
    "copy_": lambda lib, a, b: lib._foreach_copy_(a, b),
    "sqrt_": lambda lib, a, b: lib._foreach_sqrt_(a),
}


@pytest.mark.parametrize("name", list(IN_PLACE))
def test_foreach_in_place_matches_pytorch(name):
    results = []
    for lib in (kiln, torch):
        a = [lib.tensor(v) for v in VALUES]
        b = [lib.tensor(v) for v in OTHERS]
        returned = IN_PLACE[name](lib, a, b)
        assert returned is None or all(r is t for r, t in zip(returned, a))
        results.append(a)
    assert_close(results[0], results[1])


def test_mismatched_list_lengths_raise():
    for lib in (kiln, torch):
        with pytest.raises(RuntimeError):
            lib._foreach_add([lib.ones(2), lib.ones(2)], [lib.ones(2)])
