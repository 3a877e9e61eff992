"""Training utilities as scripts use them, run with both libraries (probe round 14): stochastic
weight averaging (``AveragedModel`` with an EMA ``multi_avg_fn``, ``SWALR``, ``update_bn``),
``GradScaler`` steps that skip on a non-finite gradient, an EMA of the weights by
``torch._foreach_*`` inside a compiled step, gradient clipping in its forms
(``get_total_norm``/``clip_grads_with_norm_``, infinity norm, ``error_if_nonfinite``),
freezing and ``add_param_group`` mid-training, ``nn.MultiheadAttention``'s mask and weight
variants, a checkpoint saved by one library and loaded by the other through ``io.BytesIO``;
then the exception types and messages of common mistakes, eagerly and under ``kiln.compile``.

What the round found: ``expand``'s size error named the first mismatching dim where PyTorch
names the last, and version errors described the changed tensor in kiln's words (now
PyTorch's: legacy type, the node that made it, the anomaly hint). Left as they are: a CUDA
tensor on a machine without CUDA raises RuntimeError (PyTorch's CPU build raises
AssertionError, its CUDA build RuntimeError), and a non-scalar ``backward`` says PyTorch's
message followed by the output's shape.
"""

from __future__ import annotations

import io

import numpy as np
import pytest

import kiln
from tests.models.test_detection_flow_sequence_programs_vs_torch import _train
from tests.models.test_hf_vision_sequence_programs_vs_torch import ALL_MODES, Program, _check
from tests.oracle import first_lines_of_errors, needs_torch, torch

pytestmark = needs_torch


def _regression_batches(rng, sizes=(4, 6, 4, 6), width=5):
    return [
        (
            rng.standard_normal((n, width)).astype(np.float32),
            rng.standard_normal((n, 1)).astype(np.float32),
        )
        for n in sizes
    ]


def _net(lib, width=5, hidden=8):
    nn = lib.nn
    return nn.Sequential(
        nn.Linear(width, hidden, bias=False),
        nn.BatchNorm1d(hidden),
        nn.ReLU(),
        nn.Linear(hidden, 1),
    )


# ------------------------------------------------------------------------------ SWA / EMA


def _swa(lib):
    """torchvision's reference recipe: an EMA ``AveragedModel`` updated after each step
    (``use_buffers=True``), an equal-weight SWA model with ``SWALR`` annealing, then
    ``update_bn`` over a ``DataLoader`` to recompute the SWA model's BatchNorm statistics."""
    swa_utils = lib.optim.swa_utils
    model = _net(lib)
    opt = lib.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    ema = swa_utils.AveragedModel(
        model, multi_avg_fn=swa_utils.get_ema_multi_avg_fn(0.9), use_buffers=True
    )
    swa = swa_utils.AveragedModel(model)
    scheduler = swa_utils.SWALR(opt, swa_lr=0.05, anneal_epochs=2, anneal_strategy="cos")
    return model, opt, ema, swa, scheduler


def _swa_step(lib, model, opt, ema, swa, scheduler, x, y):
    loss = lib.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    ema.update_parameters(model)
    swa.update_parameters(model)
    scheduler.step()
    loader = lib.utils.data.DataLoader(lib.utils.data.TensorDataset(x), batch_size=2)
    lib.optim.swa_utils.update_bn(loader, swa)
    swa.eval()
    with lib.no_grad():
        averaged = swa(x)
    swa.train()
    return (
        loss,
        ema.n_averaged,
        swa.n_averaged,
        [p.detach().clone() for p in ema.parameters()],
        [b.clone() for b in swa.module.buffers()],
        averaged,
        opt.param_groups[0]["lr"],
    )


def test_swa_and_ema_averaged_models_with_swalr_and_update_bn_match_torch():
    _check(Program(_swa, _swa_step, _regression_batches, modes=("eager",)))


def _foreach_ema(lib):
    """timm's ``ModelEmaV3`` update by ``_foreach_lerp_`` for floating tensors and
    ``_foreach_mul_``/``_foreach_add_`` with ``alpha`` written out, buffers copied, and the
    global gradient norm by ``_foreach_norm``."""
    model = _net(lib)
    ema = _net(lib)
    ema.load_state_dict(model.state_dict())
    ema.requires_grad_(False)
    opt = lib.optim.AdamW(model.parameters(), lr=1e-2)
    return model, opt, ema


def _foreach_ema_step(lib, model, opt, ema, x, y):
    loss = lib.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    grads = [p.grad for p in model.parameters()]
    grad_norm = lib.linalg.vector_norm(lib.stack(lib._foreach_norm(grads, 2.0)), 2.0)
    opt.step()
    decay = 0.9
    with lib.no_grad():
        ema_params = list(ema.parameters())
        model_params = list(model.parameters())
        half = len(ema_params) // 2
        lib._foreach_lerp_(ema_params[:half], model_params[:half], weight=1.0 - decay)
        lib._foreach_mul_(ema_params[half:], decay)
        lib._foreach_add_(ema_params[half:], model_params[half:], alpha=1.0 - decay)
        for ema_b, model_b in zip(ema.buffers(), model.buffers()):
            ema_b.copy_(model_b)
    return loss, grad_norm, [p.clone() for p in ema.parameters()]


def test_ema_of_weights_by_foreach_ops_in_a_compiled_step_matches_torch():
    _check(Program(_foreach_ema, _foreach_ema_step, _regression_batches, modes=ALL_MODES))


# ------------------------------------------------------------------------------ scaler, clipping


def _scaled(lib):
    model = _net(lib)
    opt = lib.optim.SGD(model.parameters(), lr=0.05)
    scaler = lib.amp.GradScaler("cpu", init_scale=2.0**10, growth_interval=2)
    return model, opt, scaler


def _scaled_step(lib, model, opt, scaler, x, y):
    """The AMP recipe: scale, backward, ``unscale_`` before clipping, ``step`` (skipped when
    a gradient is not finite: the second batch holds a NaN), ``update``."""
    with lib.autocast("cpu", dtype=lib.bfloat16):
        out = model(x)
    loss = lib.nn.functional.mse_loss(out.float(), y)
    opt.zero_grad()
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    norm = lib.nn.utils.clip_grad_norm_(model.parameters(), max_norm=0.5)
    scaler.step(opt)
    scaler.update()
    return loss, norm, scaler.get_scale(), scaler.state_dict()["_growth_tracker"]


def _nan_batches(rng):
    batches = _regression_batches(rng, sizes=(4, 4, 4, 4, 4))
    batches[1][0][0, 0] = np.nan
    return batches


def test_grad_scaler_with_bfloat16_autocast_skips_non_finite_steps_like_torch():
    _check(Program(_scaled, _scaled_step, _nan_batches, rtol=1e-2, atol=1e-2, modes=("eager",)))


def _clipping_step(lib, model, opt, x, y):
    loss = lib.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    params = list(model.parameters())
    grads = [p.grad for p in params]
    total = lib.nn.utils.get_total_norm(grads, norm_type=2.0)
    lib.nn.utils.clip_grads_with_norm_(params, max_norm=0.3, total_norm=total)
    inf_norm = lib.nn.utils.clip_grad_norm_(params, max_norm=0.2, norm_type="inf", foreach=True)
    one_norm = lib.nn.utils.clip_grad_norm_(params, max_norm=1.0, norm_type=1.0)
    lib.nn.utils.clip_grad_value_(params, clip_value=0.01)
    opt.step()
    return loss, total, inf_norm, one_norm


def _clipped(lib):
    model = _net(lib)
    return model, lib.optim.SGD(model.parameters(), lr=0.5)


def test_gradient_clipping_forms_match_torch():
    _check(Program(_clipped, _clipping_step, _regression_batches, modes=ALL_MODES))


def test_clipping_a_non_finite_norm_with_error_if_nonfinite_raises_torchs_error():
    messages = []
    for lib in (torch, kiln):
        p = lib.nn.Parameter(lib.ones(3))
        p.grad = lib.tensor([1.0, float("inf"), 0.0])
        with pytest.raises(RuntimeError) as info:
            lib.nn.utils.clip_grad_norm_([p], 1.0, error_if_nonfinite=True)
        messages.append(str(info.value).replace("torch.", "").replace("kiln.", ""))
    assert messages[0] == messages[1]


# ------------------------------------------------------------------------------ freezing


def _finetune(lib):
    """Fine-tuning with a frozen backbone: the head trains first, then the backbone is
    unfrozen and joins through ``add_param_group`` with its own learning rate."""
    nn = lib.nn
    model = nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 1))
    backbone, head = model[0], model[2]
    backbone.requires_grad_(False)
    opt = lib.optim.Adam(head.parameters(), lr=1e-2)
    return model, opt, {"step": 0}


def _finetune_step(lib, model, opt, counter, x, y):
    counter["step"] += 1
    if counter["step"] == 3:
        model[0].requires_grad_(True)
        opt.add_param_group({"params": model[0].parameters(), "lr": 1e-3})
    loss = lib.nn.functional.mse_loss(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss, [g["lr"] for g in opt.param_groups], model[0].weight.grad is None


def test_frozen_backbone_unfrozen_through_add_param_group_trains_like_torch():
    _check(Program(_finetune, _finetune_step, _regression_batches, modes=("eager",)))


# ------------------------------------------------------------------------------ attention variants


def _attention_variants(lib, d=8, heads=2):
    nn = lib.nn

    class Variants(nn.Module):
        def __init__(self):
            super().__init__()
            self.plain = nn.MultiheadAttention(d, heads)
            self.biased = nn.MultiheadAttention(d, heads, add_bias_kv=True, add_zero_attn=True)
            self.cross = nn.MultiheadAttention(d, heads, kdim=5, vdim=9, batch_first=True)

        def forward(self, x, memory_k, memory_v, padding):
            T, B = x.shape[0], x.shape[1]
            causal = nn.Transformer.generate_square_subsequent_mask(T)
            a, w_avg = self.plain(x, x, x, key_padding_mask=padding, attn_mask=causal)
            bool_causal = lib.triu(lib.ones(T, T, dtype=lib.bool), diagonal=1)
            float_padding = lib.zeros(B, T).masked_fill(padding, float("-inf"))
            b, w_heads = self.biased(
                x, x, x, key_padding_mask=float_padding, average_attn_weights=False
            )
            c, none = self.cross(x.transpose(0, 1), memory_k, memory_v, need_weights=False)
            per_head_mask = bool_causal.expand(B * heads, T, T)
            e, w_masked = self.plain(x, x, x, attn_mask=per_head_mask)
            out = a.sum() + b.pow(2).sum() + c.mean() + e.sum()
            return out, a, w_avg, b, w_heads, c, none is None, e, w_masked

    model = Variants()
    return model, lib.optim.SGD(model.parameters(), lr=0.1)


def _attention_batches(rng):
    out = []
    for batch in (3, 4, 3):
        padding = np.zeros((batch, 6), dtype=bool)
        padding[:, -1] = True
        padding[0, -2] = True
        out.append(
            (
                rng.standard_normal((6, batch, 8)).astype(np.float32),
                rng.standard_normal((batch, 7, 5)).astype(np.float32),
                rng.standard_normal((batch, 7, 9)).astype(np.float32),
                padding,
            )
        )
    return out


def test_multihead_attention_mask_bias_kv_and_weight_variants_match_torch():
    # key biases get zero gradients up to rounding (softmax ignores a shift per query)
    skip = ("plain.in_proj_bias", "biased.in_proj_bias", "cross.in_proj_bias")
    program = Program(
        _attention_variants,
        _train,
        _attention_batches,
        rtol=1e-3,
        atol=1e-4,
        modes=ALL_MODES,
        skip=skip,
    )
    _check(program)


# ------------------------------------------------------------------------------ checkpoints


def _checkpoint_bytes(lib, model, opt, scheduler, epoch):
    buffer = io.BytesIO()
    lib.save(
        {
            "epoch": epoch,
            "model_state_dict": model.state_dict(),
            "optimizer_state_dict": opt.state_dict(),
            "scheduler": scheduler.state_dict(),
        },
        buffer,
    )
    return buffer.getvalue()


def _resumable(lib):
    model = _net(lib)
    opt = lib.optim.Adam(model.parameters(), lr=1e-2)
    scheduler = lib.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    return model, opt, scheduler


def _steps(lib, model, opt, scheduler, batches):
    losses = []
    for x, y in batches:
        loss = lib.nn.functional.mse_loss(model(lib.tensor(x)), lib.tensor(y))
        opt.zero_grad()
        loss.backward()
        opt.step()
        scheduler.step()
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize("saver, loader", [("kiln", "torch"), ("torch", "kiln")])
def test_a_checkpoint_saved_by_one_library_resumes_training_in_the_other(saver, loader):
    """Train two steps, save model, optimizer and scheduler into bytes, resume in a fresh
    model of the other library (``weights_only=True``) for two more steps: the losses and
    weights are those of the uninterrupted run."""
    libs = {"kiln": kiln, "torch": torch}
    batches = _regression_batches(np.random.default_rng(1))
    torch.manual_seed(0)
    reference = _resumable(torch)
    weights = {k: v.numpy().copy() for k, v in reference[0].state_dict().items()}
    want = _steps(torch, *reference, batches)

    first = libs[saver]
    model, opt, scheduler = _resumable(first)
    model.load_state_dict({k: first.tensor(v) for k, v in weights.items()})
    got = _steps(first, model, opt, scheduler, batches[:2])
    data = _checkpoint_bytes(first, model, opt, scheduler, epoch=2)

    second = libs[loader]
    checkpoint = second.load(io.BytesIO(data), weights_only=True)
    model, opt, scheduler = _resumable(second)
    model.load_state_dict(checkpoint["model_state_dict"])
    opt.load_state_dict(checkpoint["optimizer_state_dict"])
    scheduler.load_state_dict(checkpoint["scheduler"])
    assert checkpoint["epoch"] == 2
    got += _steps(second, model, opt, scheduler, batches[2:])
    np.testing.assert_allclose(got, want, rtol=1e-5)
    for (name, value), theirs in zip(
        model.state_dict().items(), reference[0].state_dict().values()
    ):
        np.testing.assert_allclose(value.numpy(), theirs.numpy(), 1e-5, 1e-6, err_msg=name)


# ------------------------------------------------------------------------------ errors


def _inplace_after_save(lib):
    x = lib.ones(2, requires_grad=True)
    y = x.exp()
    y.add_(1)
    y.sum().backward()


def _no_grad_backward(lib):
    with lib.no_grad():
        y = lib.ones(2, requires_grad=True) * 2
    y.sum().backward()


def _mistakes(lib):
    """Mistakes people make beyond round 13's shape errors: wrong index dtypes, a non-scalar
    backward, a module fed the wrong dtype or rank, state dicts that do not fit, devices."""
    nn, F = lib.nn, lib.nn.functional
    x = lib.arange(6.0).view(2, 3)
    return {
        "float_index": lambda: x[lib.tensor([0.0, 1.0])],
        "embedding_float": lambda: nn.Embedding(4, 2)(lib.tensor([1.0, 2.0])),
        "linear_double": lambda: nn.Linear(3, 2)(x.double()),
        "matmul_int_float": lambda: lib.ones(2, 3, dtype=lib.long) @ lib.ones(3, 2),
        "backward_non_scalar": lambda: (lib.ones(2, requires_grad=True) * 2).backward(),
        "backward_no_grad": lambda: _no_grad_backward(lib),
        "inplace_saved": lambda: _inplace_after_save(lib),
        "int_requires_grad": lambda: lib.tensor([1, 2]).requires_grad_(),
        "mean_of_long": lambda: lib.tensor([1, 2]).mean(),
        "view_non_contiguous": lambda: x.t().view(6),
        "squeeze_dim": lambda: x.squeeze(3),
        "permute_dims": lambda: x.permute(0),
        "expand": lambda: lib.ones(2, 3).expand(4, 2),
        "expand_leading": lambda: lib.ones(2, 3).expand(-1, 2, 3),
        "conv_rank": lambda: nn.Conv2d(1, 2, 3)(lib.ones(5, 5)),
        "lstm_input_size": lambda: nn.LSTM(4, 3)(lib.ones(2, 1, 5)),
        "nll_target_shape": lambda: F.nll_loss(lib.ones(3, 4), lib.tensor([0, 1])),
        "one_hot_negative": lambda: F.one_hot(lib.tensor([-1, 0])),
        "load_state_dict_shape": lambda: nn.Linear(3, 2).load_state_dict(
            nn.Linear(4, 2).state_dict()
        ),
        "load_state_dict_keys": lambda: nn.Linear(3, 2).load_state_dict({"weight": lib.ones(2, 3)}),
        "optimizer_non_leaf": lambda: lib.optim.SGD([lib.ones(2, requires_grad=True) * 2], lr=0.1),
        "where_shapes": lambda: lib.where(lib.ones(2, 3) > 0, lib.ones(4), 0.0),
        "softmax_dim": lambda: lib.ones(2, 3).softmax(dim=2),
        "cross_entropy_batch": lambda: F.cross_entropy(lib.ones(3, 4), lib.tensor([0, 1])),
        "mm_not_a_matrix": lambda: lib.mm(lib.ones(2, 2, 2), x),
        "mm_mat2_not_a_matrix": lambda: lib.mm(x, lib.ones(3)),
        "bmm_not_3d": lambda: lib.bmm(x, x.t()),
        "bmm_batch2_not_3d": lambda: lib.bmm(lib.ones(2, 3, 4), lib.ones(4, 2)),
        "argmax_of_empty": lambda: lib.tensor([]).argmax(),
        "max_of_empty": lambda: lib.tensor([]).max(),
        "grad_of_another_size": lambda: setattr(
            lib.ones(2, requires_grad=True), "grad", lib.ones(3)
        ),
        "grad_of_unused_input": lambda: lib.autograd.grad(
            (lib.ones(2, requires_grad=True) * 2).sum(), [lib.ones(2, requires_grad=True)]
        ),
        "grad_of_input_without_grad": lambda: lib.autograd.grad(
            (lib.ones(2, requires_grad=True) * 2).sum(), [lib.ones(2)]
        ),
        "clamp_without_bounds": lambda: x.clamp(),
        "normal_negative_std": lambda: lib.normal(0.0, -1.0, (2,)),
        "normal_tensor_mean_negative_std": lambda: lib.normal(lib.zeros(2), -0.5),
        "clip_grad_norm_type": lambda: nn.utils.clip_grad_norm_(
            nn.Linear(2, 2).parameters(), 1.0, norm_type="x"
        ),
        "vector_norm_ord_string": lambda: lib.linalg.vector_norm(x, ord="fro"),
    }


@pytest.mark.parametrize("name", list(_mistakes(torch)))
def test_more_common_mistakes_raise_torchs_exception_and_message(name):
    got, want = first_lines_of_errors(_mistakes(kiln)[name], _mistakes(torch)[name])
    # kiln may say more after PyTorch's words (the shape of a non-scalar backward's output)
    assert got == want or got.startswith(want + " (")


def _compiled_mistakes(lib):
    """Shape mistakes inside a compiled function: the error is eager's (its type or a
    subclass, its message), raised when the call is captured."""
    return {
        "matmul": lambda a, b: a @ b,
        "cat": lambda a, b: lib.cat([a, b], dim=0),
        "view": lambda a, b: a.t().view(-1) + b.sum(),
        "expand": lambda a, b: a.expand(4, 2) + b.sum(),
        "linear": lambda a, b: lib.nn.functional.linear(a, b),
    }


@pytest.mark.parametrize("name", list(_compiled_mistakes(torch)))
def test_mistakes_inside_a_compiled_function_raise_eagers_error(name):
    a, b = np.ones((2, 3), np.float32), np.ones((4, 5), np.float32)
    with pytest.raises(Exception) as theirs:
        _compiled_mistakes(torch)[name](torch.tensor(a), torch.tensor(b))
    kiln.dynamo.reset()
    compiled = kiln.compile(_compiled_mistakes(kiln)[name])
    with pytest.raises(Exception) as ours:
        compiled(kiln.tensor(a), kiln.tensor(b))
    assert type(theirs.value).__name__ in [k.__name__ for k in type(ours.value).__mro__]
    want = str(theirs.value).split("\n")[0].replace("torch.", "")
    assert want in str(ours.value).replace("kiln.", "")
