"""The benchmark suite: each workload builds the same function and inputs in kiln or in PyTorch.

Kernels (pointwise, softmax, layer_norm, a copy: memory-bound, so the bench prints their GB/s),
small models (an MLP, a GPT-2 block; forward and training step, also with a batch size that
changes every step), the per-call overhead, the programs of ``programs.py``, and those of
``dynamic_programs.py`` whose shapes change from call to call (measured end to end). ``quick``
picks small shapes; ``QUICK_SUITE`` is what ``--quick`` runs, ``DEFAULT_SUITE`` the full run,
and opt-in workloads (GPT-2 small) run only when named.
"""

from __future__ import annotations

import functools

from .dynamic_programs import (
    build_gpt_lengths,
    build_greedy_generation,
    build_mlp_ragged_epochs,
    describe_gpt_lengths,
    describe_greedy_generation,
    describe_mlp_ragged_epochs,
)
from .programs import (
    DCGAN_SIZES,
    GPT2_SMALL_SIZES,
    LSTM_SIZES,
    MNIST_SIZES,
    NANOGPT_SIZES,
    RESNET18_SIZES,
    RESNET_SIZES,
    build_dcgan,
    build_gpt2_small,
    build_lstm_lm,
    build_mnist_cnn,
    build_nanogpt,
    build_resnet18,
    build_resnet_cnn,
    models_for,
)
from .workload_types import (
    Instance,
    Workload,
    randn_tensor,
    seeded_rng,
    set_parameters,
    training_step,
)

__all__ = [
    "Instance",
    "Workload",
    "WORKLOADS",
    "DEFAULT_SUITE",
    "QUICK_SUITE",
    "get_workload",
    "models_for",
]

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
    return Instance(
        pointwise_chain, (randn_tensor(lib, seeded_rng("chain"), _square(quick), device),)
    )


def _build_gelu(lib, quick, device):
    F = lib.nn.functional

    def gelu_tanh(x):
        return F.gelu(x, approximate="tanh")

    return Instance(gelu_tanh, (randn_tensor(lib, seeded_rng("gelu"), _square(quick), device),))


def _build_softmax(lib, quick, device):
    F = lib.nn.functional

    def row_softmax(x):
        return F.softmax(x, dim=-1)

    return Instance(
        row_softmax, (randn_tensor(lib, seeded_rng("softmax"), _square(quick), device),)
    )


def _build_layer_norm(lib, quick, device):
    F = lib.nn.functional
    rows, width = (1024, 256) if quick else (8192, 1024)
    rng = seeded_rng("layer_norm")

    def layer_norm(x, weight, bias):
        return F.layer_norm(x, (x.shape[-1],), weight, bias)

    args = (
        randn_tensor(lib, rng, (rows, width), device),
        randn_tensor(lib, rng, (width,), device),
        randn_tensor(lib, rng, (width,), device),
    )
    return Instance(layer_norm, args)


def _build_mse(lib, quick, device):
    F = lib.nn.functional
    rng = seeded_rng("mse")

    def mse_loss(prediction, target):
        return F.mse_loss(prediction, target)

    args = (
        randn_tensor(lib, rng, _square(quick), device),
        randn_tensor(lib, rng, _square(quick), device),
    )
    return Instance(mse_loss, args)


def _build_copy(lib, quick, device):
    def copy(x):
        return x.clone()

    return Instance(copy, (randn_tensor(lib, seeded_rng("copy"), _square(quick), device),))


def _square_bytes(quick: bool) -> int:
    """One float32 square read and one written."""
    rows, cols = _square(quick)
    return 2 * 4 * rows * cols


def _layer_norm_bytes(quick: bool) -> int:
    rows, width = (1024, 256) if quick else (8192, 1024)
    return 2 * 4 * rows * width + 2 * 4 * width


def _mlp_sizes(quick: bool) -> tuple:
    return (32, 64, 256) if quick else (256, 512, 2048)  # batch, width, hidden


def _varying_batches(quick: bool) -> tuple[int, ...]:
    """The batch sizes a varying-batch step cycles through (a data loader's ragged batches)."""
    return (16, 24, 32, 40) if quick else (128, 192, 256, 320)


def _gpt_sizes(quick: bool) -> tuple:
    return (2, 32, 64, 2) if quick else (8, 128, 256, 4)  # batch, tokens, width, heads


def _inference(model):
    for p in model.parameters():
        p.requires_grad_(False)
    return model.eval()


def _train_step(lib, model, arg_sets: tuple) -> Instance:
    """forward + MSE loss + backward + AdamW step, as a user writes it (and compiles it);
    ``arg_sets``: the (input, target) pair of each step in turn."""
    optimizer = lib.optim.AdamW(model.parameters(), lr=1e-3)
    return Instance(training_step(lib, model, optimizer), arg_sets=arg_sets)


def _build_mlp(lib, quick, device, train: bool, varying: bool = False):
    batch, width, hidden = _mlp_sizes(quick)
    batches = _varying_batches(quick) if varying else (batch,)
    rng = seeded_rng("mlp_varying" if varying else "mlp")
    model = models_for(lib).MLP(width, hidden).to(device)
    set_parameters(lib, model, rng)
    if train:
        arg_sets = tuple(
            (randn_tensor(lib, rng, (b, width), device), randn_tensor(lib, rng, (b, width), device))
            for b in batches
        )
        return _train_step(lib, model, arg_sets)
    model = _inference(model)

    def mlp_forward(x):
        return model(x)

    arg_sets = tuple((randn_tensor(lib, rng, (b, width), device),) for b in batches)
    return Instance(mlp_forward, arg_sets=arg_sets)


def _build_gpt(lib, quick, device, train: bool):
    batch, tokens, width, heads = _gpt_sizes(quick)
    rng = seeded_rng("gpt_block")
    model = models_for(lib).Block(width, heads, tokens).to(device)
    set_parameters(lib, model, rng)
    x = randn_tensor(lib, rng, (batch, tokens, width), device)
    if train:
        target = randn_tensor(lib, rng, (batch, tokens, width), device)
        return _train_step(lib, model, ((x, target),))
    model = _inference(model)

    def gpt_block_forward(x):
        return model(x)

    return Instance(gpt_block_forward, (x,))


def add_one(x):
    """Almost no work: what remains is the cost of a call (dispatch, guards, wrapper)."""
    return x + 1


def _build_overhead(lib, quick, device):
    return Instance(add_one, (randn_tensor(lib, seeded_rng("overhead"), (16,), device),))


def _describe_mlp(train: bool, varying: bool = False) -> str:
    batch, width, hidden = _mlp_sizes(False)
    what = "fwd + MSE + bwd + AdamW" if train else "forward, no grad"
    batches = "/".join(map(str, _varying_batches(False))) + " in turn" if varying else batch
    return f"MLP {width}->{hidden}->{width} + LayerNorm, batch {batches}: {what}"


def _describe_gpt(train: bool) -> str:
    batch, tokens, width, heads = _gpt_sizes(False)
    what = "fwd + MSE + bwd + AdamW" if train else "forward, no grad"
    return f"GPT-2 block, {batch}x{tokens} tokens, width {width}, {heads} heads: {what}"


def _describe_gpt_program(what: str, sizes: tuple) -> str:
    batch, tokens, vocab, layers, width, heads = sizes
    return (
        f"{what}: {layers} layers, width {width}, {heads} heads, vocabulary {vocab}, "
        f"{batch}x{tokens} tokens: fwd + cross-entropy + bwd + clip + AdamW"
    )


def _describe_lstm() -> str:
    tokens, batch, vocab, width, hidden, layers = LSTM_SIZES[False]
    return (
        f"word_language_model LSTM: {layers} layers, {width}->{hidden}, vocabulary {vocab}, "
        f"{tokens} steps x batch {batch}: fwd + cross-entropy + bwd + clip + SGD"
    )


def _describe_resnet() -> str:
    batch, side, channels, classes = RESNET_SIZES[False]
    return (
        f"ResNet CNN: stem + 2 basic blocks ({channels}, {2 * channels} channels), "
        f"batch {batch} x 3x{side}x{side}, {classes} classes: fwd + bwd + SGD momentum"
    )


def _describe_resnet18() -> str:
    batch, side, classes = RESNET18_SIZES[False]
    return (
        f"torchvision resnet18, batch {batch} x 3x{side}x{side}, {classes} classes: fwd + bwd + "
        "SGD momentum, weight decay"
    )


def _describe_mnist() -> str:
    batch, _ = MNIST_SIZES[False]
    return (
        f"pytorch/examples MNIST network (no dropout), batch {batch} x 1x28x28: fwd + nll_loss "
        "+ bwd + Adadelta"
    )


def _describe_dcgan() -> str:
    batch, noise, width = DCGAN_SIZES[False]
    return (
        f"DCGAN: generator {noise}->3x16x16 and discriminator, width {width}, batch {batch}: "
        "discriminator step on real and fake, then generator step (Adam); compiled: the two "
        "models"
    )


WORKLOADS: dict[str, Workload] = {
    w.name: w
    for w in [
        Workload("copy", "x.clone() of 4096x4096 float32", _build_copy, moved_bytes=_square_bytes),
        Workload(
            "pointwise_chain",
            "10 elementwise ops on 4096x4096 float32",
            _build_chain,
            moved_bytes=_square_bytes,
        ),
        Workload(
            "gelu_tanh",
            "F.gelu(approximate='tanh') on 4096x4096",
            _build_gelu,
            moved_bytes=_square_bytes,
        ),
        Workload("softmax", "row softmax of 4096x4096", _build_softmax, moved_bytes=_square_bytes),
        Workload(
            "layer_norm",
            "F.layer_norm over rows of 8192x1024",
            _build_layer_norm,
            moved_bytes=_layer_norm_bytes,
        ),
        Workload(
            "mse_loss",
            "F.mse_loss of two 4096x4096 float32: pointwise into one full reduction",
            _build_mse,
            moved_bytes=_square_bytes,  # two squares read (the scalar written is noise)
        ),
        Workload("mlp_forward", _describe_mlp(False), functools.partial(_build_mlp, train=False)),
        Workload(
            "mlp_train_step",
            _describe_mlp(True),
            functools.partial(_build_mlp, train=True),
            trains=True,
        ),
        Workload(
            "mlp_forward_varying_batch",
            _describe_mlp(False, varying=True),
            functools.partial(_build_mlp, train=False, varying=True),
        ),
        Workload(
            "mlp_train_step_varying_batch",
            _describe_mlp(True, varying=True),
            functools.partial(_build_mlp, train=True, varying=True),
            trains=True,
            in_quick=False,  # compiles a training step per batch size: seconds
        ),
        Workload(
            "gpt_block_forward", _describe_gpt(False), functools.partial(_build_gpt, train=False)
        ),
        Workload(
            "gpt_block_train_step",
            _describe_gpt(True),
            functools.partial(_build_gpt, train=True),
            trains=True,
            in_quick=False,  # nanogpt_train_step covers it in a quick run
        ),
        Workload("call_overhead", "x + 1 on 16 floats: the per-call overhead", _build_overhead),
        Workload(
            "nanogpt_train_step",
            _describe_gpt_program("nanoGPT", NANOGPT_SIZES[False]),
            build_nanogpt,
            trains=True,
        ),
        Workload(
            "lstm_lm_train_step",
            _describe_lstm(),
            build_lstm_lm,
            trains=True,
            in_quick=False,  # its time-unrolled compile takes about a minute (issue 18, item 3)
        ),
        Workload(
            "resnet_cnn_train_step",
            _describe_resnet(),
            build_resnet_cnn,
            trains=True,
            in_quick=False,  # its convolutions compile as extern calls in seconds: full run only
        ),
        Workload("dcgan_train_step", _describe_dcgan(), build_dcgan, trains=True, in_quick=False),
        Workload(
            "resnet18_train_step",
            _describe_resnet18(),
            build_resnet18,
            trains=True,
            in_quick=False,  # 11.7M parameters: a tenth of a second per step
        ),
        Workload(
            "mnist_cnn_train_step", _describe_mnist(), build_mnist_cnn, trains=True, in_quick=False
        ),
        Workload("gpt_forward_lengths", describe_gpt_lengths(), build_gpt_lengths, end_to_end=True),
        Workload(
            "mlp_ragged_epochs",
            describe_mlp_ragged_epochs(),
            build_mlp_ragged_epochs,
            trains=True,
            end_to_end=True,
        ),
        Workload(
            "greedy_generation",
            describe_greedy_generation(),
            build_greedy_generation,
            end_to_end=True,
        ),
        Workload(
            "gpt2_small_train_step",
            _describe_gpt_program("GPT-2 small (nanoGPT)", GPT2_SMALL_SIZES[False]),
            build_gpt2_small,
            trains=True,
            in_quick=False,
            opt_in=True,
        ),
    ]
}
DEFAULT_SUITE: tuple[str, ...] = tuple(name for name, w in WORKLOADS.items() if not w.opt_in)
QUICK_SUITE: tuple[str, ...] = tuple(
    name for name, w in WORKLOADS.items() if w.in_quick and not w.opt_in
)


def get_workload(name: str) -> Workload:
    """The workload called ``name``; a ``KeyError`` lists the known names."""
    try:
        return WORKLOADS[name]
    except KeyError:
        raise KeyError(f"unknown workload {name!r}; known: {', '.join(WORKLOADS)}") from None
