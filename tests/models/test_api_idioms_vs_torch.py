"""PyTorch API idioms as ordinary programs write them, run with both libraries (probe round 19's
sweep): each idiom is a short function of the library and a ``compile`` wrapper, run with
PyTorch eagerly and with kiln eagerly, under ``kiln.compile`` and ``kiln.compile(dynamic=True)``;
values, gradients, dtypes, ``requires_grad`` flags and Python results must match.

The sweep covered tensor idioms (in-place writes through views, ``index_put_`` accumulation,
``scatter_reduce``, promotion with Python numbers, integer division signs, einsum forms,
advanced indexing, ``unique``/``sort``/``topk`` options, cumulative dtypes), ``nn.utils``
(parametrizations, pruning, packed sequences with ``enforce_sorted=False``, clipping),
checkpointing and hooks, state dicts, optimizers and schedulers, ``torch.func`` and double
backward, attention masks, data loading, AMP with ``GradScaler``, serialization and
structured compiled outputs. What it found is fixed and tested where it was fixed: a
``vjp_fn`` called in compiled code returned a gradient with history (autograd engine), SDPA
refused ``is_causal`` with a mask where PyTorch's flash kernel takes both, compiled ``randint``
drew one fixed sample and compiled complex ``randn`` had no imaginary part (AOT's random table).
"""

from __future__ import annotations

import copy
import importlib
import io

import numpy as np
import pytest

import kiln
from tests.models.test_hf_vision_sequence_programs_vs_torch import _compare
from tests.oracle import needs_torch, torch

pytestmark = needs_torch

_rng = np.random.default_rng(19)
A = _rng.standard_normal((4, 5)).astype(np.float32)
INTS = _rng.integers(-7, 8, (4, 5))
X3 = _rng.standard_normal((3, 4, 5)).astype(np.float32)
W = [
    _rng.standard_normal((8, 6)).astype(np.float32) * 0.4,
    _rng.standard_normal(8).astype(np.float32),
    _rng.standard_normal((4, 8)).astype(np.float32) * 0.4,
    _rng.standard_normal(4).astype(np.float32),
]
X = _rng.standard_normal((5, 6)).astype(np.float32)
Y = _rng.standard_normal((5, 4)).astype(np.float32)
LENGTHS = [5, 2, 4]
SEQUENCES = [_rng.standard_normal((n, 3)).astype(np.float32) for n in LENGTHS]
TOKENS = _rng.standard_normal((2, 5, 6)).astype(np.float32)


def _net(lib):
    net = lib.nn.Sequential(lib.nn.Linear(6, 8), lib.nn.Tanh(), lib.nn.Linear(8, 4))
    with lib.no_grad():
        for p, w in zip(net.parameters(), W):
            p.copy_(lib.tensor(w))
    return net


def _filled(lib, module, scale=0.5):
    """``module`` with deterministic weights (sines of their positions), the same in both."""
    with lib.no_grad():
        for i, (_, p) in enumerate(sorted(module.named_parameters())):
            values = np.sin(np.arange(p.numel()) * 0.37 + i) * scale
            p.copy_(lib.tensor(values.reshape(tuple(p.shape)).astype(np.float32)))
    return module


# ------------------------------------------------------------------------------ tensors


def _views_written_in_place(lib, compile_):
    x = lib.tensor(A, requires_grad=True)

    def loss(x):
        y = x * 1
        y[:, 0] = y[:, 1] * 3
        y.t()[2].zero_()
        y.diagonal().sigmoid_()
        return (y**2).sum()

    value = compile_(loss)(x)
    value.backward()
    return value, x.grad


def _accumulating_writes(lib, compile_):
    def writes(x, rows, cols, values):
        y = x.clone()
        y.index_put_((rows, cols), values, accumulate=True)
        z = x.scatter_reduce(
            1, cols.view(1, 3).expand(4, 3), x[:, :3] * 2, "amax", include_self=False
        )
        return y, z, x.index_add(0, rows, x[:3])

    x = lib.tensor(A, requires_grad=True)
    rows, cols = lib.tensor([0, 0, 1]), lib.tensor([1, 1, 2])
    y, z, w = compile_(writes)(x, rows, cols, lib.tensor([1.0, 2.0, 3.0]))
    (y.sum() + (z * z).sum() + w.sum()).backward()
    return y, z, w, x.grad


def _promotion_and_integer_division(lib, compile_):
    def mixed(x, i, b):
        divisor = lib.where(i == 0, 3, i)
        return (
            i + 1.5, b + 1, i / 2, x.half() + i, i.to(lib.int32) + i.to(lib.int8),
            lib.where(x > 0, x, 0.0), lib.where(i > 0, 1.5, i), 2 ** i.abs(),
            i // divisor, i % divisor, lib.fmod(i, -3), i.float() // -3.0,
            lib.div(i, divisor, rounding_mode="trunc"), x + lib.tensor(3.0, dtype=lib.float64),
        )  # fmt: skip

    return compile_(mixed)(lib.tensor(A), lib.tensor(INTS), lib.tensor(A > 0))


def _einsum_and_indexing(lib, compile_):
    def forms(x):
        i, j = lib.tensor([0, 2]), lib.tensor([1, 3])
        y = x.clone()
        y[[0, 2], :, [1, 3]] = 0.5
        y[y < -1] = -1
        return (
            lib.einsum("bij,bkj->bik", x, x), lib.einsum("b i j -> j", x), lib.einsum("ii->i", x[0, :, :4]),
            x[i, :, j], x[:, i, j], x[..., i], x[None, 1:, None, [0, 1]], x[x > 0], y,
        )  # fmt: skip

    return compile_(forms)(lib.tensor(X3))


def _ordering_options(lib, compile_):
    def orders(x, m):
        return (
            lib.sort(x, stable=True), lib.sort(x, descending=True, stable=True).indices,
            lib.topk(x.nan_to_num(), 3, largest=False), lib.kthvalue(x.nan_to_num(), 3),
            lib.unique(m, dim=0, return_inverse=True, return_counts=True),
            lib.unique_consecutive(m.flatten(), return_counts=True),
        )  # fmt: skip

    x = lib.tensor([3.0, 1.0, 2.0, 3.0, 1.0, 5.0, float("nan"), -0.0, 0.0])
    return compile_(orders)(x, lib.tensor([[1, 2], [1, 2], [0, 1]]))


def _cumulative_dtypes(lib, compile_):
    def sums(x, i, b):
        return (
            lib.cumsum(i.to(lib.int32), 1), lib.cumsum(b, 1), lib.cumsum(x, 0, dtype=lib.float64),
            lib.cumprod(i.to(lib.int8), 1), lib.sum(b), b.sum(0, dtype=lib.int32),
            lib.bincount(i.abs().flatten(), weights=x.flatten()), lib.histc(x, bins=5, min=-2, max=2),
        )  # fmt: skip

    return compile_(sums)(lib.tensor(A), lib.tensor(INTS), lib.tensor(A > 0))


# ------------------------------------------------------------------------------ nn.utils


def _weight_norm_parametrization(lib, compile_):
    net = lib.nn.utils.parametrizations.weight_norm(_net(lib)[0])
    out = compile_(net)(lib.tensor(X))
    out.sum().backward()
    names = sorted(n for n, _ in net.named_parameters())
    return out, names, [p.grad for _, p in sorted(net.named_parameters())], net.weight


def _pruned_then_removed(lib, compile_):
    prune = importlib.import_module(lib.__name__ + ".nn.utils.prune")
    layer = _net(lib)[0]
    prune.l1_unstructured(layer, "weight", amount=0.3)
    prune.ln_structured(layer, "weight", amount=0.25, n=2, dim=0)
    out = compile_(layer)(lib.tensor(X))
    out.sum().backward()
    grad, mask = layer.weight_orig.grad, layer.weight_mask
    prune.remove(layer, "weight")
    return out, grad, mask, layer.weight, sorted(layer.state_dict())


def _unsorted_packed_sequences(lib, compile_):
    rnn_utils = lib.nn.utils.rnn
    lstm = _filled(lib, lib.nn.LSTM(3, 4, num_layers=2, batch_first=True, bidirectional=True))
    seqs = [lib.tensor(s, requires_grad=True) for s in SEQUENCES]
    padded = rnn_utils.pad_sequence(seqs, batch_first=True)
    packed = rnn_utils.pack_padded_sequence(
        padded, lib.tensor(LENGTHS), batch_first=True, enforce_sorted=False
    )
    out, (h, _) = lstm(packed)
    unpacked, lengths = rnn_utils.pad_packed_sequence(out, batch_first=True, total_length=6)
    (unpacked.sum() + h.pow(2).sum()).backward()
    lib.nn.utils.clip_grad_value_(lstm.parameters(), 0.05)
    return (
        unpacked, lengths, h, [s.grad for s in seqs], packed.sorted_indices,
        [p.grad for p in lstm.parameters()], rnn_utils.pack_sequence(seqs, False).batch_sizes,
    )  # fmt: skip


# ------------------------------------------------------------------------------ autograd


def _checkpointed(lib, compile_, use_reentrant):
    checkpoint = importlib.import_module(lib.__name__ + ".utils.checkpoint").checkpoint
    net = _net(lib)
    x = lib.tensor(X, requires_grad=True)

    def forward(x):
        h = checkpoint(net[0], x, use_reentrant=use_reentrant)
        h = checkpoint(lambda a, b: lib.tanh(a) * b, h, h, use_reentrant=use_reentrant)
        return net[2](h)

    out = compile_(forward)(x)
    (out**2).sum().backward()
    return out, x.grad, [p.grad for p in net.parameters()]


def _module_and_tensor_hooks(lib, compile_):
    net, seen = _net(lib), []

    def double_grad_in(module, grad_in, grad_out):
        seen.append([None if g is None else tuple(g.shape) for g in grad_in])
        return tuple(None if g is None else g * 2 for g in grad_in)

    net[1].register_full_backward_hook(double_grad_in)
    net[2].register_full_backward_pre_hook(lambda module, grad_out: (grad_out[0] * 3,))

    def halve(p):
        p.grad.mul_(0.5)

    for p in net.parameters():
        p.register_post_accumulate_grad_hook(halve)
    x = lib.tensor(X, requires_grad=True)
    x.register_hook(lambda g: g + 1)
    out = compile_(net)(x)
    out.sum().backward()
    return out, x.grad, [p.grad for p in net.parameters()], seen


def _per_example_gradients(lib, compile_):
    func, net = lib.func, _net(lib)
    params = {k: v.detach() for k, v in net.named_parameters()}

    def loss(p, x, y):
        return lib.nn.functional.mse_loss(func.functional_call(net, p, (x,)), y)

    def gradients(x, y):
        per_example = func.vmap(func.grad(loss), in_dims=(None, 0, 0))(params, x, y)
        out, vjp_fn = func.vjp(lambda x: x.sin() * x, x)
        return per_example, func.hessian(lambda x: (x**3).sum())(x[0]), vjp_fn(lib.ones_like(out))

    return compile_(gradients)(lib.tensor(X), lib.tensor(Y))


def _double_backward(lib, compile_):
    block = _filled(lib, lib.nn.Sequential(lib.nn.LayerNorm(6), lib.nn.GELU(), lib.nn.Linear(6, 3)))
    x = lib.tensor(X, requires_grad=True)

    def gradient_penalty(x):
        (g,) = lib.autograd.grad((block(x) ** 2).sum(), x, create_graph=True)
        return g

    g = compile_(gradient_penalty)(x)
    (g**2).sum().backward()
    return g, x.grad, [p.grad for p in block.parameters()]


# ------------------------------------------------------------------------------ training


def _state_dict_round_trips(lib, compile_):
    net = _net(lib)
    net.register_buffer("kept", lib.ones(3))
    net.register_buffer("scratch", lib.zeros(2), persistent=False)
    opt = lib.optim.Adam(net.parameters(), lr=0.1)
    (net(lib.tensor(X)) ** 2).sum().backward()
    opt.step()
    state = dict(net.state_dict())
    state["unexpected"] = lib.ones(1)
    del state["2.bias"]
    other = _net(lib)
    other.register_buffer("kept", lib.zeros(3))
    result = other.load_state_dict(state, strict=False)
    meta = lib.nn.Linear(6, 8, device="meta")
    meta.load_state_dict({"weight": lib.tensor(W[0]), "bias": lib.tensor(W[1])}, assign=True)
    buffer = io.BytesIO()
    lib.save({"opt": opt.state_dict(), "epoch": 3}, buffer)
    buffer.seek(0)
    loaded = lib.load(buffer, weights_only=True)
    copied = copy.deepcopy(opt)
    return (
        sorted(net.state_dict()), sorted(result.missing_keys), sorted(result.unexpected_keys),
        other.kept, meta.weight, meta.weight.requires_grad, loaded["opt"]["state"][0]["exp_avg"],
        loaded["epoch"], copied.state_dict()["state"][1]["exp_avg_sq"],
    )  # fmt: skip


OPTIMIZERS = {
    "nadam_decoupled": ("NAdam", {"lr": 0.01, "decoupled_weight_decay": True, "weight_decay": 0.1}),
    "radam": ("RAdam", {"lr": 0.01}),
    "adagrad_decay": ("Adagrad", {"lr": 0.1, "lr_decay": 0.01, "initial_accumulator_value": 0.1}),
    "rmsprop_centered": ("RMSprop", {"lr": 0.01, "momentum": 0.9, "centered": True}),
    "adam_amsgrad_maximize": ("Adam", {"lr": 0.01, "amsgrad": True, "maximize": True}),
}


def _optimizer_with_groups(name, options):
    def program(lib, compile_):
        net = _net(lib)
        groups = [{"params": net[0].parameters()}]
        opt = getattr(lib.optim, name)(groups, **options)
        opt.add_param_group({"params": net[2].parameters(), "lr": options["lr"] * 0.5})

        def step(x, y):
            opt.zero_grad(set_to_none=False)
            loss = lib.nn.functional.mse_loss(net(x), y)
            loss.backward()
            opt.step()
            return loss

        step = compile_(step)
        losses = [step(lib.tensor(X), lib.tensor(Y)) for _ in range(3)]
        return losses, list(net.parameters()), sorted(opt.state_dict()["state"][0])

    return program


def _schedulers(lib, compile_):
    schedulers = lib.optim.lr_scheduler
    rates = []
    for build in (
        lambda o: schedulers.OneCycleLR(o, 0.1, total_steps=12, three_phase=True),
        lambda o: schedulers.CosineAnnealingWarmRestarts(o, T_0=3, T_mult=2, eta_min=0.001),
        lambda o: schedulers.SequentialLR(
            o, [schedulers.LinearLR(o, 0.1, total_iters=3), schedulers.ExponentialLR(o, 0.9)], [3]
        ),
        lambda o: schedulers.ChainedScheduler(
            [schedulers.StepLR(o, 2, 0.5), schedulers.ExponentialLR(o, 0.9)]
        ),
    ):
        opt = lib.optim.SGD(_net(lib).parameters(), lr=0.1, momentum=0.9)
        scheduler = build(opt)
        for _ in range(8):
            opt.step()
            scheduler.step()
            rates.append((scheduler.get_last_lr()[0], opt.param_groups[0]["momentum"]))
    return rates


def _amp_with_grad_scaler(lib, compile_):
    net = _net(lib)
    opt = lib.optim.SGD(net.parameters(), lr=0.1)
    scaler = lib.amp.GradScaler("cpu", init_scale=2.0**8, growth_interval=2)

    def forward(x, y):
        with lib.autocast("cpu", dtype=lib.bfloat16):
            out = net(x)
            return out, lib.nn.functional.mse_loss(out.float(), y)

    forward = compile_(forward)
    results = []
    for _ in range(3):
        out, loss = forward(lib.tensor(X), lib.tensor(Y))
        opt.zero_grad()
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        norm = lib.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        scaler.step(opt)
        scaler.update()
        results.append((out, loss, norm, scaler.get_scale()))
    return results, list(net.parameters())


# ------------------------------------------------------------------------------ attention, data


def _attention_masks(lib, compile_):
    mha = _filled(lib, lib.nn.MultiheadAttention(6, 2, batch_first=True), 0.3)
    padding = lib.tensor([[False] * 5, [False, False, False, True, True]])
    x = lib.tensor(TOKENS, requires_grad=True)
    keep = lib.tensor(np.tril(np.ones((5, 5), bool)) & (A[:, :5].repeat(2, 0)[:5] > -1.5))

    def attend(x):
        out, weights = mha(x, x, x, key_padding_mask=padding, average_attn_weights=False)
        q = x.view(2, 5, 2, 3).transpose(1, 2)
        causal = lib.nn.functional.scaled_dot_product_attention(
            q, q, q, attn_mask=keep, is_causal=True
        )
        return out, weights, causal  # fmt: skip

    out, weights, causal = compile_(attend)(x)
    (out.sum() + causal.sum()).backward()
    return out, weights, causal, x.grad


def _data_loading(lib, compile_):
    data = importlib.import_module(lib.__name__ + ".utils.data")
    dataset = data.TensorDataset(lib.tensor(X), lib.tensor(np.arange(5) % 3))

    def collate(batch):
        xs, ys = zip(*batch)
        return lib.stack(xs).sum(1), lib.tensor([int(y) for y in ys])

    batches = list(data.DataLoader(dataset, batch_size=2, collate_fn=collate))
    batches += list(data.DataLoader(dataset, batch_sampler=data.BatchSampler(range(5), 2, True)))
    first, second = data.random_split(dataset, [0.6, 0.4], generator=lib.Generator().manual_seed(1))
    records = [
        {"a": lib.tensor(X[0]), "b": 1, "c": [1.5, 2.5]},
        {"a": lib.tensor(X[1]), "b": 2, "c": [3.5, 4.5]},
    ]
    return batches, len(first), len(second), data.default_collate(records)  # fmt: skip


# ------------------------------------------------------------------------------ the table

IDIOMS = {
    "views_written_in_place": (_views_written_in_place, "ecd"),
    "accumulating_writes": (_accumulating_writes, "ecd"),
    "promotion_and_integer_division": (_promotion_and_integer_division, "ec"),
    "einsum_and_indexing": (_einsum_and_indexing, "ec"),
    "ordering_options": (_ordering_options, "ec"),
    "cumulative_dtypes": (_cumulative_dtypes, "ec"),
    "weight_norm_parametrization": (_weight_norm_parametrization, "ec"),
    "pruned_then_removed": (_pruned_then_removed, "ec"),
    "unsorted_packed_sequences": (_unsorted_packed_sequences, "e"),
    "checkpoint_reentrant": (lambda lib, c: _checkpointed(lib, c, True), "ec"),
    "checkpoint_non_reentrant": (lambda lib, c: _checkpointed(lib, c, False), "ec"),
    "module_and_tensor_hooks": (_module_and_tensor_hooks, "ec"),
    "per_example_gradients": (_per_example_gradients, "ec"),
    "double_backward": (_double_backward, "ecd"),
    "state_dict_round_trips": (_state_dict_round_trips, "e"),
    "schedulers": (_schedulers, "e"),
    "amp_with_grad_scaler": (_amp_with_grad_scaler, "ec"),
    "attention_masks": (_attention_masks, "ecd"),
    "data_loading": (_data_loading, "e"),
}
IDIOMS |= {f"optimizer_{k}": (_optimizer_with_groups(*v), "ec") for k, v in OPTIMIZERS.items()}
MODES = {"e": "eager", "c": "compiled", "d": "dynamic"}
CASES = [(name, MODES[m]) for name, (_, modes) in IDIOMS.items() for m in modes]
TOLERANCES = {"amp_with_grad_scaler": (2e-2, 2e-2)}


def _wrapper(mode: str):
    if mode == "eager":
        return lambda fn: fn
    return lambda fn: kiln.compile(fn, dynamic=True if mode == "dynamic" else None)


@pytest.mark.parametrize(("name", "mode"), CASES, ids=[f"{n}-{m}" for n, m in CASES])
def test_idiom_matches_torch(name, mode):
    program = IDIOMS[name][0]
    torch.manual_seed(0)
    expected = program(torch, lambda fn: fn)
    kiln.manual_seed(0)
    kiln.dynamo.reset()
    got = program(kiln, _wrapper(mode))
    rtol, atol = TOLERANCES.get(name, (1e-4, 1e-5))
    _compare(got, expected, f"{name} ({mode})", rtol, atol)
