"""``kiln.nn.functional`` beyond the oracle samples: every decomposition against its eager kernel
(values and gradients), running statistics, dropout's masks, in-place paths, double backward and
the errors PyTorch raises."""

from __future__ import annotations

import contextlib
import warnings

import numpy as np
import pytest

import kiln
import kiln.nn.functional as F
from kiln.ops import OPS
from kiln.ops.nn import (
    conv,
    cross_entropy_rows,
    dropout,
    embedding,
    losses,
    normalization,
    softmax_linear,
)
from kiln.ops.shape import padding
from tests.ops import samples_conv, samples_loss, samples_nn
from tests.ops.opinfo import Sample
from tests.ops.test_oracle import _arrays, _build, _differentiable_outputs, _rng, _tensors
from tests.oracle import assert_close, needs_torch, torch

MODULES = {
    m.__name__
    for m in (
        softmax_linear,
        normalization,
        dropout,
        embedding,
        padding,
        losses,
        conv,
        cross_entropy_rows,
    )
}
KERNEL_OPS = sorted(
    (
        op
        for op in OPS.values()
        if op.kernel is not None
        and op.decomposition is not None
        and (op.kernel.__module__ in MODULES)
    ),
    key=lambda op: op.name,
)
MY_SAMPLES = samples_nn.SAMPLES + samples_loss.SAMPLES + samples_conv.SAMPLES


@contextlib.contextmanager
def decomposed():
    """Run this file's ops through their decompositions (kernel-less ops dispatch to them)."""
    saved = {op: op.kernel for op in KERNEL_OPS}
    try:
        for op in saved:
            op.kernel = None
        yield
    finally:
        for op, kernel in saved.items():
            op.kernel = kernel


def _run(sample: Sample, decompose: bool):
    arrays = _arrays(sample)
    args, leaves = _build(kiln, sample, arrays, grad=sample.grad)
    kiln.manual_seed(0)
    with decomposed() if decompose else contextlib.nullcontext(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        outs = _tensors(sample.call(kiln, args, sample.kwargs))
        diff = _differentiable_outputs(outs) if leaves else []
        grads = []
        if diff:
            rng = _rng(sample)
            cot = [
                kiln.tensor(rng.uniform(-1, 1, size=tuple(o.shape)), dtype=o.dtype) for o in diff
            ]
            grads = kiln.autograd.grad(diff, leaves, cot, allow_unused=True)
    return [o.detach() for o in outs], grads


def test_every_kernel_op_has_a_decomposition_and_samples():
    covered = {name for s in MY_SAMPLES for name in s.covered_ops()}
    assert len(KERNEL_OPS) >= 20
    missing = [op.name for op in KERNEL_OPS if op.name not in covered]
    assert missing == []


@pytest.mark.parametrize("sample", [pytest.param(s, id=s.label()) for s in MY_SAMPLES])
def test_decomposition_matches_kernel(sample: Sample):
    k_outs, k_grads = _run(sample, decompose=False)
    d_outs, d_grads = _run(sample, decompose=True)
    assert len(k_outs) == len(d_outs)
    for k, d in zip(k_outs, d_outs):
        assert k.dtype is d.dtype
        assert_close(d, k, rtol=1e-4 if k.dtype is not kiln.float16 else 1e-2, atol=1e-5)
    for kg, dg in zip(k_grads, d_grads):
        if kg is None or dg is None:
            assert kg is None or np.allclose(kg.numpy(), 0), "decomposition lost a gradient"
            assert dg is None or np.allclose(dg.numpy(), 0), "decomposition invented a gradient"
            continue
        assert_close(dg, kg, rtol=1e-4, atol=1e-5)


def test_dropout_decomposition_draws_the_same_mask():
    x = kiln.randn(4, 50, requires_grad=True)
    outs = []
    for ctx in (contextlib.nullcontext(), decomposed()):
        kiln.manual_seed(7)
        with ctx:
            y = F.dropout(x, 0.3)
            (g,) = kiln.autograd.grad(y, x, kiln.ones_like(y))
        outs.append((y.detach().numpy(), g.numpy()))
    np.testing.assert_allclose(outs[0][0], outs[1][0], rtol=1e-6)
    np.testing.assert_allclose(outs[0][1], outs[1][1], rtol=1e-6)


# ------------------------------------------------------------------------------ dropout


def test_dropout_is_reproducible_with_manual_seed():
    x = kiln.ones(1000)
    kiln.manual_seed(3)
    a = F.dropout(x, 0.4)
    kiln.manual_seed(3)
    b = F.dropout(x, 0.4)
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert not np.array_equal(a.numpy(), F.dropout(x, 0.4).numpy())


def test_dropout_keeps_one_minus_p_and_rescales():
    y = F.dropout(kiln.ones(20000), 0.25).numpy()
    kept = y != 0
    assert abs(kept.mean() - 0.75) < 0.02
    np.testing.assert_allclose(y[kept], 1 / 0.75, rtol=1e-6)


def test_dropout_gradient_reuses_the_forward_mask():
    x = kiln.randn(64, 32, requires_grad=True)
    y = F.dropout(x, 0.5)
    y.sum().backward()
    mask = y.detach().numpy() != 0
    np.testing.assert_allclose(x.grad.numpy(), mask * 2.0, rtol=1e-6)


def test_dropout_eval_returns_input_and_p_one_zeroes():
    x = kiln.randn(3, 4)
    assert F.dropout(x, 0.5, training=False) is x
    assert np.all(F.dropout(x, 1.0).numpy() == 0)


def test_dropout_inplace_writes_into_input():
    x = kiln.ones(100)
    out = F.dropout(x, 0.5, inplace=True)
    assert out is x
    assert set(np.unique(x.numpy())) <= {0.0, 2.0}


@pytest.mark.parametrize("p", [-0.1, 1.5])
def test_dropout_rejects_bad_probability(p):
    with pytest.raises(ValueError, match="dropout probability"):
        F.dropout(kiln.ones(3), p)


def test_dropout2d_drops_whole_channels():
    y = F.dropout2d(kiln.ones(8, 16, 3, 3), 0.5).numpy()
    per_channel = y.reshape(8, 16, -1)
    assert np.all(per_channel.min(-1) == per_channel.max(-1))


def test_alpha_dropout_keeps_mean_and_variance():
    x = kiln.randn(200000)
    y = F.alpha_dropout(x, 0.2, training=True).numpy()
    assert abs(y.mean()) < 0.02 and abs(y.std() - 1) < 0.02


def test_sdpa_dropout_is_seeded():
    q, k, v = kiln.randn(2, 4, 8), kiln.randn(2, 6, 8), kiln.randn(2, 6, 8)
    kiln.manual_seed(1)
    a = F.scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    kiln.manual_seed(1)
    b = F.scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert not np.allclose(a.numpy(), F.scaled_dot_product_attention(q, k, v).numpy())


# ------------------------------------------------------------------------------ norms, embedding


@needs_torch
@pytest.mark.parametrize("momentum", [0.1, 0.5])
def test_batch_norm_updates_running_stats_like_torch(momentum):
    x = np.random.randn(6, 3, 4).astype(np.float32)
    k_stats = [kiln.zeros(3), kiln.ones(3)]
    t_stats = [torch.zeros(3), torch.ones(3)]
    for _ in range(3):
        F.batch_norm(kiln.tensor(x), *k_stats, training=True, momentum=momentum)
        torch.nn.functional.batch_norm(torch.tensor(x), *t_stats, training=True, momentum=momentum)
    assert_close(k_stats, t_stats)


def test_batch_norm_needs_more_than_one_value_per_channel():
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        F.batch_norm(kiln.randn(1, 3), None, None, training=True)


def test_batch_norm_eval_leaves_running_stats_alone():
    mean, var = kiln.zeros(3), kiln.ones(3)
    F.batch_norm(kiln.randn(4, 3), mean, var, training=False)
    assert np.all(mean.numpy() == 0) and np.all(var.numpy() == 1)


def test_batch_norm_output_may_be_modified_in_place():
    x = kiln.randn(4, 3, requires_grad=True)
    y = F.batch_norm(x, kiln.zeros(3), kiln.ones(3), training=True)
    F.relu(y, inplace=True).sum().backward()
    assert x.grad is not None


@needs_torch
def test_embedding_max_norm_renormalizes_weight_in_place():
    w = np.random.uniform(-3, 3, size=(6, 4)).astype(np.float32)
    idx = np.array([[0, 2], [2, 5]])
    kw, tw = kiln.tensor(w), torch.tensor(w)
    F.embedding(kiln.tensor(idx), kw, max_norm=1.0)
    torch.nn.functional.embedding(torch.tensor(idx), tw, max_norm=1.0)
    assert_close(kw, tw)


def test_embedding_padding_row_gets_no_gradient():
    w = kiln.randn(5, 3, requires_grad=True)
    F.embedding(kiln.tensor([0, 1, 1, 4]), w, padding_idx=1).sum().backward()
    np.testing.assert_array_equal(w.grad.numpy()[1], 0)
    np.testing.assert_array_equal(w.grad.numpy()[0], 1)


@needs_torch
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("padding_idx", [None, 3, -2])
@pytest.mark.parametrize("index_dtype", ["int64", "int32"])
def test_embedding_weight_gradient_matches_torch(dtype, padding_idx, index_dtype):
    """The derivative's numpy form (zeros summed into in place, no recorded backward) and the
    op form (double backward) both give PyTorch's gradient: repeated rows summed, the padding
    row zero, a transposed incoming gradient read in its order."""
    rng = np.random.default_rng(7)
    w = rng.standard_normal((9, 5)).astype(dtype)
    idx = rng.integers(0, 9, (4, 6)).astype(index_dtype)
    idx[0, :3] = 7  # a repeated row
    idx[1, 0] = 9 + padding_idx if padding_idx is not None and padding_idx < 0 else 3
    g = rng.standard_normal((5, 6, 4)).astype(dtype)
    got, want = [], []
    for lib, out in ((kiln, got), (torch, want)):
        weight = lib.tensor(w, requires_grad=True)
        rows = lib.nn.functional.embedding(lib.tensor(idx), weight, padding_idx=padding_idx)
        leaf = lib.tensor(g, requires_grad=True)
        (first,) = lib.autograd.grad(rows, weight, leaf.permute(2, 1, 0), create_graph=True)
        (second,) = lib.autograd.grad((first * first).sum(), leaf)
        out.extend([first.detach(), second])
        rows = lib.nn.functional.embedding(lib.tensor(idx), weight, padding_idx=padding_idx)
        rows.backward(lib.tensor(g).permute(2, 1, 0))  # not contiguous
        out.append(weight.grad)
    for a, b in zip(got, want):
        assert_close(a, b)
        assert a.dtype == getattr(kiln, dtype)


def test_embedding_rejects_out_of_range_and_float_indices():
    w = kiln.randn(5, 3)
    with pytest.raises(IndexError):
        F.embedding(kiln.tensor([5]), w)
    with pytest.raises(RuntimeError, match="indices"):
        F.embedding(kiln.tensor([1.0]), w)


def test_layer_norm_rejects_mismatched_shape():
    with pytest.raises(RuntimeError, match="normalized_shape"):
        F.layer_norm(kiln.randn(2, 3), (4,))


def test_group_norm_rejects_indivisible_groups():
    with pytest.raises(RuntimeError, match="divisible by num_groups"):
        F.group_norm(kiln.randn(2, 6, 3), 4)


def test_softmax_implicit_dim_warns():
    with pytest.warns(UserWarning, match="Implicit dimension"):
        F.softmax(kiln.randn(2, 3))


def test_softmax_of_integers_is_not_implemented():
    with pytest.raises(NotImplementedError):
        F.softmax(kiln.tensor([1, 2]), 0)


# ------------------------------------------------------------------------------ losses


def test_nll_loss_target_out_of_bounds_is_index_error():
    with pytest.raises(IndexError, match="Target 5 is out of bounds"):
        F.nll_loss(kiln.randn(3, 4), kiln.tensor([0, 1, 5]))


def test_nll_loss_batch_mismatch_is_value_error():
    with pytest.raises(ValueError, match="batch_size"):
        F.cross_entropy(kiln.randn(3, 4), kiln.tensor([0, 1]))


def test_loss_rejects_unknown_reduction():
    with pytest.raises(ValueError, match="not a valid value for reduction"):
        F.mse_loss(kiln.randn(3), kiln.randn(3), reduction="avg")


def test_binary_cross_entropy_checks_range():
    with pytest.raises(RuntimeError, match="between 0 and 1"):
        F.binary_cross_entropy(kiln.tensor([1.5]), kiln.tensor([1.0]))


def test_legacy_size_average_warns_and_sums():
    x, t = kiln.randn(4), kiln.randn(4)
    with pytest.warns(UserWarning, match="size_average"):
        total = F.mse_loss(x, t, size_average=False)
    np.testing.assert_allclose(total.item(), ((x - t) ** 2).sum().item(), rtol=1e-6)


# ------------------------------------------------------------------------------ conv, pool, pad


def test_conv_channel_mismatch_names_shapes():
    with pytest.raises(RuntimeError, match="to have 3 channels, but got 4"):
        F.conv2d(kiln.randn(1, 4, 5, 5), kiln.randn(2, 3, 3, 3))


def test_conv_same_padding_rejects_stride():
    with pytest.raises(RuntimeError, match="strided convolutions"):
        F.conv2d(kiln.randn(1, 3, 5, 5), kiln.randn(2, 3, 3, 3), stride=2, padding="same")


def test_pool_output_too_small():
    with pytest.raises(RuntimeError, match="Output size is too small"):
        F.max_pool2d(kiln.randn(1, 1, 2, 2), 3)
    with pytest.raises(RuntimeError, match="pad should be at most half"):
        F.avg_pool2d(kiln.randn(1, 1, 5, 5), 2, padding=2)


def test_pad_errors_follow_torch():
    with pytest.raises(NotImplementedError, match="Padding size 2 is not supported for 1D"):
        F.pad(kiln.randn(3), (1, 1), mode="reflect")
    with pytest.raises(RuntimeError, match="Padding size should be less than"):
        F.pad(kiln.randn(1, 3), (3, 3), mode="reflect")
    with pytest.raises(RuntimeError, match="divisible by 2"):
        F.pad(kiln.randn(2, 3), (1, 1, 1))


def test_interpolate_argument_errors():
    x = kiln.randn(1, 1, 4, 4)
    with pytest.raises(ValueError, match="only one of size or scale_factor"):
        F.interpolate(x, size=2, scale_factor=2)
    with pytest.raises(NotImplementedError, match="linear mode needs 3D input"):
        F.interpolate(x, size=2, mode="linear")
    with pytest.raises(ValueError, match="align_corners"):
        F.interpolate(x, size=2, align_corners=True)


def test_one_hot_errors():
    with pytest.raises(RuntimeError, match="non-negative"):
        F.one_hot(kiln.tensor([-1, 0]))
    with pytest.raises(RuntimeError, match="smaller than num_classes"):
        F.one_hot(kiln.tensor([3]), 2)


def test_conv2d_is_vectorized_enough_for_a_small_cnn():
    x = kiln.randn(16, 16, 32, 32, requires_grad=True)
    w = kiln.randn(32, 16, 3, 3, requires_grad=True)
    y = F.max_pool2d(F.relu(F.conv2d(x, w, padding=1)), 2)
    y.sum().backward()
    assert x.grad.shape == x.shape and w.grad.shape == w.shape


# ------------------------------------------------------------------------------ double backward

DOUBLE = [
    ("conv2d", lambda x, w: F.conv2d(x, w, stride=2, padding=1), [(1, 2, 5, 5), (2, 2, 3, 3)]),
    (
        "conv_transpose2d",
        lambda x, w: F.conv_transpose2d(x, w, stride=2, groups=2),
        [(1, 2, 3, 3), (2, 1, 2, 2)],
    ),
    ("softmax", lambda x: F.softmax(x, -1), [(2, 4)]),
    ("log_softmax", lambda x: F.log_softmax(x, 0), [(3, 2)]),
    ("layer_norm", lambda x, w: F.layer_norm(x, (3,), w), [(2, 3), (3,)]),
    ("group_norm", lambda x: F.group_norm(x, 2), [(2, 4, 2)]),
    ("batch_norm", lambda x: F.batch_norm(x, None, None, training=True), [(4, 2)]),
    ("cross_entropy", lambda x: F.cross_entropy(x, kiln.tensor([1, 0, 2])), [(3, 3)]),
    ("max_pool2d", lambda x: F.max_pool2d(x, 2), [(1, 1, 4, 4)]),
    ("avg_pool2d", lambda x: F.avg_pool2d(x, 2, padding=1), [(1, 1, 3, 3)]),
    ("linear", lambda x, w, b: F.linear(x, w, b), [(2, 3), (4, 3), (4,)]),
    ("embedding", lambda w: F.embedding(kiln.tensor([1, 1, 0]), w) ** 2, [(3, 2)]),
    ("mse_loss", lambda x, t: F.mse_loss(x, t), [(3,), (3,)]),
    ("bce_with_logits", lambda x: F.binary_cross_entropy_with_logits(x, kiln.rand(3)), [(3,)]),
]


@pytest.mark.parametrize("fn,shapes", [pytest.param(f, s, id=n) for n, f, s in DOUBLE])
def test_gradgradcheck(fn, shapes):
    inputs = tuple(kiln.randn(*s, dtype=kiln.float64, requires_grad=True) for s in shapes)
    state = kiln.get_rng_state()

    def seeded(*xs):
        kiln.set_rng_state(state)
        return fn(*xs)

    assert kiln.autograd.gradgradcheck(seeded, inputs, eps=1e-6, atol=1e-5, rtol=1e-3)


def test_samples_cover_requested_ops():
    names = {s.name for s in MY_SAMPLES}
    for name in (
        "softmax",
        "log_softmax",
        "layer_norm",
        "rms_norm",
        "batch_norm",
        "group_norm",
        "instance_norm",
        "dropout",
        "embedding",
        "one_hot",
        "pad",
        "scaled_dot_product_attention",
        "linear",
        "cross_entropy",
        "nll_loss",
        "mse_loss",
        "l1_loss",
        "smooth_l1_loss",
        "huber_loss",
        "binary_cross_entropy",
        "binary_cross_entropy_with_logits",
        "kl_div",
        "conv1d",
        "conv2d",
        "conv_transpose2d",
        "max_pool2d",
        "avg_pool2d",
        "adaptive_avg_pool2d",
        "max_pool1d",
        "avg_pool1d",
        "interpolate",
    ):
        assert name in names, name


def test_gumbel_softmax_samples_a_distribution():
    logits = kiln.randn(5, 4, requires_grad=True)
    soft = F.gumbel_softmax(logits, tau=0.5)
    np.testing.assert_allclose(soft.sum(-1).detach().numpy(), 1, rtol=1e-5)
    hard = F.gumbel_softmax(logits, hard=True)
    np.testing.assert_array_equal(np.sort(hard.detach().numpy(), -1)[:, :-1], 0)
    np.testing.assert_allclose(hard.detach().numpy().max(-1), 1)
    (hard * kiln.arange(4.0)).sum().backward()
    assert logits.grad is not None and np.abs(logits.grad.numpy()).sum() > 0


def test_rrelu_training_draws_slopes_in_range():
    x = -kiln.ones(10000)
    slopes = -F.rrelu(x, 0.1, 0.3, training=True).numpy()
    assert slopes.min() >= 0.1 and slopes.max() <= 0.3 and slopes.std() > 0.03


@needs_torch
def test_signatures_match_torch():
    """The nn modules call these with PyTorch's keywords: parameter names must agree."""
    import inspect

    checked = 0
    for name in dir(torch.nn.functional):
        ours = getattr(F, name, None)
        if name.startswith("_") or ours is None or not callable(ours):
            continue
        try:
            theirs = list(inspect.signature(getattr(torch.nn.functional, name)).parameters)
        except (TypeError, ValueError):
            continue
        if theirs in (["args", "kwargs"], ["input", "args", "kwargs"]):
            continue
        sig = ours.signature if isinstance(ours, kiln.ops.Op) else inspect.signature(ours)
        assert list(sig.parameters) == theirs, name
        checked += 1
    assert checked > 60


def test_feature_dropout_drops_whole_channels_in_place():
    x = kiln.ones(4, 6, 5, 2)
    out = kiln.nn.functional.dropout2d(x, 0.5, inplace=True)
    assert out is x
    planes = x.numpy().reshape(24, 10)
    assert np.all(planes == planes[:, :1]) and set(np.unique(planes)) <= {0.0, 2.0}


@needs_torch
@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize(
    "shape,resize",
    [((32, 40), {"size": (13, 17)}), ((9, 11), {"size": (20, 23)}), ((7, 9), {"size": (7, 3)}),
     ((21, 18), {"scale_factor": 0.3}), ((21, 18), {"scale_factor": 2.5})],
)  # fmt: skip
def test_antialiased_interpolate_matches_torch(mode, align_corners, shape, resize):
    """``antialias=True`` (torchvision's tensor Resize): downscaling widens the filter so every
    input contributes; values, gradients and the node's name as PyTorch's."""
    data = np.random.default_rng(sum(shape)).standard_normal((2, 3) + shape).astype(np.float32)
    outs = []
    for lib in (kiln, torch):
        x = lib.tensor(data, requires_grad=True)
        y = lib.nn.functional.interpolate(
            x, mode=mode, align_corners=align_corners, antialias=True, **resize
        )
        (y * y).sum().backward()
        name = y.grad_fn.name() if lib is kiln else type(y.grad_fn).__name__
        outs.append((y, x.grad, name))
    (y, gx, name), (ty, tgx, tname) = outs
    np.testing.assert_allclose(y.detach().numpy(), ty.detach().numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(gx.numpy(), tgx.numpy(), rtol=1e-4, atol=1e-4)
    assert name == tname


def test_antialias_needs_bilinear_or_bicubic_on_4d_input():
    with pytest.raises(ValueError, match="Anti-alias"):
        kiln.nn.functional.interpolate(kiln.randn(1, 2, 8), size=4, mode="linear", antialias=True)


@needs_torch
@pytest.mark.parametrize(
    "shape,factor",
    [((2, 3, 5), 3), ((2, 3, 4, 5), 2), ((2, 3, 4, 5), (2.0, 3)), ((1, 2, 3, 2, 4), (1, 2, 3))],
)
@pytest.mark.parametrize("recompute", [None, True])
def test_nearest_upsampling_by_whole_factors_matches_torch(shape, factor, recompute):
    """Whole scale factors repeat each input (expand and reshape): values, gradients and the
    node's name as PyTorch's gather."""
    data = np.random.default_rng(len(shape)).standard_normal(shape).astype(np.float32)
    outs = []
    for lib in (kiln, torch):
        x = lib.tensor(data, requires_grad=True)
        y = lib.nn.functional.interpolate(
            x, scale_factor=factor, mode="nearest", recompute_scale_factor=recompute
        )
        (y * y.detach().cos()).sum().backward()
        name = y.grad_fn.name() if lib is kiln else type(y.grad_fn).__name__
        outs.append((y.detach().numpy(), x.grad.numpy(), name))
    (y, gx, name), (ty, tgx, tname) = outs
    np.testing.assert_array_equal(y, ty)
    np.testing.assert_allclose(gx, tgx, rtol=1e-6, atol=1e-6)
    assert name == tname
    for lib in (kiln, torch):
        with pytest.raises(RuntimeError, match="sizes should be greater than 0"):
            lib.nn.functional.interpolate(lib.ones(1, 2, 0, 3), scale_factor=2)
    image = np.arange(12, dtype=np.uint8).reshape(1, 1, 3, 4)
    got = kiln.nn.functional.interpolate(kiln.tensor(image), scale_factor=2)
    want = torch.nn.functional.interpolate(torch.tensor(image), scale_factor=2)
    np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_nearest_upsampling_compiles_once_for_every_image_size():
    """``dynamic=True``: a whole scale factor keeps the image sizes symbolic (one graph), where
    an index table built per size specialized them (a recompile per size)."""
    from kiln.dynamo import explain

    def upsample(x):
        return F.interpolate(x, scale_factor=2, mode="nearest") * 2 + 1

    from kiln.dynamo.testing import CompileCounter

    counter = CompileCounter()
    counted = kiln.compile(upsample, backend=counter, dynamic=True)
    compiled = kiln.compile(upsample, dynamic=True)
    for side in (4, 6, 9):
        x = kiln.randn(2, 3, side, side + 1)
        np.testing.assert_array_equal(compiled(x).numpy(), upsample(x).numpy())
        np.testing.assert_array_equal(counted(x).numpy(), upsample(x).numpy())
    assert counter.frame_count == 1
    report = explain(upsample)(kiln.randn(2, 3, 5, 5))
    assert report.graph_count == 1 and report.graph_break_count == 0


_SYMBOLIC_RESIZES = [
    {"scale_factor": 2, "mode": "bilinear"},
    {"scale_factor": 2, "mode": "bilinear", "align_corners": True},
    {"scale_factor": 2, "mode": "bicubic"},
    {"scale_factor": 3, "mode": "nearest-exact"},
    {"size": "skip", "mode": "bilinear"},
    {"size": "skip", "mode": "bicubic", "align_corners": True},
    {"size": "skip", "mode": "nearest"},
    {"size": "skip", "mode": "nearest-exact"},
]


@pytest.mark.parametrize("resize", _SYMBOLIC_RESIZES, ids=lambda r: "-".join(map(str, r.values())))
def test_filtered_resizes_compile_once_for_every_image_size(resize):
    """``dynamic=True``: bilinear and bicubic taps and nearest indices of symbolic sizes (a
    U-Net decoder's ``size=skip.shape[2:]``, a whole scale factor) are computed in the graph,
    not built as numpy tables for one size (a recompile per size); values and gradients as
    eager's and PyTorch's on every size."""
    from kiln.dynamo.testing import CompileCounter

    def resize_like(x, skip):
        kwargs = dict(resize)
        if kwargs.get("size") == "skip":
            kwargs["size"] = skip.shape[2:]
        return F.interpolate(x, **kwargs) * 2 + 1

    counter = CompileCounter()
    counted = kiln.compile(resize_like, backend=counter, dynamic=True)
    compiled = kiln.compile(resize_like, dynamic=True)
    rng = np.random.default_rng(3)
    for side in (4, 6, 9, 5):
        data = rng.standard_normal((2, 3, side, side + 1)).astype(np.float32)
        skip = kiln.zeros(1, 1, 2 * side + 1, 2 * side + 3)
        grads = []
        for fn in (resize_like, counted, compiled):
            x = kiln.tensor(data, requires_grad=True)
            y = fn(x, skip)
            (y * y.detach().cos()).sum().backward()
            grads.append((y.detach().numpy(), x.grad.numpy()))
        for y, gx in grads[1:]:
            np.testing.assert_allclose(y, grads[0][0], rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(gx, grads[0][1], rtol=1e-5, atol=1e-5)
        if torch is not None:
            kwargs = dict(resize)
            if kwargs.get("size") == "skip":
                kwargs["size"] = tuple(skip.shape[2:])
            tx = torch.tensor(data, requires_grad=True)
            ty = torch.nn.functional.interpolate(tx, **kwargs) * 2 + 1
            (ty * ty.detach().cos()).sum().backward()
            np.testing.assert_allclose(grads[2][0], ty.detach().numpy(), rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(grads[2][1], tx.grad.numpy(), rtol=1e-4, atol=1e-4)
    assert counter.frame_count == 1


@pytest.mark.parametrize("pool", ["max_pool1d", "avg_pool1d"])
def test_one_d_pool_over_a_symbolic_length_is_captured(pool):
    """A text CNN's ``F.max_pool1d(x, x.size(2))`` under ``dynamic=True``: the kernel size is a
    symbolic int, which the pools' argument check took for neither an int nor a sequence (a
    graph break reported as the user's error); one graph now serves every length."""
    from kiln.dynamo import explain
    from kiln.dynamo.testing import CompileCounter

    def over_length(x):
        return getattr(F, pool)(x, x.size(2)).squeeze(2) * 2

    counter = CompileCounter()
    compiled = kiln.compile(over_length, backend=counter, dynamic=True)
    rng = np.random.default_rng(0)
    for length in (7, 5, 11):
        data = rng.standard_normal((2, 3, length)).astype(np.float32)
        got = compiled(kiln.tensor(data)).numpy()
        np.testing.assert_allclose(got, over_length(kiln.tensor(data)).numpy(), rtol=1e-6)
        if torch is not None:
            want = getattr(torch.nn.functional, pool)(torch.tensor(data), length).squeeze(2) * 2
            np.testing.assert_allclose(got, want.numpy(), rtol=1e-6)
    assert counter.frame_count == 1
    x = kiln.randn(2, 3, 6)
    kiln.dynamo.mark_dynamic(x, 2)
    assert not explain(over_length)(x).break_reasons


@needs_torch
def test_attention_helpers_under_pytorchs_private_names_match_pytorch():
    """Custom attention layers copied from ``torch.nn.functional`` import these."""
    rng = np.random.default_rng(0)
    q, k, v = (rng.normal(size=(3, 2, 4)).astype(np.float32) for _ in range(3))
    w = rng.normal(size=(12, 4)).astype(np.float32)
    b = rng.normal(size=12).astype(np.float32)
    mask = np.array([[True, False, False]])
    results = []
    for lib in (kiln, torch):
        G, T = lib.nn.functional, lib.tensor
        qt = T(q)
        projected = [
            *G._in_projection_packed(qt, qt, qt, T(w), T(b)),
            *G._in_projection_packed(qt, T(k), T(k), T(w), None),
            *G._in_projection(qt, T(k), T(v), *T(w).chunk(3), *T(b).chunk(3)),
        ]
        results.append([p.numpy() for p in projected])
        results[-1].append(G._canonical_mask(T(mask), "m", None, "", lib.float32, False).numpy())
        assert G._none_or_dtype(T(mask)) is lib.bool and G._none_or_dtype(None) is None
        assert G._mha_shape_check(qt, qt, qt, None, None, 2) is True
    for ours, theirs in zip(*results, strict=True):
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_binary_cross_entropy_plain_backward_is_the_op_formulas_bits(reduction, dtype):
    """A plain backward computes BCE's input gradient on the arrays; the kiln-op formula
    (taken under create_graph) must give the same bits, saturated probabilities included."""
    rng = np.random.default_rng(11)
    probabilities = rng.uniform(0, 1, 37).astype(dtype)
    probabilities[:4] = [0, 1, 1e-30, 1 - 1e-7]
    target = kiln.tensor(rng.uniform(0, 1, 37).astype(dtype))
    grads = []
    for create_graph in (False, True):
        p = kiln.tensor(probabilities, requires_grad=True)
        loss = F.binary_cross_entropy(p, target, reduction=reduction)
        (loss.sum() if reduction == "none" else loss * 1.7).backward(create_graph=create_graph)
        grads.append(p.grad.detach().numpy())
    np.testing.assert_array_equal(grads[0], grads[1])


@needs_torch
def test_binary_cross_entropy_gradients_match_torch_with_target_and_weight_grads():
    """The op formula still serves what the array path leaves out: a weight, a target that
    requires grad."""
    rng = np.random.default_rng(12)
    p, t, w = (rng.uniform(0.05, 0.95, 9).astype(np.float32) for _ in range(3))
    grads = []
    for lib in (kiln, torch):
        x, y = lib.tensor(p, requires_grad=True), lib.tensor(t, requires_grad=True)
        lib.nn.functional.binary_cross_entropy(x, y, weight=lib.tensor(w)).backward()
        grads.append((x.grad.detach().numpy(), y.grad.detach().numpy()))
    for got, want in zip(grads[0], grads[1]):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
