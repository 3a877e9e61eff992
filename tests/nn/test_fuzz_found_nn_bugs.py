"""Model-code ops the fuzzer's nn rules (tests/fuzz/nn_rules.py) found disagreeing with PyTorch:
NaN and inf kept to their own windows in adaptive average pooling, 0-d activations' gradients,
and the argument checks PyTorch makes (a target that requires grad where no derivative exists,
a group of one value, probabilities outside [0, 1] or NaN)."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from tests.oracle import needs_torch, torch


def _pair(values, requires_grad=False):
    a = np.asarray(values, dtype=np.float32)
    ours = kiln.tensor(a, requires_grad=requires_grad)
    theirs = torch.tensor(a, requires_grad=requires_grad)
    return ours, theirs


@needs_torch
@pytest.mark.parametrize("output_size", [(2, 2), (3, 5), (2, 3), (1, 3)])
def test_adaptive_avg_pool_keeps_nan_and_inf_in_their_windows(output_size):
    values = np.arange(24, dtype=np.float32).reshape(1, 4, 6)
    values[0, 0, 1] = np.nan
    values[0, 3, 5] = np.inf
    values[0, 2, 0] = -np.inf
    ours, theirs = _pair(values, requires_grad=True)
    got = kiln.nn.functional.adaptive_avg_pool2d(ours, output_size)
    expected = torch.nn.functional.adaptive_avg_pool2d(theirs, output_size)
    # before: a product with an averaging matrix made every output NaN (0 * NaN, 0 * inf)
    np.testing.assert_array_equal(got.detach().numpy(), expected.detach().numpy())
    upstream = np.random.default_rng(0).standard_normal(tuple(got.shape)).astype(np.float32)
    got.backward(kiln.tensor(upstream))
    expected.backward(torch.tensor(upstream))
    np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), rtol=1e-6)


@needs_torch
@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_adaptive_avg_pool_of_uneven_windows_compiles_with_its_gradient(backend):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 3, 6, 7)).astype(np.float32)
    ours = kiln.tensor(x).to(memory_format=kiln.channels_last).requires_grad_()
    theirs = torch.tensor(x).to(memory_format=torch.channels_last).requires_grad_()
    compiled = kiln.compile(lambda t: kiln.nn.functional.adaptive_avg_pool2d(t, (3, 2)),
                            backend=backend)  # fmt: skip
    got = compiled(ours)
    expected = torch.nn.functional.adaptive_avg_pool2d(theirs, (3, 2))
    np.testing.assert_allclose(got.detach().numpy(), expected.detach().numpy(), rtol=1e-5)
    upstream = rng.standard_normal(tuple(got.shape)).astype(np.float32)
    # the gradient laid out as the result (channels-last): the backward graph's views of the
    # where() that masks the windows saw eager strides other than the meta's
    (grad,) = kiln.autograd.grad(got, ours, kiln.empty_like(got).copy_(kiln.tensor(upstream)))
    (expected_grad,) = torch.autograd.grad(expected, theirs, torch.tensor(upstream))
    np.testing.assert_allclose(grad.numpy(), expected_grad.numpy(), rtol=1e-5, atol=1e-6)


@needs_torch
@pytest.mark.parametrize("slope", [0.01, 0.2, 2.0])
@pytest.mark.parametrize("value", [2.0, -3.0, 0.0])
def test_leaky_relu_of_a_0d_tensor_has_a_gradient(slope, value):
    ours, theirs = _pair(value, requires_grad=True)
    kiln.nn.functional.leaky_relu(ours, slope).backward()
    torch.nn.functional.leaky_relu(theirs, slope).backward()
    assert ours.grad.shape == () and ours.grad.item() == theirs.grad.item()


def _raises_like_torch(build):
    with pytest.raises(Exception) as theirs:
        build(torch)
    with pytest.raises(type(theirs.value)) as ours:
        build(kiln)
    assert str(ours.value) == str(theirs.value)


@needs_torch
def test_soft_margin_loss_refuses_a_target_that_requires_grad():
    _raises_like_torch(
        lambda lib: lib.nn.functional.soft_margin_loss(lib.ones(3), lib.ones(3, requires_grad=True))
    )
    with kiln.no_grad():  # without grad mode there is nothing to differentiate
        kiln.nn.functional.soft_margin_loss(kiln.ones(3), kiln.ones(3, requires_grad=True))


@needs_torch
@pytest.mark.parametrize("shape, groups", [((1, 1), 1), ((1, 2, 1), 2), ((1, 3, 1, 1), 3)])
def test_group_norm_refuses_groups_of_one_value(shape, groups):
    _raises_like_torch(lambda lib: lib.nn.functional.group_norm(lib.ones(shape), groups))


@needs_torch
def test_group_norm_of_two_values_per_group_still_runs():
    ours, theirs = _pair(np.arange(4.0).reshape(1, 2, 2))
    np.testing.assert_allclose(
        kiln.nn.functional.group_norm(ours, 2).numpy(),
        torch.nn.functional.group_norm(theirs, 2).numpy(),
        rtol=1e-5,
    )


@needs_torch
@pytest.mark.parametrize("which", ["input", "target"])
@pytest.mark.parametrize("bad", [float("nan"), 1.5, -0.25])
def test_binary_cross_entropy_checks_both_operands_are_probabilities(which, bad):
    def build(lib):
        good = lib.tensor([0.25, 0.5, 0.75])
        wrong = lib.tensor([0.25, bad, 0.75])
        args = (wrong, good) if which == "input" else (good, wrong)
        return lib.nn.functional.binary_cross_entropy(*args)

    _raises_like_torch(build)


@needs_torch
@pytest.mark.parametrize(
    "call",
    [
        lambda lib, w: lib.nn.functional.binary_cross_entropy_with_logits(
            lib.zeros(3), lib.ones(3), weight=w
        ),
        lambda lib, w: lib.nn.functional.binary_cross_entropy_with_logits(
            lib.zeros(3), lib.ones(3), pos_weight=w
        ),
        lambda lib, w: lib.nn.functional.binary_cross_entropy(
            lib.full((3,), 0.5), lib.ones(3), weight=w
        ),
        lambda lib, w: lib.nn.functional.cross_entropy(
            lib.zeros(2, 3), lib.tensor([0, 2]), weight=w
        ),
        lambda lib, w: lib.nn.functional.nll_loss(lib.zeros(2, 3, 2), lib.zeros(2, 2).long(), w),
    ],
    ids=["bce_logits_weight", "bce_logits_pos_weight", "bce_weight", "ce_weight", "nll2d_weight"],
)
def test_loss_weights_that_require_grad_are_refused_as_in_torch(call):
    _raises_like_torch(lambda lib: call(lib, lib.ones(3, requires_grad=True)))
    with kiln.no_grad():
        call(kiln, kiln.ones(3, requires_grad=True))


@needs_torch
@pytest.mark.parametrize("value", [float("inf"), float("nan"), 0.0, -2.0])
def test_cumprod_of_one_element_passes_the_gradient_through(value):
    ours, theirs = _pair([[value]], requires_grad=True)
    kiln.cumprod(ours, 0).backward(kiln.tensor([[-2.0]]))
    torch.cumprod(theirs, 0).backward(torch.tensor([[-2.0]]))
    np.testing.assert_array_equal(ours.grad.numpy(), theirs.grad.numpy())


@needs_torch
def test_embedding_of_a_zero_width_weight_has_an_empty_gradient():
    ours, theirs = _pair(np.zeros((2, 0)), requires_grad=True)
    kiln.nn.functional.embedding(kiln.tensor([[0, 0], [1, 1]]), ours).sum().backward()
    torch.nn.functional.embedding(torch.tensor([[0, 0], [1, 1]]), theirs).sum().backward()
    assert tuple(ours.grad.shape) == tuple(theirs.grad.shape) == (2, 0)


@needs_torch
def test_cumprod_along_a_dim_of_one_passes_the_gradient_through():
    values = np.array([[[np.inf, 0.0, np.nan], [2.0, -1.0, 3.0]]], dtype=np.float32)
    ours, theirs = _pair(values, requires_grad=True)
    upstream = np.full(values.shape, -2.0, dtype=np.float32)
    kiln.cumprod(ours, 0).backward(kiln.tensor(upstream))
    torch.cumprod(theirs, 0).backward(torch.tensor(upstream))
    np.testing.assert_array_equal(ours.grad.numpy(), theirs.grad.numpy())


@needs_torch
def test_binary_cross_entropy_target_gradient_is_unclamped_as_torchs():
    probabilities = [1.0, 0.0, 0.3, 0.999]
    grads = []
    for lib in (kiln, torch):
        target = lib.tensor([0.5, 0.2, 0.7, 0.1], requires_grad=True)
        lib.nn.functional.binary_cross_entropy(
            lib.tensor(probabilities), target, reduction="sum"
        ).backward()
        grads.append(target.grad.numpy())
    # -logit(p): infinite where p saturates (the clamped logs gave +-100)
    np.testing.assert_allclose(grads[0], grads[1], rtol=1e-6)


@needs_torch
@pytest.mark.parametrize(
    "values, upstream",
    [
        ([2.0, 0.0, 3.0], [1.0, np.inf, 1.0]),  # the sum before the zero skips terms past it
        ([0.0, 0.0, 2.0], [1.0, np.inf, 1.0]),  # the first zero's sum stops at the second
        ([0.0, 3.0, 0.0, 2.0], [1.0, 1.0, 1.0, -np.inf]),
        ([0.0, 3.0, 0.0, 2.0], [1.0, np.nan, 1.0, 1.0]),  # NaN before the second zero stays
    ],
)
def test_cumprod_gradient_leaves_out_terms_past_a_zero_as_torch(values, upstream):
    """An infinite upstream gradient meeting a product made zero by an earlier zero gave NaN
    (inf * 0) where PyTorch's sums leave those terms out (a fuzz case: cumprod, scatter_add,
    a reciprocal with its inf)."""
    ours, theirs = _pair(values, requires_grad=True)
    kiln.cumprod(ours, 0).backward(kiln.tensor(np.float32(upstream)))
    torch.cumprod(theirs, 0).backward(torch.tensor(np.float32(upstream)))
    np.testing.assert_array_equal(ours.grad.numpy(), theirs.grad.numpy())
    compiled = kiln.compile(lambda x: kiln.cumprod(x, 0))
    again = kiln.tensor(np.float32(values), requires_grad=True)
    compiled(again).backward(kiln.tensor(np.float32(upstream)))
    np.testing.assert_array_equal(again.grad.numpy(), theirs.grad.numpy())
