"""The benchmark suite: each workload builds the same function and inputs in kiln or in PyTorch.

A workload's ``build(lib, quick, device)`` returns an :class:`Instance` (a function and the
arguments to call it with) written only against the torch-compatible API, so one definition runs
in both libraries. Inputs and parameters come from a numpy generator seeded by the workload name,
so every instance of a workload (eager, compiled, PyTorch) starts from identical values and their
first outputs can be compared. ``quick`` picks small shapes (the whole quick suite runs in seconds).
"""

from __future__ import annotations

import functools
import math
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np

__all__ = ["Instance", "Workload", "WORKLOADS", "DEFAULT_SUITE", "get_workload", "models_for"]


@dataclass
class Instance:
    """One ready-to-run copy of a workload: ``fn(*args)`` is one step."""

    fn: Callable
    args: tuple

    def __post_init__(self):
        # dumps and logs are named after the function: keep ``<locals>`` out of them
        self.fn.__qualname__ = self.fn.__name__


@dataclass(frozen=True)
class Workload:
    name: str
    summary: str  # what one step computes, with the default (full-size) shapes
    build: Callable[[object, bool, str], Instance]
    trains: bool = False  # a step mutates parameters (forward + backward + optimizer)


def _rng(name: str) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(name.encode()))


def _tensor(lib, array: np.ndarray, device: str):
    return lib.tensor(array, device=device)


def _randn(lib, rng: np.random.Generator, shape: tuple, device: str):
    return _tensor(lib, rng.standard_normal(shape, dtype=np.float32), device)


def _set_parameters(lib, model, rng: np.random.Generator) -> None:
    """Give ``model`` the same parameters in every library: matrices ~ N(0, 1/fan_in), vectors
    (biases, norm scales) as the libraries initialize them except biases ~ N(0, 0.01)."""
    with lib.no_grad():
        for name, p in model.named_parameters():
            shape = tuple(p.shape)
            if len(shape) >= 2:
                value = rng.standard_normal(shape, dtype=np.float32) / math.sqrt(shape[-1])
            elif name.endswith("bias"):
                value = (0.01 * rng.standard_normal(shape)).astype(np.float32)
            else:
                value = np.ones(shape, dtype=np.float32)
            p.copy_(lib.tensor(value, device=p.device))


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

    return SimpleNamespace(MLP=MLP, Block=Block)


# ---------------------------------------------------------------------------- the workloads


def pointwise_chain(x):
    """Ten elementwise ops that a compiler fuses into one pass over memory."""
    y = x * 0.5
    y = y + 1.0
    y = y.sin()
    y = y * x
    y = y.relu()
    y = y - 0.25
    y = y * y
    y = y.exp()
    y = y + x
    return y.tanh()


def _square(quick: bool) -> tuple:
    return (512, 512) if quick else (4096, 4096)


def _build_chain(lib, quick, device):
    return Instance(pointwise_chain, (_randn(lib, _rng("chain"), _square(quick), device),))


def _build_gelu(lib, quick, device):
    F = lib.nn.functional

    def gelu_tanh(x):
        return F.gelu(x, approximate="tanh")

    return Instance(gelu_tanh, (_randn(lib, _rng("gelu"), _square(quick), device),))


def _build_softmax(lib, quick, device):
    F = lib.nn.functional

    def row_softmax(x):
        return F.softmax(x, dim=-1)

    return Instance(row_softmax, (_randn(lib, _rng("softmax"), _square(quick), device),))


def _build_layer_norm(lib, quick, device):
    F = lib.nn.functional
    rows, width = (1024, 256) if quick else (8192, 1024)
    rng = _rng("layer_norm")

    def layer_norm(x, weight, bias):
        return F.layer_norm(x, (x.shape[-1],), weight, bias)

    args = (
        _randn(lib, rng, (rows, width), device),
        _randn(lib, rng, (width,), device),
        _randn(lib, rng, (width,), device),
    )
    return Instance(layer_norm, args)


def _mlp_sizes(quick: bool) -> tuple:
    return (32, 64, 256) if quick else (256, 512, 2048)  # batch, width, hidden


def _gpt_sizes(quick: bool) -> tuple:
    return (2, 32, 64, 2) if quick else (8, 128, 256, 4)  # batch, tokens, width, heads


def _inference(model):
    for p in model.parameters():
        p.requires_grad_(False)
    return model.eval()


def _train_step(lib, model, x, target) -> Instance:
    """forward + MSE loss + backward + AdamW step, as a user writes it (and compiles it)."""
    F = lib.nn.functional
    optimizer = lib.optim.AdamW(model.parameters(), lr=1e-3)

    def train_step(x, target):
        optimizer.zero_grad()
        loss = F.mse_loss(model(x), target)
        loss.backward()
        optimizer.step()
        return loss

    return Instance(train_step, (x, target))


def _build_mlp(lib, quick, device, train: bool):
    batch, width, hidden = _mlp_sizes(quick)
    rng = _rng("mlp")
    model = models_for(lib).MLP(width, hidden).to(device)
    _set_parameters(lib, model, rng)
    x = _randn(lib, rng, (batch, width), device)
    if train:
        return _train_step(lib, model, x, _randn(lib, rng, (batch, width), device))
    model = _inference(model)

    def mlp_forward(x):
        return model(x)

    return Instance(mlp_forward, (x,))


def _build_gpt(lib, quick, device, train: bool):
    batch, tokens, width, heads = _gpt_sizes(quick)
    rng = _rng("gpt_block")
    model = models_for(lib).Block(width, heads, tokens).to(device)
    _set_parameters(lib, model, rng)
    x = _randn(lib, rng, (batch, tokens, width), device)
    if train:
        return _train_step(lib, model, x, _randn(lib, rng, (batch, tokens, width), device))
    model = _inference(model)

    def gpt_block_forward(x):
        return model(x)

    return Instance(gpt_block_forward, (x,))


def add_one(x):
    """Almost no work: what remains is the cost of a call (dispatch, guards, wrapper)."""
    return x + 1


def _build_overhead(lib, quick, device):
    return Instance(add_one, (_randn(lib, _rng("overhead"), (16,), device),))


def _describe_mlp(train: bool) -> str:
    batch, width, hidden = _mlp_sizes(False)
    what = "fwd + MSE + bwd + AdamW" if train else "forward, no grad"
    return f"MLP {width}->{hidden}->{width} + LayerNorm, batch {batch}: {what}"


def _describe_gpt(train: bool) -> str:
    batch, tokens, width, heads = _gpt_sizes(False)
    what = "fwd + MSE + bwd + AdamW" if train else "forward, no grad"
    return f"GPT-2 block, {batch}x{tokens} tokens, width {width}, {heads} heads: {what}"


WORKLOADS: dict[str, Workload] = {
    w.name: w
    for w in [
        Workload("pointwise_chain", "10 elementwise ops on 4096x4096 float32", _build_chain),
        Workload("gelu_tanh", "F.gelu(approximate='tanh') on 4096x4096", _build_gelu),
        Workload("softmax", "row softmax of 4096x4096", _build_softmax),
        Workload("layer_norm", "F.layer_norm over rows of 8192x1024", _build_layer_norm),
        Workload("mlp_forward", _describe_mlp(False), functools.partial(_build_mlp, train=False)),
        Workload(
            "mlp_train_step",
            _describe_mlp(True),
            functools.partial(_build_mlp, train=True),
            trains=True,
        ),
        Workload(
            "gpt_block_forward", _describe_gpt(False), functools.partial(_build_gpt, train=False)
        ),
        Workload(
            "gpt_block_train_step",
            _describe_gpt(True),
            functools.partial(_build_gpt, train=True),
            trains=True,
        ),
        Workload("call_overhead", "x + 1 on 16 floats: the per-call overhead", _build_overhead),
    ]
}
DEFAULT_SUITE: tuple[str, ...] = tuple(WORKLOADS)


def get_workload(name: str) -> Workload:
    """The workload called ``name``; a ``KeyError`` lists the known names."""
    try:
        return WORKLOADS[name]
    except KeyError:
        raise KeyError(f"unknown workload {name!r}; known: {', '.join(DEFAULT_SUITE)}") from None
