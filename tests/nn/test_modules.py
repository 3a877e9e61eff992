"""Every layer against its torch.nn twin: same weights (copied through state dicts), same inputs,
then outputs, input gradients, parameter gradients, updated buffers and reprs must agree."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import kiln
from tests.nn.helpers import (
    Case,
    In,
    copy_weights,
    module_case_tests,
)
from tests.oracle import assert_close, needs_torch, torch

pytestmark = needs_torch


def _mha_self(lib, m, xs):
    return m(xs[0], xs[0], xs[0])


def _mha_causal(lib, m, xs):
    mask = lib.ones(5, 5, dtype=lib.bool).triu(1)
    return m(xs[0], xs[0], xs[0], attn_mask=mask, need_weights=False)


def _mha_padding(lib, m, xs):
    pad = lib.tensor([[False] * 5, [False, False, False, True, True]])
    return m(xs[0], xs[1], xs[1], key_padding_mask=pad, average_attn_weights=False)


def _mha_float_mask(lib, m, xs):
    return m(xs[0], xs[1], xs[2], attn_mask=xs[3])


def _encoder_causal(lib, m, xs):
    mask = lib.nn.Transformer.generate_square_subsequent_mask(5) if lib is torch else None
    if lib is kiln:
        from kiln.nn.modules.transformer import generate_square_subsequent_mask

        mask = generate_square_subsequent_mask(5)
    return m(xs[0], src_mask=mask, is_causal=True)


def _ce_weighted(lib):
    return lib.nn.CrossEntropyLoss(
        weight=lib.tensor([1.0, 2.0, 0.5, 1.0, 3.0]), label_smoothing=0.1, ignore_index=1
    )


CASES = [
    Case("linear", lambda lib: lib.nn.Linear(5, 3), [In((4, 5))]),
    Case("linear_nobias_3d", lambda lib: lib.nn.Linear(5, 3, bias=False), [In((2, 4, 5))]),
    Case("bilinear", lambda lib: lib.nn.Bilinear(3, 4, 2), [In((5, 3)), In((5, 4))]),
    Case("identity", lambda lib: lib.nn.Identity(7, x=1), [In((2, 3))]),
    Case("flatten", lambda lib: lib.nn.Flatten(), [In((2, 3, 4))]),
    Case("flatten_range", lambda lib: lib.nn.Flatten(0, 1), [In((2, 3, 4))]),
    Case("unflatten", lambda lib: lib.nn.Unflatten(1, (2, 3)), [In((4, 6))]),
    Case("embedding", lambda lib: lib.nn.Embedding(10, 4), [In((3, 5), "i", 10)]),
    Case(
        "embedding_padding",
        lambda lib: lib.nn.Embedding(10, 4, padding_idx=-1),
        [In((3, 5), "i", 10)],
    ),
    Case("layer_norm", lambda lib: lib.nn.LayerNorm(6), [In((3, 6))]),
    Case(
        "layer_norm_2d_plain",
        lambda lib: lib.nn.LayerNorm((3, 4), elementwise_affine=False),
        [In((2, 3, 4))],
    ),
    Case("layer_norm_nobias", lambda lib: lib.nn.LayerNorm(4, bias=False), [In((2, 3, 4))]),
    Case("rms_norm", lambda lib: lib.nn.RMSNorm(6), [In((3, 6))]),
    Case("rms_norm_eps", lambda lib: lib.nn.RMSNorm([2, 3], eps=1e-3), [In((4, 2, 3))]),
    Case("group_norm", lambda lib: lib.nn.GroupNorm(2, 4), [In((3, 4, 5))]),
    Case("batch_norm1d", lambda lib: lib.nn.BatchNorm1d(4), [In((8, 4))]),
    Case("batch_norm1d_3d", lambda lib: lib.nn.BatchNorm1d(4, momentum=0.3), [In((5, 4, 3))]),
    Case("batch_norm1d_eval", lambda lib: lib.nn.BatchNorm1d(4), [In((8, 4))], train=False),
    Case("batch_norm2d", lambda lib: lib.nn.BatchNorm2d(3), [In((4, 3, 5, 5))]),
    Case(
        "batch_norm2d_no_stats",
        lambda lib: lib.nn.BatchNorm2d(3, affine=False, track_running_stats=False),
        [In((4, 3, 2, 2))],
        train=False,
    ),
    Case("dropout_eval", lambda lib: lib.nn.Dropout(0.5), [In((4, 6))], train=False),
    Case("dropout_p0", lambda lib: lib.nn.Dropout(0.0), [In((4, 6))]),
    Case("dropout1d_eval", lambda lib: lib.nn.Dropout1d(0.3), [In((2, 4, 6))], train=False),
    Case("dropout2d_eval", lambda lib: lib.nn.Dropout2d(0.3), [In((2, 4, 3, 3))], train=False),
    Case("dropout3d_eval", lambda lib: lib.nn.Dropout3d(), [In((2, 4, 2, 2, 2))], train=False),
    Case("alpha_dropout_eval", lambda lib: lib.nn.AlphaDropout(0.2), [In((4, 6))], train=False),
    Case("conv1d", lambda lib: lib.nn.Conv1d(3, 4, 3, padding=1), [In((2, 3, 8))]),
    Case("conv2d", lambda lib: lib.nn.Conv2d(3, 4, 3, stride=2, padding=1), [In((2, 3, 8, 8))]),
    Case(
        "conv2d_groups_dilation",
        lambda lib: lib.nn.Conv2d(4, 6, 3, groups=2, dilation=2, bias=False),
        [In((2, 4, 9, 9))],
    ),
    Case(
        "conv2d_same_reflect",
        lambda lib: lib.nn.Conv2d(3, 2, (3, 2), padding="same", padding_mode="reflect"),
        [In((2, 3, 6, 7))],
    ),
    Case(
        "conv2d_circular",
        lambda lib: lib.nn.Conv2d(2, 2, 3, padding=1, padding_mode="circular"),
        [In((1, 2, 5, 5))],
    ),
    Case(
        "conv_transpose2d",
        lambda lib: lib.nn.ConvTranspose2d(3, 2, 3, stride=2, padding=1, output_padding=1),
        [In((2, 3, 4, 4))],
    ),
    Case(
        "conv_transpose1d",
        lambda lib: lib.nn.ConvTranspose1d(2, 4, 3, stride=2, groups=2),
        [In((2, 2, 5))],
    ),
    Case("max_pool2d", lambda lib: lib.nn.MaxPool2d(2), [In((2, 3, 6, 6))]),
    Case(
        "max_pool2d_padded",
        lambda lib: lib.nn.MaxPool2d(3, stride=2, padding=1, ceil_mode=True),
        [In((2, 3, 7, 7))],
    ),
    Case("max_pool1d", lambda lib: lib.nn.MaxPool1d(2), [In((2, 3, 8))]),
    Case("avg_pool2d", lambda lib: lib.nn.AvgPool2d(2), [In((2, 3, 6, 6))]),
    Case(
        "avg_pool2d_padded",
        lambda lib: lib.nn.AvgPool2d(3, stride=2, padding=1, count_include_pad=False),
        [In((2, 3, 7, 7))],
    ),
    Case("avg_pool1d", lambda lib: lib.nn.AvgPool1d(3, stride=2), [In((2, 3, 9))]),
    Case("adaptive_avg_pool2d", lambda lib: lib.nn.AdaptiveAvgPool2d((2, 3)), [In((2, 3, 7, 8))]),
    Case("adaptive_avg_pool1d", lambda lib: lib.nn.AdaptiveAvgPool1d(3), [In((2, 3, 7))]),
    Case("adaptive_max_pool2d", lambda lib: lib.nn.AdaptiveMaxPool2d(2), [In((2, 3, 6, 5))]),
    Case("relu", lambda lib: lib.nn.ReLU(), [In((4, 5))]),
    Case(
        "relu6",
        lambda lib: lib.nn.ReLU6(),
        [In((4, 5), values=np.linspace(-8, 8, 20, dtype=np.float32).reshape(4, 5))],
    ),
    Case("gelu", lambda lib: lib.nn.GELU(), [In((4, 5))]),
    Case("gelu_tanh", lambda lib: lib.nn.GELU("tanh"), [In((4, 5))]),
    Case("silu", lambda lib: lib.nn.SiLU(), [In((4, 5))]),
    Case("tanh", lambda lib: lib.nn.Tanh(), [In((4, 5))]),
    Case("sigmoid", lambda lib: lib.nn.Sigmoid(), [In((4, 5))]),
    Case("softmax", lambda lib: lib.nn.Softmax(dim=1), [In((3, 4, 5))]),
    Case("log_softmax", lambda lib: lib.nn.LogSoftmax(dim=-1), [In((3, 4, 5))]),
    Case("leaky_relu", lambda lib: lib.nn.LeakyReLU(0.2), [In((4, 5))]),
    Case("elu", lambda lib: lib.nn.ELU(0.5), [In((4, 5))]),
    Case("softplus", lambda lib: lib.nn.Softplus(2.0, 3.0), [In((4, 5))]),
    Case("mish", lambda lib: lib.nn.Mish(), [In((4, 5))]),
    Case("hardtanh", lambda lib: lib.nn.Hardtanh(-0.5, 0.7), [In((4, 5))]),
    Case("hardsigmoid", lambda lib: lib.nn.Hardsigmoid(), [In((4, 5))]),
    Case("hardswish", lambda lib: lib.nn.Hardswish(), [In((4, 5))]),
    Case("mha_self", lambda lib: lib.nn.MultiheadAttention(8, 2), [In((5, 3, 8))], _mha_self),
    Case(
        "mha_batch_first_causal",
        lambda lib: lib.nn.MultiheadAttention(8, 4, batch_first=True),
        [In((2, 5, 8))],
        _mha_causal,
    ),
    Case(
        "mha_padding_heads",
        lambda lib: lib.nn.MultiheadAttention(6, 3, batch_first=True, bias=False),
        [In((2, 4, 6)), In((2, 5, 6))],
        _mha_padding,
    ),
    Case(
        "mha_kdim_vdim_bias_kv",
        lambda lib: lib.nn.MultiheadAttention(
            8, 2, kdim=5, vdim=3, add_bias_kv=True, add_zero_attn=True
        ),
        [In((4, 2, 8)), In((6, 2, 5)), In((6, 2, 3)), In((4, 6), grad=False)],
        _mha_float_mask,
    ),
    Case(
        "mha_unbatched",
        lambda lib: lib.nn.MultiheadAttention(4, 2),
        [In((3, 4))],
        _mha_self,
    ),
    Case(
        "encoder_layer",
        lambda lib: lib.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True),
        [In((2, 5, 8))],
    ),
    Case(
        "encoder_layer_norm_first_gelu_causal",
        lambda lib: lib.nn.TransformerEncoderLayer(
            8, 2, 16, dropout=0.0, activation="gelu", norm_first=True
        ),
        [In((5, 2, 8))],
        _encoder_causal,
    ),
    Case(
        "encoder_stack",
        lambda lib: lib.nn.TransformerEncoder(
            lib.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0),
            2,
            norm=lib.nn.LayerNorm(8),
            enable_nested_tensor=False,
        ),
        [In((5, 2, 8))],
    ),
    Case(
        "cross_entropy",
        lambda lib: lib.nn.CrossEntropyLoss(),
        [In((4, 5)), In((4,), "i", 5)],
    ),
    Case("cross_entropy_weighted", _ce_weighted, [In((6, 5)), In((6,), "i", 5)]),
    Case(
        "cross_entropy_nd_sum",
        lambda lib: lib.nn.CrossEntropyLoss(reduction="sum"),
        [In((2, 5, 3)), In((2, 3), "i", 5)],
    ),
    Case(
        "cross_entropy_soft_targets",
        lambda lib: lib.nn.CrossEntropyLoss(),
        [In((4, 5)), In((4, 5), "p", grad=False)],
    ),
    Case("nll", lambda lib: lib.nn.NLLLoss(), [In((4, 5)), In((4,), "i", 5)]),
    Case(
        "nll_none",
        lambda lib: lib.nn.NLLLoss(reduction="none", ignore_index=2),
        [In((4, 5)), In((4,), "i", 5)],
    ),
    Case("mse", lambda lib: lib.nn.MSELoss(), [In((3, 4)), In((3, 4), grad=False)]),
    Case("l1_sum", lambda lib: lib.nn.L1Loss(reduction="sum"), [In((3, 4)), In((3, 4))]),
    Case("smooth_l1", lambda lib: lib.nn.SmoothL1Loss(beta=0.5), [In((3, 4)), In((3, 4))]),
    Case("huber", lambda lib: lib.nn.HuberLoss(delta=0.7), [In((3, 4)), In((3, 4))]),
    Case("bce", lambda lib: lib.nn.BCELoss(), [In((3, 4), "p"), In((3, 4), "p", grad=False)]),
    Case(
        "bce_logits_pos_weight",
        lambda lib: lib.nn.BCEWithLogitsLoss(pos_weight=lib.tensor([1.0, 2.0, 0.5, 3.0])),
        [In((3, 4)), In((3, 4), "p", grad=False)],
    ),
    Case(
        "kl_div_batchmean",
        lambda lib: lib.nn.KLDivLoss(reduction="batchmean"),
        [In((3, 4)), In((3, 4), "p", grad=False)],
    ),
    Case(
        "kl_div_log_target",
        lambda lib: lib.nn.KLDivLoss(log_target=True),
        [In((3, 4)), In((3, 4), grad=False)],
    ),
]


test_forward_and_backward_match_torch, test_repr_and_parameter_names_match_torch = (
    module_case_tests(CASES)
)
test_forward_and_backward_match_torch = pytest.mark.filterwarnings(
    "ignore:reduction. 'mean' divides the total loss"
)(test_forward_and_backward_match_torch)


def test_batch_norm_cumulative_average_over_batches():
    rng = np.random.default_rng(3)
    tmod, kmod = torch.nn.BatchNorm1d(3, momentum=None), kiln.nn.BatchNorm1d(3, momentum=None)
    for _ in range(3):
        x = rng.standard_normal((6, 3)).astype(np.float32)
        assert_close(kmod(kiln.tensor(x)), tmod(torch.tensor(x)))
    assert_close(kmod.running_mean, tmod.running_mean)
    assert_close(kmod.running_var, tmod.running_var)
    assert int(kmod.num_batches_tracked) == 3
    kmod.eval()
    tmod.eval()
    x = rng.standard_normal((2, 3)).astype(np.float32)
    assert_close(kmod(kiln.tensor(x)), tmod(torch.tensor(x)))


def test_batch_norm_loads_checkpoint_without_num_batches_tracked():
    m = kiln.nn.BatchNorm2d(2)
    state = {k: v for k, v in m.state_dict().items() if k != "num_batches_tracked"}
    assert repr(m.load_state_dict(state)) == "<All keys matched successfully>"


def test_batch_norm_rejects_wrong_rank():
    with pytest.raises(ValueError, match=r"expected 4D input \(got 2D input\)"):
        kiln.nn.BatchNorm2d(2)(kiln.ones(3, 2))
    with pytest.raises(ValueError, match=r"expected 2D or 3D input \(got 4D input\)"):
        kiln.nn.BatchNorm1d(2)(kiln.ones(3, 2, 1, 1))


def test_dropout_training_zeroes_and_rescales():
    m = kiln.nn.Dropout(0.25)
    y = m(kiln.ones(200, 200)).numpy()
    assert set(np.unique(y)) <= {0.0, np.float32(1 / 0.75)}
    assert abs((y == 0).mean() - 0.25) < 0.02
    with pytest.raises(ValueError, match="dropout probability has to be between 0 and 1"):
        kiln.nn.Dropout(1.5)


def test_feature_dropout_zeroes_whole_channels():
    y = kiln.nn.Dropout2d(0.5)(kiln.ones(8, 16, 3, 3)).numpy()
    per_channel = y.reshape(8, 16, 9)
    assert np.all((per_channel == 0).all(-1) | (per_channel == 2.0).all(-1))
    assert 0.2 < (per_channel[..., 0] == 0).mean() < 0.8


def test_embedding_padding_row_is_zero_and_gets_no_gradient():
    emb = kiln.nn.Embedding(5, 3, padding_idx=2)
    assert float(emb.weight[2].abs().sum()) == 0.0
    emb(kiln.tensor([[2, 1, 2]])).sum().backward()
    assert float(emb.weight.grad[2].abs().sum()) == 0.0
    assert float(emb.weight.grad[1].sum()) == 3.0


def test_embedding_from_pretrained_shares_and_freezes():
    table = kiln.randn(4, 2)
    emb = kiln.nn.Embedding.from_pretrained(table)
    assert not emb.weight.requires_grad and emb.weight._data is table._data
    assert kiln.nn.Embedding.from_pretrained(table, freeze=False).weight.requires_grad
    with pytest.raises(AssertionError, match="2-dimensional"):
        kiln.nn.Embedding.from_pretrained(kiln.ones(3))


def test_conv_argument_errors_match_torch():
    for kwargs, message in (
        ({"groups": 0}, "groups must be a positive integer"),
        ({"groups": 2}, "in_channels must be divisible by groups"),
        ({"padding": "full"}, "Invalid padding string 'full'"),
        ({"padding": "same", "stride": 2}, "padding='same' is not supported for strided"),
        ({"padding_mode": "mirror"}, "padding_mode must be one of"),
    ):
        with pytest.raises(ValueError, match=message):
            kiln.nn.Conv2d(3, 4, 3, **kwargs)
        with pytest.raises(ValueError, match=message):
            torch.nn.Conv2d(3, 4, 3, **kwargs)


def test_conv_transpose_output_size_selects_output_padding():
    rng = np.random.default_rng(5)
    tmod, kmod = (
        torch.nn.ConvTranspose2d(2, 3, 3, stride=2),
        kiln.nn.ConvTranspose2d(2, 3, 3, stride=2),
    )
    copy_weights(kmod, tmod)
    x = rng.standard_normal((1, 2, 4, 4)).astype(np.float32)
    out_t = tmod(torch.tensor(x), output_size=[10, 10])
    out_k = kmod(kiln.tensor(x), output_size=[10, 10])
    assert tuple(out_k.shape) == (1, 3, 10, 10)
    assert_close(out_k, out_t, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="requested an output size"):
        kmod(kiln.tensor(x), output_size=[12, 12])


def test_mha_need_weights_shapes_and_errors():
    m = kiln.nn.MultiheadAttention(8, 2, batch_first=True)
    x = kiln.randn(3, 4, 8)
    out, w = m(x, x, x)
    assert tuple(out.shape) == (3, 4, 8) and tuple(w.shape) == (3, 4, 4)
    _, w = m(x, x, x, average_attn_weights=False)
    assert tuple(w.shape) == (3, 2, 4, 4)
    assert m(x, x, x, need_weights=False)[1] is None
    with pytest.raises(AssertionError, match="embed_dim must be divisible by num_heads"):
        kiln.nn.MultiheadAttention(7, 2)
    with pytest.raises(RuntimeError, match="Need attn_mask if specifying the is_causal hint"):
        m(x, x, x, is_causal=True)
    with pytest.raises(RuntimeError, match="The shape of the 2D attn_mask"):
        m(x, x, x, attn_mask=kiln.zeros(3, 3))


def test_loss_legacy_reduction_arguments_warn_and_map():
    with pytest.warns(UserWarning, match="reduction='sum'"):
        loss = kiln.nn.MSELoss(size_average=False)
    assert loss.reduction == "sum"
    with pytest.warns(UserWarning, match="reduction='none'"):
        assert kiln.nn.L1Loss(reduce=False, size_average=None).reduction == "none"


def test_group_norm_requires_divisible_channels():
    with pytest.raises(
        ValueError, match=r"num_channels \(4\) must be divisible by num_groups \(3\)"
    ):
        kiln.nn.GroupNorm(3, 4)


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
    copy_weights(seq[kiln], seq[torch])
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


@needs_torch
def test_feature_alpha_dropout_module():
    for lib in (kiln, torch):
        layer = lib.nn.FeatureAlphaDropout(0.2)
        assert repr(layer) == "FeatureAlphaDropout(p=0.2, inplace=False)"
        out = layer(lib.ones(4, 6, 5))
        # whole channels share one fate: each (sample, channel) plane is constant
        planes = out.numpy().reshape(24, 5)
        assert np.all(planes == planes[:, :1])
        layer.eval()
        assert layer(lib.ones(1, 2, 2)).tolist() == [[[1.0, 1.0], [1.0, 1.0]]]
