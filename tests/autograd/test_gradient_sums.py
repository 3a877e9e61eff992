"""Gradients meeting at one tensor are summed into one of them when nothing else sees it, as
PyTorch's InputBuffer does: a tied weight (an embedding and its language-model head) or a
residual stream needs no third buffer for the sum, and a gradient something else still holds
(a hook kept it, create_graph needs its history) is never written."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.runtime.storage import memory_unshared, pool
from tests.oracle import needs_torch, torch

MB = 1 << 20


@pytest.fixture
def pooled_allocations(monkeypatch) -> list[int]:
    """The sizes of the pooled buffers handed out while the test runs (1 MiB and more)."""
    sizes: list[int] = []
    allocate = pool.allocate

    def counting(nbytes: int):
        sizes.append(nbytes)
        return allocate(nbytes)

    monkeypatch.setattr(pool, "allocate", counting)
    return sizes


def test_two_gradients_of_a_leaf_are_summed_into_one_of_them(pooled_allocations):
    x = kiln.randn(1024, 1024, requires_grad=True)  # 4 MB: pooled
    loss = (x * 2).sum() + (x * 3).sum()
    del pooled_allocations[:]
    loss.backward()
    # one buffer per product's gradient; the sum is written into the first of them
    assert len(pooled_allocations) == 2
    np.testing.assert_array_equal(x.grad.numpy(), np.full((1024, 1024), 5, np.float32))


@needs_torch
def test_tied_embedding_and_head_take_two_weight_sized_buffers(pooled_allocations):
    rng = np.random.default_rng(0)
    vocab, width = 2048, 256  # a 2 MB weight
    weight = rng.standard_normal((vocab, width), dtype=np.float32) / 16
    tokens = rng.integers(0, vocab, (4, 32))

    def loss_of(lib, w, idx):
        hidden = lib.nn.functional.embedding(idx, w).tanh()
        logits = lib.nn.functional.linear(hidden, w)  # nanoGPT's head: nn.Linear
        return lib.nn.functional.cross_entropy(logits.reshape(-1, vocab), idx.reshape(-1))

    w = kiln.tensor(weight, requires_grad=True)
    loss = loss_of(kiln, w, kiln.tensor(tokens))
    del pooled_allocations[:]
    loss.backward()
    weight_sized = [n for n in pooled_allocations if n == weight.nbytes]
    # the head's; the embedding's is numpy zeros (calloc'd pages, rows no token names never
    # touched), and the sum goes into one of the two: no third weight-sized buffer
    assert len(weight_sized) == 1, pooled_allocations

    tw = torch.tensor(weight, requires_grad=True)
    loss_of(torch, tw, torch.tensor(tokens)).backward()
    np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy(), rtol=1e-5, atol=1e-7)


def test_a_gradient_a_hook_kept_is_not_written():
    x = kiln.randn(1024, 1024, requires_grad=True)
    y = x.clone()
    kept = []
    y.register_hook(kept.append)  # y's gradient reaches x unchanged, through the clone
    loss = (y * 2).sum() + (x * 3).sum()
    loss.backward()
    np.testing.assert_array_equal(kept[0].numpy(), np.full((1024, 1024), 2, np.float32))
    np.testing.assert_array_equal(x.grad.numpy(), np.full((1024, 1024), 5, np.float32))


@needs_torch
def test_create_graph_sums_keep_their_history():
    data = np.linspace(-1, 1, 1 << 18, dtype=np.float32).reshape(512, 512)
    x = kiln.tensor(data, requires_grad=True)
    (gx,) = kiln.autograd.grad((x.sin() * 2).sum() + (x * x).sum(), x, create_graph=True)
    gx.sum().backward()
    tx = torch.tensor(data, requires_grad=True)
    (tg,) = torch.autograd.grad((tx.sin() * 2).sum() + (tx * tx).sum(), tx, create_graph=True)
    tg.sum().backward()
    np.testing.assert_allclose(gx.detach().numpy(), tg.detach().numpy(), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-6, atol=1e-6)


def _unshared(t: kiln.Tensor) -> bool:
    # not inside an assert: pytest's rewriting keeps the operands for its message
    return memory_unshared(t._data, t._storage)


def test_memory_unshared_sees_every_other_reference():
    t = kiln.ones(1024, 1024) * 2  # pooled
    small = kiln.ones(8) * 2  # numpy's own
    assert _unshared(t)
    assert _unshared(small)
    view = t[1:]
    assert not _unshared(t)
    del view
    array = t.numpy()
    assert not _unshared(t)
    del array
    alias = t.detach()
    assert not _unshared(t)
    del alias
    t.untyped_storage()  # a storage of its own
    assert _unshared(t)
