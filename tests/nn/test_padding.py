"""Padding layers (constant, zero, reflection, replication, circular; 1-3 d, batched
and unbatched) against torch.nn: values, gradients, reprs and argument checks."""

from __future__ import annotations

import pytest

import kiln
from tests.nn.helpers import Case, In, module_case_tests
from tests.oracle import needs_torch

pytestmark = needs_torch


_PAD_AMOUNT = {"Zero": 1, "Reflection": 1, "Replication": 2, "Circular": 1}


def _pad_case(kind: str, dims: int, unbatched: bool) -> Case:
    """``<kind>Pad<dims>d`` on a (N, C, *spatial) or unbatched (C, *spatial) input."""
    if kind == "Constant":
        args = ((1, 2, 0, 1, 2, 1)[: 2 * dims], 1.5)
    else:
        args = (_PAD_AMOUNT[kind],)
    shape = ((3,) if unbatched else (2, 3)) + (4, 5, 3)[:dims]
    name = f"{kind.lower()}_pad{dims}d" + ("_unbatched" if unbatched else "")
    return Case(name, lambda lib: getattr(lib.nn, f"{kind}Pad{dims}d")(*args), [In(shape)])


PADDING = [
    _pad_case(kind, dims, unbatched)
    for kind in ("Constant", "Zero", "Reflection", "Replication", "Circular")
    for dims in (1, 2, 3)
    for unbatched in (False, True)
]


PADDING += [
    Case("reflectionpad2d_tuple", lambda lib: lib.nn.ReflectionPad2d((1, 0, 2, 1)), [In((1, 2, 4, 4))]),
    Case("replicationpad3d_tuple", lambda lib: lib.nn.ReplicationPad3d((0, 1, 2, 0, 1, 1)), [In((1, 2, 2, 3, 3))]),
    Case("circularpad2d_tuple", lambda lib: lib.nn.CircularPad2d((2, 1, 0, 3)), [In((2, 1, 4, 3))]),
    Case("zeropad2d_negative", lambda lib: lib.nn.ZeroPad2d((-1, 2, 1, -1)), [In((1, 2, 4, 4))]),
]  # fmt: skip


test_forward_and_backward_match_torch, test_repr_and_state_match_torch = module_case_tests(
    PADDING, every_output_differentiable=True
)


def test_circular_pad_checks_rank_and_reflection_checks_size():
    with pytest.raises(ValueError, match=r"expected 3D or 4D input \(got 2D input\)"):
        kiln.nn.CircularPad2d(1)(kiln.ones(3, 4))
    with pytest.raises(RuntimeError, match="Padding size should be less than"):
        kiln.nn.ReflectionPad1d(3)(kiln.ones(1, 2, 3))
    assert isinstance(kiln.nn.ZeroPad2d(1), kiln.nn.ConstantPad2d)
    assert kiln.nn.ZeroPad1d(2).value == 0.0
