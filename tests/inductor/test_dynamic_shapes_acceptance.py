"""Issue 13's acceptance through ``kiln.compile`` with its default settings (the inductor).

Every call is compared with PyTorch; captures are counted with ``kiln.dynamo.counters`` around
the loop, so nothing but the default backend takes part: a changing size becomes a symbol on the
second capture, which then serves every later size (sizes of 1 specialize, as PyTorch's do).
A graph the inductor cannot compile would run eagerly with a warning: that fails these tests.
"""

from __future__ import annotations

import functools
import random

import numpy as np
import pytest

import kiln
from kiln.dynamo.counters import counters
from tests.models.models import GPTConfig, copy_weights, models_for
from tests.oracle import needs_torch, torch

# a graph the inductor fails on runs eagerly with a warning (right values, no kernels): here an error
pytestmark = [
    needs_torch,
    pytest.mark.filterwarnings("error:backend .* failed to compile:RuntimeWarning"),
]


class _Captures:
    """Graphs captured and recompiles while the block runs (``kiln.dynamo.counters``)."""

    def __enter__(self):
        self.start = (counters["frames"]["ok"], counters["recompiles"]["total"])
        return self

    def __exit__(self, *exc) -> None:
        self.frames = counters["frames"]["ok"] - self.start[0]
        self.recompiles = counters["recompiles"]["total"] - self.start[1]


def _close(ours, theirs, rtol=1e-4, atol=1e-5) -> None:
    assert tuple(ours.shape) == tuple(theirs.shape)
    np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(), rtol=rtol, atol=atol)


def _mixer_for(lib):
    """``models.SequenceMixer`` taking its peak with ``amax``."""
    return functools.partial(models_for(lib).SequenceMixer, amax=True)


def _shapes(seed: int, count: int) -> list[tuple[int, int]]:
    """Batch sizes 1..64 and sequence lengths 1..128 in a random order, the corners included."""
    rng = random.Random(seed)
    shapes = [(rng.randint(1, 64), rng.randint(1, 128)) for _ in range(count)]
    return shapes + [(1, 1), (64, 128), (1, 128), (64, 1)]


@pytest.mark.parametrize("dynamic, most", [(None, 2), (True, 1)], ids=["default", "dynamic"])
def test_batch_sizes_and_sequence_lengths_in_random_order_capture_few_graphs(dynamic, most):
    torch.manual_seed(0)
    theirs = _mixer_for(torch)()
    ours = _mixer_for(kiln)()
    copy_weights(kiln, ours, theirs)
    compiled = kiln.compile(ours, dynamic=dynamic)
    with _Captures() as captured, kiln.no_grad(), torch.no_grad():
        for k, (b, t) in enumerate(_shapes(seed=7, count=8)):
            data = np.random.default_rng(k).standard_normal((b, t, 8)).astype(np.float32)
            for got, expected in zip(compiled(kiln.tensor(data)), theirs(torch.tensor(data))):
                _close(got, expected)
    assert captured.frames <= most


@pytest.mark.slow  # two GPT graphs compiled cold
def test_gpt_forward_over_sequence_lengths_with_1_captures_two_graphs():
    """nanoGPT's head merge (``y.transpose(1, 2).contiguous().view(B, T, C)``) copies for every
    length but 1, where eager code returns a view: length 1 is served by the dynamic graph too
    (PyTorch specializes it, a third graph), since nothing observes that aliasing."""
    cfg = GPTConfig(vocab_size=32, block_size=16, n_layer=1, n_head=2, n_embd=16)
    torch.manual_seed(0)
    theirs = models_for(torch).TinyGPT(cfg).eval()
    ours = models_for(kiln).TinyGPT(cfg).eval()
    copy_weights(kiln, ours, theirs)
    compiled = kiln.compile(ours)
    rng = np.random.default_rng(3)
    with _Captures() as captured, kiln.no_grad(), torch.no_grad():
        for t in (9, 5, 1, 7, 1, 16, 2):
            idx = rng.integers(0, cfg.vocab_size, (2, t))
            logits, _ = compiled(kiln.tensor(idx))
            expected, _ = theirs(torch.tensor(idx))
            _close(logits, expected)
    assert captured.frames == 2


@pytest.mark.slow  # two GPT graphs compiled cold: about 12 s of CPU
def test_greedy_generation_of_64_tokens_captures_at_most_three_graphs():
    cfg = GPTConfig(vocab_size=32, block_size=64, n_layer=1, n_head=2, n_embd=16)
    torch.manual_seed(0)
    theirs = models_for(torch).TinyGPT(cfg).eval()
    ours = models_for(kiln).TinyGPT(cfg).eval()
    copy_weights(kiln, ours, theirs)
    compiled = kiln.compile(ours)
    idx = [[1]]
    with _Captures() as captured, kiln.no_grad(), torch.no_grad():
        for _ in range(64):
            context = [row[-cfg.block_size :] for row in idx]
            logits, _ = compiled(kiln.tensor(context))
            expected, _ = theirs(torch.tensor(context))
            _close(logits, expected)
            idx[0].append(int(expected[0, -1].argmax()))
    assert captured.frames <= 3


@pytest.mark.slow  # forward, backward and optimizer graphs compiled cold: about 13 s of CPU
def test_a_training_step_over_a_smaller_last_batch_compiles_at_most_twice():
    """The whole step (forward, loss, backward, optimizer step) compiled; the dataset's last
    batch is smaller. Its capture is split at ``backward()``: the step's own frame is captured
    at most twice, every loss and the final weights equal PyTorch's."""
    rng = np.random.default_rng(0)
    data = [
        (rng.standard_normal((n, 8)).astype(np.float32),
         rng.standard_normal((n, 4)).astype(np.float32))
        for n in (16, 16, 16, 5)
    ]  # fmt: skip

    def make_step(lib, model):
        # no optimizer state: a momentum buffer made by the first step recompiles the code
        # after ``backward()`` once (its guard sees the new state), whatever the shapes do
        optimizer = lib.optim.SGD(model.parameters(), lr=0.05)

        def train_step(x, y):
            loss = lib.nn.functional.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            return loss

        return train_step

    torch.manual_seed(0)
    theirs = models_for(torch).MLP()
    ours = models_for(kiln).MLP()
    copy_weights(kiln, ours, theirs)
    step = kiln.compile(make_step(kiln, ours))
    reference = make_step(torch, theirs)
    with _Captures() as captured:
        for _ in range(2):
            for x, y in data:
                loss = step(kiln.tensor(x), kiln.tensor(y))
                _close(loss, reference(torch.tensor(x), torch.tensor(y)))
    for p, q in zip(ours.parameters(), theirs.parameters()):
        _close(p, q)
    assert captured.recompiles <= 1  # the step's frame: a static capture, then a dynamic one
