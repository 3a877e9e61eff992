"""Compiled training steps (``kiln.compile(..., backend="aot_eager"|"inductor")``) equal eager ones.

Each test builds one model twice from the same seed, trains one eagerly and one compiled with
the same batches and AdamW, and after every step compares the loss, every gradient, every
updated parameter and every buffer (BatchNorm running stats are inputs the compiled graph
mutates). Both partitioners run every case. Random ops are seeded identically before each step,
so compiled dropout must draw exactly eager's mask.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

import kiln
from tests.models.models import GPTConfig, models_for

nn = kiln.nn
F = kiln.nn.functional
M = models_for(kiln)

PARTITIONERS = ["default", "min_cut"]
# inductor's kernels sum in other orders (vector lanes, Welford): float32-level differences
TOLERANCES = {"aot_eager": (1e-5, 1e-6), "inductor": (2e-4, 2e-5)}
_current = {"backend": "aot_eager"}


@pytest.fixture(params=sorted(TOLERANCES), autouse=True)
def backend(request):
    _current["backend"] = request.param
    yield request.param
    _current["backend"] = "aot_eager"


def _close(got, expected, what: str) -> None:
    rtol, atol = TOLERANCES[_current["backend"]]
    np.testing.assert_allclose(
        got.detach().float().numpy(), expected.detach().float().numpy(), rtol=rtol, atol=atol,
        err_msg=what,
    )  # fmt: skip


def _through_compiled_region(t) -> bool:
    """Whether ``t``'s autograd history passes through a compiled forward/backward pair."""
    stack, seen = [t.grad_fn], set()
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        if node.name() == "CompiledFunctionBackward":
            return True
        stack.extend(n for n, _ in node.next_functions)
    return False


def _optimizer(model):
    """SGD with momentum, not Adam: Adam's first step is lr * sign(grad), which turns rounding
    noise in a gradient that is zero in exact arithmetic (a bias under log_softmax, the key bias
    of attention) into a full-size difference. Neither backend is bit-exact: eager runs fused
    numpy kernels (softmax, layer_norm backward), compiled graphs their decompositions."""
    return kiln.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)


def _step(model, run, batch, loss_fn, opt):
    opt.zero_grad()
    loss = loss_fn(run, *batch)
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    opt.step()
    return loss, grads


def _assert_steps_match(make, batches, loss_fn, partitioner, steps=2, mode="train"):
    kiln.manual_seed(0)
    eager_model = make()
    compiled_model = copy.deepcopy(eager_model)
    eager_model.train(mode == "train")
    compiled_model.train(mode == "train")
    compiled = kiln.compile(
        compiled_model, backend=_current["backend"], options={"partitioner": partitioner}
    )
    eager_opt = _optimizer(eager_model)
    compiled_opt = _optimizer(compiled_model)
    for step in range(steps):
        batch = batches[step % len(batches)]
        kiln.manual_seed(100 + step)
        e_loss, e_grads = _step(eager_model, eager_model, batch, loss_fn, eager_opt)
        kiln.manual_seed(100 + step)
        c_loss, c_grads = _step(compiled_model, compiled, batch, loss_fn, compiled_opt)
        assert _through_compiled_region(c_loss)
        _close(c_loss, e_loss, f"loss at step {step}")
        assert c_grads.keys() == e_grads.keys()
        for name in e_grads:
            _close(c_grads[name], e_grads[name], f"grad of {name} at step {step}")
        for (name, p), (_, q) in zip(
            eager_model.named_parameters(), compiled_model.named_parameters()
        ):
            _close(q, p, f"{name} after step {step}")
        for (name, b), (_, c) in zip(eager_model.named_buffers(), compiled_model.named_buffers()):
            assert c.requires_grad == b.requires_grad, name
            _close(c, b, f"buffer {name} after step {step}")
    return eager_model, compiled_model


def _randn(*shape):
    return kiln.randn(*shape)


def _mse(run, x, y):
    return F.mse_loss(run(x), y)


def _cross_entropy(run, x, y):
    return F.cross_entropy(run(x), y)


def _weighted_sum(run, x, w):
    return (run(x) * w).sum()


# ------------------------------------------------------------------------------ models


@pytest.mark.parametrize("partitioner", PARTITIONERS)
def test_mlp_training_step_matches_eager(partitioner):
    batches = [(_randn(16, 8), _randn(16, 4)) for _ in range(2)]
    _assert_steps_match(M.MLP, batches, _mse, partitioner)


@pytest.mark.parametrize("partitioner", PARTITIONERS)
@pytest.mark.parametrize(
    "cfg", [GPTConfig(), GPTConfig(tie_weights=False, attention="sdpa")], ids=["tied", "sdpa"]
)
def test_tiny_gpt_training_step_matches_eager(partitioner, cfg):
    batches = [(kiln.randint(0, 32, (4, 16)), kiln.randint(0, 32, (4, 16))) for _ in range(2)]
    _assert_steps_match(lambda: M.TinyGPT(cfg), batches, lambda run, i, t: run(i, t)[1],
                        partitioner)  # fmt: skip


@pytest.mark.parametrize("partitioner", PARTITIONERS)
def test_cnn_with_batchnorm_training_steps_update_running_stats_like_eager(partitioner):
    batches = [(_randn(4, 3, 8, 8), kiln.randint(0, 5, (4,))) for _ in range(3)]
    eager, compiled = _assert_steps_match(M.SmallCNN, batches, _cross_entropy, partitioner, 3)
    bn = compiled.features[1]
    assert int(bn.num_batches_tracked) == 3
    assert not np.allclose(bn.running_mean.numpy(), 0.0)


@pytest.mark.parametrize("partitioner", PARTITIONERS)
def test_cnn_with_batchnorm_in_eval_mode_uses_and_keeps_running_stats(partitioner):
    batches = [(_randn(4, 3, 8, 8), kiln.randint(0, 5, (4,))) for _ in range(2)]

    def trained_cnn():
        model = M.SmallCNN()
        with kiln.no_grad():  # non-trivial running stats for eval mode to read
            for x, _ in batches:
                model(x * 3 + 1)
        return model

    eager, compiled = _assert_steps_match(
        trained_cnn, batches, _cross_entropy, partitioner, mode="eval"
    )
    bn = compiled.features[1]
    assert int(bn.num_batches_tracked) == 2  # eval steps read the stats, never update them


# ------------------------------------------------------------------------------ single ops


class _Head(nn.Module):
    """A linear layer followed by the op under test (so the op's input requires grad)."""

    def __init__(self, op, features: int = 8):
        super().__init__()
        self.fc = nn.Linear(features, features)
        self.op = op

    def forward(self, x):
        return self.op(self.fc(x))


class _Classifier(nn.Module):
    def __init__(self, **ce_kwargs):
        super().__init__()
        self.fc = nn.Linear(8, 5)
        self.ce_kwargs = ce_kwargs

    def forward(self, x, y):
        return F.cross_entropy(self.fc(x), y, **self.ce_kwargs)


class _Embedder(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 8, padding_idx=0)
        self.fc = nn.Linear(8, 3)

    def forward(self, idx):
        return self.fc(self.emb(idx))


@pytest.mark.parametrize("partitioner", PARTITIONERS)
@pytest.mark.parametrize(
    "make",
    [
        lambda: _Head(nn.LayerNorm(8)),
        lambda: _Head(lambda h: F.softmax(h, dim=-1)),
        lambda: _Head(lambda h: F.log_softmax(h, dim=0)),
    ],
    ids=["layer_norm", "softmax", "log_softmax"],
)
def test_single_op_training_step_matches_eager(make, partitioner):
    batches = [(_randn(6, 8), _randn(6, 8)) for _ in range(2)]
    _assert_steps_match(make, batches, _weighted_sum, partitioner)


@pytest.mark.parametrize("partitioner", PARTITIONERS)
@pytest.mark.parametrize("ce_kwargs", [{}, {"label_smoothing": 0.1}, {"ignore_index": 2}], ids=str)
def test_cross_entropy_training_step_matches_eager(partitioner, ce_kwargs):
    batches = [(_randn(7, 8), kiln.randint(0, 5, (7,))) for _ in range(2)]
    _assert_steps_match(lambda: _Classifier(**ce_kwargs), batches, lambda run, x, y: run(x, y),
                        partitioner)  # fmt: skip


@pytest.mark.parametrize("partitioner", PARTITIONERS)
def test_embedding_training_step_matches_eager(partitioner):
    idx = kiln.tensor([[1, 0, 3, 3], [9, 2, 0, 1]])
    batches = [(idx, _randn(2, 4, 3))]
    _assert_steps_match(_Embedder, batches, _weighted_sum, partitioner)


@pytest.mark.parametrize("partitioner", PARTITIONERS)
def test_dropout_with_the_same_seed_matches_eager(partitioner):
    batches = [(_randn(32, 8), _randn(32, 8)) for _ in range(2)]
    eager, compiled = _assert_steps_match(
        lambda: _Head(nn.Dropout(0.5)), batches, _weighted_sum, partitioner, steps=3
    )


def test_dropout_draws_a_new_mask_each_call_and_none_in_eval_mode():
    model = _Head(nn.Dropout(0.5), features=64)
    compiled = kiln.compile(model, backend="aot_eager")
    x = _randn(4, 64)
    first, second = compiled(x), compiled(x)
    assert not np.array_equal(first.detach().numpy() == 0, second.detach().numpy() == 0)
    model.eval()
    np.testing.assert_allclose(compiled(x).detach().numpy(), model.fc(x).detach().numpy())
