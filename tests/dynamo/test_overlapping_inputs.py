"""Inputs of a compiled function that view overlapping memory (``f(base[:4], base[2:])``): the
graph treats inputs as separate buffers, so calls whose graph writes to an input run eagerly (a
graph break of its own kind), and a guard sends a later overlapping call there too; a graph that
only reads its inputs compiles whatever they overlap; views of one storage that do not overlap
still compile."""

from __future__ import annotations

import numpy as np
import pytest

import kiln


def _shift(a, b):
    a.add_(1)
    return b * 2


def _scale_and_sum(x, flat):
    x.mul_(2)
    return flat.sum()


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_overlapping_views_see_each_others_writes(backend):
    compiled = kiln.compile(_shift, backend=backend)
    base, ref = kiln.arange(6.0), kiln.arange(6.0)
    got = compiled(base[:4], base[2:])
    expected = _shift(ref[:4], ref[2:])
    np.testing.assert_array_equal(got.numpy(), expected.numpy())
    np.testing.assert_array_equal(base.numpy(), ref.numpy())
    g = kiln.compile(_scale_and_sum, backend=backend)
    x = kiln.ones(2, 3)
    assert g(x, x.view(-1)).item() == 12.0


def test_a_later_overlapping_call_is_not_served_by_the_first_graph():
    compiled = kiln.compile(_shift, backend="aot_eager")
    a, b = kiln.zeros(4), kiln.arange(4.0)
    np.testing.assert_array_equal(compiled(a, b).numpy(), (kiln.arange(4.0) * 2).numpy())
    base, ref = kiln.arange(6.0), kiln.arange(6.0)
    got = compiled(base[:4], base[2:])
    np.testing.assert_array_equal(got.numpy(), _shift(ref[:4], ref[2:]).numpy())


def test_disjoint_views_of_one_storage_compile():
    def f(left, right):
        left.mul_(3)
        return left + right

    compiled = kiln.compile(f, backend="aot_eager", fullgraph=True)
    base, ref = kiln.arange(8.0), kiln.arange(8.0)
    got = compiled(base[:4], base[4:])
    np.testing.assert_array_equal(got.numpy(), f(ref[:4], ref[4:]).numpy())
    np.testing.assert_array_equal(base.numpy(), ref.numpy())


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_interleaved_views_of_one_storage_compile(backend):
    # the key and value heads split from one projection and viewed per head (a KV cache fed
    # back as inputs): their extents interleave but no element is shared
    def attend(k, v):
        k.mul_(2)
        return (k * v).sum(-1)

    compiled = kiln.compile(attend, backend=backend, fullgraph=True)
    qkv, ref = kiln.randn(2, 5, 12), None
    ref = qkv.clone()
    heads = [t.view(2, 5, 2, 2).transpose(1, 2) for t in qkv.split(4, dim=-1)[1:]]
    expected_heads = [t.view(2, 5, 2, 2).transpose(1, 2) for t in ref.split(4, dim=-1)[1:]]
    got = compiled(*heads)
    np.testing.assert_allclose(got.numpy(), attend(*expected_heads).numpy(), rtol=1e-6)
    np.testing.assert_array_equal(qkv.numpy(), ref.numpy())


def _language_model_step(model, data, targets):
    """word_language_model's and char-RNN's step: ``data`` and ``targets`` are overlapping
    slices of one token stream (``source[i:i+n]``, ``source[i+1:i+1+n]``)."""
    logits = model(data)
    loss = kiln.nn.functional.cross_entropy(logits.view(-1, logits.shape[-1]), targets.reshape(-1))
    loss.backward()
    return loss.detach()


def _embedding_and_head():
    kiln.manual_seed(0)
    return kiln.nn.Sequential(kiln.nn.Embedding(10, 8), kiln.nn.Linear(8, 10))


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_overlapping_inputs_the_graph_only_reads_compile(backend):
    from kiln.dynamo.testing import CompileCounter

    stream = kiln.arange(13) % 10
    counter = CompileCounter(backend)
    model, ref = _embedding_and_head(), _embedding_and_head()
    compiled = kiln.compile(_language_model_step, backend=counter)
    for i in (0, 4, 8):  # overlapping slices, then apart: one graph serves both
        data, targets = stream[i : i + 4], stream[i + 1 : i + 5]
        if i == 8:
            targets = targets.clone()
        got = compiled(model, data.view(2, 2), targets.view(2, 2))
        expected = _language_model_step(ref, data.view(2, 2), targets.view(2, 2))
        np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-6)
        for p, q in zip(model.parameters(), ref.parameters()):
            np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-5, atol=1e-7)
    # the step up to backward and the detach after it (the step ran eagerly: none), compiled
    # once for overlapping and separate slices
    assert counter.frame_count == 2
