"""What the graph keeps for backward, and when it lets go: a node's saved tensors are freed as
soon as its backward has run (unless ``retain_graph``), and ops keep what PyTorch keeps, not
their whole inputs. Arrays are watched through weak references to ``Tensor.numpy()``."""

from __future__ import annotations

import gc
import weakref

import numpy as np

import kiln
import kiln.nn.functional as F
from tests.oracle import needs_torch, torch


def _watch(t: kiln.Tensor) -> weakref.ref:
    return weakref.ref(t.detach().numpy())


def _chain(retain_graph: bool) -> list[bool]:
    """Backward through x -> a = tanh(x) -> b = tanh(a) -> sum; whether ``b``'s array (which
    TanhBackward saves) is still alive when ``a``'s gradient arrives."""
    x = kiln.randn(64, 64, requires_grad=True)
    a = x.tanh()
    b = a.tanh()
    watched = _watch(b)
    loss = b.sum()
    del b
    gc.collect()
    alive = []
    a.register_hook(lambda g: alive.append(watched() is not None))
    loss.backward(retain_graph=retain_graph)
    return alive


def test_backward_frees_a_nodes_saved_tensors_once_it_ran():
    assert _chain(retain_graph=False) == [False]


def test_retain_graph_keeps_saved_tensors():
    assert _chain(retain_graph=True) == [True]


@needs_torch
def test_log_softmax_keeps_one_logits_sized_array():
    """Its node keeps exp(x - max) for the derivative, as PyTorch keeps the output: the
    log-probabilities themselves are freed once the forward stops using them."""
    rng = np.random.default_rng(0)
    logits = rng.standard_normal((32, 100), dtype=np.float32)
    target = rng.integers(0, 100, 32)
    x = kiln.tensor(logits, requires_grad=True)
    log_probs = F.log_softmax(x, dim=1)
    watched = _watch(log_probs)
    loss = F.nll_loss(log_probs, kiln.tensor(target))
    del log_probs
    gc.collect()
    assert watched() is None
    loss.backward()
    xt = torch.tensor(logits, requires_grad=True)
    torch.nn.functional.nll_loss(torch.log_softmax(xt, 1), torch.tensor(target)).backward()
    np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), rtol=1e-5, atol=1e-7)


@needs_torch
def test_log_softmax_double_backward_rebuilds_the_output():
    rng = np.random.default_rng(1)
    data = rng.standard_normal((5, 7), dtype=np.float32)
    x, xt = kiln.tensor(data, requires_grad=True), torch.tensor(data, requires_grad=True)
    (g,) = kiln.autograd.grad((F.log_softmax(x, 1) ** 2).sum(), x, create_graph=True)
    (gt,) = torch.autograd.grad((torch.log_softmax(xt, 1) ** 2).sum(), xt, create_graph=True)
    np.testing.assert_allclose(g.detach().numpy(), gt.detach().numpy(), rtol=1e-4, atol=1e-5)
    (g * g).sum().backward()
    (gt * gt).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), rtol=1e-4, atol=1e-4)


@needs_torch
def test_masked_fill_does_not_keep_its_input():
    rng = np.random.default_rng(2)
    data = rng.standard_normal((8, 8), dtype=np.float32)
    mask = np.triu(np.ones((8, 8), bool), 1)
    x = kiln.tensor(data, requires_grad=True)
    scores = x * 0.5
    watched = _watch(scores)
    out = scores.masked_fill(kiln.tensor(mask), float("-inf")).softmax(-1)
    del scores
    gc.collect()
    assert watched() is None
    weights = rng.standard_normal((8, 8), dtype=np.float32)
    (out * kiln.tensor(weights)).sum().backward()
    xt = torch.tensor(data, requires_grad=True)
    outt = (xt * 0.5).masked_fill(torch.tensor(mask), float("-inf")).softmax(-1)
    (outt * torch.tensor(weights)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_masked_fill_with_a_tensor_value_still_gets_its_gradient():
    x = kiln.randn(4, 4, requires_grad=True)
    value = kiln.tensor(2.0, requires_grad=True)
    mask = kiln.eye(4, dtype=kiln.bool)
    x.masked_fill(mask, value).sum().backward()
    assert value.grad.item() == 4.0
    np.testing.assert_array_equal(x.grad.numpy(), 1 - np.eye(4, dtype=np.float32))


@needs_torch
def test_linear_keeps_neither_its_bias_nor_an_input_without_a_gradient():
    """PyTorch's linear saves the weight for the input's gradient and the input for the
    weight's, never the bias: changing the bias in place, or the weight when only the input
    needs a gradient, before backward is no error (the fuzzer's ``x2.copy_(x2)`` after
    ``linear(x0, x1, x2)`` raised in kiln)."""
    grads = []
    for lib in (torch, kiln):
        x = lib.arange(6.0).reshape(2, 3).requires_grad_()
        w = lib.arange(12.0).reshape(4, 3) / 10
        b = lib.ones(4)
        y = lib.nn.functional.linear(x, w.requires_grad_(), b)
        b.mul_(2)
        y.sum().backward()
        x2 = lib.arange(6.0).reshape(2, 3).requires_grad_()
        h = x2 * 1
        y2 = lib.nn.functional.linear(h, lib.ones(4, 3))
        h.mul_(3)  # (the input is not kept: only the weight is needed)
        y2.sum().backward()
        grads.append((x.grad.numpy(), w.grad.numpy(), x2.grad.numpy()))
    for got, expected in zip(grads[1], grads[0]):
        np.testing.assert_allclose(got, expected)
