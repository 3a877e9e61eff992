"""Small training programs (a CNN with SGD, a character LSTM with Adam) started from
identical weights follow PyTorch's loss curves."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from tests.oracle import needs_torch, torch


def _copy_weights(kiln_model, torch_model) -> None:
    with torch.no_grad():
        for name, value in kiln_model.state_dict().items():
            torch_model.state_dict()[name].copy_(torch.from_numpy(np.array(value.numpy())))


def _curve(lib, model, make_optimizer, batches, loss_fn) -> list[float]:
    optimizer = make_optimizer(lib, model)
    losses = []
    for x, y in batches:
        optimizer.zero_grad()
        loss = loss_fn(lib, model(lib.from_numpy(x)), lib.from_numpy(y))
        loss.backward()
        lib.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        optimizer.step()
        losses.append(loss.item())
    return losses


def _cnn(lib):
    nn = lib.nn
    return nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1),
        nn.BatchNorm2d(4),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(4 * 4 * 4, 3),
    )


class _CharModel:
    """An LSTM language model built from either library's layers."""

    @staticmethod
    def build(lib):
        nn = lib.nn

        class CharLSTM(nn.Module):
            def __init__(self):
                super().__init__()
                self.embed = nn.Embedding(7, 5)
                self.lstm = nn.LSTM(5, 8, num_layers=2, batch_first=True)
                self.head = nn.Linear(8, 7)

            def forward(self, tokens):
                out, _ = self.lstm(self.embed(tokens))
                return self.head(out).transpose(1, 2)

        return CharLSTM()


@needs_torch
@pytest.mark.parametrize(
    "case",
    [
        (
            _cnn,
            lambda lib, m: lib.optim.SGD(m.parameters(), lr=0.1, momentum=0.9, nesterov=True),
            lambda lib, out, y: lib.nn.functional.cross_entropy(
                out, y, weight=lib.tensor([1.0, 2.0, 0.5]), label_smoothing=0.1
            ),
            lambda rng: (
                rng.standard_normal((8, 1, 8, 8)).astype(np.float32),
                rng.integers(0, 3, 8),
            ),
        ),
        (
            _CharModel.build,
            lambda lib, m: lib.optim.Adam(m.parameters(), lr=1e-2),
            lambda lib, out, y: lib.nn.functional.cross_entropy(out, y),
            lambda rng: (rng.integers(0, 7, (4, 6)), rng.integers(0, 7, (4, 6))),
        ),
    ],
    ids=["cnn_sgd_weighted_smoothed_ce", "char_lstm_adam"],
)
def test_loss_curve_matches_torch_from_the_same_weights(case):
    build, make_optimizer, loss_fn, make_batch = case
    rng = np.random.default_rng(0)
    batches = [make_batch(rng) for _ in range(6)]
    kiln.manual_seed(0)
    kiln_model = build(kiln)
    torch_model = build(torch)
    _copy_weights(kiln_model, torch_model)
    got = _curve(kiln, kiln_model, make_optimizer, batches, loss_fn)
    want = _curve(torch, torch_model, make_optimizer, batches, loss_fn)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
