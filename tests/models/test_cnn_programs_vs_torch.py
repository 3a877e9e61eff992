"""Small vision programs, written once for both libraries, trained under ``kiln.compile``
against PyTorch (probe round 7's most telling CNN programs).

Each step starts from PyTorch's current weights (copied in place): BatchNorm with small batches
and ReLU/max-pool ties make the trajectories of two float32 libraries part after a few steps
(PyTorch drifts as far from itself for a 1e-7 nudge of its weights), so a step is compared, not a
trajectory. Optimizers without gradient normalisation (SGD) keep a bias that feeds a norm layer
(whose gradient is rounding noise) from being blown up to a full step.
"""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from tests.models.models import copy_weights
from tests.oracle import needs_torch, torch


def _mobilenet(lib):
    """Inverted residual blocks: 1x1 expansion, depthwise 3x3 (stride 1 and 2), squeeze and
    excitation, hardswish, ReLU6, BatchNorm."""
    nn, F = lib.nn, lib.nn.functional

    class SqueezeExcite(nn.Module):
        def __init__(self, channels):
            super().__init__()
            self.reduce = nn.Conv2d(channels, channels // 4, 1)
            self.expand = nn.Conv2d(channels // 4, channels, 1)

        def forward(self, x):
            weights = self.expand(F.relu(self.reduce(F.adaptive_avg_pool2d(x, 1))))
            return x * F.hardsigmoid(weights)

    class InvertedResidual(nn.Module):
        def __init__(self, cin, cout, stride, expansion):
            super().__init__()
            hidden = cin * expansion
            self.residual = stride == 1 and cin == cout
            self.body = nn.Sequential(
                nn.Conv2d(cin, hidden, 1, bias=False), nn.BatchNorm2d(hidden), nn.Hardswish(),
                nn.Conv2d(hidden, hidden, 3, stride, 1, groups=hidden, bias=False),
                nn.BatchNorm2d(hidden), nn.ReLU6(), SqueezeExcite(hidden),
                nn.Conv2d(hidden, cout, 1, bias=False), nn.BatchNorm2d(cout),
            )  # fmt: skip

        def forward(self, x):
            y = self.body(x)
            return x + y if self.residual else y

    return nn.Sequential(
        nn.Conv2d(3, 8, 3, 2, 1, bias=False), nn.BatchNorm2d(8), nn.SiLU(),
        InvertedResidual(8, 8, 1, 2), InvertedResidual(8, 12, 2, 3),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(12, 7),
    )  # fmt: skip


def _unet(lib):
    """Two levels: reflect-padded and padding='same' convolutions, GroupNorm and BatchNorm,
    ceil-mode max pooling, a ConvTranspose2d padded to the skip's odd size, bilinear
    interpolation to the skip's size, pixel shuffle/unshuffle."""
    nn, F = lib.nn, lib.nn.functional

    def double(cin, cout):
        return nn.Sequential(
            nn.Conv2d(cin, cout, 3, padding=1, padding_mode="reflect"), nn.GroupNorm(2, cout),
            nn.LeakyReLU(0.1), nn.Conv2d(cout, cout, 3, padding="same"), nn.BatchNorm2d(cout),
            nn.ReLU(inplace=True),
        )  # fmt: skip

    class UNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.down1, self.down2 = double(3, 8), double(8, 16)
            self.up = nn.ConvTranspose2d(16, 8, 2, 2)
            self.merge = double(16, 8)
            self.shuffle = nn.Conv2d(8, 8, 1)
            self.out = nn.Conv2d(2, 2, 1)

        def forward(self, x):
            a = self.down1(x)
            b = self.down2(F.max_pool2d(a, 2, ceil_mode=True))
            u = self.up(b)
            u = F.interpolate(u, size=a.shape[2:], mode="bilinear", align_corners=True)
            u = self.merge(lib.cat([u, a], 1))
            u = F.pixel_unshuffle(F.pixel_shuffle(self.shuffle(u), 2), 2)[:, :2]
            return self.out(u)

    return UNet()


def _classifier_step(lib, model, opt, x, y):
    opt.zero_grad()
    loss = lib.nn.functional.cross_entropy(model(x), y, label_smoothing=0.1)
    loss.backward()
    lib.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    return loss


def _accumulating_step(lib, model, opt, x, y):
    """Two micro-batches of the batch's even and odd samples, gradients accumulated."""
    opt.zero_grad()
    total = 0
    for half in range(2):
        loss = lib.nn.functional.mse_loss(model(x[half::2]), y[half::2]) / 2
        loss.backward()
        total = total + loss.detach()
    lib.nn.utils.clip_grad_value_(model.parameters(), 0.5)
    opt.step()
    return total


def _assert_state_matches(ours, theirs) -> None:
    for (name, p), q in zip(ours.named_parameters(), theirs.parameters()):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), 1e-4, 1e-5, err_msg=name)
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), 1e-3, 1e-5, err_msg=name)
    for (name, b), c in zip(ours.named_buffers(), theirs.buffers()):
        np.testing.assert_allclose(b.numpy(), c.numpy(), 1e-4, 1e-5, err_msg=name)


def _train_against_torch(build, step, batches, compile_kwargs, channels_last=False):
    """``step`` on each (x, y) batch in both libraries, compiled in kiln with
    ``compile_kwargs``; ``mark_dynamic`` on the batch dim when the key is given."""
    torch.manual_seed(0)
    theirs, ours = build(torch), build(kiln)
    copy_weights(kiln, ours, theirs)
    if channels_last:
        theirs = theirs.to(memory_format=torch.channels_last)
        ours = ours.to(memory_format=kiln.channels_last)
    their_opt = torch.optim.SGD(theirs.parameters(), lr=0.05, momentum=0.9, nesterov=True)
    our_opt = kiln.optim.SGD(ours.parameters(), lr=0.05, momentum=0.9, nesterov=True)
    mark_batch = compile_kwargs.pop("mark_batch_dynamic", False)
    compiled = kiln.compile(step, **compile_kwargs)
    for x, y in batches:
        with kiln.no_grad():
            for ours_value, their_value in zip(
                ours.state_dict().values(), theirs.state_dict().values()
            ):
                ours_value.copy_(kiln.tensor(their_value.numpy()))
        tx = torch.tensor(x)
        kx = kiln.tensor(x)
        if channels_last:
            tx = tx.contiguous(memory_format=torch.channels_last)
            kx = kx.contiguous(memory_format=kiln.channels_last)
        if mark_batch:
            kiln._dynamo.mark_dynamic(kx, 0)
        their_loss = step(torch, theirs, their_opt, tx, torch.tensor(y))
        our_loss = compiled(kiln, ours, our_opt, kx, kiln.tensor(y))
        np.testing.assert_allclose(our_loss.detach().numpy(), their_loss.detach().numpy(), 1e-4)
        _assert_state_matches(ours, theirs)
    theirs.eval(), ours.eval()
    x = batches[0][0][:1]
    with torch.inference_mode():
        expected = theirs(torch.tensor(x))
    with kiln.inference_mode():
        got = kiln.compile(ours)(kiln.tensor(x))
    assert got.is_inference()
    np.testing.assert_allclose(got.numpy(), expected.numpy(), 1e-4, 1e-5)


def _images(rng, batch, side_h, side_w, classes=None, channels_out=2):
    x = rng.standard_normal((batch, 3, side_h, side_w)).astype(np.float32)
    if classes is not None:
        return x, rng.integers(0, classes, (batch,))
    return x, rng.standard_normal((batch, channels_out, side_h, side_w)).astype(np.float32)


@needs_torch
@pytest.mark.slow  # ~14 s: the batch's recompile under mark_dynamic and channels-last layouts
def test_mobilenet_steps_on_channels_last_images_with_a_marked_batch_match_torch():
    rng = np.random.default_rng(1)
    batches = [_images(rng, b, 17, 23, classes=7) for b in (3, 5, 3)]
    _train_against_torch(
        _mobilenet, _classifier_step, batches, {"mark_batch_dynamic": True}, channels_last=True
    )


@needs_torch
def test_unet_steps_with_gradient_accumulation_under_dynamic_match_torch():
    rng = np.random.default_rng(2)
    batches = [_images(rng, 4, 17, 23), _images(rng, 6, 17, 23)]
    _train_against_torch(_unet, _accumulating_step, batches, {"dynamic": True})
