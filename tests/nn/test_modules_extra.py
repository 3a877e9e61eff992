"""The less common layers against their torch.nn twins: activations, padding, pixel/channel
shuffles, upsampling, instance and local response norms, distances, 3-d/LP/unpool/fractional
pooling, fold/unfold, ConvTranspose3d and EmbeddingBag. Same weights (copied through state
dicts), same inputs; outputs, input and parameter gradients, updated buffers and reprs must
agree."""

from __future__ import annotations

import pickle
import warnings

import numpy as np
import pytest

import kiln
from tests.nn.test_modules import Case, In, _copy_weights, _run_case
from tests.oracle import assert_close, needs_torch, torch

pytestmark = needs_torch

_RNG = np.random.default_rng(11)
FRACTIONAL_2D = _RNG.random((2, 3, 2)).astype(np.float32)
FRACTIONAL_3D = _RNG.random((1, 2, 3)).astype(np.float32)
BAG_INDICES = np.array([1, 2, 4, 5, 4, 3, 2, 9, 0, 0], np.int64)
BAG_OFFSETS = np.array([0, 2, 2, 5], np.int64)


def _idx(values) -> In:
    return In(np.shape(values), "i", grad=False, values=np.asarray(values))


def _unpool(dims: int, output_size=None, kernel=2, stride=None, padding=0):
    """Call a MaxUnpoolNd module on the values and indices of a MaxPoolNd of its input."""

    def call(lib, m, xs):
        pool = getattr(lib.nn.functional, f"max_pool{dims}d")
        values, indices = pool(xs[0], kernel, stride, padding, return_indices=True)
        return m(values, indices, output_size)

    return call


def _bag(lib, m, xs):
    return m(*xs)


ACTIVATIONS = [
    Case("prelu", lambda lib: lib.nn.PReLU(), [In((2, 3, 4))]),
    Case("prelu_channels", lambda lib: lib.nn.PReLU(3, init=0.1), [In((2, 3, 4, 5))]),
    Case("selu", lambda lib: lib.nn.SELU(), [In((3, 4))]),
    Case("celu", lambda lib: lib.nn.CELU(0.5), [In((3, 4))]),
    Case("glu", lambda lib: lib.nn.GLU(1), [In((2, 4, 3))]),
    Case("glu_last", lambda lib: lib.nn.GLU(), [In((2, 3, 6))]),
    Case("logsigmoid", lambda lib: lib.nn.LogSigmoid(), [In((3, 4))]),
    Case("softsign", lambda lib: lib.nn.Softsign(), [In((3, 4))]),
    Case("tanhshrink", lambda lib: lib.nn.Tanhshrink(), [In((3, 4))]),
    Case("softmin", lambda lib: lib.nn.Softmin(dim=1), [In((3, 4, 2))]),
    Case("threshold", lambda lib: lib.nn.Threshold(0.1, 20.0), [In((3, 4))]),
    Case("hardshrink", lambda lib: lib.nn.Hardshrink(0.3), [In((3, 4))]),
    Case("softshrink", lambda lib: lib.nn.Softshrink(0.3), [In((3, 4))]),
    Case("rrelu_eval", lambda lib: lib.nn.RReLU(0.1, 0.3), [In((3, 4))], train=False),
    Case("prelu_1d_input", lambda lib: lib.nn.PReLU(), [In((5,))]),
    Case("softmax2d", lambda lib: lib.nn.Softmax2d(), [In((2, 3, 4, 5))]),
    Case("softmax2d_unbatched", lambda lib: lib.nn.Softmax2d(), [In((3, 4, 5))]),
]

_PAD_AMOUNT = {"Zero": 1, "Reflection": 1, "Replication": 2, "Circular": 1}


def _pad_case(kind: str, dims: int, unbatched: bool) -> Case:
    """``<kind>Pad<dims>d`` on a (N, C, *spatial) or unbatched (C, *spatial) input."""
    if kind == "Constant":
        args = ((1, 2, 0, 1, 2, 1)[: 2 * dims], 1.5)
    else:
        args = (_PAD_AMOUNT[kind],)
    shape = ((3,) if unbatched else (2, 3)) + (4, 5, 3)[:dims]
    name = f"{kind.lower()}_pad{dims}d" + ("_unbatched" if unbatched else "")
    return Case(name, lambda lib: getattr(lib.nn, f"{kind}Pad{dims}d")(*args), [In(shape)])


PADDING = [
    _pad_case(kind, dims, unbatched)
    for kind in ("Constant", "Zero", "Reflection", "Replication", "Circular")
    for dims in (1, 2, 3)
    for unbatched in (False, True)
]
PADDING += [
    Case("reflectionpad2d_tuple", lambda lib: lib.nn.ReflectionPad2d((1, 0, 2, 1)), [In((1, 2, 4, 4))]),
    Case("replicationpad3d_tuple", lambda lib: lib.nn.ReplicationPad3d((0, 1, 2, 0, 1, 1)), [In((1, 2, 2, 3, 3))]),
    Case("circularpad2d_tuple", lambda lib: lib.nn.CircularPad2d((2, 1, 0, 3)), [In((2, 1, 4, 3))]),
    Case("zeropad2d_negative", lambda lib: lib.nn.ZeroPad2d((-1, 2, 1, -1)), [In((1, 2, 4, 4))]),
]  # fmt: skip

RESAMPLING = [
    Case("pixel_shuffle", lambda lib: lib.nn.PixelShuffle(2), [In((2, 8, 3, 4))]),
    Case("pixel_unshuffle", lambda lib: lib.nn.PixelUnshuffle(2), [In((2, 2, 4, 6))]),
    Case("pixel_shuffle_unbatched", lambda lib: lib.nn.PixelShuffle(3), [In((9, 2, 2))]),
    Case("channel_shuffle", lambda lib: lib.nn.ChannelShuffle(2), [In((2, 6, 3, 4))]),
    Case("upsample_nearest", lambda lib: lib.nn.Upsample(scale_factor=2), [In((2, 3, 4, 5))]),
    Case(
        "upsample_nearest_3d_size",
        lambda lib: lib.nn.Upsample(size=(3, 5, 7)),
        [In((1, 2, 2, 3, 4))],
    ),
    Case(
        "upsample_nearest_exact",
        lambda lib: lib.nn.Upsample(scale_factor=1.7, mode="nearest-exact"),
        [In((2, 3, 4, 5))],
    ),
    Case(
        "upsample_linear",
        lambda lib: lib.nn.Upsample(scale_factor=2.5, mode="linear"),
        [In((2, 3, 5))],
    ),
    Case(
        "upsample_bilinear_size",
        lambda lib: lib.nn.Upsample(size=(5, 7), mode="bilinear"),
        [In((2, 3, 4, 5))],
    ),
    Case(
        "upsample_bilinear_recompute",
        lambda lib: lib.nn.Upsample(scale_factor=1.7, mode="bilinear", recompute_scale_factor=True),
        [In((2, 3, 4, 5))],
    ),
    Case(
        "upsample_bicubic_aligned",
        lambda lib: lib.nn.Upsample(scale_factor=(1.5, 2), mode="bicubic", align_corners=True),
        [In((1, 2, 4, 5))],
    ),
    Case(
        "upsample_trilinear",
        lambda lib: lib.nn.Upsample(size=6, mode="trilinear", align_corners=False),
        [In((1, 2, 3, 4, 5))],
    ),
    Case(
        "upsample_area_down",
        lambda lib: lib.nn.Upsample(size=(3, 2), mode="area"),
        [In((2, 3, 7, 5))],
    ),
    Case(
        "upsampling_nearest2d",
        lambda lib: lib.nn.UpsamplingNearest2d(scale_factor=2),
        [In((2, 3, 4, 5))],
    ),
    Case(
        "upsampling_bilinear2d",
        lambda lib: lib.nn.UpsamplingBilinear2d(size=(6, 8)),
        [In((2, 3, 4, 5))],
    ),
]

NORMS = [
    Case("instance_norm1d", lambda lib: lib.nn.InstanceNorm1d(3), [In((4, 3, 6))]),
    Case(
        "instance_norm1d_unbatched_affine",
        lambda lib: lib.nn.InstanceNorm1d(3, affine=True),
        [In((3, 6))],
    ),
    Case(
        "instance_norm2d_affine",
        lambda lib: lib.nn.InstanceNorm2d(3, affine=True, eps=1e-3),
        [In((2, 3, 4, 5))],
    ),
    Case(
        "instance_norm2d_affine_no_bias",
        lambda lib: lib.nn.InstanceNorm2d(3, affine=True, bias=False),
        [In((2, 3, 4, 5))],
    ),
    Case(
        "instance_norm3d_running_stats",
        lambda lib: lib.nn.InstanceNorm3d(2, momentum=0.3, track_running_stats=True),
        [In((3, 2, 2, 3, 4))],
    ),
    Case(
        "instance_norm2d_running_stats_eval",
        lambda lib: lib.nn.InstanceNorm2d(3, affine=True, track_running_stats=True),
        [In((2, 3, 4, 5))],
        train=False,
    ),
    Case(
        "instance_norm1d_no_stats_eval",
        lambda lib: lib.nn.InstanceNorm1d(3),
        [In((2, 3, 5))],
        train=False,
    ),
    Case("local_response_norm", lambda lib: lib.nn.LocalResponseNorm(3), [In((2, 5, 4, 4))]),
    Case(
        "local_response_norm_3d",
        lambda lib: lib.nn.LocalResponseNorm(2, alpha=0.1, beta=0.5, k=2.0),
        [In((2, 6, 7))],
    ),
    Case(
        "local_response_norm_5d",
        lambda lib: lib.nn.LocalResponseNorm(4, alpha=0.2),
        [In((2, 6, 2, 3, 2))],
    ),
]

DISTANCES = [
    Case("pairwise_distance", lambda lib: lib.nn.PairwiseDistance(), [In((4, 5)), In((4, 5))]),
    Case(
        "pairwise_distance_l1_keepdim",
        lambda lib: lib.nn.PairwiseDistance(p=1.0, eps=1e-3, keepdim=True),
        [In((4, 5)), In((5,))],
    ),
    Case(
        "pairwise_distance_p3",
        lambda lib: lib.nn.PairwiseDistance(p=3.0),
        [In((2, 3, 5)), In((2, 3, 5))],
    ),
    Case(
        "pairwise_distance_inf_1d",
        lambda lib: lib.nn.PairwiseDistance(p=float("inf")),
        [In((5,)), In((5,))],
    ),
    Case("cosine_similarity", lambda lib: lib.nn.CosineSimilarity(), [In((4, 5)), In((4, 5))]),
    Case(
        "cosine_similarity_broadcast",
        lambda lib: lib.nn.CosineSimilarity(dim=-1, eps=1e-3),
        [In((2, 3, 4)), In((1, 3, 4))],
    ),
]

POOLING = [
    Case("max_pool3d", lambda lib: lib.nn.MaxPool3d(2), [In((2, 2, 4, 4, 4))]),
    Case(
        "max_pool3d_ceil",
        lambda lib: lib.nn.MaxPool3d(3, stride=2, padding=1, ceil_mode=True),
        [In((1, 2, 5, 4, 6))],
    ),
    Case(
        "max_pool3d_indices",
        lambda lib: lib.nn.MaxPool3d((2, 1, 2), dilation=(1, 2, 1), return_indices=True),
        [In((2, 3, 4, 5, 4))],
    ),
    Case("avg_pool3d", lambda lib: lib.nn.AvgPool3d(2), [In((2, 2, 4, 4, 4))]),
    Case(
        "avg_pool3d_exclude_pad",
        lambda lib: lib.nn.AvgPool3d((2, 3, 2), stride=1, padding=1, count_include_pad=False),
        [In((1, 2, 3, 4, 3))],
    ),
    Case(
        "avg_pool3d_divisor",
        lambda lib: lib.nn.AvgPool3d(2, ceil_mode=True, divisor_override=3),
        [In((1, 2, 3, 5, 4))],
    ),
    Case(
        "adaptive_avg_pool3d",
        lambda lib: lib.nn.AdaptiveAvgPool3d((2, 3, None)),
        [In((2, 2, 5, 4, 3))],
    ),
    Case("adaptive_max_pool1d", lambda lib: lib.nn.AdaptiveMaxPool1d(3), [In((2, 3, 8))]),
    Case(
        "adaptive_max_pool1d_indices",
        lambda lib: lib.nn.AdaptiveMaxPool1d(4, return_indices=True),
        [In((3, 7))],
    ),
    Case(
        "adaptive_max_pool3d",
        lambda lib: lib.nn.AdaptiveMaxPool3d((2, 2, 3)),
        [In((2, 2, 4, 5, 6))],
    ),
    Case("lp_pool1d", lambda lib: lib.nn.LPPool1d(2, 3, stride=2), [In((2, 3, 9))]),
    Case("lp_pool2d", lambda lib: lib.nn.LPPool2d(3, (2, 3)), [In((2, 3, 4, 6), "p")]),
    Case(
        "lp_pool3d_ceil",
        lambda lib: lib.nn.LPPool3d(1.5, 2, ceil_mode=True),
        [In((1, 2, 3, 5, 4), "p")],
    ),
    Case("max_unpool1d", lambda lib: lib.nn.MaxUnpool1d(2), [In((2, 3, 8))], _unpool(1)),
    Case("max_unpool2d", lambda lib: lib.nn.MaxUnpool2d(2), [In((2, 3, 6, 4))], _unpool(2)),
    Case(
        "max_unpool2d_output_size",
        lambda lib: lib.nn.MaxUnpool2d(2, stride=2),
        [In((1, 2, 5, 5))],
        _unpool(2, [5, 5]),
    ),
    Case(
        "max_unpool1d_strided_padded_unbatched",
        lambda lib: lib.nn.MaxUnpool1d(3, stride=2, padding=1),
        [In((2, 7))],
        _unpool(1, kernel=3, stride=2, padding=1),
    ),
    Case("max_unpool3d", lambda lib: lib.nn.MaxUnpool3d(2), [In((1, 2, 4, 4, 2))], _unpool(3)),
    Case(
        "fractional_max_pool2d",
        lambda lib: lib.nn.FractionalMaxPool2d(
            2, output_size=(3, 4), _random_samples=lib.tensor(FRACTIONAL_2D)
        ),
        [In((2, 3, 7, 9))],
    ),
    Case(
        "fractional_max_pool3d_ratio_indices",
        lambda lib: lib.nn.FractionalMaxPool3d(
            (2, 3, 2),
            output_ratio=0.5,
            return_indices=True,
            _random_samples=lib.tensor(FRACTIONAL_3D),
        ),
        [In((1, 2, 6, 8, 7))],
    ),
]

FOLDING = [
    Case(
        "unfold",
        lambda lib: lib.nn.Unfold((2, 3), padding=1, stride=2),
        [In((2, 3, 5, 6))],
    ),
    Case("unfold_dilated", lambda lib: lib.nn.Unfold(2, dilation=2), [In((1, 2, 5, 5))]),
    Case("fold", lambda lib: lib.nn.Fold((4, 5), (2, 2)), [In((2, 12, 12))]),
    Case("unfold_unbatched", lambda lib: lib.nn.Unfold((2, 3), stride=(1, 2)), [In((2, 4, 7))]),
    Case(
        "fold_unbatched_strided",
        lambda lib: lib.nn.Fold((5, 5), 3, padding=1, stride=2),
        [In((18, 9))],
    ),
]

CONVOLUTIONS = [
    Case(
        "conv_transpose3d",
        lambda lib: lib.nn.ConvTranspose3d(3, 2, (2, 3, 2), stride=2, padding=1),
        [In((2, 3, 3, 2, 3))],
    ),
    Case(
        "conv_transpose3d_groups_unbatched",
        lambda lib: lib.nn.ConvTranspose3d(4, 6, 2, groups=2, dilation=(1, 2, 1), bias=False),
        [In((4, 2, 3, 2))],
    ),
    Case(
        "conv_transpose3d_output_size",
        lambda lib: lib.nn.ConvTranspose3d(2, 3, 3, stride=2),
        [In((1, 2, 2, 3, 2))],
        lambda lib, m, xs: m(xs[0], output_size=[6, 8, 5]),
    ),
]

BAGS = [
    Case(
        "embedding_bag_mean",
        lambda lib: lib.nn.EmbeddingBag(10, 4),
        [_idx(BAG_INDICES), _idx(BAG_OFFSETS)],
    ),
    Case(
        "embedding_bag_sum_weighted",
        lambda lib: lib.nn.EmbeddingBag(10, 4, mode="sum"),
        [_idx(BAG_INDICES), _idx(BAG_OFFSETS), In((10,))],
    ),
    Case(
        "embedding_bag_max_2d",
        lambda lib: lib.nn.EmbeddingBag(10, 3, mode="max"),
        [_idx(BAG_INDICES.reshape(2, 5))],
    ),
    Case(
        "embedding_bag_padding_mean",
        lambda lib: lib.nn.EmbeddingBag(10, 4, padding_idx=2),
        [_idx(BAG_INDICES), _idx(BAG_OFFSETS)],
    ),
    Case(
        "embedding_bag_last_offset_max",
        lambda lib: lib.nn.EmbeddingBag(10, 4, mode="max", include_last_offset=True),
        [_idx(BAG_INDICES), _idx(np.array([0, 3, 3, 7, 10]))],
    ),
]

CASES = ACTIVATIONS + PADDING + RESAMPLING + NORMS + DISTANCES + POOLING + FOLDING + CONVOLUTIONS
CASES += BAGS


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_forward_and_backward_match_torch(case: Case):
    tmod, kmod, t_in, k_in, t_out, k_out, rng = _run_case(case)
    assert len(t_out) == len(k_out)
    for t, k in zip(t_out, k_out):
        assert_close(k, t, rtol=case.rtol, atol=case.atol)
    t_terms, k_terms = [], []
    for t, k in zip(t_out, k_out):
        if t.requires_grad:
            cot = rng.standard_normal(tuple(t.shape)).astype(np.float32)
            t_terms.append((t * torch.tensor(cot)).sum())
            k_terms.append((k * kiln.tensor(cot)).sum())
    assert t_terms, "every case has a differentiable output"
    sum(t_terms).backward()
    sum(k_terms).backward()
    for t, k in zip(t_in, k_in):
        if t.grad is not None:
            assert_close(k.grad, t.grad, rtol=case.rtol, atol=case.atol)
    k_params = dict(kmod.named_parameters())
    for name, p in tmod.named_parameters():
        assert_close(k_params[name].grad, p.grad, rtol=case.rtol, atol=case.atol)
    for (name, tb), (kname, kb) in zip(tmod.named_buffers(), kmod.named_buffers()):
        assert name == kname
        assert_close(kb, tb, rtol=case.rtol, atol=case.atol)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_repr_and_state_match_torch(case: Case):
    tmod, kmod = case.build(torch), case.build(kiln)
    assert repr(kmod) == repr(tmod)
    assert [(n, tuple(p.shape)) for n, p in kmod.named_parameters()] == [
        (n, tuple(p.shape)) for n, p in tmod.named_parameters()
    ]
    assert list(kmod.state_dict()) == list(tmod.state_dict())


@pytest.mark.parametrize(
    "build",
    [
        lambda lib: lib.nn.Threshold(0.5, -1.0, inplace=True),
        lambda lib: lib.nn.RReLU(inplace=True),
        lambda lib: lib.nn.CELU(2.0, inplace=True),
        lambda lib: lib.nn.SELU(inplace=True),
    ],
    ids=["threshold", "rrelu", "celu", "selu"],
)
def test_inplace_activations_write_into_their_input(build):
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    kmod, tmod = build(kiln).eval(), build(torch).eval()
    assert repr(kmod) == repr(tmod)
    k_in, t_in = kiln.tensor(x), torch.tensor(x)
    k_out, t_out = kmod(k_in), tmod(t_in)
    assert_close(k_in, t_in)
    assert_close(k_out, t_out)


def test_rrelu_training_draws_a_slope_per_element_and_backpropagates_it():
    kiln.manual_seed(0)
    m = kiln.nn.RReLU(0.1, 0.3)
    x = kiln.full((200, 50), -1.0, requires_grad=True)
    y = m(x)
    slopes = -y.detach().numpy()
    assert slopes.min() >= 0.1 and slopes.max() <= 0.3
    assert abs(slopes.mean() - 0.2) < 0.01 and len(np.unique(slopes)) > 1000
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), slopes, rtol=1e-6)
    positive = kiln.ones(3, requires_grad=True)
    assert_close(m(positive), kiln.ones(3))


def test_prelu_per_channel_weight_is_learnt_per_channel():
    m = kiln.nn.PReLU(2, init=0.5)
    x = kiln.tensor([[-1.0, -2.0], [3.0, -4.0]])
    m(x).sum().backward()
    assert_close(m.weight.grad, kiln.tensor([-1.0, -6.0]))


def test_softmax2d_rejects_other_ranks():
    with pytest.raises(ValueError, match="Softmax2d: expected input to be 3D or 4D, got 2D"):
        kiln.nn.Softmax2d()(kiln.ones(2, 3))


def test_circular_pad_checks_rank_and_reflection_checks_size():
    with pytest.raises(ValueError, match=r"expected 3D or 4D input \(got 2D input\)"):
        kiln.nn.CircularPad2d(1)(kiln.ones(3, 4))
    with pytest.raises(RuntimeError, match="Padding size should be less than"):
        kiln.nn.ReflectionPad1d(3)(kiln.ones(1, 2, 3))
    assert isinstance(kiln.nn.ZeroPad2d(1), kiln.nn.ConstantPad2d)
    assert kiln.nn.ZeroPad1d(2).value == 0.0


def test_upsample_stores_float_factors_and_unpickles_old_state():
    assert kiln.nn.Upsample(scale_factor=(2, 3)).scale_factor == (2.0, 3.0)
    assert kiln.nn.Upsample(size=4).scale_factor is None
    m = kiln.nn.Upsample(scale_factor=2)
    state = dict(m.__dict__)
    del state["recompute_scale_factor"]
    fresh = kiln.nn.Upsample.__new__(kiln.nn.Upsample)
    fresh.__setstate__(state)
    assert fresh.recompute_scale_factor is True
    restored = pickle.loads(pickle.dumps(kiln.nn.UpsamplingBilinear2d(scale_factor=2)))
    assert repr(restored) == "UpsamplingBilinear2d(scale_factor=2.0, mode='bilinear')"


def test_instance_norm_running_stats_follow_torch_over_steps_then_eval():
    rng = np.random.default_rng(4)
    kmod = kiln.nn.InstanceNorm1d(3, affine=True, track_running_stats=True, momentum=None)
    tmod = torch.nn.InstanceNorm1d(3, affine=True, track_running_stats=True, momentum=None)
    for _ in range(3):
        x = rng.standard_normal((4, 3, 5)).astype(np.float32)
        assert_close(kmod(kiln.tensor(x)), tmod(torch.tensor(x)), rtol=1e-5, atol=1e-6)
    assert_close(kmod.running_mean, tmod.running_mean, rtol=1e-5, atol=1e-6)
    assert_close(kmod.running_var, tmod.running_var, rtol=1e-5, atol=1e-6)
    assert int(kmod.num_batches_tracked) == int(tmod.num_batches_tracked) == 0
    kmod.eval()
    tmod.eval()
    x = rng.standard_normal((2, 3, 5)).astype(np.float32)
    assert_close(kmod(kiln.tensor(x)), tmod(torch.tensor(x)), rtol=1e-5, atol=1e-6)


def test_instance_norm_checks_rank_and_channels():
    with pytest.raises(ValueError, match=r"expected 3D or 4D input \(got 2D input\)"):
        kiln.nn.InstanceNorm2d(3)(kiln.ones(3, 4))
    with pytest.raises(ValueError, match=r"expected input's size at dim=1 to match num_features"):
        kiln.nn.InstanceNorm1d(4, affine=True)(kiln.ones(2, 3, 5))
    with pytest.warns(UserWarning, match="does not match num_features"):
        kiln.nn.InstanceNorm1d(4)(kiln.randn(2, 3, 5))
    with pytest.raises(ValueError, match="Expected more than 1 spatial element"):
        kiln.nn.InstanceNorm1d(3)(kiln.ones(2, 3, 1))


def test_instance_norm_refuses_running_stats_it_does_not_track():
    tracked = kiln.nn.InstanceNorm2d(3, track_running_stats=True).state_dict()
    with pytest.raises(RuntimeError, match="Unexpected running stats buffer"):
        kiln.nn.InstanceNorm2d(3).load_state_dict(tracked)


@pytest.mark.parametrize("size", [1, 2, 3, 4])
def test_cross_map_lrn2d_matches_torch_values_and_has_exact_gradients(size):
    # PyTorch's hand-written backward for this legacy module fails its own gradcheck (and
    # crashes for size 1), so gradients are checked against finite differences instead
    rng = np.random.default_rng(size)
    x = rng.standard_normal((2, 5, 3, 3))
    kmod = kiln.nn.CrossMapLRN2d(size, alpha=0.5, beta=0.6, k=2)
    tmod = torch.nn.CrossMapLRN2d(size, alpha=0.5, beta=0.6, k=2)
    assert repr(kmod) == repr(tmod)
    assert_close(kmod(kiln.tensor(x)), tmod(torch.tensor(x)))
    assert kiln.autograd.gradcheck(kmod, (kiln.tensor(x, requires_grad=True),))
    with pytest.raises(ValueError, match="Expected input to be 4D, got 3D"):
        kmod(kiln.ones(2, 3, 4))


def test_cross_map_lrn2d_default_repr_matches_torch():
    assert repr(kiln.nn.CrossMapLRN2d(3)) == repr(torch.nn.CrossMapLRN2d(3))
    assert repr(kiln.nn.LocalResponseNorm(3)) == repr(torch.nn.LocalResponseNorm(3))


def test_distance_modules_have_torch_attributes():
    m = kiln.nn.PairwiseDistance(p=3.0, keepdim=True)
    assert (m.norm, m.eps, m.keepdim) == (3.0, 1e-6, True)
    assert repr(m) == "PairwiseDistance()"
    assert repr(kiln.nn.CosineSimilarity(dim=0)) == "CosineSimilarity()"


def test_fractional_max_pool_draws_fresh_windows_without_samples():
    kiln.manual_seed(1)
    m = kiln.nn.FractionalMaxPool2d(2, output_ratio=(0.5, 0.5), return_indices=True)
    x = kiln.randn(2, 3, 10, 12)
    values, indices = m(x)
    assert tuple(values.shape) == (2, 3, 5, 6) and indices.dtype is kiln.int64
    picked = x.reshape(2, 3, -1).gather(2, indices.reshape(2, 3, -1)).reshape(values.shape)
    assert_close(values, picked)


def test_fractional_max_pool_argument_errors_match_torch():
    for lib in (kiln, torch):
        with pytest.raises(ValueError, match="requires specifying either an output size"):
            lib.nn.FractionalMaxPool2d(2)
        with pytest.raises(ValueError, match="only one of output_size and output_ratio"):
            lib.nn.FractionalMaxPool2d(2, output_size=3, output_ratio=0.5)
        with pytest.raises(ValueError, match="output_ratio must be between 0 and 1"):
            lib.nn.FractionalMaxPool3d(2, output_ratio=1.5)
        with pytest.raises(ValueError, match="kernel_size must be greater than 0"):
            lib.nn.FractionalMaxPool3d(0, output_size=2)
        with pytest.raises(RuntimeError, match="pool height 3 too large relative to input height"):
            lib.nn.FractionalMaxPool2d(3, output_size=(6, 2))(lib.ones(1, 1, 7, 9))


def test_max_unpool_stores_tuples_like_torch():
    assert repr(kiln.nn.MaxUnpool3d(2, stride=1)) == repr(torch.nn.MaxUnpool3d(2, stride=1))
    assert kiln.nn.MaxUnpool1d(3).stride == (3,)


def test_embedding_bag_padding_row_is_zero_and_from_pretrained_freezes():
    bag = kiln.nn.EmbeddingBag(5, 3, padding_idx=-1, mode="sum")
    assert bag.padding_idx == 4 and float(bag.weight[4].abs().sum()) == 0.0
    table = kiln.randn(4, 2)
    frozen = kiln.nn.EmbeddingBag.from_pretrained(table, mode="max")
    assert not frozen.weight.requires_grad and frozen.mode == "max"
    out = frozen(kiln.tensor([[0, 1], [2, 3]]))
    assert_close(out, kiln.maximum(table[[0, 2]], table[[1, 3]]))
    with pytest.raises(AssertionError, match="padding_idx must be within num_embeddings"):
        kiln.nn.EmbeddingBag(5, 3, padding_idx=5)


def test_embedding_bag_max_norm_renormalizes_the_looked_up_rows():
    weight = np.arange(12, dtype=np.float32).reshape(4, 3)
    kbag = kiln.nn.EmbeddingBag.from_pretrained(kiln.tensor(weight), max_norm=2.0)
    tbag = torch.nn.EmbeddingBag.from_pretrained(torch.tensor(weight), max_norm=2.0)
    assert repr(kbag) == repr(tbag)
    indices = np.array([[1, 3]])
    assert_close(kbag(kiln.tensor(indices)), tbag(torch.tensor(indices)), rtol=1e-5, atol=1e-6)
    assert_close(kbag.weight, tbag.weight, rtol=1e-5, atol=1e-6)


def test_modules_exist_under_torch_names():
    wanted = {
        "PReLU", "SELU", "CELU", "GLU", "LogSigmoid", "Softsign", "Softmin", "Threshold",
        "Hardshrink", "Softshrink", "Tanhshrink", "RReLU", "Softmax2d", "PixelShuffle",
        "PixelUnshuffle", "ChannelShuffle", "Upsample", "UpsamplingNearest2d",
        "UpsamplingBilinear2d", "InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d",
        "LocalResponseNorm", "CrossMapLRN2d", "CosineSimilarity", "PairwiseDistance",
        "MaxPool3d", "AvgPool3d", "AdaptiveAvgPool3d", "AdaptiveMaxPool1d", "AdaptiveMaxPool3d",
        "LPPool1d", "LPPool2d", "LPPool3d", "MaxUnpool1d", "MaxUnpool2d", "MaxUnpool3d",
        "FractionalMaxPool2d", "FractionalMaxPool3d", "Fold", "Unfold", "EmbeddingBag",
        "LazyLinear", "LazyConv1d", "LazyConv2d", "LazyConv3d", "UninitializedParameter",
        "ConvTranspose3d", "LazyConvTranspose1d", "LazyConvTranspose2d", "LazyConvTranspose3d",
        "LazyBatchNorm1d", "LazyInstanceNorm3d", "UninitializedBuffer",
    }  # fmt: skip
    wanted |= {f"{k}Pad{d}d" for k in ("Constant", "Zero", "Reflection", "Replication",
               "Circular") for d in (1, 2, 3)}  # fmt: skip
    assert wanted <= set(dir(torch.nn))
    assert sorted(wanted - set(dir(kiln.nn))) == []
    assert wanted <= set(kiln.nn.__all__)


def test_identity_and_containers_of_new_modules():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 4, 3, 3)).astype(np.float32)
    seq = {
        lib: lib.nn.Sequential(
            lib.nn.ReflectionPad2d(1),
            lib.nn.Identity(54, unused=True),
            lib.nn.PixelUnshuffle(1),
            lib.nn.InstanceNorm2d(4, affine=True),
            lib.nn.PReLU(4),
        )
        for lib in (kiln, torch)
    }
    _copy_weights(seq[kiln], seq[torch])
    assert repr(seq[kiln]) == repr(seq[torch])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert_close(seq[kiln](kiln.tensor(x)), seq[torch](torch.tensor(x)), rtol=1e-5, atol=1e-5)


def test_constructor_and_forward_signatures_match_torch():
    """Every class of every ``kiln.nn.modules.<file>`` is in ``torch.nn.modules.<file>`` (the
    same module path) with the same constructor and forward parameters."""
    import importlib
    import inspect

    checked = 0
    for family in kiln.nn.modules.FAMILIES:
        file = family.__name__.rsplit(".", 1)[1]
        mirror = importlib.import_module(f"torch.nn.modules.{file}")
        for name in family.__all__:
            ours = getattr(family, name)
            if not inspect.isclass(ours):
                continue
            theirs = getattr(mirror, name)
            for attr in ("__init__", "forward"):
                if attr == "forward" and not hasattr(theirs, "forward"):
                    continue
                assert list(inspect.signature(getattr(ours, attr)).parameters) == list(
                    inspect.signature(getattr(theirs, attr)).parameters
                ), (name, attr)
            checked += 1
    assert checked >= 150
