"""End to end: the same MLP, tiny GPT and CNN built from kiln.nn and torch.nn, loaded with the
same initial weights and trained on the same data; the loss curves must agree at every step."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from tests.models.models import GPTConfig, copy_weights, models_for
from tests.oracle import assert_close, needs_torch, torch

pytestmark = needs_torch

STEPS = 20


def _twins(name: str, *args):
    torch.manual_seed(0)
    t_model = getattr(models_for(torch), name)(*args)
    k_model = getattr(models_for(kiln), name)(*args)
    copy_weights(kiln, k_model, t_model)
    return k_model, t_model


def _train(lib, model, opt, batches, loss_fn):
    losses = []
    for step in range(STEPS):
        inputs = [lib.tensor(a) for a in batches[step % len(batches)]]
        opt.zero_grad()
        loss = loss_fn(lib, model, *inputs)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return np.array(losses)


def _compare(k_model, t_model, k_losses, t_losses, rtol=1e-4, atol=1e-5):
    """Loss curves agree; parameters are not compared one by one: a parameter whose gradient is
    zero up to rounding (a key bias in attention, a conv bias before BatchNorm) gets Adam steps
    of +-lr decided by rounding noise, in PyTorch as in kiln, without changing the function."""
    np.testing.assert_allclose(k_losses, t_losses, rtol=rtol, atol=atol)
    assert k_losses[-1] < k_losses[0]
    assert list(k_model.state_dict()) == list(t_model.state_dict())


def _train_both(k_model, t_model, batches, loss_fn, optimizer: str, **options):
    """Train the twins with the same optimizer class and settings, then compare them."""
    k_opt = getattr(kiln.optim, optimizer)(k_model.parameters(), **options)
    t_opt = getattr(torch.optim, optimizer)(t_model.parameters(), **options)
    k_losses = _train(kiln, k_model, k_opt, batches, loss_fn)
    _compare(k_model, t_model, k_losses, _train(torch, t_model, t_opt, batches, loss_fn))


def _mse(lib, model, x, y):
    return lib.nn.functional.mse_loss(model(x), y)


def test_mlp_adamw_loss_curve_matches_torch():
    rng = np.random.default_rng(0)
    batches = [
        (
            rng.standard_normal((16, 8)).astype(np.float32),
            rng.standard_normal((16, 4)).astype(np.float32),
        )
        for _ in range(4)
    ]
    k_model, t_model = _twins("MLP")
    _train_both(k_model, t_model, batches, _mse, "AdamW", lr=3e-3)


def _lm(lib, model, idx, targets):
    return model(idx, targets)[1]


@pytest.mark.parametrize(
    "cfg",
    [
        GPTConfig(),
        GPTConfig(tie_weights=False, attention="sdpa"),
        GPTConfig(n_layer=1, attention="mha"),
    ],
    ids=["tied-manual", "untied-sdpa", "mha"],
)
def test_tiny_gpt_adamw_loss_curve_matches_torch(cfg):
    rng = np.random.default_rng(1)
    text = rng.integers(0, cfg.vocab_size, 400)
    batches = []
    for _ in range(5):
        starts = rng.integers(0, len(text) - cfg.block_size - 1, 4)
        idx = np.stack([text[s : s + cfg.block_size] for s in starts]).astype(np.int64)
        tgt = np.stack([text[s + 1 : s + cfg.block_size + 1] for s in starts]).astype(np.int64)
        batches.append((idx, tgt))
    k_model, t_model = _twins("TinyGPT", cfg)
    if cfg.tie_weights:
        assert k_model.lm_head.weight is k_model.wte.weight
    _train_both(k_model, t_model, batches, _lm, "AdamW", lr=3e-3, weight_decay=0.1)
    k_model.eval()
    t_model.eval()
    idx = batches[0][0][:, :7]
    assert_close(k_model(kiln.tensor(idx))[0], t_model(torch.tensor(idx))[0], rtol=1e-3, atol=1e-4)


def _ce(lib, model, x, y):
    return lib.nn.functional.cross_entropy(model(x), y)


def test_small_cnn_adam_loss_curve_and_running_stats_match_torch():
    rng = np.random.default_rng(2)
    batches = [
        (
            rng.standard_normal((8, 3, 8, 8)).astype(np.float32),
            rng.integers(0, 5, 8).astype(np.int64),
        )
        for _ in range(3)
    ]
    k_model, t_model = _twins("SmallCNN")
    _train_both(k_model, t_model, batches, _ce, "Adam", lr=1e-3)
    assert int(k_model.features[1].num_batches_tracked) == STEPS
    bn = (k_model.features[5], t_model.features[5])
    assert_close(bn[0].running_mean, bn[1].running_mean, rtol=1e-3, atol=1e-4)
    assert_close(bn[0].running_var, bn[1].running_var, rtol=1e-3, atol=1e-4)
    k_model.eval()
    t_model.eval()
    x = batches[0][0]
    assert_close(k_model(kiln.tensor(x)), t_model(torch.tensor(x)), rtol=1e-3, atol=1e-4)
