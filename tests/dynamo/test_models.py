"""The reference MLP and tiny GPT (tests/models) compile into exactly one graph each."""

from __future__ import annotations

import copy

import pytest

import kiln
from kiln.dynamo.testing import CompileCounter
from tests.models.models import GPTConfig, models_for

from .helpers import assert_same

MODELS = models_for(kiln)


def _mlp():
    return MODELS.MLP(), lambda batch: (kiln.randn(batch, 8),)


def _gpt(attention="manual"):
    cfg = GPTConfig(attention=attention)

    def inputs(batch):
        idx = kiln.randint(0, cfg.vocab_size, (batch, 8))
        return (idx, kiln.randint(0, cfg.vocab_size, (batch, 8)))

    return MODELS.TinyGPT(cfg), inputs


@pytest.mark.parametrize("make", [_mlp, _gpt], ids=["mlp", "tiny_gpt"])
def test_model_is_one_graph_compiled_once_then_once_per_batch_size(make):
    model, inputs = make()
    counter = CompileCounter()
    compiled = kiln.compile(model, backend=counter, fullgraph=True)
    args = inputs(4)
    for _ in range(20):
        assert_same(compiled(*args), model(*args))
    assert counter.frame_count == 1
    args = inputs(6)
    for _ in range(3):
        assert_same(compiled(*args), model(*args))
    assert counter.frame_count == 2


def test_gpt_graph_has_the_users_source_lines():
    model, inputs = _gpt()
    counter = CompileCounter()
    kiln.compile(model, backend=counter, fullgraph=True)(*inputs(2))
    sources = {n.meta.get("source", "") for n in counter.graphs[0].graph.nodes}
    assert any(s.endswith(".py:" + s.rsplit(":", 1)[-1]) and "models.py" in s for s in sources)


def test_compiled_gpt_trains_like_eager():
    model, inputs = _gpt()
    twin = copy.deepcopy(model)
    compiled = kiln.compile(model, fullgraph=True)
    opt = kiln.optim.AdamW(model.parameters(), lr=1e-2)
    twin_opt = kiln.optim.AdamW(twin.parameters(), lr=1e-2)
    idx, targets = inputs(3)
    for _ in range(3):
        for m, o in ((compiled, opt), (twin, twin_opt)):
            o.zero_grad()
            _, loss = m(idx, targets)
            loss.backward()
            o.step()
        # compiled kernels sum in another order: float32 drift over training steps
        assert_same(model.lm_head.weight.grad, twin.lm_head.weight.grad, rtol=1e-4, atol=1e-5)
    assert_same(compiled(idx, targets), twin(idx, targets), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
def test_batch_norm_running_stats_stay_free_of_autograd_history(backend):
    """F.batch_norm updates running stats under no_grad: graphs must replay that switch."""
    x = kiln.randn(8, 4, requires_grad=True)
    compiled_bn, eager_bn = kiln.nn.BatchNorm1d(4), kiln.nn.BatchNorm1d(4)
    y = kiln.compile(compiled_bn, backend=backend)(x)
    y.sum().backward()
    expected = eager_bn(x)
    assert not compiled_bn.running_mean.requires_grad and compiled_bn.running_mean.grad_fn is None
    assert_same(compiled_bn.running_mean, eager_bn.running_mean, rtol=1e-5, atol=1e-6)
    assert_same(y, expected, rtol=1e-5, atol=1e-6)
    assert kiln.is_grad_enabled()
