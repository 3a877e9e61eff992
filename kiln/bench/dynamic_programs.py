"""Programs whose shapes change from call to call (issue 13): one step is the whole program.

A GPT forward over sequence lengths 1..longest in a seeded random order, an MLP training loop
over a dataset whose last batch is smaller, and greedy generation with a context that grows by
one token a call. Their figure is end to end: the compiled program's first run (every capture
and compile included, ``compile_with`` compiles the model or the step as a user would) against
an eager run, with the graphs captured and recompiles beside it; later runs show the steady
state. Sizes are (full, quick) tables; ``--quick`` runs fewer calls on smaller models.
"""

from __future__ import annotations

import numpy as np

from .programs import models_for
from .workload_types import (
    Instance,
    int_tensor,
    randn_tensor,
    seeded_rng,
    set_parameters,
    training_step,
)

__all__ = [
    "build_gpt_lengths",
    "build_mlp_ragged_epochs",
    "build_greedy_generation",
    "describe_gpt_lengths",
    "describe_mlp_ragged_epochs",
    "describe_greedy_generation",
    "GPT_LENGTHS_SIZES",
    "MLP_RAGGED_SIZES",
    "GENERATION_SIZES",
]

# calls, batch, longest sequence, vocabulary, layers, width, heads (full; quick)
GPT_LENGTHS_SIZES = {False: (200, 4, 128, 65, 2, 64, 4), True: (40, 2, 32, 65, 1, 32, 2)}
# samples, batch, width, hidden, epochs: the last batch of each epoch is smaller
MLP_RAGGED_SIZES = {False: (1000, 64, 128, 512, 2), True: (200, 32, 32, 64, 1)}
# new tokens, vocabulary, layers, width, heads (the context starts at one token, batch 1)
GENERATION_SIZES = {False: (64, 65, 2, 64, 4), True: (16, 65, 1, 32, 2)}


def sequence_lengths(rng: np.random.Generator, longest: int, calls: int) -> list[int]:
    """Every length 1..longest once in a random order, then random lengths up to ``calls``."""
    lengths = [int(n) for n in rng.permutation(np.arange(1, longest + 1))]
    lengths += [int(n) for n in rng.integers(1, longest + 1, max(0, calls - longest))]
    return lengths[:calls]


def _gpt(lib, name: str, block_size: int, sizes: tuple, device: str):
    """The benchmark's nanoGPT model in inference mode, seeded by ``name``."""
    vocab, layers, width, heads = sizes
    rng = seeded_rng(name)
    model = models_for(lib).GPT(vocab, block_size, layers, width, heads).to(device)
    set_parameters(lib, model, rng)
    for p in model.parameters():
        p.requires_grad_(False)
    return model.eval(), rng


def build_gpt_lengths(lib, quick: bool, device: str) -> Instance:
    calls, batch, longest, *model_sizes = GPT_LENGTHS_SIZES[quick]
    model, rng = _gpt(lib, "gpt_lengths", longest, tuple(model_sizes), device)
    inputs = [
        int_tensor(lib, rng, model_sizes[0], (batch, n), device)
        for n in sequence_lengths(rng, longest, calls)
    ]

    def program(forward):
        def gpt_forward_lengths():
            with lib.no_grad():
                for idx in inputs:
                    logits = forward(idx)
            return logits

        return gpt_forward_lengths

    return Instance(program(model), compile_with=lambda compile: program(compile(model)))


def build_greedy_generation(lib, quick: bool, device: str) -> Instance:
    tokens, *model_sizes = GENERATION_SIZES[quick]
    model, _ = _gpt(lib, "greedy_generation", tokens, tuple(model_sizes), device)
    prompt = lib.zeros((1, 1), dtype=lib.int64, device=device)

    def program(forward):
        def greedy_generation():
            """nanoGPT's ``generate`` with the greedy choice: crop the context to the block
            size, append the most likely next token."""
            idx = prompt
            with lib.no_grad():
                for _ in range(tokens):
                    context = idx if idx.shape[1] <= tokens else idx[:, -tokens:]
                    logits = forward(context)
                    idx = lib.cat([idx, logits[:, -1, :].argmax(-1, keepdim=True)], dim=1)
            return idx

        return greedy_generation

    return Instance(program(model), compile_with=lambda compile: program(compile(model)))


def build_mlp_ragged_epochs(lib, quick: bool, device: str) -> Instance:
    samples, batch, width, hidden, epochs = MLP_RAGGED_SIZES[quick]
    rng = seeded_rng("mlp_ragged_epochs")
    model = models_for(lib).MLP(width, hidden).to(device)
    set_parameters(lib, model, rng)
    train_step = training_step(lib, model, lib.optim.AdamW(model.parameters(), lr=1e-3))
    x = randn_tensor(lib, rng, (samples, width), device)
    y = randn_tensor(lib, rng, (samples, width), device)
    batches = [(x[i : i + batch], y[i : i + batch]) for i in range(0, samples, batch)]

    def program(step):
        def mlp_ragged_epochs():
            for _ in range(epochs):
                for inputs, target in batches:
                    loss = step(inputs, target)
            return loss

        return mlp_ragged_epochs

    return Instance(program(train_step), compile_with=lambda compile: program(compile(train_step)))


def describe_gpt_lengths() -> str:
    calls, batch, longest, vocab, layers, width, heads = GPT_LENGTHS_SIZES[False]
    return (
        f"GPT forward ({layers} layers, width {width}, {heads} heads, vocabulary {vocab}), "
        f"batch {batch}, {calls} calls at sequence lengths 1..{longest} in a seeded random order"
    )


def describe_mlp_ragged_epochs() -> str:
    samples, batch, width, hidden, epochs = MLP_RAGGED_SIZES[False]
    last = samples % batch or batch
    return (
        f"MLP {width}->{hidden}->{width} training loop (fwd + MSE + bwd + AdamW): {epochs} "
        f"epochs of {samples} samples in batches of {batch}, the last of {last}"
    )


def describe_greedy_generation() -> str:
    tokens, vocab, layers, width, heads = GENERATION_SIZES[False]
    return (
        f"greedy generation of {tokens} tokens from one, context growing by one a call: GPT "
        f"({layers} layers, width {width}, {heads} heads, vocabulary {vocab})"
    )
