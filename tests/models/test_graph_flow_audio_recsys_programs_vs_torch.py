"""Graph, flow, audio, recommender and implicit-model programs in the style of their popular
repositories (PyG's GAT layer, nflows' rational-quadratic splines, a keyword-spotting log-mel
front end, DLRM and DeepFM, the implicit-layers tutorial's DEQ, SIREN, a JEM-style energy
model, RotatE, DLinear with RevIN, a Gumbel-softmax VAE, Poincare embeddings and linear
attention), written once for both libraries and run eagerly, under ``kiln.compile`` and under
``kiln.compile(dynamic=True)`` against PyTorch (probe round 15).

Each program uses the harness of ``test_hf_vision_sequence_programs_vs_torch``: kiln's model
starts from PyTorch's weights, and every step's outputs, parameters and gradients are compared;
under ``dynamic=True`` the batches change size and a recompile fails the test. The first
batches avoid sizes equal to another input's (duck sizing would make them one symbol).

What the round found: ``stft``'s reflect-padded centre frames (and ``F.pad``'s reflect,
replicate and circular modes) built their source index with numpy from the length, pinning it,
so the keyword spotter recompiled for every wave length under ``dynamic=True``; an
``EmbeddingBag`` index outside the table raised an IndexError where PyTorch raises a
RuntimeError.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from tests.models.test_hf_vision_sequence_programs_vs_torch import ALL_MODES, Program, _check
from tests.oracle import needs_torch

pytestmark = needs_torch


# ------------------------------------------------------------------------------ graph attention


def _gat(lib):
    """Two GAT layers as PyG writes them: self loops appended to the edge list, per-edge scores
    from source and target halves, a segment softmax (a detached ``scatter_reduce`` amax, an
    ``index_add_`` of the exponentials), messages summed into their targets; mean and max
    pooling per graph."""
    nn, F = lib.nn, lib.nn.functional

    def segment_softmax(scores, index, num_nodes):
        expanded = index[:, None].expand_as(scores)
        peak = scores.new_zeros((num_nodes, scores.shape[1])).scatter_reduce(
            0, expanded, scores.detach(), reduce="amax", include_self=False
        )
        weights = (scores - peak.index_select(0, index)).exp()
        total = scores.new_zeros((num_nodes, scores.shape[1])).index_add_(0, index, weights)
        return weights / (total.index_select(0, index) + 1e-16)

    class GATConv(nn.Module):
        def __init__(self, cin, cout, heads, concat=True):
            super().__init__()
            self.heads, self.cout, self.concat = heads, cout, concat
            self.lin = nn.Linear(cin, heads * cout, bias=False)
            self.att_src = nn.Parameter(lib.randn(1, heads, cout) * 0.3)
            self.att_dst = nn.Parameter(lib.randn(1, heads, cout) * 0.3)
            self.bias = nn.Parameter(lib.zeros(heads * cout if concat else cout))

        def forward(self, x, edge_index):
            num_nodes = x.size(0)
            loops = lib.arange(num_nodes, device=x.device)
            src = lib.cat([edge_index[0], loops])
            dst = lib.cat([edge_index[1], loops])
            h = self.lin(x).view(-1, self.heads, self.cout)
            alpha_src = (h * self.att_src).sum(dim=-1)
            alpha_dst = (h * self.att_dst).sum(dim=-1)
            alpha = F.leaky_relu(alpha_src[src] + alpha_dst.index_select(0, dst), 0.2)
            alpha = segment_softmax(alpha, dst, num_nodes)
            messages = h[src] * alpha.unsqueeze(-1)
            out = lib.zeros_like(h).index_add_(0, dst, messages)
            out = out.flatten(1) if self.concat else out.mean(dim=1)
            return out + self.bias

    class GAT(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = GATConv(5, 4, heads=3)
            self.conv2 = GATConv(12, 6, heads=2, concat=False)
            self.head = nn.Linear(12, 3)

        def forward(self, x, edge_index, batch, num_graphs):
            x = F.elu(self.conv1(x, edge_index))
            x = self.conv2(x, edge_index)
            counts = lib.bincount(batch, minlength=num_graphs).clamp(min=1)
            mean = x.new_zeros((num_graphs, x.shape[1])).index_add_(0, batch, x)
            mean = mean / counts[:, None].to(x.dtype)
            peak = x.new_zeros((num_graphs, x.shape[1])).scatter_reduce(
                0, batch[:, None].expand_as(x), x, reduce="amax", include_self=False
            )
            return self.head(lib.cat([mean, peak], dim=1))

    model = GAT()
    return model, lib.optim.Adam(model.parameters(), lr=1e-2, weight_decay=5e-4)


def _graph_step(lib, model, opt, x, edge_index, batch, num_graphs, y):
    logits = model(x, edge_index, batch, num_graphs)
    loss = lib.nn.functional.cross_entropy(logits, y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss, logits


def _graph_batches(rng):
    batches = []
    for sizes in ((4, 6, 5, 3), (5, 3), (6, 6, 4)):
        x, edges, batch, start = [], [], [], 0
        for graph, n in enumerate(sizes):
            x.append(rng.standard_normal((n, 5), dtype=np.float32))
            count = 2 * n
            edges.append(rng.integers(0, n, (2, count)) + start)
            batch += [graph] * n
            start += n
        y = rng.integers(0, 3, len(sizes))
        batches.append(
            (np.concatenate(x), np.concatenate(edges, 1), np.array(batch), len(sizes), y)
        )
    return batches


def test_gat_with_segment_softmax_and_scatter_pooling_trains_like_torch():
    _check(Program(_gat, _graph_step, _graph_batches))


# ------------------------------------------------------------------------------ spline flow


def _rational_quadratic_spline(lib, x, widths, heights, derivatives, bound=3.0):
    """nflows' unconstrained rational-quadratic spline (forward direction) with linear tails:
    knots by softmax and a padded cumsum with the ends written in place, the bin of each input
    by ``searchsorted``, its knot values by ``gather``."""
    F = lib.nn.functional
    min_size = 1e-3
    bins = widths.shape[-1]
    inside = (x >= -bound) & (x <= bound)
    x_in = x.clamp(-bound, bound)

    def knots(unnormalised):
        sizes = min_size + (1 - min_size * bins) * F.softmax(unnormalised, dim=-1)
        cumulative = F.pad(lib.cumsum(sizes, dim=-1), (1, 0), mode="constant", value=0.0)
        cumulative = 2 * bound * cumulative - bound
        cumulative[..., 0] = -bound
        cumulative[..., -1] = bound
        return cumulative, cumulative[..., 1:] - cumulative[..., :-1]

    cumwidths, widths = knots(widths)
    cumheights, heights = knots(heights)
    derivatives = F.pad(derivatives, (1, 1))
    constant = math.log(math.exp(1 - min_size) - 1)
    derivatives[..., 0] = constant
    derivatives[..., -1] = constant
    derivatives = min_size + F.softplus(derivatives)

    index = lib.searchsorted(cumwidths.detach().contiguous(), x_in[..., None], right=True) - 1
    index = index.clamp(0, bins - 1)

    def pick(values):
        return values.gather(-1, index)[..., 0]

    x_k, w_k, y_k, h_k = pick(cumwidths), pick(widths), pick(cumheights), pick(heights)
    d_k, d_k1 = pick(derivatives), pick(derivatives[..., 1:])
    slope = h_k / w_k
    theta = (x_in - x_k) / w_k
    mixed = theta * (1 - theta)
    numerator = h_k * (slope * theta.pow(2) + d_k * mixed)
    denominator = slope + (d_k1 + d_k - 2 * slope) * mixed
    y = y_k + numerator / denominator
    derivative = slope.pow(2) * (d_k1 * theta.pow(2) + 2 * slope * mixed + d_k * (1 - theta).pow(2))
    log_det = lib.log(derivative) - 2 * lib.log(denominator)
    return lib.where(inside, y, x), lib.where(inside, log_det, lib.zeros_like(log_det))


def _spline_flow(lib):
    nn = lib.nn
    bins = 5

    class Coupling(nn.Module):
        def __init__(self, flip):
            super().__init__()
            self.flip = flip
            self.net = nn.Sequential(nn.Linear(2, 16), nn.Tanh(), nn.Linear(16, 2 * (3 * bins - 1)))

        def forward(self, x):
            identity, transformed = x.chunk(2, dim=1)
            if self.flip:
                identity, transformed = transformed, identity
            params = self.net(identity).view(x.shape[0], 2, 3 * bins - 1)
            widths, heights, derivatives = params.split([bins, bins, bins - 1], dim=-1)
            scale = 1 / math.sqrt(16)
            y, log_det = _rational_quadratic_spline(
                lib, transformed, widths * scale, heights * scale, derivatives
            )
            out = lib.cat([y, identity] if self.flip else [identity, y], dim=1)
            return out, log_det.sum(dim=1)

    class Flow(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList([Coupling(False), Coupling(True)])

        def forward(self, x):
            total = x.new_zeros(x.shape[0])
            for layer in self.layers:
                x, log_det = layer(x)
                total = total + log_det
            base = -0.5 * x.pow(2).sum(dim=1) - x.shape[1] * 0.5 * math.log(2 * math.pi)
            return base + total

    model = Flow()
    return model, lib.optim.Adam(model.parameters(), lr=5e-3)


def _flow_step(lib, model, opt, x):
    log_prob = model(x)
    loss = -log_prob.mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss, log_prob


def _flow_batches(rng):
    # some values past the spline's bound take the linear tails
    return [(rng.standard_normal((n, 4), dtype=np.float32) * 1.6,) for n in (24, 17, 31)]


def test_rational_quadratic_spline_flow_with_searchsorted_bins_trains_like_torch():
    _check(Program(_spline_flow, _flow_step, _flow_batches))


# ------------------------------------------------------------------------------ audio


def _mel_filterbank(n_freqs: int, n_mels: int, sample_rate: int) -> np.ndarray:
    """HTK triangular filters, (n_freqs, n_mels), as torchaudio's melscale_fbanks makes them."""

    def to_mel(f):
        return 2595.0 * np.log10(1.0 + f / 700.0)

    freqs = np.linspace(0, sample_rate // 2, n_freqs)
    mel_points = np.linspace(to_mel(0.0), to_mel(sample_rate / 2), n_mels + 2)
    hz_points = 700.0 * (10 ** (mel_points / 2595.0) - 1.0)
    slopes = hz_points[None, :] - freqs[:, None]
    gaps = np.diff(hz_points)
    down = -slopes[:, :-2] / gaps[:-1]
    up = slopes[:, 2:] / gaps[1:]
    return np.maximum(0, np.minimum(down, up)).astype(np.float32)


def _keyword_spotter(lib):
    """A learnable pre-emphasis filter, a log-mel spectrogram from ``stft`` (Hann window,
    reflect-padded centre frames), per-utterance normalisation, SpecAugment masks built from
    ``arange`` comparisons, and a small CNN trained with label smoothing."""
    nn = lib.nn

    class KeywordSpotter(nn.Module):
        def __init__(self):
            super().__init__()
            self.pre_emphasis = nn.Conv1d(1, 1, 5, padding=2)
            self.register_buffer("window", lib.hann_window(64))
            self.register_buffer("mel", lib.tensor(_mel_filterbank(33, 12, 8000)))
            self.features = nn.Sequential(
                nn.Conv2d(1, 8, 3, padding=1, bias=False),
                nn.BatchNorm2d(8),
                nn.ReLU(),
                nn.MaxPool2d(2),
                nn.Conv2d(8, 12, 3, padding=1, bias=False),
                nn.BatchNorm2d(12),
                nn.ReLU(),
                nn.AdaptiveAvgPool2d(1),
            )
            self.classifier = nn.Linear(12, 4)

        def forward(self, wave, freq_start, time_start):
            wave = self.pre_emphasis(wave.unsqueeze(1)).squeeze(1)
            spec = lib.stft(
                wave, n_fft=64, hop_length=16, window=self.window, center=True,
                pad_mode="reflect", return_complex=True,
            )  # fmt: skip
            power = spec.abs().pow(2)
            mel = lib.matmul(power.transpose(1, 2), self.mel).transpose(1, 2)
            log_mel = lib.log(mel + 1e-6)
            mean = log_mel.mean(dim=(1, 2), keepdim=True)
            std = log_mel.std(dim=(1, 2), keepdim=True)
            log_mel = (log_mel - mean) / (std + 1e-5)
            freq = lib.arange(log_mel.shape[1])[None, :, None]
            time = lib.arange(log_mel.shape[2])[None, None, :]
            freq_start, time_start = freq_start[:, None, None], time_start[:, None, None]
            masked = ((freq >= freq_start) & (freq < freq_start + 3)) | (
                (time >= time_start) & (time < time_start + 4)
            )
            log_mel = log_mel.masked_fill(masked, 0.0)
            return self.classifier(self.features(log_mel.unsqueeze(1)).flatten(1))

    model = KeywordSpotter()
    return model, lib.optim.AdamW(model.parameters(), lr=3e-3)


def _keyword_step(lib, model, opt, wave, freq_start, time_start, labels):
    logits = model(wave, freq_start, time_start)
    loss = lib.nn.functional.cross_entropy(logits, labels, label_smoothing=0.1)
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss, logits


def _audio_batches(rng):
    batches = []
    for size, length in ((5, 400), (3, 464), (6, 528)):
        t = np.arange(length) / 8000.0
        tone = np.sin(2 * np.pi * rng.uniform(200, 3000, (size, 1)) * t)
        wave = (tone + 0.1 * rng.standard_normal((size, length))).astype(np.float32)
        frames = length // 16 + 1
        batches.append(
            (
                wave,
                rng.integers(0, 9, size),
                rng.integers(0, frames - 4, size),
                rng.integers(0, 4, size),
            )
        )
    return batches


def test_log_mel_keyword_spotter_with_stft_and_spec_augment_trains_like_torch():
    _check(Program(_keyword_spotter, _keyword_step, _audio_batches, rtol=2e-4, atol=2e-5))


# ------------------------------------------------------------------------------ recommenders


def _dlrm(lib):
    """DLRM: a bottom MLP for dense features, one ``EmbeddingBag`` per sparse feature (weighted
    sum with offsets, mean with an empty bag, max with ``include_last_offset``), pairwise dot
    interactions by ``bmm`` read through ``tril_indices``, a top MLP and a weighted BCE."""
    nn = lib.nn

    class DLRM(nn.Module):
        def __init__(self):
            super().__init__()
            self.bottom = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 6), nn.ReLU())
            self.bag_sum = nn.EmbeddingBag(10, 6, mode="sum")
            self.bag_mean = nn.EmbeddingBag(7, 6, mode="mean")
            self.bag_max = nn.EmbeddingBag(12, 6, mode="max", include_last_offset=True)
            self.top = nn.Sequential(nn.Linear(6 + 6, 8), nn.ReLU(), nn.Linear(8, 1))

        def forward(self, dense, ids0, offsets0, weights0, ids1, offsets1, ids2, offsets2):
            x = self.bottom(dense)
            features = [
                x,
                self.bag_sum(ids0, offsets0, per_sample_weights=weights0),
                self.bag_mean(ids1, offsets1),
                self.bag_max(ids2, offsets2),
            ]
            batch, width = x.shape
            stacked = lib.cat(features, dim=1).view(batch, -1, width)
            interactions = lib.bmm(stacked, stacked.transpose(1, 2))
            rows, cols = lib.tril_indices(len(features), len(features), offset=-1)
            return self.top(lib.cat([x, interactions[:, rows, cols]], dim=1)).squeeze(1)

    model = DLRM()
    return model, lib.optim.Adagrad(model.parameters(), lr=0.05)


def _dlrm_step(lib, model, opt, dense, ids0, off0, w0, ids1, off1, ids2, off2, clicks):
    logits = model(dense, ids0, off0, w0, ids1, off1, ids2, off2)
    loss = lib.nn.functional.binary_cross_entropy_with_logits(
        logits, clicks, pos_weight=lib.tensor(2.0)
    )
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss, lib.sigmoid(logits)


def _bags(rng, size, vocab, taken, last_offset=False, empty=False):
    """Ids and offsets of ``size`` bags; the total length differs from the sizes in ``taken``
    (duck sizing would make equal sizes one symbol, so a later batch would recompile)."""
    lengths = rng.integers(1, 4, size)
    if empty:
        lengths[1] = 0
    while lengths.sum() in taken:
        lengths[-1] += 1
    taken.add(lengths.sum())
    ids = rng.integers(0, vocab, lengths.sum())
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    return ids, offsets if last_offset else offsets[:-1]


def _dlrm_batches(rng):
    batches = []
    for size in (6, 4, 9):
        taken = {4, size, size + 1}
        ids0, off0 = _bags(rng, size, 10, taken)
        ids1, off1 = _bags(rng, size, 7, taken, empty=True)
        ids2, off2 = _bags(rng, size, 12, taken, last_offset=True)
        batches.append(
            (
                rng.standard_normal((size, 4), dtype=np.float32),
                ids0, off0, rng.uniform(0.5, 1.5, len(ids0)).astype(np.float32),
                ids1, off1, ids2, off2,
                rng.integers(0, 2, size).astype(np.float32),
            )
        )  # fmt: skip
    return batches


def test_dlrm_with_embedding_bags_and_tril_indexed_interactions_trains_like_torch():
    _check(Program(_dlrm, _dlrm_step, _dlrm_batches, modes=ALL_MODES))


def _deep_fm(lib):
    """DeepFM with a DCN-v2 cross network: one embedding table for all fields (field offsets
    added to the ids), the factorisation machine's square-of-sum minus sum-of-squares, and the
    cross layers ``x0 * W(xl) + xl``."""
    nn = lib.nn
    field_dims = (5, 4, 6)

    class DeepFM(nn.Module):
        def __init__(self):
            super().__init__()
            offsets = np.concatenate([[0], np.cumsum(field_dims)[:-1]])
            self.register_buffer("offsets", lib.tensor(offsets))
            self.embedding = nn.Embedding(sum(field_dims), 4)
            self.linear = nn.Embedding(sum(field_dims), 1)
            self.bias = nn.Parameter(lib.zeros(1))
            self.cross = nn.ModuleList([nn.Linear(12, 12) for _ in range(2)])
            self.mlp = nn.Sequential(
                nn.Linear(12, 8, bias=False),
                nn.BatchNorm1d(8),
                nn.ReLU(),
                nn.Dropout(0.0),
                nn.Linear(8, 1),
            )

        def forward(self, fields):
            fields = fields + self.offsets.unsqueeze(0)
            emb = self.embedding(fields)
            square_of_sum = emb.sum(dim=1) ** 2
            sum_of_square = (emb**2).sum(dim=1)
            fm = 0.5 * (square_of_sum - sum_of_square).sum(dim=1, keepdim=True)
            linear = self.linear(fields).sum(dim=1) + self.bias
            x0 = xl = emb.flatten(1)
            for layer in self.cross:
                xl = x0 * layer(xl) + xl
            return (linear + fm + self.mlp(xl)).squeeze(1)

    model = DeepFM()
    return model, lib.optim.Adam(model.parameters(), lr=1e-2)


def _ctr_step(lib, model, opt, fields, clicks):
    logits = model(fields)
    loss = lib.nn.functional.binary_cross_entropy(lib.sigmoid(logits), clicks)
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss


def _ctr_batches(rng):
    return [
        (
            np.stack([rng.integers(0, d, n) for d in (5, 4, 6)], axis=1),
            rng.integers(0, 2, n).astype(np.float32),
        )
        for n in (8, 5, 11)
    ]


def test_deep_fm_with_cross_network_trains_like_torch():
    _check(Program(_deep_fm, _ctr_step, _ctr_batches, modes=ALL_MODES))


# ------------------------------------------------------------------------------ implicit models


def _deq(lib):
    """The implicit-layers tutorial's DEQ: the fixed point found under ``no_grad``, one more
    application with grad, and the backward's fixed point solved in a tensor hook that calls
    ``autograd.grad`` on a re-attached copy."""
    nn = lib.nn

    def forward_iteration(f, z, iterations=25):
        for _ in range(iterations):
            z = f(z)
        return z

    class Cell(nn.Module):
        def __init__(self, width):
            super().__init__()
            self.linear = nn.Linear(width, width, bias=False)
            self.norm = nn.LayerNorm(width)

        def forward(self, z, x):
            return self.norm(lib.tanh(0.5 * self.linear(z) + x))

    class DEQFixedPoint(nn.Module):
        def __init__(self, width):
            super().__init__()
            self.f = Cell(width)

        def forward(self, x):
            with lib.no_grad():
                z = forward_iteration(lambda z: self.f(z, x), lib.zeros_like(x))
            z = self.f(z, x)
            z0 = z.clone().detach().requires_grad_()
            f0 = self.f(z0, x)

            def backward_hook(grad):
                return forward_iteration(
                    lambda y: lib.autograd.grad(f0, z0, y, retain_graph=True)[0] + grad, grad
                )

            z.register_hook(backward_hook)
            return z

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Linear(3, 8)
            self.deq = DEQFixedPoint(8)
            self.head = nn.Linear(8, 2)

        def forward(self, x):
            return self.head(self.deq(self.embed(x)))

    model = Model()
    return model, lib.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


def _regress_step(lib, model, opt, x, y):
    out = model(x)
    loss = lib.nn.functional.mse_loss(out, y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss, out


def _regression_batches(width, target):
    def batches(rng):
        return [
            (
                rng.standard_normal((n, width), dtype=np.float32),
                rng.standard_normal((n, target), dtype=np.float32),
            )
            for n in (6, 9, 5)
        ]

    return batches


def test_deq_with_fixed_point_backward_hook_trains_like_torch():
    # the momentum buffers appear at the first step: the second compiles the steady step
    program = Program(_deq, _regress_step, _regression_batches(3, 2), recompiles=1)
    _check(dataclasses.replace(program, modes=ALL_MODES))


def _siren(lib):
    """SIREN: sine layers with the paper's initialisation, fitted to values, gradients and the
    Laplacian of a field (``autograd.grad`` with ``create_graph``, twice)."""
    nn = lib.nn

    class SineLayer(nn.Module):
        def __init__(self, cin, cout, first=False, omega=4.0):
            super().__init__()
            self.omega = omega
            self.linear = nn.Linear(cin, cout)
            with lib.no_grad():
                bound = 1 / cin if first else math.sqrt(6 / cin) / omega
                self.linear.weight.uniform_(-bound, bound)

        def forward(self, x):
            return lib.sin(self.omega * self.linear(x))

    model = nn.Sequential(SineLayer(2, 16, first=True), SineLayer(16, 16), nn.Linear(16, 1))
    return model, lib.optim.Adam(model.parameters(), lr=1e-3)


def _siren_step(lib, model, opt, coords, values, gradients):
    coords = coords.clone().requires_grad_(True)
    out = model(coords)
    (grad,) = lib.autograd.grad(out.sum(), coords, create_graph=True)
    laplacian = 0
    for i in range(coords.shape[1]):
        laplacian = (
            laplacian + lib.autograd.grad(grad[:, i].sum(), coords, create_graph=True)[0][:, i]
        )
    loss = (
        lib.nn.functional.mse_loss(out.squeeze(1), values)
        + 0.1 * (grad - gradients).pow(2).sum(dim=1).mean()
        + 1e-3 * laplacian.pow(2).mean()
    )
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss, out, grad


def _field_batches(rng):
    batches = []
    for n in (20, 13, 27):
        coords = rng.uniform(-1, 1, (n, 2)).astype(np.float32)
        values = np.sin(3 * coords[:, 0]) * np.cos(2 * coords[:, 1])
        gradients = np.stack(
            [
                3 * np.cos(3 * coords[:, 0]) * np.cos(2 * coords[:, 1]),
                -2 * np.sin(3 * coords[:, 0]) * np.sin(2 * coords[:, 1]),
            ],
            axis=1,
        )
        batches.append((coords, values.astype(np.float32), gradients.astype(np.float32)))
    return batches


def test_siren_fitting_values_gradients_and_laplacian_trains_like_torch():
    _check(Program(_siren, _siren_step, _field_batches, modes=ALL_MODES))


def _energy_model(lib):
    nn = lib.nn
    model = nn.Sequential(
        nn.Linear(2, 16), nn.SiLU(), nn.Linear(16, 16), nn.SiLU(), nn.Linear(16, 1)
    )
    return model, lib.optim.Adam(model.parameters(), lr=1e-3, betas=(0.0, 0.999))


def _langevin_step(lib, model, opt, positives, start, noise):
    """Contrastive divergence with short-run Langevin samples (JEM/IGEBM style): each sampling
    step takes ``autograd.grad`` of the energy with respect to a detached input."""
    samples = start
    for k in range(noise.shape[0]):
        samples = samples.detach().requires_grad_(True)
        (grad,) = lib.autograd.grad(model(samples).sum(), samples)
        samples = samples - 0.1 * grad + 0.01 * noise[k]
    samples = samples.detach()
    positive_energy, negative_energy = model(positives), model(samples)
    loss = positive_energy.mean() - negative_energy.mean()
    loss = loss + 0.1 * (positive_energy.pow(2).mean() + negative_energy.pow(2).mean())
    opt.zero_grad()
    loss.backward()
    lib.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
    opt.step()
    return loss, samples


def _langevin_batches(rng):
    return [
        (
            rng.standard_normal((n, 2), dtype=np.float32) * 0.5 + 1.0,
            rng.uniform(-2, 2, (n, 2)).astype(np.float32),
            rng.standard_normal((5, n, 2), dtype=np.float32),
        )
        for n in (10, 7, 13)
    ]


def test_energy_model_with_langevin_sampling_by_input_gradients_trains_like_torch():
    _check(Program(_energy_model, _langevin_step, _langevin_batches, modes=ALL_MODES))


# ------------------------------------------------------------------------------ embeddings


def _rotate(lib):
    """RotatE: entity embeddings read as complex numbers (``lib.complex`` of the two halves),
    relations as unit rotations by ``polar``, the distance as the sum of complex moduli, and
    self-adversarial negative sampling (a detached softmax over the negatives' scores)."""
    nn = lib.nn
    gamma, dim = 6.0, 4
    embedding_range = (gamma + 2.0) / dim

    class RotatE(nn.Module):
        def __init__(self):
            super().__init__()
            self.entity = nn.Embedding(12, 2 * dim)
            self.relation = nn.Embedding(3, dim)
            nn.init.uniform_(self.entity.weight, -embedding_range, embedding_range)
            nn.init.uniform_(self.relation.weight, -embedding_range, embedding_range)

        def forward(self, head, relation, tail):
            re_head, im_head = self.entity(head).chunk(2, dim=-1)
            re_tail, im_tail = self.entity(tail).chunk(2, dim=-1)
            phase = self.relation(relation) / (embedding_range / math.pi)
            rotation = lib.polar(lib.ones_like(phase), phase)
            difference = lib.complex(re_head, im_head) * rotation - lib.complex(re_tail, im_tail)
            return gamma - difference.abs().sum(dim=-1)

    model = RotatE()
    return model, lib.optim.Adam(model.parameters(), lr=1e-2)


def _knowledge_graph_step(lib, model, opt, head, relation, tail, negatives):
    F = lib.nn.functional
    positive = model(head[:, None], relation[:, None], tail[:, None])
    negative = model(head[:, None], relation[:, None], negatives)
    weights = F.softmax(negative * 1.0, dim=1).detach()
    negative_loss = -(weights * F.logsigmoid(-negative)).sum(dim=1)
    positive_loss = -F.logsigmoid(positive).squeeze(1)
    loss = (positive_loss.mean() + negative_loss.mean()) / 2
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss, positive, negative


def _triples(rng):
    return [
        (rng.integers(0, 12, n), rng.integers(0, 3, n), rng.integers(0, 12, n),
         rng.integers(0, 12, (n, 4)))
        for n in (6, 9, 4)
    ]  # fmt: skip


def test_rotate_with_complex_rotations_and_self_adversarial_negatives_trains_like_torch():
    _check(Program(_rotate, _knowledge_graph_step, _triples, modes=ALL_MODES))


def _poincare(lib):
    """Poincare embeddings (Nickel & Kiela) with a user ``Optimizer`` subclass: Riemannian SGD
    rescales the gradient by the metric and projects back into the ball in place."""
    nn = lib.nn

    class RiemannianSGD(lib.optim.Optimizer):
        def __init__(self, params, lr):
            super().__init__(params, dict(lr=lr))

        @lib.no_grad()
        def step(self):
            for group in self.param_groups:
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    square_norm = p.pow(2).sum(dim=-1, keepdim=True)
                    p.add_(p.grad * (1 - square_norm).pow(2) / 4, alpha=-group["lr"])
                    norm = p.norm(dim=-1, keepdim=True)
                    p.copy_(lib.where(norm >= 1, p / norm * (1 - 1e-5), p))

    class Poincare(nn.Module):
        def __init__(self):
            super().__init__()
            self.embedding = nn.Embedding(10, 2)
            nn.init.uniform_(self.embedding.weight, -0.3, 0.3)

        def forward(self, u, v):
            u, v = self.embedding(u), self.embedding(v)
            square_u = u.pow(2).sum(dim=-1).clamp(0, 1 - 1e-5)
            square_v = v.pow(2).sum(dim=-1).clamp(0, 1 - 1e-5)
            square_distance = (u - v).pow(2).sum(dim=-1)
            x = 1 + 2 * square_distance / ((1 - square_u) * (1 - square_v))
            return lib.acosh(x.clamp_min(1 + 1e-5))

    model = Poincare()
    return model, RiemannianSGD(model.parameters(), lr=0.3)


def _poincare_step(lib, model, opt, pairs):
    distances = model(pairs[:, :1], pairs[:, 1:])
    loss = lib.nn.functional.cross_entropy(-distances, lib.zeros_like(pairs[:, 0]))
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss, distances


def _pair_batches(rng):
    return [(rng.integers(0, 10, (n, 5)),) for n in (6, 4, 8)]


def test_poincare_embeddings_with_a_riemannian_sgd_optimizer_subclass_train_like_torch():
    _check(Program(_poincare, _poincare_step, _pair_batches, modes=ALL_MODES))


# ------------------------------------------------------------------------------ time series


def _dlinear(lib):
    """DLinear with RevIN: statistics kept on the module between ``norm`` and ``denorm``,
    replicate padding by ``repeat`` of the end steps before an ``AvgPool1d`` trend, and one
    linear head per channel written into a preallocated output by slice assignment."""
    nn = lib.nn
    seq_len, pred_len, channels, kernel = 12, 4, 3, 5

    class RevIN(nn.Module):
        def __init__(self, num_features, eps=1e-5):
            super().__init__()
            self.eps = eps
            self.affine_weight = nn.Parameter(lib.ones(num_features))
            self.affine_bias = nn.Parameter(lib.zeros(num_features))

        def forward(self, x, mode):
            if mode == "norm":
                self.mean = lib.mean(x, dim=1, keepdim=True).detach()
                self.stdev = lib.sqrt(
                    lib.var(x, dim=1, keepdim=True, unbiased=False) + self.eps
                ).detach()
                return (x - self.mean) / self.stdev * self.affine_weight + self.affine_bias
            x = (x - self.affine_bias) / (self.affine_weight + self.eps * self.eps)
            return x * self.stdev + self.mean

    class DLinear(nn.Module):
        def __init__(self):
            super().__init__()
            self.revin = RevIN(channels)
            self.pool = nn.AvgPool1d(kernel, stride=1, padding=0)
            self.seasonal = nn.ModuleList([nn.Linear(seq_len, pred_len) for _ in range(channels)])
            self.trend = nn.ModuleList([nn.Linear(seq_len, pred_len) for _ in range(channels)])

        def moving_average(self, x):
            front = x[:, 0:1, :].repeat(1, (kernel - 1) // 2, 1)
            end = x[:, -1:, :].repeat(1, (kernel - 1) // 2, 1)
            x = lib.cat([front, x, end], dim=1)
            return self.pool(x.permute(0, 2, 1)).permute(0, 2, 1)

        def forward(self, x):
            x = self.revin(x, "norm")
            trend = self.moving_average(x)
            seasonal = (x - trend).permute(0, 2, 1)
            trend = trend.permute(0, 2, 1)
            out = lib.zeros([x.size(0), channels, pred_len], dtype=x.dtype)
            for i in range(channels):
                out[:, i, :] = self.seasonal[i](seasonal[:, i, :]) + self.trend[i](trend[:, i, :])
            return self.revin(out.permute(0, 2, 1), "denorm")

    model = DLinear()
    return model, lib.optim.Adam(model.parameters(), lr=5e-3)


def _forecast_step(lib, model, opt, history, future):
    forecast = model(history)
    loss = lib.nn.functional.l1_loss(forecast, future) + lib.nn.functional.mse_loss(
        forecast, future
    )
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss, forecast


def _series_batches(rng):
    batches = []
    for n in (5, 8, 3):
        t = np.arange(16)[None, :, None] + rng.uniform(0, 10, (n, 1, 3))
        series = np.sin(t / 2.0) * rng.uniform(1, 3, (n, 1, 3)) + rng.uniform(-2, 2, (n, 1, 3))
        series = (series + 0.1 * rng.standard_normal(series.shape)).astype(np.float32)
        batches.append((series[:, :12], series[:, 12:]))
    return batches


def test_dlinear_with_revin_and_per_channel_heads_trains_like_torch():
    _check(Program(_dlinear, _forecast_step, _series_batches))


# ------------------------------------------------------------------------------ latent models


def _gumbel_vae(lib):
    """A categorical VAE with the straight-through Gumbel-softmax (noise drawn outside, the
    hard sample by ``scatter_`` of the argmax into ``zeros_like``) and a KL to the uniform
    prior; the temperature is a tensor annealed by the caller."""
    nn, F = lib.nn, lib.nn.functional
    latents, categories = 3, 4

    class CategoricalVAE(nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder = nn.Sequential(nn.Linear(16, 24), nn.ReLU(), nn.Linear(24, 12))
            self.decoder = nn.Sequential(nn.Linear(12, 24), nn.ReLU(), nn.Linear(24, 16))

        def forward(self, x, gumbel, temperature):
            logits = self.encoder(x).view(-1, latents, categories)
            soft = F.softmax((logits + gumbel) / temperature, dim=-1)
            index = soft.max(dim=-1, keepdim=True)[1]
            hard = lib.zeros_like(soft).scatter_(-1, index, 1.0)
            z = (hard - soft).detach() + soft
            q = F.softmax(logits, dim=-1)
            kl = (q * (F.log_softmax(logits, dim=-1) + math.log(categories))).sum(dim=(1, 2))
            return self.decoder(z.flatten(1)), kl

    model = CategoricalVAE()
    return model, lib.optim.Adam(model.parameters(), lr=2e-3)


def _gumbel_step(lib, model, opt, x, uniform, temperature):
    gumbel = -lib.log(-lib.log(uniform + 1e-10) + 1e-10)
    recon, kl = model(x, gumbel, temperature)
    bce = lib.nn.functional.binary_cross_entropy_with_logits(recon, x, reduction="none")
    loss = (bce.sum(dim=1) + kl).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss, kl


def _binary_batches(rng):
    return [
        (
            (rng.uniform(size=(n, 16)) < 0.4).astype(np.float32),
            rng.uniform(size=(n, 3, 4)).astype(np.float32),
            np.array(max(0.5, math.exp(-0.3 * i)), dtype=np.float32),
        )
        for i, n in enumerate((8, 5, 10))
    ]


def test_gumbel_softmax_vae_with_straight_through_samples_trains_like_torch():
    _check(Program(_gumbel_vae, _gumbel_step, _binary_batches, modes=ALL_MODES))


def _linear_attention_lm(lib):
    """'Transformers are RNNs': the elu+1 feature map and causal attention by ``cumsum`` of
    per-position outer products (einsum), in a two-layer character model."""
    nn, F = lib.nn, lib.nn.functional

    class CausalLinearAttention(nn.Module):
        def __init__(self, width, heads):
            super().__init__()
            self.heads = heads
            self.qkv = nn.Linear(width, 3 * width)
            self.out = nn.Linear(width, width)

        def forward(self, x):
            b, n, c = x.shape
            q, k, v = self.qkv(x).view(b, n, 3, self.heads, c // self.heads).unbind(2)
            q, k = F.elu(q) + 1, F.elu(k) + 1
            kv = lib.einsum("bnhd,bnhe->bnhde", k, v).cumsum(dim=1)
            normaliser = 1 / (lib.einsum("bnhd,bnhd->bnh", q, k.cumsum(dim=1)) + 1e-6)
            y = lib.einsum("bnhd,bnhde,bnh->bnhe", q, kv, normaliser)
            return self.out(y.reshape(b, n, c))

    class Block(nn.Module):
        def __init__(self, width):
            super().__init__()
            self.norm1, self.attn = nn.LayerNorm(width), CausalLinearAttention(width, 2)
            self.norm2 = nn.LayerNorm(width)
            self.mlp = nn.Sequential(
                nn.Linear(width, 2 * width), nn.GELU(), nn.Linear(2 * width, width)
            )

        def forward(self, x):
            x = x + self.attn(self.norm1(x))
            return x + self.mlp(self.norm2(x))

    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(11, 8)
            self.blocks = nn.Sequential(Block(8), Block(8))
            self.head = nn.Linear(8, 11, bias=False)
            self.head.weight = self.embed.weight

        def forward(self, ids):
            return self.head(self.blocks(self.embed(ids)))

    model = LM()
    return model, lib.optim.AdamW(model.parameters(), lr=3e-3)


def _char_lm_step(lib, model, opt, ids):
    logits = model(ids[:, :-1])
    loss = lib.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), ids[:, 1:].flatten()
    )
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss


def _char_batches(rng):
    return [(rng.integers(0, 11, (b, n)),) for b, n in ((3, 9), (2, 13), (4, 7))]


def test_causal_linear_attention_lm_with_cumsum_trains_like_torch():
    _check(Program(_linear_attention_lm, _char_lm_step, _char_batches))
