"""Elementwise results over permuted and expanded operands are laid out as PyTorch's
TensorIterator lays them out, in eager kernels (numpy's own rule places a broadcast dim
elsewhere) and in the metas compiled graphs are traced with, so both agree with each other and
a compiled graph's views of such a result see the strides eager code makes."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import kiln
from tests.oracle import needs_torch, torch


def _operand(lib, shape, order, expanded):
    """A tensor of ``shape`` stored with its dims in ``order`` (outermost first) and the dims
    in ``expanded`` broadcast from size 1."""
    stored = [1 if d in expanded else shape[d] for d in order]
    t = lib.arange(float(np.prod(stored))).reshape(stored)
    t = t.permute(*[order.index(d) for d in range(len(shape))])
    return t.expand(*shape)


def _cases():
    """Deterministic draws of two or three operands (some of them lower-rank) of one shape."""
    rng = np.random.default_rng(7)
    cases = []
    while len(cases) < 60:
        rank = int(rng.integers(2, 5))
        shape = tuple(int(s) for s in rng.choice([1, 2, 3, 4], rank))
        operands = []
        for _ in range(int(rng.integers(2, 4))):
            order = [int(d) for d in rng.permutation(rank)]
            expanded = frozenset(int(d) for d in range(rank) if rng.random() < 0.3)
            operands.append((order, expanded, bool(rng.random() < 0.3)))
        cases.append((shape, tuple(operands)))
    return cases


def _build(lib, shape, operands):
    built = []
    for order, expanded, drop_first in operands:
        t = _operand(lib, shape, order, expanded)
        built.append(t[0] if drop_first and len(shape) > 2 else t)
    return built


_OPS = {
    "add": lambda lib, ts: ts[0] + ts[1],
    "mul_scalar": lambda lib, ts: ts[0] * 2,
    "exp": lambda lib, ts: ts[0].exp(),
    "gt": lambda lib, ts: ts[0] > 1,
    "where": lambda lib, ts: lib.where(ts[1] > 1, ts[0], ts[1]),
    "where_scalar": lambda lib, ts: lib.where(ts[1] > 1, ts[0], 0.0),
    "floor_divide_scalar": lambda lib, ts: ts[0] // 1.5,
    "div_trunc": lambda lib, ts: lib.div(ts[0], ts[1], rounding_mode="trunc"),
    # unreduced losses: one iterator over (input, target); huber's result is empty_like(input)
    "mse_loss": lambda lib, ts: _loss(lib, "mse_loss", ts),
    "l1_loss": lambda lib, ts: _loss(lib, "l1_loss", ts),
    "smooth_l1_loss": lambda lib, ts: _loss(lib, "smooth_l1_loss", ts),
    "huber_loss": lambda lib, ts: _loss(lib, "huber_loss", ts),
    # PyTorch's own layouts: empty_like(input) for BCE, (1 - target).mul_(input)... for BCE with
    # logits, neg_out(input).mul_(target) for the soft margin
    "binary_cross_entropy": lambda lib, ts: _loss(
        lib, "binary_cross_entropy", [(ts[0] + 1).reciprocal(), (ts[1] + 2).reciprocal()]
    ),
    "binary_cross_entropy_with_logits": lambda lib, ts: _loss(
        lib, "binary_cross_entropy_with_logits", ts
    ),
    "soft_margin_loss": lambda lib, ts: _loss(lib, "soft_margin_loss", ts),
}


def _loss(lib, name, ts):
    loss_input, target = lib.broadcast_tensors(ts[0], ts[1])
    return getattr(lib.nn.functional, name)(loss_input, target, reduction="none")


def _layout(t) -> tuple:
    """Strides of the dims longer than one (a size-1 dim's stride is never stepped over)."""
    return tuple((d, s) for d, (n, s) in enumerate(zip(t.shape, t.stride())) if n > 1)


@needs_torch
@pytest.mark.parametrize("name", sorted(_OPS))
def test_eager_results_have_torchs_strides(name):
    op = _OPS[name]
    for shape, operands in _cases():
        got = op(kiln, _build(kiln, shape, operands))
        expected = op(torch, _build(torch, shape, operands))
        assert _layout(got) == _layout(expected), (shape, operands)
        # (the soft margin's exp(-x * t) reaches float32's denormals)
        np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-6, atol=1e-37)


@pytest.mark.parametrize("name", sorted(_OPS))
def test_metas_lay_results_out_as_eager_kernels_do(name):
    op = _OPS[name]
    for shape, operands in _cases():
        eager = op(kiln, _build(kiln, shape, operands))
        traced = _meta_result(op, shape, operands)
        assert _layout(traced) == _layout(eager), (shape, operands)


def _meta_result(op, shape, operands):
    """The op's result as a compiled graph's trace sees it: on meta tensors of the same
    strides."""
    built = _build(kiln, shape, operands)
    metas = [kiln.empty_strided(tuple(t.shape), tuple(t.stride()), device="meta") for t in built]
    return op(kiln, metas)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_a_masked_expanded_gradient_views_in_a_compiled_backward(backend):
    """The backward of ``where(mask, x.unsqueeze(-1).expand(...), 0)`` summed over the new dim,
    reshaped: the gradient's where() result is viewed by the graph, so its eager strides must
    be the meta's (adaptive average pooling's decomposition failed so under aot_eager)."""

    def fn(x, mask):
        picked = x.unsqueeze(-1).expand(*x.shape, 4)
        return kiln.where(mask, picked, 0).reshape(*x.shape[:-1], -1).sum(-1)

    x = kiln.randn(2, 3, 3, 2).to(memory_format=kiln.channels_last).requires_grad_()
    mask = kiln.tensor(list(itertools.islice(itertools.cycle([True, False, True]), 8)))
    mask = mask.reshape(1, 1, 1, 2, 4)
    compiled = kiln.compile(fn, backend=backend)
    got = compiled(x, mask)
    (grad,) = kiln.autograd.grad(got, x, kiln.ones_like(got))
    expected = fn(x, mask)
    (expected_grad,) = kiln.autograd.grad(expected, x, kiln.ones_like(expected))
    np.testing.assert_allclose(got.detach().numpy(), expected.detach().numpy(), rtol=1e-6)
    np.testing.assert_allclose(grad.numpy(), expected_grad.numpy(), rtol=1e-6)


@needs_torch
@pytest.mark.parametrize(
    "op",
    [
        lambda lib, x: 2.0**x,
        lambda lib, x: lib.pow(3, x.long()),
        lambda lib, x: lib.nn.functional.pad(x[0], (1, 2)),
        lambda lib, x: lib.nn.functional.pad(x[0], (1, 2, 0, 1), value=-1.0),
    ],
    ids=["number_pow", "number_pow_int", "pad_2d", "pad_2d_both_dims"],
)
@pytest.mark.parametrize("backend", [None, "aot_eager", "inductor"])
def test_results_torch_lays_out_row_major_over_a_transposed_input(op, backend):
    """Not iterator results: a number's power and a constant pad of a 2-d tensor are row-major
    in PyTorch whatever the input's order (numpy's kept a transposed input's)."""
    fn = op if backend is None else kiln.compile(op, backend=backend)
    x = kiln.arange(12.0).reshape(2, 3, 2).transpose(1, 2)
    expected = op(torch, torch.arange(12.0).reshape(2, 3, 2).transpose(1, 2))
    got = fn(kiln, x)
    assert _layout(got) == _layout(expected)
    np.testing.assert_allclose(got.numpy(), expected.numpy())


_PERMUTED_LOSSES = ["binary_cross_entropy", "binary_cross_entropy_with_logits", "soft_margin_loss"]


@pytest.mark.parametrize("name", _PERMUTED_LOSSES)
@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compiled_unreduced_losses_lay_out_as_eager(name, backend):
    """Over an input and a target stored in different dim orders, a compiled unreduced loss
    has eager's strides, values and input gradient (the three losses lay out by their own
    rules, not one iterator over both operands)."""

    def fn(x, t):
        return getattr(kiln.nn.functional, name)(x, t, reduction="none")

    x = kiln.rand(4, 2, 3).permute(1, 2, 0).requires_grad_()
    t = kiln.rand(2, 4, 3).permute(0, 2, 1)
    if name != "binary_cross_entropy":
        x = (x * 4 - 2).detach().requires_grad_()
    expected = fn(x, t)
    got = kiln.compile(fn, backend=backend)(x, t)
    assert got.stride() == expected.stride()
    np.testing.assert_allclose(got.detach().numpy(), expected.detach().numpy(), rtol=1e-5)
    (grad,) = kiln.autograd.grad(got.sum(), x)
    (expected_grad,) = kiln.autograd.grad(expected.sum(), x)
    np.testing.assert_allclose(grad.numpy(), expected_grad.numpy(), rtol=1e-5, atol=1e-6)


@needs_torch
@pytest.mark.parametrize(
    "name, build",
    [
        ("gelu", lambda lib: lib.arange(4.0).reshape(1, 4).expand(3, 4)),
        ("silu", lambda lib: lib.arange(3.0).reshape(3, 1).expand(3, 4)),
        ("logsigmoid", lambda lib: lib.arange(12.0).reshape(4, 3).t()),
        ("logsigmoid", lambda lib: lib.arange(12.0).reshape(4, 3).t().half()),
    ],
)
@pytest.mark.parametrize("backend", [None, "aot_eager", "inductor"])
def test_activations_lay_out_as_torch(name, build, backend):
    """gelu and silu over an expanded input are row-major in PyTorch (a stride-0 dim tells
    TensorIterator nothing; numpy put it inside); log_sigmoid's result is always row-major."""
    fn = getattr(kiln.nn.functional, name)
    if backend is not None:
        fn = kiln.compile(fn, backend=backend)
    expected = getattr(torch.nn.functional, name)(build(torch))
    got = fn(build(kiln))
    assert _layout(got) == _layout(expected)
    np.testing.assert_allclose(got.float().numpy(), expected.float().numpy(), rtol=1e-3)


@needs_torch
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_recorded_half_log_softmax_is_row_major(dtype):
    """log_softmax of a transposed 16-bit input that requires grad (the recording kernel's
    path) is row-major, as PyTorch's and as the plain kernel's."""
    results = []
    for lib in (torch, kiln):
        x = lib.arange(6.0).reshape(2, 3).t().to(getattr(lib, dtype)).requires_grad_()
        results.append(lib.nn.functional.log_softmax(x, dim=-1))
    assert results[1].stride() == results[0].stride() == (2, 1)
    # (PyTorch's bfloat16 kernel rounds its row total to bfloat16 first: a few units off)
    rtol = 1e-2 if dtype == "float16" else 6e-2
    np.testing.assert_allclose(
        results[1].detach().float().numpy(), results[0].detach().float().numpy(), rtol=rtol
    )
