"""Sparse-graph, equivariant, cellular-automaton, spiking, quantisation-aware, self-supervised,
speech-enhancement and adaptive-ODE programs in the style of their reference repositories
(pygcn, EGNN, Growing Neural Cellular Automata, snnTorch, LSQ, MoCo, Barlow Twins, a
mask-based enhancer with SI-SDR, a Dormand-Prince solver), written once for both libraries and
run eagerly, under ``kiln.compile`` and under ``kiln.compile(dynamic=True)`` against PyTorch
(probe round 15, second part).

The harness is ``test_hf_vision_sequence_programs_vs_torch``'s: kiln's model starts from
PyTorch's weights, and every step's outputs, parameters, gradients and buffers are compared.
All of these matched PyTorch; the quantiser's ``math.sqrt`` of a size recompiles per batch
size (kiln has no symbolic floats), where PyTorch compiles it once.
"""

from __future__ import annotations

import copy
import math

import numpy as np

from tests.models.test_hf_vision_sequence_programs_vs_torch import ALL_MODES, Program, _check
from tests.oracle import needs_torch

pytestmark = needs_torch


# ------------------------------------------------------------------------------ sparse GCN


def _pygcn(lib):
    """Kipf's pygcn: ``mm`` with the weight, ``spmm`` with the normalised sparse adjacency
    (a COO tensor built in the step), log-softmax and NLL on the training nodes."""
    nn, F = lib.nn, lib.nn.functional

    class GraphConvolution(nn.Module):
        def __init__(self, cin, cout):
            super().__init__()
            self.weight = nn.Parameter(lib.empty(cin, cout))
            self.bias = nn.Parameter(lib.empty(cout))
            stdv = 1.0 / math.sqrt(cout)
            self.weight.data.uniform_(-stdv, stdv)
            self.bias.data.uniform_(-stdv, stdv)

        def forward(self, x, adj):
            return lib.spmm(adj, lib.mm(x, self.weight)) + self.bias

    class GCN(nn.Module):
        def __init__(self):
            super().__init__()
            self.gc1, self.gc2 = GraphConvolution(6, 8), GraphConvolution(8, 3)

        def forward(self, x, adj):
            x = F.dropout(F.relu(self.gc1(x, adj)), 0.5, self.training)
            return F.log_softmax(self.gc2(x, adj), dim=1)

    model = GCN().eval()  # no dropout draws
    return model, lib.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)


def _gcn_step(lib, model, opt, x, indices, values, labels, train):
    adj = lib.sparse_coo_tensor(indices, values, (x.shape[0], x.shape[0]))
    out = model(x, adj)
    loss = lib.nn.functional.nll_loss(out[train], labels[train])
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss, out


def _normalised_adjacency(rng, n):
    adjacency = (rng.uniform(size=(n, n)) < 0.3).astype(np.float32)
    adjacency = np.maximum(adjacency, adjacency.T) + np.eye(n, dtype=np.float32)
    adjacency = adjacency / adjacency.sum(1, keepdims=True)
    rows, cols = np.nonzero(adjacency)
    return np.stack([rows, cols]), adjacency[rows, cols]


def _citation_batches(rng):
    batches = []
    for n in (9, 12, 7):
        indices, values = _normalised_adjacency(rng, n)
        batches.append(
            (
                rng.standard_normal((n, 6), dtype=np.float32),
                indices,
                values,
                rng.integers(0, 3, n),
                np.arange(n) % 3 != 0,
            )
        )
    return batches


def test_pygcn_with_a_sparse_normalised_adjacency_trains_like_torch():
    _check(Program(_pygcn, _gcn_step, _citation_batches, modes=ALL_MODES))


# ------------------------------------------------------------------------------ EGNN


def _egnn(lib):
    """E(n)-equivariant GNN layers on dense padded molecules: all-pairs differences by
    broadcasting, edge masks from the node mask and an ``eye``, coordinate updates by a
    distance-weighted mean, a masked sum readout."""
    nn = lib.nn

    class EGCL(nn.Module):
        def __init__(self, hidden):
            super().__init__()
            self.edge_mlp = nn.Sequential(
                nn.Linear(2 * hidden + 1, hidden), nn.SiLU(), nn.Linear(hidden, hidden), nn.SiLU()
            )
            self.node_mlp = nn.Sequential(
                nn.Linear(2 * hidden, hidden), nn.SiLU(), nn.Linear(hidden, hidden)
            )
            last = nn.Linear(hidden, 1, bias=False)
            nn.init.xavier_uniform_(last.weight, gain=0.01)
            self.coord_mlp = nn.Sequential(nn.Linear(hidden, hidden), nn.SiLU(), last)

        def forward(self, h, x, node_mask):
            n = h.shape[1]
            diff = x[:, :, None, :] - x[:, None, :, :]
            radial = diff.pow(2).sum(dim=-1, keepdim=True)
            h_i = h[:, :, None, :].expand(-1, -1, n, -1)
            h_j = h[:, None, :, :].expand(-1, n, -1, -1)
            m = self.edge_mlp(lib.cat([h_i, h_j, radial], dim=-1))
            edge_mask = node_mask[:, :, None] * node_mask[:, None, :] * (1 - lib.eye(n))
            m = m * edge_mask.unsqueeze(-1)
            neighbours = edge_mask.sum(dim=2, keepdim=True).clamp(min=1)
            x = x + (diff * self.coord_mlp(m)).sum(dim=2) / neighbours
            h = h + self.node_mlp(lib.cat([h, m.sum(dim=2)], dim=-1))
            return h * node_mask.unsqueeze(-1), x

    class EGNN(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Linear(4, 12)
            self.layers = nn.ModuleList([EGCL(12), EGCL(12)])
            self.head = nn.Sequential(nn.Linear(12, 12), nn.SiLU(), nn.Linear(12, 1))

        def forward(self, atoms, positions, node_mask):
            h = self.embed(atoms) * node_mask.unsqueeze(-1)
            for layer in self.layers:
                h, positions = layer(h, positions, node_mask)
            energy = (self.head(h).squeeze(-1) * node_mask).sum(dim=1)
            return energy, positions

    model = EGNN()
    return model, lib.optim.AdamW(model.parameters(), lr=1e-3)


def _egnn_step(lib, model, opt, atoms, positions, node_mask, energy):
    predicted, moved = model(atoms, positions, node_mask)
    loss = lib.nn.functional.smooth_l1_loss(predicted, energy)
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss, predicted, moved


def _molecule_batches(rng):
    batches = []
    for b, n in ((2, 7), (5, 6), (6, 9)):
        counts = rng.integers(2, n + 1, b)
        node_mask = (np.arange(n)[None] < counts[:, None]).astype(np.float32)
        atoms = np.eye(4, dtype=np.float32)[rng.integers(0, 4, (b, n))] * node_mask[..., None]
        positions = rng.standard_normal((b, n, 3), dtype=np.float32) * node_mask[..., None]
        batches.append((atoms, positions, node_mask, rng.standard_normal(b, dtype=np.float32)))
    return batches


def test_egnn_with_dense_masked_pairs_and_coordinate_updates_trains_like_torch():
    _check(Program(_egnn, _egnn_step, _molecule_batches))


# ------------------------------------------------------------------------------ cellular automata


def _neural_ca(lib):
    """Growing Neural Cellular Automata: fixed Sobel/identity filters applied depthwise after a
    circular pad, a stochastic update mask (drawn outside), alive masks from ``max_pool2d`` of
    the alpha channel before and after the update, unrolled for several steps."""
    nn, F = lib.nn, lib.nn.functional
    channels = 6

    class CA(nn.Module):
        def __init__(self):
            super().__init__()
            identity = lib.tensor([[0.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
            sobel_x = lib.tensor([[-1.0, 0.0, 1.0], [-2.0, 0.0, 2.0], [-1.0, 0.0, 1.0]]) / 8
            kernels = lib.stack([identity, sobel_x, sobel_x.T])
            self.register_buffer("kernels", kernels.repeat(channels, 1, 1).unsqueeze(1))
            self.update = nn.Sequential(
                nn.Conv2d(3 * channels, 24, 1), nn.ReLU(), nn.Conv2d(24, channels, 1, bias=False)
            )

        def alive(self, x):
            return F.max_pool2d(x[:, 3:4], kernel_size=3, stride=1, padding=1) > 0.1

        def forward(self, x, fire):
            before = self.alive(x)
            perceived = F.conv2d(F.pad(x, (1, 1, 1, 1), "circular"), self.kernels, groups=channels)
            x = x + self.update(perceived) * fire
            return x * (before & self.alive(x)).to(x.dtype)

    model = CA()
    return model, lib.optim.Adam(model.parameters(), lr=2e-3)


def _ca_step(lib, model, opt, seed, fire, target):
    x = seed
    for i in range(fire.shape[0]):
        x = model(x, fire[i])
    loss = lib.nn.functional.mse_loss(x[:, :4], target)
    opt.zero_grad()
    loss.backward()
    for p in model.parameters():
        p.grad.data = p.grad.data / (p.grad.data.norm() + 1e-8)
    opt.step()
    return loss, x


def _ca_batches(rng):
    batches = []
    for b, h, w in ((2, 7, 8), (3, 9, 6), (2, 8, 10)):
        seed = np.zeros((b, 6, h, w), dtype=np.float32)
        seed[:, 3:, h // 2, w // 2] = 1.0
        seed[:, :3] = rng.uniform(0, 0.2, (b, 3, h, w))
        fire = (rng.uniform(size=(3, b, 1, h, w)) < 0.5).astype(np.float32)
        target = rng.uniform(0, 1, (b, 4, h, w)).astype(np.float32)
        batches.append((seed, fire, target))
    return batches


def test_neural_cellular_automaton_with_circular_perception_trains_like_torch():
    _check(Program(_neural_ca, _ca_step, _ca_batches, rtol=2e-4, atol=2e-5))


# ------------------------------------------------------------------------------ spiking


def _spiking_net(lib):
    """snnTorch's tutorial network: leaky integrate-and-fire neurons with a Heaviside spike and
    a fast-sigmoid surrogate gradient (a custom ``autograd.Function``), reset by subtracting the
    detached spike, unrolled over time steps with a loss on every step's membrane."""
    nn = lib.nn

    class FastSigmoidSpike(lib.autograd.Function):
        @staticmethod
        def forward(ctx, membrane):
            ctx.save_for_backward(membrane)
            return (membrane > 0).float()

        @staticmethod
        def backward(ctx, grad_output):
            (membrane,) = ctx.saved_tensors
            return grad_output / (10 * membrane.abs() + 1.0) ** 2

    class Leaky(nn.Module):
        def __init__(self, beta, threshold=1.0):
            super().__init__()
            self.beta, self.threshold = beta, threshold

        def forward(self, current, membrane):
            reset = (membrane - self.threshold > 0).float().detach()
            membrane = self.beta * membrane + current - reset * self.threshold
            return FastSigmoidSpike.apply(membrane - self.threshold), membrane

    class SNN(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.lif1 = nn.Linear(10, 16), Leaky(0.9)
            self.fc2, self.lif2 = nn.Linear(16, 3), Leaky(0.8)

        def forward(self, spikes_in):
            mem1 = lib.zeros(spikes_in.shape[1], 16)
            mem2 = lib.zeros(spikes_in.shape[1], 3)
            spikes, membranes = [], []
            for t in range(spikes_in.shape[0]):
                spk1, mem1 = self.lif1(self.fc1(spikes_in[t]), mem1)
                spk2, mem2 = self.lif2(self.fc2(spk1), mem2)
                spikes.append(spk2)
                membranes.append(mem2)
            return lib.stack(spikes), lib.stack(membranes)

    model = SNN()
    return model, lib.optim.Adam(model.parameters(), lr=5e-3, betas=(0.9, 0.999))


def _snn_step(lib, model, opt, spikes_in, labels):
    spikes, membranes = model(spikes_in)
    loss = lib.zeros((), dtype=lib.float32)
    for t in range(membranes.shape[0]):
        loss = loss + lib.nn.functional.cross_entropy(membranes[t], labels)
    opt.zero_grad()
    loss.backward()
    opt.step()
    correct = (spikes.sum(dim=0).argmax(dim=1) == labels).sum()
    return loss, spikes, correct


def _spike_batches(rng):
    return [
        (
            (rng.uniform(size=(4, b, 10)) < 0.4).astype(np.float32) * 2.0,
            rng.integers(0, 3, b),
        )
        for b in (5, 8, 4)
    ]


def test_spiking_network_with_surrogate_gradient_function_trains_like_torch():
    _check(Program(_spiking_net, _snn_step, _spike_batches))


# ------------------------------------------------------------------------------ quantisation


def _lsq_net(lib):
    """Learned step-size quantisation: step sizes initialised from the first batch behind a
    buffer flag (a data-dependent branch), the gradient-scale and round-pass tricks by
    ``detach``, quantised weights and activations in a conv net."""
    nn, F = lib.nn, lib.nn.functional

    def grad_scale(x, scale):
        return (x - x * scale).detach() + x * scale

    def round_pass(x):
        return (x.round() - x).detach() + x

    class Quantizer(nn.Module):
        def __init__(self, bits, signed):
            super().__init__()
            self.q_min = -(2 ** (bits - 1)) if signed else 0
            self.q_max = 2 ** (bits - 1) - 1 if signed else 2**bits - 1
            self.step = nn.Parameter(lib.tensor(1.0))
            self.register_buffer("initialised", lib.zeros(1))

        def forward(self, x):
            if self.initialised == 0:
                self.step.data.copy_(2 * x.detach().abs().mean() / math.sqrt(self.q_max))
                self.initialised.fill_(1)
            scale = 1.0 / math.sqrt(x.numel() * self.q_max)
            step = grad_scale(self.step, scale)
            return round_pass((x / step).clamp(self.q_min, self.q_max)) * step

    class QConv2d(nn.Conv2d):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.weight_quantizer = Quantizer(4, signed=True)
            self.input_quantizer = Quantizer(4, signed=False)

        def forward(self, x):
            weight = self.weight_quantizer(self.weight)
            return F.conv2d(self.input_quantizer(x), weight, self.bias, self.stride, self.padding)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Conv2d(1, 4, 3, padding=1)
            self.conv = QConv2d(4, 8, 3, stride=2, padding=1)
            self.head = nn.Linear(8, 3)

        def forward(self, x):
            x = F.relu(self.conv(F.relu(self.stem(x))))
            return self.head(x.mean(dim=(2, 3)))

    model = Net()
    return model, lib.optim.SGD(model.parameters(), lr=0.05)


def _classify_step(lib, model, opt, x, y):
    logits = model(x)
    loss = lib.nn.functional.cross_entropy(logits, y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss, logits


def _image_batches(rng):
    return [
        (rng.standard_normal((b, 1, 6, 6), dtype=np.float32), rng.integers(0, 3, b))
        for b in (5, 7, 3)
    ]


def test_lsq_quantisation_with_first_batch_initialisation_trains_like_torch():
    # ``math.sqrt(x.numel() * q_max)`` is a Python float in kiln (no SymFloat): each new batch
    # size recompiles the quantiser's resumed frame, where PyTorch compiles it once
    _check(Program(_lsq_net, _classify_step, _image_batches, recompiles=2))


# ------------------------------------------------------------------------------ self-supervised


def _moco(lib):
    """MoCo v2: a momentum key encoder updated by assigning ``.data``, a queue buffer written
    by slice assignment at a pointer read with ``int()``, the positive and negative logits by
    the list form of ``einsum``."""
    nn, F = lib.nn, lib.nn.functional
    dim, queue_size, momentum, temperature = 6, 12, 0.9, 0.2

    class MoCo(nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder_q = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, dim))
            self.encoder_k = copy.deepcopy(self.encoder_q)
            for param in self.encoder_k.parameters():
                param.requires_grad = False
            self.register_buffer("queue", F.normalize(lib.randn(dim, queue_size), dim=0))
            self.register_buffer("queue_ptr", lib.zeros(1, dtype=lib.long))

        @lib.no_grad()
        def _momentum_update_key_encoder(self):
            for param_q, param_k in zip(self.encoder_q.parameters(), self.encoder_k.parameters()):
                param_k.data = param_k.data * momentum + param_q.data * (1.0 - momentum)

        @lib.no_grad()
        def _dequeue_and_enqueue(self, keys):
            batch_size = keys.shape[0]
            ptr = int(self.queue_ptr)
            assert queue_size % batch_size == 0
            self.queue[:, ptr : ptr + batch_size] = keys.T
            self.queue_ptr[0] = (ptr + batch_size) % queue_size

        def forward(self, im_q, im_k):
            q = F.normalize(self.encoder_q(im_q), dim=1)
            with lib.no_grad():
                self._momentum_update_key_encoder()
                k = F.normalize(self.encoder_k(im_k), dim=1)
            l_pos = lib.einsum("nc,nc->n", [q, k]).unsqueeze(-1)
            l_neg = lib.einsum("nc,ck->nk", [q, self.queue.clone().detach()])
            logits = lib.cat([l_pos, l_neg], dim=1) / temperature
            labels = lib.zeros(logits.shape[0], dtype=lib.long)
            self._dequeue_and_enqueue(k)
            return logits, labels

    model = MoCo()
    return model, lib.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)


def _moco_step(lib, model, opt, view_q, view_k):
    logits, labels = model(view_q, view_k)
    loss = lib.nn.functional.cross_entropy(logits, labels)
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss, logits


def _two_views(sizes):
    def batches(rng):
        out = []
        for b in sizes:
            x = rng.standard_normal((b, 8), dtype=np.float32)
            out.append(
                (
                    x + 0.1 * rng.standard_normal((b, 8), dtype=np.float32),
                    x + 0.1 * rng.standard_normal((b, 8), dtype=np.float32),
                )
            )
        return out

    return batches


def test_moco_queue_and_momentum_encoder_train_like_torch():
    # SGD's momentum buffers appear at the first step: the second compiles the steady step
    _check(Program(_moco, _moco_step, _two_views((4, 2, 6, 3)), recompiles=1, modes=ALL_MODES))


def _barlow_twins(lib):
    """Barlow Twins: the cross-correlation of batch-normalised embeddings divided in place, the
    diagonal's ``add_(-1).pow_(2)`` on a view, and the off-diagonal by the flatten/view trick."""
    nn = lib.nn

    def off_diagonal(x):
        n, m = x.shape
        assert n == m
        return x.flatten()[:-1].view(n - 1, n + 1)[:, 1:].flatten()

    class BarlowTwins(nn.Module):
        def __init__(self):
            super().__init__()
            self.backbone = nn.Sequential(nn.Linear(8, 12), nn.ReLU())
            self.projector = nn.Sequential(
                nn.Linear(12, 10, bias=False), nn.BatchNorm1d(10), nn.ReLU(), nn.Linear(10, 10)
            )
            self.bn = nn.BatchNorm1d(10, affine=False)

        def forward(self, y1, y2):
            z1 = self.projector(self.backbone(y1))
            z2 = self.projector(self.backbone(y2))
            c = self.bn(z1).T @ self.bn(z2)
            c.div_(y1.shape[0])
            on_diag = lib.diagonal(c).add_(-1).pow_(2).sum()
            off_diag = off_diagonal(c).pow_(2).sum()
            return on_diag + 0.05 * off_diag

    model = BarlowTwins()
    return model, lib.optim.SGD(model.parameters(), lr=0.02)


def _ssl_step(lib, model, opt, view_a, view_b):
    loss = model(view_a, view_b)
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss


def test_barlow_twins_with_in_place_diagonal_and_off_diagonal_view_trains_like_torch():
    _check(Program(_barlow_twins, _ssl_step, _two_views((6, 9, 5)), modes=ALL_MODES))


# ------------------------------------------------------------------------------ speech enhancement


def _enhancer(lib):
    """A mask-based speech enhancer: ``stft``, a log-magnitude mask network over frequency
    channels (Conv1d), the enhanced spectrum by ``polar`` of the masked magnitude and the noisy
    phase (``angle``), ``istft`` back to the signal's length, trained on negative SI-SDR."""
    nn = lib.nn

    class Enhancer(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("window", lib.hann_window(32))
            self.mask = nn.Sequential(
                nn.Conv1d(17, 24, 3, padding=1), nn.PReLU(), nn.Conv1d(24, 17, 3, padding=1)
            )

        def forward(self, noisy):
            spec = lib.stft(noisy, 32, hop_length=8, window=self.window, return_complex=True)
            magnitude = spec.abs()
            mask = lib.sigmoid(self.mask(lib.log1p(magnitude)))
            enhanced = lib.polar(magnitude * mask, lib.angle(spec))
            return lib.istft(enhanced, 32, hop_length=8, window=self.window, length=noisy.shape[-1])

    model = Enhancer()
    return model, lib.optim.Adam(model.parameters(), lr=2e-3)


def _si_sdr(lib, estimate, reference, eps=1e-8):
    estimate = estimate - estimate.mean(dim=-1, keepdim=True)
    reference = reference - reference.mean(dim=-1, keepdim=True)
    alpha = (estimate * reference).sum(-1, keepdim=True) / (
        reference.pow(2).sum(-1, keepdim=True) + eps
    )
    target = alpha * reference
    noise = estimate - target
    return 10 * lib.log10(target.pow(2).sum(-1) / (noise.pow(2).sum(-1) + eps) + eps)


def _enhance_step(lib, model, opt, noisy, clean):
    estimate = model(noisy)
    loss = -_si_sdr(lib, estimate, clean).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss, estimate


def _speech_batches(rng):
    batches = []
    for b, length in ((3, 160), (2, 200), (4, 136)):
        t = np.arange(length) / 4000.0
        clean = np.sin(2 * np.pi * rng.uniform(100, 900, (b, 1)) * t)
        noisy = clean + 0.3 * rng.standard_normal((b, length))
        batches.append((noisy.astype(np.float32), clean.astype(np.float32)))
    return batches


def test_mask_based_enhancer_with_stft_istft_and_si_sdr_trains_like_torch():
    _check(Program(_enhancer, _enhance_step, _speech_batches, rtol=2e-4, atol=2e-5))


# ------------------------------------------------------------------------------ adaptive ODE


_DOPRI_C = (0.0, 1 / 5, 3 / 10, 4 / 5, 8 / 9, 1.0, 1.0)
_DOPRI_A = (
    (),
    (1 / 5,),
    (3 / 40, 9 / 40),
    (44 / 45, -56 / 15, 32 / 9),
    (19372 / 6561, -25360 / 2187, 64448 / 6561, -212 / 729),
    (9017 / 3168, -355 / 33, 46732 / 5247, 49 / 176, -5103 / 18656),
    (35 / 384, 0.0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84),
)
_DOPRI_B4 = (5179 / 57600, 0.0, 7571 / 16695, 393 / 640, -92097 / 339200, 187 / 2100, 1 / 40)


def _odeint_dopri5(lib, f, y, t0, t1, rtol=1e-3, atol=1e-4):
    """A Dormand-Prince 5(4) solver as the small neural-ODE repositories write it: Python floats
    for time and step, each step accepted or rejected by the error norm's ``item()``."""
    t, h, steps = t0, 0.2, 0
    while t < t1 - 1e-9 and steps < 40:
        h = min(h, t1 - t)
        k = []
        for c, row in zip(_DOPRI_C, _DOPRI_A):
            stage = y
            for a, kj in zip(row, k):
                if a != 0.0:
                    stage = stage + h * a * kj
            k.append(f(t + c * h, stage))
        y5 = y + h * sum(a * kj for a, kj in zip(_DOPRI_A[-1], k) if a != 0.0)
        y4 = y + h * sum(b * kj for b, kj in zip(_DOPRI_B4, k) if b != 0.0)
        scale = atol + rtol * lib.maximum(y.abs(), y5.abs())
        error = ((y5 - y4) / scale).pow(2).mean().sqrt().item()
        if error <= 1.0:
            t, y = t + h, y5
        h = h * min(5.0, max(0.2, 0.9 * (error + 1e-10) ** -0.2))
        steps += 1
    return y


def _ode_field(lib):
    nn = lib.nn

    class Field(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(3, 16), nn.Tanh(), nn.Linear(16, 2))

        def forward(self, t, y):
            return self.net(lib.cat([y, lib.full_like(y[:, :1], t)], dim=1))

    model = Field()
    return model, lib.optim.Adam(model.parameters(), lr=1e-2)


def _ode_step(lib, model, opt, y0, target):
    y1 = _odeint_dopri5(lib, model, y0, 0.0, 1.0)
    loss = lib.nn.functional.mse_loss(y1, target)
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss, y1


def _spiral_batches(rng):
    batches = []
    for b in (5, 7):
        y0 = rng.standard_normal((b, 2), dtype=np.float32)
        rotation = np.array([[0.0, -1.0], [1.0, 0.0]], dtype=np.float32)
        batches.append((y0, y0 @ rotation * 0.8))
    return batches


def test_neural_ode_with_an_adaptive_dormand_prince_solver_trains_like_torch():
    _check(Program(_ode_field, _ode_step, _spiral_batches, modes=("eager", "compiled")))
