"""Vision, diffusion, RL and graph-net programs in the style of popular repositories (timm,
diffusers, CleanRL/Spinning Up, PyG), written once for both libraries and run under
``kiln.compile`` against PyTorch (probe round 9's programs).

Each program starts from PyTorch's weights (copied in) and runs a few steps; losses, gradients
and parameters are compared at every step. Biases whose gradient is rounding noise (a key
projection's bias under softmax) are left out of the comparison: Adam would blow them up to
full steps in either library. Layers that feed a BatchNorm have no bias, as their authors write
them, for the same reason.
"""

from __future__ import annotations

import dataclasses
import io
import math
from collections import OrderedDict

import numpy as np
import pytest

import kiln
from tests.models.models import copy_weights
from tests.oracle import needs_torch, torch

pytestmark = needs_torch


def _close(ours, theirs, what: str, rtol: float = 1e-4, atol: float = 1e-5) -> None:
    def array(v):
        return v.detach().numpy() if hasattr(v, "detach") else np.asarray(v)

    np.testing.assert_allclose(array(ours), array(theirs), rtol, atol, err_msg=what)


def _assert_same_state(ours, theirs, rtol=1e-3, grads=True, skip=()) -> None:
    for (name, p), q in zip(ours.named_parameters(), theirs.parameters()):
        if name in skip:
            continue
        _close(p, q, name, rtol)
        if grads and q.grad is not None:
            _close(p.grad, q.grad, f"{name}.grad", rtol)
    for (name, b), c in zip(ours.named_buffers(), theirs.buffers()):
        _close(b, c, name, rtol)


def _pair(build, *args):
    """The program built in both libraries, kiln's with PyTorch's weights."""
    torch.manual_seed(0)
    theirs, ours = build(torch, *args), build(kiln, *args)
    copy_weights(kiln, ours, theirs)
    return ours, theirs


# ---------------------------------------------------------------------------------- diffusion


def _diffusion_unet(lib):
    """A DDPM noise predictor: sinusoidal time embedding through an MLP, residual blocks with
    GroupNorm/SiLU and the embedding added per channel, a spatial self-attention block (einsum,
    softmax), a strided-conv downsample, a ConvTranspose2d upsample and a skip concat."""
    nn, F = lib.nn, lib.nn.functional

    def timestep_embedding(t, dim):
        half = dim // 2
        freqs = lib.exp(-math.log(10000) * lib.arange(0, half, dtype=lib.float32) / half)
        args = t[:, None].float() * freqs[None]
        return lib.cat([lib.cos(args), lib.sin(args)], dim=-1)

    class ResBlock(nn.Module):
        def __init__(self, cin, cout, tdim):
            super().__init__()
            self.norm1, self.conv1 = nn.GroupNorm(4, cin), nn.Conv2d(cin, cout, 3, padding=1)
            self.temb = nn.Linear(tdim, cout)
            self.norm2, self.conv2 = nn.GroupNorm(4, cout), nn.Conv2d(cout, cout, 3, padding=1)
            self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

        def forward(self, x, temb):
            h = self.conv1(F.silu(self.norm1(x)))
            h = h + self.temb(F.silu(temb))[:, :, None, None]
            h = self.conv2(F.dropout(F.silu(self.norm2(h)), 0.0, self.training))
            return h + self.skip(x)

    class AttnBlock(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.norm, self.qkv, self.proj = (
                nn.GroupNorm(4, c),
                nn.Conv2d(c, 3 * c, 1),
                nn.Conv2d(c, c, 1),
            )

        def forward(self, x):
            B, C, H, W = x.shape
            q, k, v = self.qkv(self.norm(x)).reshape(B, 3, C, H * W).unbind(1)
            w = F.softmax(lib.einsum("bci,bcj->bij", q, k) * (int(C) ** (-0.5)), dim=-1)
            return x + self.proj(lib.einsum("bij,bcj->bci", w, v).reshape(B, C, H, W))

    class UNet(nn.Module):
        def __init__(self, ch=8, tdim=16):
            super().__init__()
            self.tdim = tdim
            self.time_mlp = nn.Sequential(
                nn.Linear(tdim, 2 * tdim), nn.SiLU(), nn.Linear(2 * tdim, tdim)
            )
            self.inc = nn.Conv2d(3, ch, 3, padding=1)
            self.down = ResBlock(ch, 2 * ch, tdim)
            self.pool = nn.Conv2d(2 * ch, 2 * ch, 3, stride=2, padding=1)
            self.mid, self.attn = ResBlock(2 * ch, 2 * ch, tdim), AttnBlock(2 * ch)
            self.up = nn.ConvTranspose2d(2 * ch, 2 * ch, 4, 2, 1)
            self.dec = ResBlock(4 * ch, ch, tdim)
            self.out = nn.Sequential(nn.GroupNorm(4, ch), nn.SiLU(), nn.Conv2d(ch, 3, 3, padding=1))

        def forward(self, x, t):
            temb = self.time_mlp(timestep_embedding(t, self.tdim))
            h1 = self.down(self.inc(x), temb)
            h = self.up(self.attn(self.mid(self.pool(h1), temb)))
            h = F.interpolate(h, size=h1.shape[-2:], mode="nearest")
            return self.out(self.dec(lib.cat([h, h1], dim=1), temb))

    return UNet()  # fmt: skip


def _noise_schedule(lib, steps=50):
    betas = lib.linspace(1e-4, 0.02, steps)
    return betas, lib.cumprod(1.0 - betas, dim=0)


def _extract(a, t, x_shape):
    return a.gather(-1, t).reshape(t.shape[0], *((1,) * (len(x_shape) - 1)))


def _ddpm_step(lib, model, opt, x0, t, noise, alphas_cumprod):
    xt = (
        _extract(alphas_cumprod.sqrt(), t, x0.shape) * x0
        + _extract((1 - alphas_cumprod).sqrt(), t, x0.shape) * noise
    )
    loss = lib.nn.functional.mse_loss(model(xt, t), noise)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    lib.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    return loss


def _ddim_step(model, x, t, i, alphas_cumprod):
    """One deterministic DDIM update; ``i`` is the Python int the sampler counts down."""
    eps = model(x, t)
    a_t = alphas_cumprod[i]
    a_prev = alphas_cumprod[i - 1] if i > 0 else alphas_cumprod[0] * 0 + 1
    x0 = ((x - (1 - a_t).sqrt() * eps) / a_t.sqrt()).clamp(-1, 1)
    return a_prev.sqrt() * x0 + (1 - a_prev).sqrt() * eps


@pytest.mark.slow  # ~12 s: a UNet's forward and backward compiled for every batch size
def test_ddpm_training_steps_and_ddim_sampling_match_torch_under_dynamic():
    ours, theirs = _pair(_diffusion_unet)
    their_opt = torch.optim.AdamW(theirs.parameters(), lr=1e-3)
    our_opt = kiln.optim.AdamW(ours.parameters(), lr=1e-3)
    _, their_acp = _noise_schedule(torch)
    _, our_acp = _noise_schedule(kiln)
    _close(our_acp, their_acp, "alphas_cumprod")
    step = kiln.compile(_ddpm_step, dynamic=True)
    rng = np.random.default_rng(0)
    for batch in (4, 3):
        x0, noise = (rng.standard_normal((batch, 3, 8, 8)).astype(np.float32) for _ in range(2))
        data = (x0, rng.integers(0, 50, (batch,)), noise)
        their_loss = _ddpm_step(torch, theirs, their_opt, *map(torch.tensor, data), their_acp)
        our_loss = step(kiln, ours, our_opt, *map(kiln.tensor, data), our_acp)
        _close(our_loss, their_loss, "loss")
        _assert_same_state(ours, theirs, skip={"attn.qkv.bias"})
    theirs.eval(), ours.eval()
    x = rng.standard_normal((2, 3, 8, 8)).astype(np.float32)
    sampler = kiln.compile(_ddim_step)
    their_x, our_x = torch.tensor(x), kiln.tensor(x)
    with torch.no_grad(), kiln.no_grad():
        for i in reversed(range(6)):
            their_x = _ddim_step(theirs, their_x, torch.full((2,), i), i, their_acp)
            our_x = sampler(ours, our_x, kiln.full((2,), i), i, our_acp)
    _close(our_x, their_x, "sample", 1e-3, 1e-4)


def _vae(lib):
    """A convolutional VAE: strided-conv encoder, mean and log-variance heads, the
    reparameterisation with given noise, ConvTranspose2d and bilinear upsampling decoder."""
    nn = lib.nn

    class VAE(nn.Module):
        def __init__(self, z=4):
            super().__init__()
            self.enc = nn.Sequential(
                nn.Conv2d(1, 8, 4, 2, 1),
                nn.LeakyReLU(0.2),
                nn.Conv2d(8, 16, 4, 2, 1, bias=False),
                nn.BatchNorm2d(16),
                nn.LeakyReLU(0.2),
                nn.Flatten(),
            )
            self.fc_mu, self.fc_logvar = nn.Linear(256, z), nn.Linear(256, z)
            self.fc_dec = nn.Linear(z, 256)
            self.dec = nn.Sequential(
                nn.Unflatten(1, (16, 4, 4)),
                nn.ConvTranspose2d(16, 8, 4, 2, 1),
                nn.ReLU(),
                nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False),
                nn.Conv2d(8, 1, 3, padding=1),
                nn.Sigmoid(),
            )

        def forward(self, x, eps):
            h = self.enc(x)
            mu, logvar = self.fc_mu(h), self.fc_logvar(h)
            z = mu + eps * lib.exp(0.5 * logvar)
            return self.dec(self.fc_dec(z)), mu, logvar

    return VAE()  # fmt: skip


def _vae_step(lib, model, opt, x, eps, beta):
    opt.zero_grad()
    recon, mu, logvar = model(x, eps)
    bce = lib.nn.functional.binary_cross_entropy(recon, x, reduction="sum")
    kld = -0.5 * lib.sum(1 + logvar - mu.pow(2) - logvar.exp())
    loss = (bce + beta * kld) / x.size(0)
    loss.backward()
    opt.step()
    return loss


def test_vae_with_kl_annealing_and_one_cycle_lr_trains_like_torch():
    ours, theirs = _pair(_vae)
    their_opt, our_opt = torch.optim.Adam(theirs.parameters()), kiln.optim.Adam(ours.parameters())
    their_sched = torch.optim.lr_scheduler.OneCycleLR(their_opt, max_lr=1e-2, total_steps=10)
    our_sched = kiln.optim.lr_scheduler.OneCycleLR(our_opt, max_lr=1e-2, total_steps=10)
    step = kiln.compile(_vae_step)
    rng = np.random.default_rng(0)
    for i in range(3):
        x = rng.uniform(0, 1, (4, 1, 16, 16)).astype(np.float32)
        eps = rng.standard_normal((4, 4)).astype(np.float32)
        beta = 0.5 + 0.1 * i  # a changing float: no recompile per value
        their_loss = _vae_step(torch, theirs, their_opt, torch.tensor(x), torch.tensor(eps), beta)
        our_loss = step(kiln, ours, our_opt, kiln.tensor(x), kiln.tensor(eps), beta)
        their_sched.step(), our_sched.step()
        _close(our_loss, their_loss, "loss")
        _close(our_sched.get_last_lr(), their_sched.get_last_lr(), "lr")
        _assert_same_state(ours, theirs)


# ---------------------------------------------------------------------------------- vision


def _drop_path(x, drop_prob: float = 0.0, training: bool = False):
    """timm's stochastic depth: whole samples dropped, the kept ones scaled by 1 / keep."""
    if drop_prob == 0.0 or not training:
        return x
    keep_prob = 1 - drop_prob
    shape = (x.shape[0],) + (1,) * (x.ndim - 1)
    random_tensor = x.new_empty(shape).bernoulli_(keep_prob)
    random_tensor.div_(keep_prob)
    return x * random_tensor


def _efficientnet(lib, drop_path_rate=0.0):
    """MBConv blocks: 1x1 expansion, depthwise 3x3/5x5 (stride 2 too), squeeze-and-excitation
    through a mean over (2, 3), SiLU in place, BatchNorm with eps=1e-3 and momentum=0.01,
    stochastic depth on the residual branch."""
    nn, F = lib.nn, lib.nn.functional

    class SqueezeExcite(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.fc1, self.fc2 = nn.Conv2d(c, c // 4, 1), nn.Conv2d(c // 4, c, 1)

        def forward(self, x):
            return x * self.fc2(F.silu(self.fc1(x.mean((2, 3), keepdim=True)))).sigmoid()

    def bn(c):
        return nn.BatchNorm2d(c, eps=1e-3, momentum=0.01)

    class MBConv(nn.Module):
        def __init__(self, cin, cout, k, stride, expand):
            super().__init__()
            h = cin * expand
            self.use_res = stride == 1 and cin == cout
            layers = []
            if expand != 1:
                layers += [nn.Conv2d(cin, h, 1, bias=False), bn(h), nn.SiLU(inplace=True)]
            layers += [
                nn.Conv2d(h, h, k, stride, k // 2, groups=h, bias=False), bn(h),
                nn.SiLU(inplace=True), SqueezeExcite(h), nn.Conv2d(h, cout, 1, bias=False), bn(cout),
            ]  # fmt: skip
            self.block = nn.Sequential(*layers)

        def forward(self, x):
            y = self.block(x)
            return _drop_path(y, drop_path_rate, self.training) + x if self.use_res else y

    return nn.Sequential(
        nn.Conv2d(3, 8, 3, 2, 1, bias=False), nn.BatchNorm2d(8), nn.SiLU(),
        MBConv(8, 8, 3, 1, 1), MBConv(8, 16, 5, 2, 4), MBConv(16, 16, 3, 1, 4),
        nn.Conv2d(16, 32, 1, bias=False), nn.BatchNorm2d(32), nn.SiLU(),
        nn.AdaptiveAvgPool2d((1, 1)), nn.Flatten(1), nn.Dropout(0.0), nn.Linear(32, 5),
    )  # fmt: skip


def _spatial_transformer(lib):
    """A spatial transformer (affine_grid + grid_sample) in front of a patch autoencoder built
    from unfold/fold, then bilinear (align_corners=True), bicubic and nearest resizing and a
    pixel shuffle."""
    nn, F = lib.nn, lib.nn.functional

    class STN(nn.Module):
        def __init__(self):
            super().__init__()
            self.loc = nn.Sequential(
                nn.Conv2d(3, 4, 3, padding=1), nn.MaxPool2d(2), nn.ReLU(), nn.Flatten(),
                nn.Linear(256, 6),
            )  # fmt: skip
            with lib.no_grad():
                self.loc[-1].weight.mul_(0.1)
                self.loc[-1].bias.copy_(lib.tensor([1, 0, 0, 0, 1, 0], dtype=lib.float))
            self.proj, self.unproj = nn.Linear(48, 12), nn.Linear(12, 48)
            self.up, self.shuffle = nn.Conv2d(3, 12, 3, padding=1), nn.PixelShuffle(2)

        def forward(self, x):
            theta = self.loc(x).view(-1, 2, 3)
            grid = F.affine_grid(theta, list(x.size()), align_corners=False)
            x = F.grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=False)
            tokens = self.proj(F.unfold(x, kernel_size=4, stride=4).transpose(1, 2))
            patches = self.unproj(tokens + F.gelu(tokens)).transpose(1, 2)
            img = F.fold(patches, output_size=x.shape[-2:], kernel_size=4, stride=4)
            out = F.interpolate(img, scale_factor=0.5, mode="bilinear", align_corners=True)
            out = self.shuffle(self.up(out))
            out = out + F.interpolate(img, size=(16, 16), mode="bicubic", align_corners=False)
            return out + F.avg_pool2d(F.interpolate(x, scale_factor=2, mode="nearest"), 2)

    return STN()


def _classify_step(lib, model, opt, x, y):
    opt.zero_grad()
    loss = lib.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    return loss


def _reconstruct_step(lib, model, opt, x, y):
    opt.zero_grad()
    out = model(x)
    loss = lib.nn.functional.l1_loss(out, y) + lib.nn.functional.mse_loss(out, y)
    loss.backward()
    opt.step()
    return loss


@pytest.mark.parametrize(
    "build, step",
    [(_efficientnet, _classify_step), (_spatial_transformer, _reconstruct_step)],
    ids=["efficientnet", "spatial_transformer"],
)
def test_vision_steps_on_channels_last_images_match_torch(build, step):
    ours, theirs = _pair(build)
    theirs = theirs.to(memory_format=torch.channels_last)
    ours = ours.to(memory_format=kiln.channels_last)
    their_opt = torch.optim.SGD(theirs.parameters(), lr=0.05, momentum=0.9)
    our_opt = kiln.optim.SGD(ours.parameters(), lr=0.05, momentum=0.9)
    compiled = kiln.compile(step)
    rng = np.random.default_rng(0)
    for _ in range(2):
        x = rng.standard_normal((3, 3, 16, 16)).astype(np.float32)
        if build is _efficientnet:
            y = rng.integers(0, 5, 3)
        else:
            y = rng.standard_normal((3, 3, 16, 16)).astype(np.float32)
        with kiln.no_grad():  # each step from PyTorch's weights: BatchNorm parts trajectories
            for mine, its in zip(ours.state_dict().values(), theirs.state_dict().values()):
                mine.copy_(kiln.tensor(its.numpy()))
        tx = torch.tensor(x).contiguous(memory_format=torch.channels_last)
        kx = kiln.tensor(x).contiguous(memory_format=kiln.channels_last)
        _close(
            compiled(kiln, ours, our_opt, kx, kiln.tensor(y)),
            step(torch, theirs, their_opt, tx, torch.tensor(y)),
            "loss",
        )
        _assert_same_state(ours, theirs)


def test_stochastic_depth_drops_whole_samples_compiled_and_repeats_under_manual_seed():
    drop = kiln.compile(lambda x: _drop_path(x, 0.5, True))
    x = kiln.randn(16, 8, 4, 4)
    ratio = (drop(x) / x).reshape(16, -1).numpy()
    assert all(np.allclose(row, 0) or np.allclose(row, 2) for row in ratio)
    kiln.manual_seed(3)
    first = drop(x)
    kiln.manual_seed(3)
    assert bool((drop(x) == first).all())


# ---------------------------------------------------------------------------------- RL


def _actor_critic(lib, discrete):
    nn = lib.nn

    class ActorCritic(nn.Module):
        def __init__(self, obs=6, act=3):
            super().__init__()
            self.body = nn.Sequential(nn.Linear(obs, 32), nn.Tanh(), nn.Linear(32, 32), nn.Tanh())
            self.pi, self.v = nn.Linear(32, act), nn.Linear(32, 1)
            self.log_std = nn.Parameter(-0.5 * lib.ones(act))

        def forward(self, obs):
            h = self.body(obs)
            if discrete:
                dist = lib.distributions.Categorical(logits=self.pi(h))
            else:
                dist = lib.distributions.Normal(self.pi(h), self.log_std.exp())
            return dist, self.v(h).squeeze(-1)

    return ActorCritic()


def _gae(lib, rewards, values, dones, last_value, gamma=0.99, lam=0.95):
    """Generalised advantage estimation in a Python loop over time, as CleanRL writes it."""
    steps = len(rewards)
    advantages = lib.zeros_like(rewards)
    last = 0
    for t in reversed(range(steps)):
        if t == steps - 1:
            not_done, next_value = 1.0 - dones[t], last_value
        else:
            not_done, next_value = 1.0 - dones[t + 1], values[t + 1]
        delta = rewards[t] + gamma * next_value * not_done - values[t]
        advantages[t] = last = delta + gamma * lam * not_done * last
    return advantages, advantages + values


def _ppo_update(lib, model, opt, obs, actions, old_logp, adv, returns, discrete, clip=0.2):
    dist, value = model(obs)
    logp, entropy = dist.log_prob(actions), dist.entropy()
    if not discrete:
        logp, entropy = logp.sum(-1), entropy.sum(-1)
    ratio = (logp - old_logp).exp()
    adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    pg_loss = lib.max(-adv * ratio, -adv * lib.clamp(ratio, 1 - clip, 1 + clip)).mean()
    loss = pg_loss - 0.01 * entropy.mean() + 0.25 * ((value - returns) ** 2).mean()
    approx_kl = ((ratio - 1) - (logp - old_logp)).mean()
    clip_fraction = ((ratio - 1.0).abs() > clip).float().mean()
    opt.zero_grad()
    loss.backward()
    lib.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
    opt.step()
    return loss.detach(), approx_kl.item(), clip_fraction


@pytest.mark.parametrize("discrete", [True, False], ids=["categorical", "normal"])
def test_ppo_rollout_gae_and_clipped_updates_match_torch_under_dynamic(discrete):
    ours, theirs = _pair(_actor_critic, discrete)
    their_opt = torch.optim.Adam(theirs.parameters(), lr=3e-4, eps=1e-5)
    our_opt = kiln.optim.Adam(ours.parameters(), lr=3e-4, eps=1e-5)
    update = kiln.compile(_ppo_update, dynamic=True)
    gae = kiln.compile(_gae, dynamic=True)
    rng = np.random.default_rng(0)
    for steps in (8, 6):
        obs = rng.standard_normal((steps, 6)).astype(np.float32)
        rewards = rng.standard_normal(steps).astype(np.float32)
        dones = (rng.uniform(size=steps) < 0.2).astype(np.float32)
        if discrete:
            actions = rng.integers(0, 3, steps)
        else:
            actions = rng.standard_normal((steps, 3)).astype(np.float32)
        rollout = []
        for lib, model, fn in ((torch, theirs, _gae), (kiln, ours, gae)):
            with lib.no_grad():
                dist, values = model(lib.tensor(obs))
                logp = dist.log_prob(lib.tensor(actions))
            logp = logp if discrete else logp.sum(-1)
            rollout.append((logp, *fn(lib, lib.tensor(rewards), values, lib.tensor(dones), 0.3)))
        for mine, its in zip(rollout[1], rollout[0]):
            _close(mine, its, "rollout")
        for _ in range(2):
            theirs_out = _ppo_update(
                torch,
                theirs,
                their_opt,
                torch.tensor(obs),
                torch.tensor(actions),
                *rollout[0],
                discrete,
            )
            our_out = update(
                kiln, ours, our_opt, kiln.tensor(obs), kiln.tensor(actions), *rollout[1], discrete
            )
            for mine, its, what in zip(our_out, theirs_out, ("loss", "approx_kl", "clip_fraction")):
                _close(mine, its, what, 1e-3, 1e-6)
            _assert_same_state(ours, theirs)


def _sac_networks(lib):
    nn = lib.nn

    class QNetwork(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 1))

        def forward(self, obs, act):
            return self.net(lib.cat([obs, act], dim=-1)).squeeze(-1)

    class Actor(nn.Module):
        """A tanh-squashed Gaussian policy; the noise is given (an rsample's)."""

        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(4, 16), nn.ReLU())
            self.mu, self.log_std = nn.Linear(16, 2), nn.Linear(16, 2)

        def forward(self, obs, eps):
            h = self.net(obs)
            mu, std = self.mu(h), lib.clamp(self.log_std(h), -20, 2).exp()
            u = mu + std * eps
            logp = lib.distributions.Normal(mu, std).log_prob(u).sum(-1)
            logp = logp - (2 * (math.log(2) - u - lib.nn.functional.softplus(-2 * u))).sum(-1)
            return lib.tanh(u), logp

    class SAC(nn.Module):
        def __init__(self):
            super().__init__()
            self.actor, self.q, self.q_target = Actor(), QNetwork(), QNetwork()

    return SAC()


def _sac_step(lib, sac, actor_opt, q_opt, obs, act, rew, next_obs, done, eps, next_eps):
    """Spinning Up's SAC update: a target from the frozen target network, the Q network frozen
    with ``requires_grad = False`` for the policy step, polyak averaging through ``.data``."""
    alpha, gamma, polyak = 0.2, 0.99, 0.995
    with lib.no_grad():
        next_act, next_logp = sac.actor(next_obs, next_eps)
        target = sac.q_target(next_obs, next_act) - alpha * next_logp
        backup = rew + gamma * (1 - done) * target
    q_loss = ((sac.q(obs, act) - backup) ** 2).mean()
    q_opt.zero_grad()
    q_loss.backward()
    q_opt.step()
    for p in sac.q.parameters():
        p.requires_grad = False
    pi, logp = sac.actor(obs, eps)
    pi_loss = (alpha * logp - sac.q(obs, pi)).mean()
    actor_opt.zero_grad()
    pi_loss.backward()
    actor_opt.step()
    for p in sac.q.parameters():
        p.requires_grad = True
    with lib.no_grad():
        for p, p_target in zip(sac.q.parameters(), sac.q_target.parameters()):
            p_target.data.mul_(polyak)
            p_target.data.add_((1 - polyak) * p.data)
    return q_loss, pi_loss


def test_sac_update_with_frozen_critic_and_polyak_target_matches_torch():
    ours, theirs = _pair(_sac_networks)
    opts = []
    for lib, sac in ((torch, theirs), (kiln, ours)):
        for p in sac.q_target.parameters():
            p.requires_grad = False
        opts.append((lib.optim.Adam(sac.actor.parameters()), lib.optim.Adam(sac.q.parameters())))
    step = kiln.compile(_sac_step)
    rng = np.random.default_rng(0)
    for batch in (8, 5):
        data = [
            rng.standard_normal((batch, 4)), np.tanh(rng.standard_normal((batch, 2))),
            rng.standard_normal(batch), rng.standard_normal((batch, 4)),
            rng.uniform(size=batch) < 0.3, rng.standard_normal((batch, 2)),
            rng.standard_normal((batch, 2)),
        ]  # fmt: skip
        data = [d.astype(np.float32) for d in data]
        their_losses = _sac_step(torch, theirs, *opts[0], *map(torch.tensor, data))
        our_losses = step(kiln, ours, *opts[1], *map(kiln.tensor, data))
        for mine, its in zip(our_losses, their_losses):
            _close(mine, its, "loss")
        _assert_same_state(ours, theirs)
        assert all(p.requires_grad for p in ours.q.parameters())


# ---------------------------------------------------------------------------------- graph nets


def _graph_net(lib):
    """Message passing as PyG writes it by hand: GCN with self-loops and symmetric degree
    normalisation (scatter_add_, index_add_), GraphSAGE with amax and mean scatter_reduce, a GAT
    softmax over incoming edges (scatter_reduce amax, index_add), mean pooling per graph."""
    nn, F = lib.nn, lib.nn.functional

    class GCN(nn.Module):
        def __init__(self, cin, cout):
            super().__init__()
            self.lin = nn.Linear(cin, cout, bias=False)
            self.bias = nn.Parameter(lib.zeros(cout))

        def forward(self, x, edge_index):
            n = x.size(0)
            loops = lib.arange(n, device=x.device)
            row, col = lib.cat([edge_index, lib.stack([loops, loops])], dim=1)
            ones = lib.ones(col.size(0), dtype=x.dtype)
            deg = lib.zeros(n, dtype=x.dtype).scatter_add_(0, col, ones)
            deg_inv_sqrt = deg.pow(-0.5)
            deg_inv_sqrt[deg_inv_sqrt == float("inf")] = 0
            norm = deg_inv_sqrt[row] * deg_inv_sqrt[col]
            h = self.lin(x)
            return lib.zeros_like(h).index_add_(0, col, norm.view(-1, 1) * h[row]) + self.bias

    class SAGE(nn.Module):
        def __init__(self, cin, cout):
            super().__init__()
            self.lin_l, self.lin_r = nn.Linear(cin, cout), nn.Linear(cin, cout, bias=False)

        def forward(self, x, edge_index):
            src, dst = edge_index
            index = dst.unsqueeze(-1).expand(-1, x.size(1))
            peak = lib.zeros_like(x).scatter_reduce(0, index, x[src], "amax", include_self=False)
            mean = lib.zeros_like(x).scatter_reduce(0, index, x[src], "mean", include_self=False)
            return self.lin_l(peak + mean) + self.lin_r(x)

    class GAT(nn.Module):
        def __init__(self, cin, cout):
            super().__init__()
            self.lin = nn.Linear(cin, cout, bias=False)
            self.att_src = nn.Parameter(lib.randn(1, cout) * 0.1)
            self.att_dst = nn.Parameter(lib.randn(1, cout) * 0.1)

        def forward(self, x, edge_index):
            src, dst = edge_index
            h = self.lin(x)
            score = (h * self.att_src).sum(-1)[src] + (h * self.att_dst).sum(-1)[dst]
            score = F.leaky_relu(score, 0.2)
            peak = lib.full((x.size(0),), -1e9).scatter_reduce(0, dst, score, reduce="amax")
            weight = (score - peak[dst]).exp()
            total = lib.zeros(x.size(0)).index_add(0, dst, weight)
            alpha = weight / (total[dst] + 1e-16)
            return lib.zeros_like(h).index_add_(0, dst, alpha.unsqueeze(-1) * h[src])

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.gcn, self.sage, self.gat = GCN(5, 16), SAGE(16, 16), GAT(16, 8)
            self.head = nn.Linear(8, 3)

        def forward(self, x, edge_index, batch, num_graphs: int):
            x = F.dropout(F.relu(self.gcn(x, edge_index)), 0.5, self.training)
            x = self.gat(F.elu(self.sage(x, edge_index)), edge_index)
            pooled = lib.zeros(num_graphs, x.size(1)).index_add_(0, batch, x)
            counts = lib.bincount(batch, minlength=num_graphs).clamp(min=1).unsqueeze(-1)
            return self.head(pooled / counts)

    return Net()


def _graph_step(lib, model, opt, x, edge_index, batch, num_graphs, y):
    opt.zero_grad()
    loss = lib.nn.functional.cross_entropy(model(x, edge_index, batch, num_graphs), y)
    loss.backward()
    opt.step()
    return loss


def _graph_batch(rng, sizes):
    """Graphs of ``sizes`` nodes (two random edges per node) batched PyG-style."""
    offsets = np.cumsum([0, *sizes[:-1]])
    edges = [rng.integers(0, n, (2, 2 * n)) + o for n, o in zip(sizes, offsets)]
    x = rng.standard_normal((sum(sizes), 5)).astype(np.float32)
    batch = np.concatenate([np.full(n, g) for g, n in enumerate(sizes)])
    return x, np.concatenate(edges, 1), batch, len(sizes), rng.integers(0, 3, len(sizes))


@pytest.mark.filterwarnings("error::RuntimeWarning")  # the inductor falling back to eager
def test_graph_net_with_scatter_message_passing_trains_like_torch_under_dynamic():
    ours, theirs = _pair(_graph_net)
    theirs.eval(), ours.eval()  # no dropout draws
    their_opt = torch.optim.Adam(theirs.parameters(), lr=1e-2, weight_decay=5e-4)
    our_opt = kiln.optim.Adam(ours.parameters(), lr=1e-2, weight_decay=5e-4)
    step = kiln.compile(_graph_step, dynamic=True)
    rng = np.random.default_rng(0)
    for sizes in ((4, 6), (5, 3, 7)):
        x, edges, batch, num_graphs, y = _graph_batch(rng, sizes)
        their_loss = _graph_step(
            torch, theirs, their_opt, torch.tensor(x), torch.tensor(edges),
            torch.tensor(batch), num_graphs, torch.tensor(y),
        )  # fmt: skip
        our_loss = step(
            kiln, ours, our_opt, kiln.tensor(x), kiln.tensor(edges), kiln.tensor(batch),
            num_graphs, kiln.tensor(y),
        )  # fmt: skip
        _close(our_loss, their_loss, "loss")
        _assert_same_state(ours, theirs)


# ---------------------------------------------------------------------------------- training


def _tabular_net(lib):
    nn = lib.nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Linear(6, 16, bias=False)
            self.bn, self.drop = nn.BatchNorm1d(16), nn.Dropout(0.3)
            self.norm, self.head = nn.LayerNorm(16), nn.Linear(16, 3)

        def forward(self, x):
            return self.head(self.norm(self.drop(lib.relu(self.bn(self.embed(x))))))

    return Net()


def _loader(lib):
    """A map-style dataset of dicts, a custom sampler (even indices first), a collate_fn
    stacking tensors and keeping ids as a list, and a ragged last batch."""
    data = lib.utils.data

    class Table(data.Dataset):
        def __init__(self, n=23):
            rng = np.random.default_rng(0)
            self.x = rng.standard_normal((n, 6)).astype(np.float32)
            self.y = rng.integers(0, 3, n)

        def __len__(self):
            return len(self.x)

        def __getitem__(self, i):
            return {"x": lib.from_numpy(self.x[i]), "y": int(self.y[i]), "id": i}

    class EvenFirst(data.Sampler):
        def __init__(self, n):
            self.n = n

        def __iter__(self):
            return iter([*range(0, self.n, 2), *range(1, self.n, 2)])

        def __len__(self):
            return self.n

    def collate(items):
        return {
            "x": lib.stack([item["x"] for item in items]),
            "y": lib.tensor([item["y"] for item in items]),
            "ids": [item["id"] for item in items],
        }

    table = Table()
    return data.DataLoader(table, batch_size=5, sampler=EvenFirst(len(table)), collate_fn=collate)


def _decay_groups(model):
    decay = [p for p in model.parameters() if p.ndim > 1]
    no_decay = [p for p in model.parameters() if p.ndim <= 1]
    return [{"params": decay, "weight_decay": 0.05}, {"params": no_decay, "weight_decay": 0.0}]


def _micro_batch_loss(lib, model, x, y, accumulation):
    return lib.nn.functional.cross_entropy(model(x), y) / accumulation


def _train_epoch(lib, model, opt, sched, scaler, loader, loss_fn):
    """Gradient accumulation over two micro-batches with a GradScaler (unscale, clip, step,
    update) and a per-optimizer-step scheduler, as the usual training-loop templates do."""
    losses = []
    opt.zero_grad()
    for i, batch in enumerate(loader):
        loss = loss_fn(lib, model, batch["x"], batch["y"], 2)
        scaler.scale(loss).backward()
        if (i + 1) % 2 == 0:
            scaler.unscale_(opt)
            lib.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
            scaler.step(opt)
            scaler.update()
            opt.zero_grad()
            sched.step()
        losses.append(loss.item())
    return losses


def _training_kit(lib, model):
    opt = lib.optim.AdamW(_decay_groups(model), lr=1e-2)
    sched = lib.optim.lr_scheduler.CosineAnnealingWarmRestarts(opt, T_0=3, T_mult=2, eta_min=1e-4)
    return opt, sched, lib.amp.GradScaler("cpu", init_scale=256.0)


def test_training_loop_with_loader_accumulation_hooks_and_checkpoint_round_trip(tmp_path):
    ours, theirs = _pair(_tabular_net)
    theirs.drop.eval(), ours.drop.eval()  # BatchNorm trains, dropout draws nothing
    seen = {}
    for lib, model in ((torch, theirs), (kiln, ours)):

        def forward_hook(module, args, output, name=lib.__name__):
            seen[name, "forward"] = output.detach().clone()

        def backward_hook(module, grad_input, grad_output, name=lib.__name__):
            seen[name, "backward"] = grad_output[0].clone()

        model.norm.register_forward_hook(forward_hook)
        model.norm.register_full_backward_hook(backward_hook)
    theirs_kit, ours_kit = _training_kit(torch, theirs), _training_kit(kiln, ours)
    loss_fn = kiln.compile(_micro_batch_loss)
    their_losses = _train_epoch(torch, theirs, *theirs_kit, _loader(torch), _micro_batch_loss)
    our_losses = _train_epoch(kiln, ours, *ours_kit, _loader(kiln), loss_fn)
    _close(our_losses, their_losses, "losses")
    for what in ("forward", "backward"):
        _close(seen["kiln", what], seen["torch", what], f"{what} hook")
    _assert_same_state(ours, theirs, grads=False)

    path = tmp_path / "checkpoint.pt"
    opt, sched, scaler = ours_kit
    kiln.save(
        {"model": ours.state_dict(), "opt": opt.state_dict(), "sched": sched.state_dict(),
         "scaler": scaler.state_dict()},
        path,
    )  # fmt: skip
    assert set(torch.load(path, weights_only=True)) == {"model", "opt", "sched", "scaler"}
    resumed = _tabular_net(kiln)
    resumed.drop.eval()
    resumed_kit = _training_kit(kiln, resumed)
    state = kiln.load(path, weights_only=True)
    resumed.load_state_dict(state["model"])
    for part, key in zip(resumed_kit, ("opt", "sched", "scaler")):
        part.load_state_dict(state[key])
    their_losses = _train_epoch(torch, theirs, *theirs_kit, _loader(torch), _micro_batch_loss)
    our_losses = _train_epoch(kiln, resumed, *resumed_kit, _loader(kiln), loss_fn)
    _close(our_losses, their_losses, "losses after resuming")
    _close(resumed_kit[1].get_last_lr(), theirs_kit[1].get_last_lr(), "lr")
    _assert_same_state(resumed, theirs, grads=False)

    buffer = io.BytesIO()
    torch.save(theirs_kit[0].state_dict(), buffer)
    buffer.seek(0)
    their_state = kiln.load(buffer, weights_only=True)["state"]
    _close(their_state[0]["exp_avg"], resumed_kit[0].state_dict()["state"][0]["exp_avg"], "exp_avg")

    for model in (theirs, resumed):
        model.embed.requires_grad_(False)
        model.zero_grad()
    x = np.random.default_rng(1).standard_normal((4, 6)).astype(np.float32)
    resumed(kiln.tensor(x)).sum().backward()
    theirs(torch.tensor(x)).sum().backward()
    assert resumed.embed.weight.grad is None
    _close(resumed.head.weight.grad, theirs.head.weight.grad, "grad with the embedding frozen")
    theirs.eval(), resumed.eval()
    with torch.inference_mode(), kiln.inference_mode():
        _close(kiln.compile(resumed)(kiln.tensor(x)), theirs(torch.tensor(x)), "inference")


# ---------------------------------------------------------------------------------- misc


def _policy(lib):
    nn = lib.nn
    return nn.Sequential(
        nn.Linear(5, 12), nn.GELU(), nn.Linear(12, 12), nn.Tanh(), nn.Linear(12, 2)
    )


def _line_search(lib, model, x):
    """TRPO's flat-gradient step: parameters as one vector, written back with
    ``vector_to_parameters`` (which assigns each parameter's ``.data``)."""
    loss = model(x).logsumexp(-1).mean()
    flat = lib.cat([g.reshape(-1) for g in lib.autograd.grad(loss, list(model.parameters()))])
    old = lib.nn.utils.parameters_to_vector(model.parameters())
    lib.nn.utils.vector_to_parameters(old - 0.1 * flat, model.parameters())
    return flat.norm(), lib.nn.utils.parameters_to_vector(model.parameters())


def _per_sample_grads(lib, model, x, y):
    """Opacus-style per-sample gradients: vmap over grad of a functional_call."""
    params = {k: v.detach() for k, v in model.named_parameters()}

    def loss(p, xi, yi):
        out = lib.func.functional_call(model, p, (xi.unsqueeze(0),))
        return lib.nn.functional.cross_entropy(out, yi.unsqueeze(0))

    grads = lib.func.vmap(lib.func.grad(loss), in_dims=(None, 0, 0))(params, x, y)
    return lib.cat([g.reshape(x.shape[0], -1) for g in grads.values()], 1)


def _checkpointed(lib, model, x):
    loss = model[3:](lib.utils.checkpoint.checkpoint(model[:3], x, use_reentrant=False))
    loss = loss.pow(2).mean()
    loss.backward()
    return loss, model[0].weight.grad


@pytest.mark.parametrize(
    "program, takes_labels",
    [(_line_search, False), (_per_sample_grads, True), (_checkpointed, False)],
    ids=["line_search", "per_sample_grads", "checkpointed"],
)
def test_policy_gradient_utilities_compiled_match_torch(program, takes_labels):
    ours, theirs = _pair(_policy)
    rng = np.random.default_rng(0)
    data = [rng.standard_normal((6, 5)).astype(np.float32)]
    if takes_labels:
        data.append(rng.integers(0, 2, 6))
    expected = program(torch, theirs, *map(torch.tensor, data))
    got = kiln.compile(program)(kiln, ours, *map(kiln.tensor, data))
    for mine, its in zip(got, expected) if isinstance(got, tuple) else [(got, expected)]:
        _close(mine, its, program.__name__)
    _assert_same_state(ours, theirs)


def _gan(lib):
    """DCGAN-style generator (ConvTranspose2d, BatchNorm) and a critic with spectral_norm and
    the weight_norm parametrization."""
    nn = lib.nn
    generator = nn.Sequential(
        nn.Linear(4, 256), nn.Unflatten(1, (16, 4, 4)),
        nn.ConvTranspose2d(16, 8, 4, 2, 1, bias=False), nn.BatchNorm2d(8), nn.ReLU(True),
        nn.ConvTranspose2d(8, 1, 4, 2, 1), nn.Tanh(),
    )  # fmt: skip
    critic = nn.Sequential(
        nn.utils.spectral_norm(nn.Conv2d(1, 8, 4, 2, 1)), nn.LeakyReLU(0.2, inplace=True),
        nn.utils.parametrizations.weight_norm(nn.Conv2d(8, 16, 4, 2, 1)),
        nn.LeakyReLU(0.2, inplace=True), nn.Flatten(), nn.Linear(256, 1),
    )  # fmt: skip
    return nn.ModuleDict({"generator": generator, "critic": critic})


def _gan_step(lib, gan, g_opt, d_opt, real, z):
    """A hinge-loss critic step on detached fakes, then a generator step."""
    F = lib.nn.functional
    generator, critic = gan["generator"], gan["critic"]
    d_opt.zero_grad()
    fake = generator(z).detach()
    d_loss = F.relu(1 + critic(fake)).mean() + F.relu(1 - critic(real)).mean()
    d_loss.backward()
    d_opt.step()
    g_opt.zero_grad()
    g_loss = F.binary_cross_entropy_with_logits(critic(generator(z)), lib.ones(z.size(0), 1))
    g_loss.backward()
    g_opt.step()
    return d_loss, g_loss


def test_gan_with_spectral_and_weight_norm_trains_like_torch():
    ours, theirs = _pair(_gan)
    opts = [
        [lib.optim.Adam(gan[part].parameters(), lr=2e-4, betas=(0.5, 0.999)) for part in ("generator", "critic")]
        for lib, gan in ((torch, theirs), (kiln, ours))
    ]  # fmt: skip
    step = kiln.compile(_gan_step)
    rng = np.random.default_rng(0)
    for _ in range(2):
        real = rng.uniform(-1, 1, (4, 1, 16, 16)).astype(np.float32)
        z = rng.standard_normal((4, 4)).astype(np.float32)
        their_losses = _gan_step(torch, theirs, *opts[0], torch.tensor(real), torch.tensor(z))
        our_losses = step(kiln, ours, *opts[1], kiln.tensor(real), kiln.tensor(z))
        for mine, its in zip(our_losses, their_losses):
            _close(mine, its, "loss", 1e-3)
        _assert_same_state(ours, theirs)  # spectral norm's u and v buffers too


# ---------------------------------------------------------------------------------- pipelines


def _denoiser(lib):
    """A diffusers-style denoiser returning a dataclass output over OrderedDict (fields that are
    not None are items too), taking its timestep as a 0-d tensor or a Python number."""
    nn = lib.nn

    class BaseOutput(OrderedDict):
        def __post_init__(self):
            for field in dataclasses.fields(self):
                if getattr(self, field.name) is not None:
                    self[field.name] = getattr(self, field.name)

        def __setitem__(self, key, value):
            super().__setitem__(key, value)
            super().__setattr__(key, value)

        def __getitem__(self, key):
            return dict(self.items())[key] if isinstance(key, str) else tuple(self.values())[key]

    @dataclasses.dataclass
    class DenoiserOutput(BaseOutput):
        sample: object = None

    class Denoiser(nn.Module):
        def __init__(self):
            super().__init__()
            self.time_mlp = nn.Linear(8, 4)
            self.conv_in, self.conv_out = (
                nn.Conv2d(4, 4, 3, padding=1),
                nn.Conv2d(4, 4, 3, padding=1),
            )

        def forward(self, sample, timestep, return_dict=True):
            if not lib.is_tensor(timestep):
                timestep = lib.tensor([timestep], dtype=lib.long)
            elif len(timestep.shape) == 0:
                timestep = timestep[None]
            timestep = timestep.expand(sample.shape[0])
            freqs = lib.exp(-math.log(10000) * lib.arange(4, dtype=lib.float32) / 4)
            angles = timestep[:, None].float() * freqs[None]
            emb = self.time_mlp(lib.cat([angles.sin(), angles.cos()], -1))
            h = self.conv_out(lib.nn.functional.silu(self.conv_in(sample) + emb[:, :, None, None]))
            return DenoiserOutput(sample=h) if return_dict else (h,)

    return Denoiser()


def _guided_step(lib, unet, latents, t, alphas_cumprod, guidance):
    """Classifier-free guidance and a deterministic DDIM update, reading the model's output by
    attribute, by key and by position."""
    out = unet(lib.cat([latents] * 2), t)
    uncond, cond = out.sample.chunk(2)
    assert out["sample"] is out[0]
    eps = uncond + guidance * (cond - uncond)
    a_t = alphas_cumprod[t]
    x0 = (latents - (1 - a_t).sqrt() * eps) / a_t.sqrt()
    return a_t.sqrt() * 0.9 * x0 + (1 - a_t * 0.81).sqrt() * eps


def test_diffusers_style_guided_denoising_compiles_its_dataclass_output_in_the_graph():
    ours, theirs = _pair(_denoiser)
    _, their_acp = _noise_schedule(torch)
    _, our_acp = _noise_schedule(kiln)
    x = np.random.default_rng(0).standard_normal((1, 4, 6, 6)).astype(np.float32)
    step = kiln.compile(_guided_step)
    their_x, our_x = torch.tensor(x), kiln.tensor(x)
    with torch.no_grad(), kiln.no_grad():
        for t in (40, 30, 20):
            their_x = _guided_step(torch, theirs, their_x, torch.tensor(t), their_acp, 7.5)
            our_x = step(kiln, ours, our_x, kiln.tensor(t), our_acp, 7.5)
        report = kiln._dynamo.explain(_guided_step)(
            kiln, ours, our_x, kiln.tensor(10), our_acp, 7.5
        )
    _close(our_x, their_x, "latents", 1e-4, 1e-5)
    assert report.graph_count == 1, report.break_reasons


# ---------------------------------------------------------------------------------- segmentation


def _segmenter(lib):
    """DeepLab-style: an encoder, atrous convolutions at three dilations, image pooling
    upsampled back (bilinear, align_corners=False), a skip fused at full resolution and logits
    resized to the input (align_corners=True)."""
    nn, F = lib.nn, lib.nn.functional

    def conv_bn(cin, cout):
        return [nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(True)]

    class Segmenter(nn.Module):
        def __init__(self):
            super().__init__()
            self.enc1 = nn.Sequential(*conv_bn(3, 8))
            self.enc2 = nn.Sequential(nn.MaxPool2d(2), *conv_bn(8, 16))
            self.atrous = nn.ModuleList(
                nn.Conv2d(16, 8, 3, padding=d, dilation=d) for d in (1, 2, 3)
            )
            self.image_pool = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(16, 8, 1))
            self.fuse, self.classify = nn.Conv2d(40, 8, 1), nn.Conv2d(8, 4, 1)

        def forward(self, x):
            skip = self.enc1(x)
            deep = self.enc2(skip)
            pooled = F.interpolate(self.image_pool(deep), size=deep.shape[-2:], mode="bilinear")
            y = lib.cat([m(deep) for m in self.atrous] + [pooled], 1)
            y = F.interpolate(y, size=skip.shape[-2:], mode="bilinear", align_corners=False)
            y = self.classify(self.fuse(lib.cat([y, skip], 1)))
            return F.interpolate(y, size=x.shape[-2:], mode="bilinear", align_corners=True)

    return Segmenter()


def _segmentation_step(lib, model, opt, x, y):
    """Weighted, label-smoothed cross entropy ignoring label 255, plus a soft Dice loss over the
    valid pixels and a sigmoid focal loss on the background channel."""
    F = lib.nn.functional
    opt.zero_grad()
    logits = model(x)
    labels = lib.where(y == 255, 0, y)
    valid = (y != 255).unsqueeze(1).float()
    probs, onehot = logits.softmax(1), F.one_hot(labels, 4).permute(0, 3, 1, 2).float()
    overlap = (probs * onehot * valid).sum((0, 2, 3))
    total = ((probs + onehot) * valid).sum((0, 2, 3))
    dice = 1 - ((2 * overlap + 1e-6) / (total + 1e-6)).mean()
    background = (labels == 0).float()
    p = logits[:, 0].sigmoid()
    p_t = p * background + (1 - p) * (1 - background)
    bce = F.binary_cross_entropy_with_logits(logits[:, 0], background, reduction="none")
    focal = ((0.25 * background + 0.75 * (1 - background)) * bce * (1 - p_t) ** 2).mean()
    weight = lib.tensor([1.0, 2.0, 0.5, 1.5])
    ce = F.cross_entropy(logits, y, weight=weight, ignore_index=255, label_smoothing=0.05)
    loss = ce + dice + focal
    loss.backward()
    opt.step()
    return loss


@pytest.mark.slow  # ~14 s: compiled for every size (odd sizes, three resizes, the losses' backward)
def test_segmentation_with_ignore_index_dice_and_focal_losses_matches_torch_under_dynamic():
    ours, theirs = _pair(_segmenter)
    their_opt = torch.optim.SGD(theirs.parameters(), lr=0.01, momentum=0.9)
    our_opt = kiln.optim.SGD(ours.parameters(), lr=0.01, momentum=0.9)
    step = kiln.compile(_segmentation_step, dynamic=True)
    rng = np.random.default_rng(0)
    for shape in ((2, 15, 17), (3, 18, 14)):
        x = rng.standard_normal((shape[0], 3, *shape[1:])).astype(np.float32)
        y = rng.integers(0, 4, shape)
        y[:, 0, :3] = 255
        with kiln.no_grad():  # each step from PyTorch's weights: BatchNorm parts trajectories
            for mine, its in zip(ours.state_dict().values(), theirs.state_dict().values()):
                mine.copy_(kiln.tensor(its.numpy()))
        their_loss = _segmentation_step(torch, theirs, their_opt, torch.tensor(x), torch.tensor(y))
        our_loss = step(kiln, ours, our_opt, kiln.tensor(x), kiln.tensor(y))
        _close(our_loss, their_loss, "loss")
        _assert_same_state(ours, theirs)


def _wgan_gp_critic_step(lib, gan, d_opt, real, z, alpha):
    """WGAN-GP: the critic's gradient at interpolates, taken with create_graph=True, in a
    penalty the step's backward differentiates again."""
    d_opt.zero_grad()
    fake = gan["generator"](z).detach()
    interp = (alpha * real + (1 - alpha) * fake).requires_grad_(True)
    out = gan["critic"](interp)
    (grads,) = lib.autograd.grad(out, interp, lib.ones_like(out), create_graph=True)
    penalty = ((grads.view(grads.size(0), -1).norm(2, dim=1) - 1) ** 2).mean()
    loss = gan["critic"](fake).mean() - gan["critic"](real).mean() + 10 * penalty
    loss.backward()
    d_opt.step()
    return loss


def test_wgan_gp_critic_steps_match_torch_compiled():
    ours, theirs = _pair(_gan)
    their_opt = torch.optim.Adam(theirs["critic"].parameters(), lr=1e-4, betas=(0.0, 0.9))
    our_opt = kiln.optim.Adam(ours["critic"].parameters(), lr=1e-4, betas=(0.0, 0.9))
    step = kiln.compile(_wgan_gp_critic_step)
    rng = np.random.default_rng(0)
    for _ in range(2):
        data = (
            rng.uniform(-1, 1, (4, 1, 16, 16)).astype(np.float32),
            rng.standard_normal((4, 4)).astype(np.float32),
            rng.uniform(size=(4, 1, 1, 1)).astype(np.float32),
        )
        their_loss = _wgan_gp_critic_step(torch, theirs, their_opt, *map(torch.tensor, data))
        our_loss = step(kiln, ours, our_opt, *map(kiln.tensor, data))
        _close(our_loss, their_loss, "loss", 1e-3)
        _assert_same_state(ours["critic"], theirs["critic"])
