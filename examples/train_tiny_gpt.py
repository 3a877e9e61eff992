"""Train a character-level tiny GPT with a compiled training step, then sample from it.

    python examples/train_tiny_gpt.py                  # ~200 steps on examples/data/kiln.txt
    python examples/train_tiny_gpt.py --steps 3 --width 16 --layers 1 --block 16   # a smoke run
    python -m kiln.distributed.run --nproc-per-node 2 examples/train_tiny_gpt.py --ddp

With ``--ddp`` (under the launcher) every rank trains a replica wrapped in
``DistributedDataParallel`` on its own batches; gradients are averaged while backward runs, so
the replicas stay identical, and rank 0 prints and samples.

The whole step (zero_grad, forward, loss, backward, AdamW) goes through ``kiln.compile``: the
forward and backward of the model become fused kernels; what dynamo cannot capture (the
optimizer's bookkeeping, ``backward()`` itself) runs eagerly between them. At the end the same step
is timed eagerly and compiled on identical copies of the model, and the model writes some text.
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import time

import numpy as np

import kiln
import kiln.distributed as dist
import kiln.nn as nn
import kiln.nn.functional as F
from kiln.bench.workloads import models_for
from kiln.nn.parallel import DistributedDataParallel

HERE = os.path.dirname(os.path.abspath(__file__))


class TinyGPT(nn.Module):
    """Token + position embeddings, pre-norm GPT-2 blocks (the ones ``kiln.bench`` times), LM head."""

    def __init__(self, vocab: int, block: int, width: int, layers: int, heads: int):
        super().__init__()
        self.token = nn.Embedding(vocab, width)
        self.position = nn.Embedding(block, width)
        self.blocks = nn.Sequential(
            *[models_for(kiln).Block(width, heads, block) for _ in range(layers)]
        )
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)

    def forward(self, idx):
        positions = kiln.arange(idx.shape[1], device=idx.device)
        x = self.token(idx) + self.position(positions)
        return self.head(self.norm(self.blocks(x)))


def make_step(model: nn.Module, lr: float):
    """A training step as one would write it for PyTorch (and an optimizer it owns)."""
    optimizer = kiln.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)

    def train_step(idx, targets):
        optimizer.zero_grad()
        logits = model(idx)
        loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))
        loss.backward()
        optimizer.step()
        return loss

    return train_step


def batches(data: np.ndarray, block: int, batch: int, rng: np.random.Generator):
    """Random windows of the text: inputs and the same windows shifted by one character."""
    while True:
        starts = rng.integers(0, len(data) - block - 1, batch)
        idx = np.stack([data[s : s + block] for s in starts])
        targets = np.stack([data[s + 1 : s + block + 1] for s in starts])
        yield kiln.tensor(idx), kiln.tensor(targets)


@kiln.no_grad()
def sample(model: TinyGPT, prompt: list[int], block: int, count: int) -> list[int]:
    """Generate ``count`` characters, each drawn from the model's softmax (eagerly: the input
    grows by one each time, and a compiled forward would recompile for every length)."""
    model.eval()
    idx = kiln.tensor([prompt], dtype=kiln.int64)
    for _ in range(count):
        logits = model(idx[:, -block:])[:, -1, :]
        following = kiln.multinomial(F.softmax(logits, dim=-1), 1)
        idx = kiln.cat([idx, following], dim=1)
    model.train()
    return idx[0].tolist()


def time_steps(steps: dict, batch_source, count: int) -> dict:
    """Median ms per step of each step function, run in turn on the same batches."""
    times: dict = {name: [] for name in steps}
    for _ in range(count):
        idx, targets = next(batch_source)
        for name, step in steps.items():
            start = time.perf_counter()
            step(idx, targets)
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) * 1e3 for name, values in times.items()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--text", default=os.path.join(HERE, "data", "kiln.txt"))
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--block", type=int, default=64, help="context length in characters")
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--time-steps", type=int, default=10, help="steps timed at the end")
    parser.add_argument("--sample-chars", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--ddp", action="store_true", help="train with DDP (under the launcher)")
    args = parser.parse_args(argv)
    rank = 0
    if args.ddp:
        dist.init_process_group("mpi")
        rank = dist.get_rank()
    say = print if rank == 0 else (lambda *a, **k: None)

    with open(args.text, encoding="utf-8") as f:
        text = f.read()
    chars = sorted(set(text))
    encode = {c: i for i, c in enumerate(chars)}
    data = np.array([encode[c] for c in text], dtype=np.int64)
    say(f"corpus: {args.text} ({len(text)} characters, {len(chars)} distinct)")

    kiln.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed + rank)  # each rank draws its own batches
    model = TinyGPT(len(chars), args.block, args.width, args.layers, args.heads)
    eager_twin = copy.deepcopy(model)  # same weights, for the timing at the end
    n_params = sum(p.numel() for p in model.parameters())
    say(f"model: {args.layers} blocks, width {args.width}, {n_params} parameters")
    trained, twin = model, eager_twin
    if args.ddp:
        trained, twin = DistributedDataParallel(model), DistributedDataParallel(eager_twin)
        say(f"DDP over {dist.get_world_size()} ranks, {len(trained.bucket_sizes())} bucket(s)")

    step = kiln.compile(make_step(trained, args.lr))
    source = batches(data, args.block, args.batch, rng)
    start = time.perf_counter()
    for i in range(args.steps):
        loss = step(*next(source))
        if args.ddp:  # the mean over every rank's batch
            loss = loss.detach().clone()
            dist.all_reduce(loss, op=dist.ReduceOp.AVG)
        if i == 0:
            say(f"first step (capture + compile + run): {time.perf_counter() - start:.2f} s")
        say(f"step {i + 1:4d}  loss {loss.item():.4f}")

    timed = {"eager": make_step(twin, args.lr), "compiled": step}
    time_steps({"eager": timed["eager"]}, source, 1)  # eager warm-up (first-call costs)
    ms = time_steps(timed, source, args.time_steps)
    say(
        f"time per training step (median of {args.time_steps}): eager {ms['eager']:.2f} ms, "
        f"compiled {ms['compiled']:.2f} ms ({ms['eager'] / ms['compiled']:.2f}x)"
    )

    if rank == 0:
        prompt = [encode[c] for c in "The "]
        out = sample(model, prompt, args.block, args.sample_chars)
        say("sample:\n" + "".join(chars[i] for i in out))


if __name__ == "__main__":
    main()
