"""A ResNet-style training step gets kernels for every batch size (issue 13), via ``kiln.compile``.

Convolutions of stride 1 and 2 (whose output size ``(s + 1) // 2`` is 1 for one input size
only), BatchNorm2d in training mode (running statistics written in place, the unbiased
variance's ``n / (n - 1)``), ReLU, a residual add, adaptive average pooling, a linear layer,
cross-entropy and SGD with momentum. Every step is compared with the same program run by
PyTorch (loss, parameters, gradients, momentum buffers, running statistics), and the counters
say that no graph was refused the symbolic route nor compiled per size.
"""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.bench.programs import models_for
from kiln.bench.workload_types import training_step
from kiln.dynamo.testing import CompileCounter
from tests.inductor.helpers import (
    assert_every_size_served,
    assert_training_state_matches,
    close_to_torch,
)
from tests.models.models import copy_weights
from tests.oracle import needs_torch, torch


def _compare_cnn_training(shapes, dynamic, classes: int = 10) -> list:
    """Train the bench's ResNetCNN (stem, a stride-1 and a stride-2 basic block, pool, linear)
    under ``kiln.compile`` and in PyTorch on images of ``shapes`` (batch, side); after every
    step everything the step touches agrees. Returns the frames captured after each step."""
    torch.manual_seed(0)
    theirs = models_for(torch).ResNetCNN(4, classes)
    ours = models_for(kiln).ResNetCNN(4, classes)
    copy_weights(kiln, ours, theirs)
    our_opt = kiln.optim.SGD(ours.parameters(), lr=0.05, momentum=0.9)
    their_opt = torch.optim.SGD(theirs.parameters(), lr=0.05, momentum=0.9)
    counter = CompileCounter("inductor")
    compiled = kiln.compile(
        training_step(kiln, ours, our_opt, "cross_entropy"), backend=counter, dynamic=dynamic
    )
    their_step = training_step(torch, theirs, their_opt, "cross_entropy")
    rng = np.random.default_rng(0)
    frames = []
    for batch, side in shapes:
        x = rng.standard_normal((batch, 3, side, side)).astype(np.float32)
        y = rng.integers(0, classes, (batch,))
        loss = compiled(kiln.tensor(x), kiln.tensor(y))
        close_to_torch(loss, their_step(torch.tensor(x), torch.tensor(y)))
        assert_training_state_matches(ours, theirs, our_opt, their_opt)
        frames.append(counter.frame_count)
    return frames


@needs_torch
@pytest.mark.parametrize("dynamic", [True, None])
def test_resnet_training_step_compiles_once_for_every_batch_size(stats, dynamic):
    """Batch sizes 2, 3, 5, 8 (and back): with ``dynamic=True`` the step's graphs are captured
    on the first two steps only (gradients and momentum buffers appear on the second); the
    default automatic dynamic captures once more, on the third step, where the batch size
    becomes a symbol. Every graph gets kernels for every size, none is refused or compiled
    per size."""
    frames = _compare_cnn_training([(2, 8), (3, 8), (5, 8), (8, 8), (3, 8), (6, 8)], dynamic)
    assert_every_size_served(stats)
    settled = 1 if dynamic else 2
    assert frames[settled] == frames[-1]


@needs_torch
@pytest.mark.parametrize("dynamic", [True, None])
def test_resnet_training_step_serves_odd_and_even_image_sizes(stats, dynamic):
    """Image sides of both parities: a stride-2 convolution's weight gradient is the kernel's
    size or one more by the parity, and its output ``(s + 1) // 2`` is related to ``s`` only
    through a floor division; neither pins the parity nor refuses kernels for every size. The
    default captures once more on the third step, where the side and the batch size become
    symbols."""
    shapes = [(2, 8), (3, 8), (5, 9), (4, 7), (3, 10), (2, 9)]
    frames = _compare_cnn_training(shapes, dynamic)
    assert_every_size_served(stats)
    settled = 1 if dynamic else 2
    assert frames[settled] == frames[-1]


@needs_torch
def test_pooled_encoder_training_step_serves_every_image_size(stats):
    """A U-Net encoder's convolution, max pooling and convolution under ``dynamic=True``: the
    pooled image the backward pass keeps comes out with its batch and channel dims swapped,
    dense for every size; asking whether it was contiguous decided whether a pooled side was
    1, which refused kernels for every size (each size then ran the graph's eager ops)."""

    def build(lib):
        lib.manual_seed(0)
        nn = lib.nn
        return nn.Sequential(
            nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(4, 4, 3, padding=1)
        )

    theirs, ours = build(torch), build(kiln)
    copy_weights(kiln, ours, theirs)
    our_opt = kiln.optim.SGD(ours.parameters(), lr=0.05)
    their_opt = torch.optim.SGD(theirs.parameters(), lr=0.05)

    def step(lib, model, opt):
        def run(x):
            opt.zero_grad()
            loss = model(x).square().mean()
            loss.backward()
            opt.step()
            return loss

        return run

    compiled = kiln.compile(step(kiln, ours, our_opt), dynamic=True)
    their_step = step(torch, theirs, their_opt)
    rng = np.random.default_rng(1)
    for batch, side in [(2, 12), (3, 9), (2, 17), (4, 10)]:
        x = rng.standard_normal((batch, 3, side, side)).astype(np.float32)
        close_to_torch(compiled(kiln.tensor(x)), their_step(torch.tensor(x)))
        for p, q in zip(ours.parameters(), theirs.parameters()):
            np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-4, atol=1e-5)
    assert_every_size_served(stats)
