"""The models the benchmark runs, and the training programs issue 18 measures, at their shapes.

``models_for(lib)`` builds every model class on ``lib.nn`` (one set per library), so the same
source runs in kiln and in PyTorch. The programs are the steps third-party code makes: nanoGPT's
training step (token and position embeddings, GPT-2 blocks, tied head, cross-entropy, gradient
clipping, AdamW), word_language_model's LSTM step, a ResNet basic-block CNN step, torchvision's
resnet18 and pytorch/examples' MNIST network (the two CNNs issue 18's table times), DCGAN's
discriminator + generator step, and GPT-2 small (opt-in: gigabytes and seconds per step).
Dropout is left out: the libraries' random streams differ, and first outputs are compared.
"""

from __future__ import annotations

import functools
import math
from types import SimpleNamespace

import numpy as np

from .workload_types import (
    Instance,
    int_tensor,
    randn_tensor,
    seeded_rng,
    set_parameters,
    training_step,
)

__all__ = [
    "models_for",
    "build_nanogpt",
    "build_gpt2_small",
    "build_lstm_lm",
    "build_resnet_cnn",
    "build_dcgan",
    "build_resnet18",
    "build_mnist_cnn",
    "NANOGPT_SIZES",
    "GPT2_SMALL_SIZES",
    "LSTM_SIZES",
    "RESNET_SIZES",
    "DCGAN_SIZES",
    "RESNET18_SIZES",
    "MNIST_SIZES",
]


@functools.cache
def models_for(lib) -> SimpleNamespace:
    """The benchmark's model classes built on ``lib.nn`` (one set per library)."""
    nn = lib.nn
    F = lib.nn.functional

    class MLP(nn.Module):
        """Linear - GELU(tanh) - Linear - LayerNorm: the shape of a transformer's feed-forward."""

        def __init__(self, width: int, hidden: int):
            super().__init__()
            self.fc1 = nn.Linear(width, hidden)
            self.fc2 = nn.Linear(hidden, width)
            self.norm = nn.LayerNorm(width)

        def forward(self, x):
            return self.norm(self.fc2(F.gelu(self.fc1(x), approximate="tanh")))

    class CausalSelfAttention(nn.Module):
        def __init__(self, width: int, heads: int, block_size: int):
            super().__init__()
            self.heads = heads
            self.qkv = nn.Linear(width, 3 * width)
            self.proj = nn.Linear(width, width)
            mask = lib.ones(block_size, block_size, dtype=lib.bool).tril()
            self.register_buffer("causal", mask, persistent=False)

        def forward(self, x):
            B, T, C = x.shape
            head = C // self.heads
            q, k, v = self.qkv(x).split(C, dim=2)
            q = q.view(B, T, self.heads, head).transpose(1, 2)
            k = k.view(B, T, self.heads, head).transpose(1, 2)
            v = v.view(B, T, self.heads, head).transpose(1, 2)
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(head))
            att = att.masked_fill(~self.causal[:T, :T], float("-inf"))
            y = F.softmax(att, dim=-1) @ v
            return self.proj(y.transpose(1, 2).contiguous().view(B, T, C))

    class Block(nn.Module):
        """A pre-norm GPT-2 block: x + attn(ln(x)), then x + mlp(ln(x))."""

        def __init__(self, width: int, heads: int, block_size: int):
            super().__init__()
            self.ln_1 = nn.LayerNorm(width)
            self.attn = CausalSelfAttention(width, heads, block_size)
            self.ln_2 = nn.LayerNorm(width)
            self.mlp = nn.Sequential(
                nn.Linear(width, 4 * width),
                nn.GELU(approximate="tanh"),
                nn.Linear(4 * width, width),
            )

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class GPT(nn.Module):
        """nanoGPT's model: embeddings, blocks, final LayerNorm, head tied to the embedding."""

        def __init__(self, vocab: int, block_size: int, layers: int, width: int, heads: int):
            super().__init__()
            self.wte = nn.Embedding(vocab, width)
            self.wpe = nn.Embedding(block_size, width)
            self.blocks = nn.ModuleList(Block(width, heads, block_size) for _ in range(layers))
            self.ln_f = nn.LayerNorm(width)
            self.lm_head = nn.Linear(width, vocab, bias=False)
            self.wte.weight = self.lm_head.weight

        def forward(self, idx, targets=None):
            """The logits, or with ``targets`` the cross-entropy loss (what training needs)."""
            positions = lib.arange(idx.shape[1], device=idx.device)
            x = self.wte(idx) + self.wpe(positions)
            for block in self.blocks:
                x = block(x)
            logits = self.lm_head(self.ln_f(x))
            if targets is None:
                return logits
            return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))

    class LSTMLanguageModel(nn.Module):
        """word_language_model's RNNModel with an LSTM: embed, LSTM, decode."""

        def __init__(self, vocab: int, width: int, hidden: int, layers: int):
            super().__init__()
            self.encoder = nn.Embedding(vocab, width)
            self.rnn = nn.LSTM(width, hidden, layers)
            self.decoder = nn.Linear(hidden, vocab)

        def forward(self, tokens, hidden):
            output, hidden = self.rnn(self.encoder(tokens), hidden)
            return self.decoder(output), hidden

    class BasicBlock(nn.Module):
        """ResNet's basic block: conv-BN-ReLU-conv-BN, plus the (projected) input, ReLU."""

        def __init__(self, inputs: int, outputs: int, stride: int):
            super().__init__()
            self.conv1 = nn.Conv2d(inputs, outputs, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(outputs)
            self.conv2 = nn.Conv2d(outputs, outputs, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(outputs)
            self.shortcut = nn.Sequential()
            if stride != 1 or inputs != outputs:
                self.shortcut = nn.Sequential(
                    nn.Conv2d(inputs, outputs, 1, stride, bias=False), nn.BatchNorm2d(outputs)
                )

        def forward(self, x):
            y = F.relu(self.bn1(self.conv1(x)))
            return F.relu(self.bn2(self.conv2(y)) + self.shortcut(x))

    class ResNetCNN(nn.Module):
        """A stem convolution, two basic blocks (the second halves the image), pool, classify."""

        def __init__(self, channels: int, classes: int):
            super().__init__()
            self.stem = nn.Sequential(
                nn.Conv2d(3, channels, 3, 1, 1, bias=False),
                nn.BatchNorm2d(channels),
                nn.ReLU(),
            )
            self.block1 = BasicBlock(channels, channels, 1)
            self.block2 = BasicBlock(channels, 2 * channels, 2)
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(2 * channels, classes)

        def forward(self, x):
            x = self.block2(self.block1(self.stem(x)))
            return self.fc(self.pool(x).flatten(1))

    class ResNet18(nn.Module):
        """torchvision's resnet18: a 7x7 stride-2 stem, max pool, four stages of two basic
        blocks (64-512 channels, each later stage halving the image), pool, classify."""

        def __init__(self, classes: int):
            super().__init__()
            self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
            self.bn1 = nn.BatchNorm2d(64)
            self.maxpool = nn.MaxPool2d(3, 2, 1)
            stages, inputs = [], 64
            for outputs, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
                stages.append(
                    nn.Sequential(
                        BasicBlock(inputs, outputs, stride), BasicBlock(outputs, outputs, 1)
                    )
                )
                inputs = outputs
            self.layers = nn.Sequential(*stages)
            self.avgpool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(512, classes)

        def forward(self, x):
            x = self.maxpool(F.relu(self.bn1(self.conv1(x))))
            return self.fc(self.avgpool(self.layers(x)).flatten(1))

    class MnistNet(nn.Module):
        """pytorch/examples' MNIST network (its dropout left out): two 3x3 convolutions, max
        pool, two linear layers, log-softmax."""

        def __init__(self, scale: int):
            super().__init__()
            self.conv1 = nn.Conv2d(1, 32 // scale, 3, 1)
            self.conv2 = nn.Conv2d(32 // scale, 64 // scale, 3, 1)
            self.fc1 = nn.Linear(9216 // scale, 128 // scale)
            self.fc2 = nn.Linear(128 // scale, 10)

        def forward(self, x):
            x = F.max_pool2d(F.relu(self.conv2(F.relu(self.conv1(x)))), 2)
            x = F.relu(self.fc1(lib.flatten(x, 1)))
            return F.log_softmax(self.fc2(x), dim=1)

    def generator(noise: int, width: int):
        """DCGAN's generator from ``noise`` x 1 x 1 to 3 x 16 x 16."""
        return nn.Sequential(
            nn.ConvTranspose2d(noise, 2 * width, 4, 1, 0, bias=False),
            nn.BatchNorm2d(2 * width),
            nn.ReLU(),
            nn.ConvTranspose2d(2 * width, width, 4, 2, 1, bias=False),
            nn.BatchNorm2d(width),
            nn.ReLU(),
            nn.ConvTranspose2d(width, 3, 4, 2, 1, bias=False),
            nn.Tanh(),
        )

    def discriminator(width: int):
        """DCGAN's discriminator from 3 x 16 x 16 to one probability."""
        return nn.Sequential(
            nn.Conv2d(3, width, 4, 2, 1, bias=False),
            nn.LeakyReLU(0.2),
            nn.Conv2d(width, 2 * width, 4, 2, 1, bias=False),
            nn.BatchNorm2d(2 * width),
            nn.LeakyReLU(0.2),
            nn.Conv2d(2 * width, 1, 4, 1, 0, bias=False),
            nn.Sigmoid(),
        )

    return SimpleNamespace(
        MLP=MLP,
        Block=Block,
        GPT=GPT,
        LSTMLanguageModel=LSTMLanguageModel,
        ResNetCNN=ResNetCNN,
        ResNet18=ResNet18,
        MnistNet=MnistNet,
        generator=generator,
        discriminator=discriminator,
    )


# batch, tokens, vocabulary, layers, width, heads (full; quick)
NANOGPT_SIZES = {False: (8, 64, 65, 2, 64, 4), True: (2, 16, 65, 1, 32, 2)}
GPT2_SMALL_SIZES = {False: (2, 256, 50304, 12, 768, 12), True: (1, 16, 128, 2, 32, 2)}
# tokens, batch, vocabulary, width, hidden, layers
LSTM_SIZES = {False: (35, 20, 1000, 64, 64, 2), True: (5, 4, 100, 16, 16, 2)}
# batch, image side, channels, classes
RESNET_SIZES = {False: (8, 32, 16, 10), True: (2, 8, 4, 10)}
# batch, image side, classes (quick: 64 pixels, so that the last stage's batch norm sees more than
# two values: over two, its output is a cancellation that rounds differently in each library)
RESNET18_SIZES = {False: (8, 32, 1000), True: (2, 64, 10)}
# batch, channel divisor (the images are 1 x 28 x 28)
MNIST_SIZES = {False: (64, 1), True: (4, 8)}
# batch, noise, width (the images are 3 x 16 x 16)
DCGAN_SIZES = {False: (16, 64, 32), True: (4, 8, 4)}


def _gpt_step(lib, sizes: tuple, name: str, device: str) -> Instance:
    batch, tokens, vocab, layers, width, heads = sizes
    rng = seeded_rng(name)
    model = models_for(lib).GPT(vocab, tokens, layers, width, heads).to(device)
    set_parameters(lib, model, rng)
    optimizer = lib.optim.AdamW(model.parameters(), lr=1e-3)

    def gpt_train_step(idx, targets):
        optimizer.zero_grad(set_to_none=True)
        loss = model(idx, targets)
        loss.backward()
        lib.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        return loss

    idx = int_tensor(lib, rng, vocab, (batch, tokens), device)
    targets = int_tensor(lib, rng, vocab, (batch, tokens), device)
    return Instance(gpt_train_step, (idx, targets))


def build_nanogpt(lib, quick: bool, device: str) -> Instance:
    return _gpt_step(lib, NANOGPT_SIZES[quick], "nanogpt", device)


def build_gpt2_small(lib, quick: bool, device: str) -> Instance:
    return _gpt_step(lib, GPT2_SMALL_SIZES[quick], "gpt2_small", device)


def build_lstm_lm(lib, quick: bool, device: str) -> Instance:
    tokens, batch, vocab, width, hidden, layers = LSTM_SIZES[quick]
    rng = seeded_rng("lstm_lm")
    model = models_for(lib).LSTMLanguageModel(vocab, width, hidden, layers).to(device)
    set_parameters(lib, model, rng)
    optimizer = lib.optim.SGD(model.parameters(), lr=1.0)
    F = lib.nn.functional

    def lstm_train_step(inputs, targets, h0, c0):
        optimizer.zero_grad()
        output, _ = model(inputs, (h0, c0))
        loss = F.cross_entropy(output.view(-1, output.shape[-1]), targets.view(-1))
        loss.backward()
        lib.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
        optimizer.step()
        return loss

    state = (layers, batch, hidden)
    args = (
        int_tensor(lib, rng, vocab, (tokens, batch), device),
        int_tensor(lib, rng, vocab, (tokens, batch), device),
        lib.zeros(state, device=device),
        lib.zeros(state, device=device),
    )
    return Instance(lstm_train_step, args)


def build_resnet_cnn(lib, quick: bool, device: str) -> Instance:
    batch, side, channels, classes = RESNET_SIZES[quick]
    rng = seeded_rng("resnet_cnn")
    model = models_for(lib).ResNetCNN(channels, classes).to(device)
    set_parameters(lib, model, rng)
    optimizer = lib.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    step = training_step(lib, model, optimizer, "cross_entropy")
    images = randn_tensor(lib, rng, (batch, 3, side, side), device)
    return Instance(step, (images, int_tensor(lib, rng, classes, (batch,), device)))


def build_resnet18(lib, quick: bool, device: str) -> Instance:
    batch, side, classes = RESNET18_SIZES[quick]
    rng = seeded_rng("resnet18")
    model = models_for(lib).ResNet18(classes).to(device)
    set_parameters(lib, model, rng)
    optimizer = lib.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
    step = training_step(lib, model, optimizer, "cross_entropy")
    images = randn_tensor(lib, rng, (batch, 3, side, side), device)
    return Instance(step, (images, int_tensor(lib, rng, classes, (batch,), device)))


def build_mnist_cnn(lib, quick: bool, device: str) -> Instance:
    batch, scale = MNIST_SIZES[quick]
    rng = seeded_rng("mnist_cnn")
    model = models_for(lib).MnistNet(scale).to(device)
    set_parameters(lib, model, rng)
    optimizer = lib.optim.Adadelta(model.parameters(), lr=1.0)
    step = training_step(lib, model, optimizer, "nll_loss")
    images = randn_tensor(lib, rng, (batch, 1, 28, 28), device)
    return Instance(step, (images, int_tensor(lib, rng, 10, (batch,), device)))


def build_dcgan(lib, quick: bool, device: str) -> Instance:
    batch, noise, width = DCGAN_SIZES[quick]
    rng = seeded_rng("dcgan")
    models = models_for(lib)
    netG = models.generator(noise, width).to(device)
    netD = models.discriminator(width).to(device)
    set_parameters(lib, netG, rng)
    set_parameters(lib, netD, rng)
    optimizerG = lib.optim.Adam(netG.parameters(), lr=2e-4, betas=(0.5, 0.999))
    optimizerD = lib.optim.Adam(netD.parameters(), lr=2e-4, betas=(0.5, 0.999))
    F = lib.nn.functional
    real_label = lib.ones(batch, device=device)
    fake_label = lib.zeros(batch, device=device)

    def make_step(generator, discriminator):
        def dcgan_step(real, z):
            optimizerD.zero_grad()
            error_real = F.binary_cross_entropy(discriminator(real).view(-1), real_label)
            fake = generator(z)
            error_fake = F.binary_cross_entropy(discriminator(fake.detach()).view(-1), fake_label)
            error_d = error_real + error_fake
            error_d.backward()
            optimizerD.step()
            optimizerG.zero_grad()
            error_g = F.binary_cross_entropy(discriminator(fake).view(-1), real_label)
            error_g.backward()
            optimizerG.step()
            return error_d, error_g

        return dcgan_step

    def compile_models(compile):
        # as the DCGAN example is compiled: the models, not the step. A compiled step cannot
        # run (in torch.compile either): the fake images and the discriminator's pass over
        # their detached copy share one graph, whose backward the first .backward() consumes.
        return make_step(compile(netG), compile(netD))

    real = lib.tensor(np.tanh(rng.standard_normal((batch, 3, 16, 16), dtype=np.float32)))
    z = randn_tensor(lib, rng, (batch, noise, 1, 1), device)
    return Instance(make_step(netG, netD), (real.to(device), z), compile_with=compile_models)
