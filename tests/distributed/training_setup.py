"""The tiny-GPT training shared by the 2-rank job and its single-process reference.

30 AdamW steps in float64 (in float32, gradients that are zero in exact arithmetic -- the
attention key biases -- come out as rounding noise that Adam's normalization turns into full
steps, so two correct computations would drift apart); the global batch of each step is
split evenly between the ranks, and the reference trains on the whole of it.
"""

from __future__ import annotations

import numpy as np

import kiln
from tests.models.models import GPTConfig, models_for

CONFIG = GPTConfig()
STEPS = 30
GLOBAL_BATCH = 8
LR = 1e-2


def batch(step: int) -> tuple[kiln.Tensor, kiln.Tensor]:
    g = np.random.default_rng(step)
    idx = g.integers(0, CONFIG.vocab_size, (GLOBAL_BATCH, CONFIG.block_size))
    return kiln.tensor(idx), kiln.tensor(np.roll(idx, -1, 1))


def make_model():
    kiln.set_default_dtype(kiln.float64)
    kiln.manual_seed(0)
    return models_for(kiln).TinyGPT(CONFIG)


def make_step(model, parameters):
    optimizer = kiln.optim.AdamW(parameters, lr=LR)

    def step(idx, targets):
        optimizer.zero_grad()
        _, loss = model(idx, targets)
        loss.backward()
        optimizer.step()
        return loss

    return step, optimizer


def reference_training() -> tuple[list[float], dict[str, np.ndarray], list[str]]:
    """Single-process training on the whole batch: per-step losses, final parameters, and the
    keys of the model's state dict."""
    previous = kiln.get_default_dtype()
    try:
        model = make_model()
        step, _ = make_step(model, model.parameters())
        losses = [step(*batch(s)).item() for s in range(STEPS)]
        params = {name: p.detach().numpy().copy() for name, p in model.named_parameters()}
    finally:
        kiln.set_default_dtype(previous)
    return losses, params, sorted(model.state_dict())
