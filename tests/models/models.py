"""Reference models written once against a torch-like library (``kiln`` or ``torch``).

``models_for(lib)`` returns the model classes built on ``lib.nn.Module``, so the same source runs
in both libraries: training tests compare them step by step, and compiler tests reuse them as
workloads. Only the public torch API is used (``lib.nn``, ``lib.nn.functional``, ``lib.arange``).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from types import SimpleNamespace

__all__ = ["GPTConfig", "models_for", "copy_weights"]


@dataclass(frozen=True)
class GPTConfig:
    vocab_size: int = 32
    block_size: int = 16
    n_layer: int = 2
    n_head: int = 2
    n_embd: int = 16
    tie_weights: bool = True
    attention: str = (
        "manual"  # "manual" (explicit softmax), "sdpa" or "mha" (nn.MultiheadAttention)
    )


@functools.cache
def models_for(lib) -> SimpleNamespace:
    """The model classes for ``lib`` (cached: one set of classes per library)."""
    nn = lib.nn
    F = lib.nn.functional

    class MLP(nn.Module):
        """Linear-ReLU-Linear-GELU(tanh)-LayerNorm-Linear."""

        def __init__(self, in_features: int = 8, hidden: int = 32, out_features: int = 4):
            super().__init__()
            self.fc1 = nn.Linear(in_features, hidden)
            self.fc2 = nn.Linear(hidden, hidden)
            self.norm = nn.LayerNorm(hidden)
            self.head = nn.Linear(hidden, out_features)

        def forward(self, x):
            x = F.relu(self.fc1(x))
            x = self.norm(F.gelu(self.fc2(x), approximate="tanh"))
            return self.head(x)

    class CausalSelfAttention(nn.Module):
        def __init__(self, cfg: GPTConfig):
            super().__init__()
            self.n_head = cfg.n_head
            self.attention = cfg.attention
            if cfg.attention == "mha":
                self.mha = nn.MultiheadAttention(cfg.n_embd, cfg.n_head, batch_first=True)
            else:
                self.c_attn = nn.Linear(cfg.n_embd, 3 * cfg.n_embd)
                self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd)
            causal = lib.ones(cfg.block_size, cfg.block_size, dtype=lib.bool).tril()
            self.register_buffer("causal", causal, persistent=False)

        def forward(self, x):
            B, T, C = x.shape
            if self.attention == "mha":
                mask = ~self.causal[:T, :T]
                return self.mha(x, x, x, attn_mask=mask, need_weights=False)[0]
            q, k, v = self.c_attn(x).split(C, dim=2)
            hd = C // self.n_head
            q = q.view(B, T, self.n_head, hd).transpose(1, 2)
            k = k.view(B, T, self.n_head, hd).transpose(1, 2)
            v = v.view(B, T, self.n_head, hd).transpose(1, 2)
            if self.attention == "sdpa":
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:
                att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
                att = att.masked_fill(~self.causal[:T, :T], float("-inf"))
                y = F.softmax(att, dim=-1) @ v
            y = y.transpose(1, 2).contiguous().view(B, T, C)
            return self.c_proj(y)

    class Block(nn.Module):
        def __init__(self, cfg: GPTConfig):
            super().__init__()
            self.ln_1 = nn.LayerNorm(cfg.n_embd)
            self.attn = CausalSelfAttention(cfg)
            self.ln_2 = nn.LayerNorm(cfg.n_embd)
            self.mlp = nn.Sequential(
                nn.Linear(cfg.n_embd, 4 * cfg.n_embd),
                nn.GELU(),
                nn.Linear(4 * cfg.n_embd, cfg.n_embd),
            )

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class TinyGPT(nn.Module):
        """A GPT-2 shaped decoder: token + position embeddings, pre-norm blocks, LM head."""

        def __init__(self, cfg: GPTConfig = GPTConfig()):
            super().__init__()
            self.cfg = cfg
            self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
            self.wpe = nn.Embedding(cfg.block_size, cfg.n_embd)
            self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
            self.ln_f = nn.LayerNorm(cfg.n_embd)
            self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
            if cfg.tie_weights:
                self.lm_head.weight = self.wte.weight

        def forward(self, idx, targets=None):
            T = idx.shape[1]
            pos = lib.arange(T, device=idx.device)
            x = self.wte(idx) + self.wpe(pos)
            for block in self.blocks:
                x = block(x)
            logits = self.lm_head(self.ln_f(x))
            if targets is None:
                return logits, None
            loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))
            return logits, loss

    class SmallCNN(nn.Module):
        """(Conv-BN-ReLU-MaxPool) x 2, then a linear classifier (no conv bias: BN cancels it)."""

        def __init__(self, in_channels: int = 3, num_classes: int = 5, size: int = 8):
            super().__init__()
            self.features = nn.Sequential(
                nn.Conv2d(in_channels, 8, 3, padding=1, bias=False),
                nn.BatchNorm2d(8),
                nn.ReLU(),
                nn.MaxPool2d(2),
                nn.Conv2d(8, 16, 3, padding=1, bias=False),
                nn.BatchNorm2d(16),
                nn.ReLU(inplace=True),
                nn.MaxPool2d(2),
            )
            self.classifier = nn.Sequential(
                nn.Flatten(), nn.Linear(16 * (size // 4) ** 2, num_classes)
            )

        def forward(self, x):
            return self.classifier(self.features(x))

    class SequenceMixer(nn.Module):
        """Over (batch, time, channels): layer norm, a projection, attention-like mixing over time
        and reductions over ``batch * time`` (sizes used as numbers too), for dynamic-shape
        tests. ``amax`` picks how the per-channel peak is taken (``amax`` or ``max(dim).values``).
        """

        def __init__(self, channels: int = 8, amax: bool = False):
            super().__init__()
            self.norm = nn.LayerNorm(channels)
            self.fc = nn.Linear(channels, channels)
            self.amax = amax

        def forward(self, x):
            B, T, C = x.shape
            h = F.gelu(self.fc(self.norm(x)))
            w = (h @ h.transpose(1, 2) / math.sqrt(C)).softmax(-1)
            y = (w @ h + x).reshape(B * T, C)
            return y.sum(0) / (B * T), y.amax(0) if self.amax else y.max(dim=0).values

    return SimpleNamespace(MLP=MLP, TinyGPT=TinyGPT, SmallCNN=SmallCNN, SequenceMixer=SequenceMixer)


def copy_weights(lib, dst, src) -> None:
    """Load ``src``'s state dict (from either library) into ``dst``, a ``lib`` module."""
    import numpy as np

    state = {k: lib.tensor(np.array(v.detach().cpu().numpy())) for k, v in src.state_dict().items()}
    dst.load_state_dict(state)
