"""Programs in the style of pytorch/examples, the PyTorch tutorials and well-known repositories
(REINFORCE, char-RNN, NeRF, a siamese net, the Annotated Transformer, a data-statistics
script), written once for both libraries and run under ``kiln.compile`` against PyTorch (probe
round 10: each found a crash, a wrong result or a graph break that should not be one).

Each program starts from PyTorch's weights (copied in) and compares losses, gradients and
results at every step.
"""

from __future__ import annotations

import collections
import math

import numpy as np

import kiln
from kiln.dynamo.eval_frame import CompileContext
from kiln.dynamo.explain import ExplainOutput
from kiln.dynamo.testing import CompileCounter
from tests.models.models import copy_weights
from tests.oracle import needs_torch, torch

pytestmark = needs_torch


def _close(ours, theirs, what: str, rtol: float = 1e-4, atol: float = 1e-5) -> None:
    def array(v):
        return v.detach().numpy() if hasattr(v, "detach") else np.asarray(v)

    np.testing.assert_allclose(array(ours), array(theirs), rtol, atol, err_msg=what)


def _pair(build, *args):
    """The program built in both libraries, kiln's with PyTorch's weights."""
    torch.manual_seed(0)
    theirs, ours = build(torch, *args), build(kiln, *args)
    copy_weights(kiln, ours, theirs)
    return ours, theirs


def _compiled_with_report(fn):
    """``fn`` compiled (inductor) and the explain report its captures fill."""
    report = ExplainOutput()
    ctx = CompileContext(CompileCounter("inductor"))
    ctx.listeners.append(report)
    return ctx.wrapper_for(fn), report


def _breaks(report) -> set[str]:
    return {reason.message for reason in report.break_reasons}


BACKWARD_BREAK = "Tensor.backward() changes autograd state"


# ----------------------------------------------------------------------------------- REINFORCE


def _policy(lib):
    nn, F = lib.nn, lib.nn.functional

    class Policy(nn.Module):
        def __init__(self):
            super().__init__()
            self.affine1 = nn.Linear(4, 16)
            self.affine2 = nn.Linear(16, 2)

        def forward(self, x):
            return F.softmax(self.affine2(F.relu(self.affine1(x))), dim=1)

    return Policy()


def _finish_episode(lib, policy, optimizer, states, actions, rewards, gamma=0.99):
    """pytorch/examples' REINFORCE: discounted returns built in a deque, then a tensor."""
    log_probs = [
        lib.distributions.Categorical(policy(s[None])).log_prob(a) for s, a in zip(states, actions)
    ]
    running, returns = 0.0, collections.deque()
    for r in rewards[::-1]:
        running = r + gamma * running
        returns.appendleft(running)
    returns = lib.tensor(returns)
    returns = (returns - returns.mean()) / (returns.std() + float(np.finfo(np.float32).eps))
    loss = lib.cat([-lp * ret for lp, ret in zip(log_probs, returns)]).sum()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss.detach()


def test_reinforce_with_deque_returns_matches_torch_compiled():
    # kiln.tensor(deque) failed ('Could not infer dtype of deque'); creating the deque in
    # compiled code was a graph break
    ours, theirs = _pair(_policy)
    opt_k = kiln.optim.Adam(ours.parameters(), lr=1e-2)
    opt_t = torch.optim.Adam(theirs.parameters(), lr=1e-2)
    rng = np.random.default_rng(0)
    states = rng.standard_normal((5, 4)).astype(np.float32)
    actions, rewards = [0, 1, 1, 0, 1], [1.0, 0.0, 1.0, 0.0, 1.0]
    step, report = _compiled_with_report(_finish_episode)
    for episode in range(3):
        s_k, s_t = kiln.tensor(states + episode), torch.tensor(states + episode)
        a_k = [kiln.tensor([a]) for a in actions]
        a_t = [torch.tensor([a]) for a in actions]
        loss = step(kiln, ours, opt_k, list(s_k), a_k, rewards)
        _close(loss, _finish_episode(torch, theirs, opt_t, list(s_t), a_t, rewards), "loss")
    for p, q in zip(ours.parameters(), theirs.parameters()):
        _close(p, q, "parameter")
    assert _breaks(report) == {BACKWARD_BREAK}


# ------------------------------------------------------------------------------------ char-RNN


def _char_rnn(lib, vocab):
    nn = lib.nn

    class CharRNN(nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder = nn.Embedding(vocab, 8)
            self.rnn = nn.LSTM(8, 12, 2)
            self.decoder = nn.Linear(12, vocab)

        def forward(self, x, hidden):
            out, hidden = self.rnn(self.encoder(x), hidden)
            return self.decoder(out), hidden

    return CharRNN()


def _char_rnn_step(lib, model, x, y, hidden, vocab):
    """word_language_model's step: the hidden state detached, clipping, a manual SGD update."""
    hidden = tuple(h.detach() for h in hidden)
    model.zero_grad()
    output, hidden = model(x, hidden)
    loss = lib.nn.functional.cross_entropy(output.view(-1, vocab), y.reshape(-1))
    loss.backward()
    lib.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
    for p in model.parameters():
        p.data.add_(p.grad, alpha=-0.5)
    return loss.detach(), hidden


def test_char_rnn_on_overlapping_slices_of_one_stream_trains_like_torch_compiled():
    # x = data[i:i+n] and y = data[i+1:i+1+n] view overlapping memory: the whole step ran
    # eagerly before
    text = "hello world, this is a tiny corpus for a char rnn. hello again!"
    chars = sorted(set(text))
    ids = np.array([chars.index(c) for c in text])
    vocab, bptt, batch = len(chars), 6, 3
    ours, theirs = _pair(_char_rnn, vocab)
    step, report = _compiled_with_report(_char_rnn_step)
    data_k = kiln.tensor(ids[: len(ids) // batch * batch]).view(batch, -1).t().contiguous()
    data_t = torch.tensor(ids[: len(ids) // batch * batch]).view(batch, -1).t().contiguous()
    hidden_k = (kiln.zeros(2, batch, 12), kiln.zeros(2, batch, 12))
    hidden_t = (torch.zeros(2, batch, 12), torch.zeros(2, batch, 12))
    for i in range(0, 3 * bptt, bptt):
        x_k, y_k = data_k[i : i + bptt], data_k[i + 1 : i + 1 + bptt]
        x_t, y_t = data_t[i : i + bptt], data_t[i + 1 : i + 1 + bptt]
        loss, hidden_k = step(kiln, ours, x_k, y_k, hidden_k, vocab)
        expected, hidden_t = _char_rnn_step(torch, theirs, x_t, y_t, hidden_t, vocab)
        _close(loss, expected, f"loss at {i}")
        _close(hidden_k[0], hidden_t[0], f"hidden at {i}")
    for p, q in zip(ours.parameters(), theirs.parameters()):
        _close(p, q, "parameter")
    assert _breaks(report) == {BACKWARD_BREAK}


# ---------------------------------------------------------------------------------------- NeRF


def _nerf(lib):
    nn, F = lib.nn, lib.nn.functional

    class NeRF(nn.Module):
        def __init__(self, width=16):
            super().__init__()
            self.first = nn.Linear(3 + 3 * 2 * 3, width)
            self.skip = nn.Linear(width + 3 + 3 * 2 * 3, width)
            self.out = nn.Linear(width, 4)

        def forward(self, x):
            h = F.relu(self.first(x))
            return self.out(F.relu(self.skip(lib.cat([x, h], -1))))

    return NeRF()


def _nerf_step(lib, model, opt, rays_o, rays_d, target):
    """NeRF-pytorch's coarse-to-fine step: positional encoding, volume rendering with
    ``torch.Tensor([1e10])``, inverse-CDF sampling with searchsorted/gather, PSNR."""
    F = lib.nn.functional

    def embed(x):
        return lib.cat([x] + [fn(x * 2.0**k) for k in range(3) for fn in (lib.sin, lib.cos)], -1)

    def render(raw, z_vals):
        dists = z_vals[..., 1:] - z_vals[..., :-1]
        dists = lib.cat([dists, lib.Tensor([1e10]).expand(dists[..., :1].shape)], -1)
        dists = dists * lib.norm(rays_d[..., None, :], dim=-1)
        alpha = 1.0 - lib.exp(-F.relu(raw[..., 3]) * dists)
        ones = lib.ones((alpha.shape[0], 1))
        weights = alpha * lib.cumprod(lib.cat([ones, 1.0 - alpha + 1e-10], -1), -1)[:, :-1]
        return lib.sum(weights[..., None] * lib.sigmoid(raw[..., :3]), -2), weights

    def sample_pdf(bins, weights, n):
        pdf = (weights + 1e-5) / lib.sum(weights + 1e-5, -1, keepdim=True)
        cdf = lib.cat([lib.zeros_like(pdf[..., :1]), lib.cumsum(pdf, -1)], -1)
        u = lib.linspace(0.0, 1.0, steps=n).expand(list(cdf.shape[:-1]) + [n]).contiguous()
        inds = lib.searchsorted(cdf, u, right=True)
        below = lib.max(lib.zeros_like(inds - 1), inds - 1)
        above = lib.min((cdf.shape[-1] - 1) * lib.ones_like(inds), inds)
        inds_g = lib.stack([below, above], -1)
        shape = [inds_g.shape[0], inds_g.shape[1], cdf.shape[-1]]
        cdf_g = lib.gather(cdf.unsqueeze(1).expand(shape), 2, inds_g)
        bins_g = lib.gather(bins.unsqueeze(1).expand(shape), 2, inds_g)
        denom = cdf_g[..., 1] - cdf_g[..., 0]
        denom = lib.where(denom < 1e-5, lib.ones_like(denom), denom)
        return bins_g[..., 0] + (u - cdf_g[..., 0]) / denom * (bins_g[..., 1] - bins_g[..., 0])

    t_vals = lib.linspace(0.0, 1.0, steps=8)
    z_vals = (2.0 * (1.0 - t_vals) + 6.0 * t_vals).expand([rays_o.shape[0], 8])
    rgb, weights = render(
        model(embed(rays_o[..., None, :] + rays_d[..., None, :] * z_vals[..., None])), z_vals
    )
    z_mid = 0.5 * (z_vals[..., 1:] + z_vals[..., :-1])
    z_fine = sample_pdf(z_mid, weights[..., 1:-1], 5).detach()
    z_all, _ = lib.sort(lib.cat([z_vals, z_fine], -1), -1)
    rgb_fine, _ = render(
        model(embed(rays_o[..., None, :] + rays_d[..., None, :] * z_all[..., None])), z_all
    )
    loss = lib.mean((rgb_fine - target) ** 2) + lib.mean((rgb - target) ** 2)
    psnr = -10.0 * lib.log(loss) / lib.log(lib.Tensor([10.0]))
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss.detach(), psnr.detach(), z_fine


def test_nerf_hierarchical_sampling_step_matches_torch_compiled():
    # torch.Tensor([1e10]) and torch.Tensor([10.0]) were graph breaks
    ours, theirs = _pair(_nerf)
    opt_k = kiln.optim.Adam(ours.parameters(), lr=5e-4)
    opt_t = torch.optim.Adam(theirs.parameters(), lr=5e-4)
    rng = np.random.default_rng(1)
    arrays = [rng.standard_normal((6, 3)).astype(np.float32) for _ in range(2)]
    arrays.append(rng.random((6, 3)).astype(np.float32))
    step, report = _compiled_with_report(_nerf_step)
    for i in range(3):
        got = step(kiln, ours, opt_k, *map(kiln.tensor, arrays))
        expected = _nerf_step(torch, theirs, opt_t, *map(torch.tensor, arrays))
        for name, a, b in zip(("loss", "psnr", "fine samples"), got, expected):
            _close(a, b, f"{name} at step {i}", rtol=1e-4, atol=1e-5)
    assert _breaks(report) == {BACKWARD_BREAK}


# ------------------------------------------------------------------------------ siamese losses


def _embedding_net(lib):
    nn, F = lib.nn, lib.nn.functional

    class EmbeddingNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.features = nn.Sequential(
                nn.Conv2d(1, 4, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(64, 8)
            )

        def forward(self, x):
            return F.normalize(self.features(x), dim=1)

    return EmbeddingNet()


def _siamese_step(lib, model, opt, losses, anchor, positive, negative, same):
    ea, ep, en = model(anchor), model(positive), model(negative)
    loss = sum(fn(ea, ep, en) for fn in losses["triplets"]) + losses["cosine"](ea, ep, same)
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss.detach()


def _siamese_losses(lib):
    nn, F = lib.nn, lib.nn.functional
    return {
        "triplets": [
            nn.TripletMarginLoss(margin=1.0, swap=True),
            nn.TripletMarginWithDistanceLoss(
                distance_function=lambda x, y: 1.0 - F.cosine_similarity(x, y), margin=0.5
            ),
            nn.TripletMarginWithDistanceLoss(distance_function=nn.PairwiseDistance(p=1.0)),
        ],
        "cosine": nn.CosineEmbeddingLoss(margin=0.2),
    }


def test_siamese_net_with_user_distance_functions_trains_like_torch_compiled():
    # the distance-function lambda passed to the functional loss was a graph break
    ours, theirs = _pair(_embedding_net)
    opt_k = kiln.optim.Adam(ours.parameters(), lr=5e-4)
    opt_t = torch.optim.Adam(theirs.parameters(), lr=5e-4)
    losses_k, losses_t = _siamese_losses(kiln), _siamese_losses(torch)
    rng = np.random.default_rng(2)
    images = [rng.standard_normal((4, 1, 10, 10)).astype(np.float32) for _ in range(3)]
    same = np.array([1, -1, 1, -1], dtype=np.float32)
    step, report = _compiled_with_report(_siamese_step)
    for i in range(3):
        loss = step(kiln, ours, opt_k, losses_k, *map(kiln.tensor, images), kiln.tensor(same))
        expected = _siamese_step(
            torch, theirs, opt_t, losses_t, *map(torch.tensor, images), torch.tensor(same)
        )
        _close(loss, expected, f"loss at step {i}")
    for p, q in zip(ours.parameters(), theirs.parameters()):
        _close(p, q, "parameter", rtol=1e-3)
    assert _breaks(report) == {BACKWARD_BREAK}


# ------------------------------------------------------------------ the Annotated Transformer


def _decoder(lib, vocab=11, d=16):
    nn, F = lib.nn, lib.nn.functional

    class Decoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(vocab, d)
            self.qkv = nn.Linear(d, 3 * d)
            self.ff = nn.Sequential(nn.Linear(d, 32), nn.ReLU(), nn.Linear(32, d))
            self.norm = nn.LayerNorm(d)
            self.generator = nn.Linear(d, vocab)

        def forward(self, tgt, mask):
            x = self.embed(tgt) * math.sqrt(d)
            q, k, v = self.qkv(x).chunk(3, -1)
            scores = (q @ k.transpose(-2, -1) / math.sqrt(d)).masked_fill(mask == 0, -1e9)
            x = x + scores.softmax(-1) @ v
            x = x + self.ff(self.norm(x))
            return F.log_softmax(self.generator(x), dim=-1)

    return Decoder()


def _label_smoothing(lib, x, target, padding_idx=0, smoothing=0.1):
    """The Annotated Transformer's LabelSmoothing: KL against a smoothed one-hot."""
    true_dist = x.data.clone()
    true_dist.fill_(smoothing / (x.size(1) - 2))
    true_dist.scatter_(1, target.data.unsqueeze(1), 1.0 - smoothing)
    true_dist[:, padding_idx] = 0
    true_dist.masked_fill_((target == padding_idx).unsqueeze(1), 0.0)
    return lib.nn.KLDivLoss(reduction="sum")(x, true_dist.clone().detach())


def _annotated_step(lib, model, opt, sched, tgt):
    t_in, t_y = tgt[:, :-1], tgt[:, 1:]
    size = t_in.size(-1)
    causal = lib.triu(lib.ones((1, size, size)), diagonal=1).type(lib.uint8) == 0
    mask = (t_in != 0).unsqueeze(-2) & causal
    out = model(t_in, mask)
    loss = _label_smoothing(lib, out.reshape(-1, out.size(-1)), t_y.reshape(-1))
    loss = loss / (t_y != 0).sum()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    sched.step()
    return loss.detach()


def _noam(opt, d=16, warmup=4):
    def rate(step):
        step = max(step, 1)
        return d**-0.5 * min(step**-0.5, step * warmup**-1.5)

    return rate


def test_annotated_transformer_steps_its_scheduler_in_the_compiled_step_like_torch():
    # the scheduler's first step read optimizer.step._kiln_step_wrapped: a graph break
    ours, theirs = _pair(_decoder)
    opts = [
        lib.optim.Adam(m.parameters(), lr=0.5, betas=(0.9, 0.98), eps=1e-9)
        for lib, m in ((kiln, ours), (torch, theirs))
    ]
    scheds = [lib.optim.lr_scheduler.LambdaLR(o, _noam(o)) for lib, o in zip((kiln, torch), opts)]
    tgt = np.random.default_rng(3).integers(1, 11, (3, 7))
    tgt[0, 5:] = 0
    step, report = _compiled_with_report(_annotated_step)
    for i in range(4):
        loss = step(kiln, ours, opts[0], scheds[0], kiln.tensor(tgt))
        _close(loss, _annotated_step(torch, theirs, opts[1], scheds[1], torch.tensor(tgt)), f"{i}")
        assert scheds[0].get_last_lr() == scheds[1].get_last_lr()
    for (name, p), q in zip(ours.named_parameters(), theirs.parameters()):
        if "qkv.bias" not in name:  # the key bias's gradient is rounding noise under softmax
            _close(p, q, name, rtol=1e-3)
    assert not [m for m in _breaks(report) if "attribute" in m]


# ----------------------------------------------------------------------------- data statistics


def _statistics(lib, x, labels):
    """A data-processing script's summary: more than 30 values in one list display (CPython
    builds it item by item), bincount's data-dependent length among them (a graph break)."""
    q = lib.tensor([0.1, 0.5, 0.9])
    return [
        lib.quantile(x, q, dim=1), lib.nanquantile(x, 0.25, dim=0), x.median(), x.std(0),
        lib.sort(x, dim=1, descending=True).values, lib.argsort(x, dim=0), x.amax(1), x.amin(0),
        lib.cummax(x, 1).values, lib.logcumsumexp(x, 0), x.topk(3, largest=False).values,
        lib.bincount(labels, minlength=7), lib.histc(x, bins=5, min=-2, max=2),
        lib.bucketize(x, lib.tensor([-1.0, 0.0, 1.0])), lib.kthvalue(x, 3, dim=1).values,
        lib.count_nonzero(x > 0, dim=1), x.var(1), x.mean(0), lib.cov(x), lib.corrcoef(x[:3]),
        lib.cdist(x[:2], x[2:4]), lib.diff(x, n=2, dim=1), lib.aminmax(x, dim=0).min,
        x.argmax(1), x.abs().sum(), x.norm(dim=1), x.prod(1), x.cumsum(0), x.logsumexp(1),
        lib.msort(x), x.clamp(-1, 1).mean(), (x > 0).float().mean(1), labels.max(),
    ]  # fmt: skip


def test_statistics_list_with_a_break_inside_matches_torch_compiled():
    # the 33 statistics came back as 11: the items after bincount were dropped
    rng = np.random.default_rng(4)
    x = rng.standard_normal((5, 8)).astype(np.float32)
    labels = rng.integers(0, 5, (20,))
    got = kiln.compile(_statistics)(kiln, kiln.tensor(x), kiln.tensor(labels))
    expected = _statistics(torch, torch.tensor(x), torch.tensor(labels))
    assert len(got) == len(expected)
    for i, (a, b) in enumerate(zip(got, expected)):
        _close(a, b, f"statistic {i}", rtol=1e-5, atol=1e-5)
