"""Sparse gradients against PyTorch: ``nn.Embedding(sparse=True)``'s, and the optimizers that
take them (SGD, SparseAdam)."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from tests.oracle import needs_torch, torch

pytestmark = needs_torch

LOOKUPS = [[1, 2, 4, 1], [0, 4, 9, 3]]


def _embedding(lib, **options):
    emb = lib.nn.Embedding(10, 3, sparse=True, **options)
    with lib.no_grad():
        emb.weight.copy_(lib.from_numpy(np.linspace(-1, 1, 30, dtype=np.float32).reshape(10, 3)))
    return emb


@pytest.mark.parametrize("options", [{}, {"padding_idx": 0}])
def test_embedding_gradient_is_sparse_as_pytorchs(options):
    grads = []
    for lib in (kiln, torch):
        emb = _embedding(lib, **options)
        (emb(lib.tensor(LOOKUPS)) ** 2).sum().backward()
        grads.append(emb.weight.grad)
    k, t = grads
    assert k.is_sparse and t.is_sparse and k._nnz() == t._nnz()
    np.testing.assert_allclose(k.to_dense().numpy(), t.to_dense().numpy(), rtol=1e-6)


def test_scale_grad_by_freq_with_sparse_gradients_is_pytorchs_error():
    for lib in (kiln, torch):
        emb = _embedding(lib, scale_grad_by_freq=True)
        bag = lib.nn.EmbeddingBag(10, 3, sparse=True, scale_grad_by_freq=True)
        for module in (emb, bag):
            with pytest.raises(RuntimeError, match="scale_grad_by_freq not supported with sparse"):
                module(lib.tensor(LOOKUPS)).sum().backward()


def test_functional_embedding_sparse_gradient():
    grads = []
    for lib in (kiln, torch):
        weight = lib.ones(5, 2, requires_grad=True)
        lib.nn.functional.embedding(lib.tensor([0, 3, 3]), weight, sparse=True).sum().backward()
        grads.append(weight.grad)
    assert grads[0].is_sparse
    np.testing.assert_array_equal(grads[0].to_dense().numpy(), grads[1].to_dense().numpy())


@pytest.mark.parametrize(
    "name, options",
    [
        ("SGD", {"lr": 0.1}),
        ("SGD", {"lr": 0.1, "momentum": 0.9}),
        ("SGD", {"lr": 0.1, "momentum": 0.9, "nesterov": True}),
        ("SparseAdam", {"lr": 0.1}),
        ("SparseAdam", {"maximize": True}),
    ],
)
def test_optimizer_trajectory_with_sparse_gradients_matches_pytorch(name, options):
    weights = []
    for lib in (kiln, torch):
        emb = _embedding(lib, padding_idx=0)
        optimizer = getattr(lib.optim, name)(emb.parameters(), **options)
        for step in range(4):
            optimizer.zero_grad()
            lookups = lib.tensor(LOOKUPS) if step % 2 else lib.tensor([[5, 6, 5]])
            (emb(lookups) ** 2).sum().backward()
            optimizer.step()
        weights.append(emb.weight.detach().numpy())
    np.testing.assert_allclose(weights[0], weights[1], rtol=1e-6, atol=1e-7)


def test_sparse_gradient_accumulates_over_two_backward_passes():
    grads = []
    for lib in (kiln, torch):
        emb = _embedding(lib)
        for lookups in ([1, 2], [2, 7]):
            emb(lib.tensor(lookups)).sum().backward()
        grads.append(emb.weight.grad)
    assert grads[0].is_sparse
    np.testing.assert_array_equal(grads[0].to_dense().numpy(), grads[1].to_dense().numpy())


BAG_CASES = [
    {"mode": "mean"},
    {"mode": "sum", "padding_idx": 2},
    {"mode": "sum", "per_sample_weights": True},
]


@pytest.mark.parametrize("case", BAG_CASES, ids=[str(c) for c in BAG_CASES])
def test_embedding_bag_gradient_is_sparse_as_pytorchs(case):
    case = dict(case)
    weighted = case.pop("per_sample_weights", False)
    grads = []
    for lib in (kiln, torch):
        bag = lib.nn.EmbeddingBag(6, 2, sparse=True, **case)
        with lib.no_grad():
            bag.weight.copy_(lib.arange(12.0).view(6, 2) / 10)
        extra = {"per_sample_weights": lib.tensor([1.0, 2, 3, 4, 5])} if weighted else {}
        out = bag(lib.tensor([1, 2, 4, 1, 3]), lib.tensor([0, 2]), **extra)
        (out * lib.tensor([[1.0, 2.0], [3.0, 4.0]])).sum().backward()
        grads.append(bag.weight.grad)
    assert grads[0].is_sparse and grads[1].is_sparse
    assert grads[0]._nnz() == grads[1]._nnz()
    np.testing.assert_allclose(grads[0].to_dense().numpy(), grads[1].to_dense().numpy(), rtol=1e-6)


def test_zero_grad_keeping_a_sparse_gradient_empties_it():
    nnz = []
    for lib in (kiln, torch):
        emb = _embedding(lib)
        emb(lib.tensor([1, 2])).sum().backward()
        assert emb.weight.grad.data.is_sparse
        lib.optim.SGD(emb.parameters(), lr=0.1).zero_grad(set_to_none=False)
        nnz.append((emb.weight.grad.is_sparse, emb.weight.grad._nnz()))
        emb(lib.tensor([3])).sum().backward()
        nnz.append(emb.weight.grad.to_dense().sum().item())
    assert nnz[:2] == nnz[2:] and nnz[0] == (True, 0)
