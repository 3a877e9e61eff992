"""Elementwise ops on sparse COO tensors against PyTorch: the unary ops that keep zero at zero
(run on the coalesced values), division by a number, powers, and products with a sparse or a
dense tensor of one shape; gradients against the same function of the dense tensor."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.ops.sparse.functions import ZERO_PRESERVING
from tests.oracle import needs_torch, torch

pytestmark = needs_torch

INDICES = [[0, 1, 1, 0, 2], [2, 0, 2, 2, 1]]  # (0, 2) twice: the ops see the summed entry
VALUES = [0.25, -0.5, 0.75, 0.125, -0.625]


def _pair(lib, requires_grad=False):
    values = lib.tensor(VALUES, requires_grad=requires_grad)
    return lib.sparse_coo_tensor(INDICES, values, (3, 3)), values


def _same(ours, theirs, same_coalescing: bool = True) -> None:
    assert ours.is_sparse and theirs.is_sparse
    assert ours.dtype.name == str(theirs.dtype).removeprefix("torch.")
    if same_coalescing:  # a product of two uncoalesced tensors may differ (the sums agree)
        assert ours.is_coalesced() == theirs.is_coalesced()
    np.testing.assert_allclose(
        ours.to_dense().detach().numpy(), theirs.to_dense().detach().numpy(), rtol=1e-6
    )


@pytest.mark.parametrize("name", ZERO_PRESERVING)
def test_zero_preserving_unary_op(name):
    _same(getattr(kiln, name)(_pair(kiln)[0]), getattr(torch, name)(_pair(torch)[0]))


@pytest.mark.parametrize(
    "expression",
    ["s / 4", "s.div(2.5)", "s / lib.tensor(2.0)", "s ** 2", "s.pow(3)", "s.relu()"],
)
def test_division_and_powers(expression):
    results = []
    for lib in (kiln, torch):
        s = _pair(lib)[0]
        results.append(eval(expression, {"s": s, "lib": lib}))
    _same(*results)


def test_product_with_a_dense_tensor_and_with_another_pattern():
    dense = np.arange(9, dtype=np.float32).reshape(3, 3) - 4
    other = [[0, 2, 1], [2, 1, 1]]
    results = []
    for lib in (kiln, torch):
        s = _pair(lib)[0]
        t = lib.sparse_coo_tensor(other, [2.0, 3.0, 4.0], (3, 3))
        results.append((s * lib.tensor(dense), lib.tensor(dense) * s, s * t, s * s, s.square()))
    for ours, theirs in zip(*results):
        _same(ours, theirs, same_coalescing=False)


def test_division_by_a_tensor_is_pytorchs_error():
    with pytest.raises(RuntimeError, match="scalar or zero-dim dense tensor divisor"):
        _pair(kiln)[0] / kiln.ones(3, 3)


@pytest.mark.parametrize(
    "fn",
    [
        lambda lib, x: lib.tanh(x),
        lambda lib, x: lib.square(x) / 3,
        lambda lib, x: x.abs() * 2,
        lambda lib, x: x * lib.arange(9.0).view(3, 3),
    ],
)
def test_gradient_to_the_values_equals_the_dense_function(fn):
    s, values = _pair(kiln, requires_grad=True)
    kiln.sparse.sum(fn(kiln, s)).backward()
    theirs = torch.tensor(VALUES, requires_grad=True)
    fn(torch, torch.sparse_coo_tensor(INDICES, theirs, (3, 3)).to_dense()).sum().backward()
    np.testing.assert_allclose(values.grad.numpy(), theirs.grad.numpy(), rtol=1e-6)


@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_sparse_softmax_and_its_gradient(name, dim):
    results = []
    for lib in (kiln, torch):
        s, _ = _pair(lib)
        s.requires_grad_(True)
        # PyTorch 2.13's backward for a negative dim is not the dense function's gradient
        # (it is for the same dim counted from the front): its dim 1 is the oracle for -1
        oracle_dim = dim % 2 if lib is torch else dim
        out = getattr(lib.sparse, name)(s, oracle_dim)
        weights = lib.sparse_coo_tensor(INDICES, [1.0, -2.0, 3.0, 0.5, 2.0], (3, 3))
        lib.sparse.sum(out * weights.coalesce()).backward()
        results.append((out, s.grad))
    (out, grad), (their_out, their_grad) = results
    _same(out, their_out)
    _same(grad, their_grad, same_coalescing=False)  # PyTorch's unique indices flagged not so


def test_sparse_softmax_along_a_dense_dim():
    values = np.linspace(-1, 1, 6, dtype=np.float32).reshape(3, 2)
    outs = [
        lib.sparse.softmax(lib.sparse_coo_tensor([[0, 2, 1]], lib.tensor(values), (4, 2)), 1)
        for lib in (kiln, torch)
    ]
    _same(*outs)
