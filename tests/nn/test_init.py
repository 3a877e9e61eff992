"""nn.init: gains, fans and deterministic fills equal PyTorch's; random fills have PyTorch's
bounds and moments (kiln's generator differs, so values are checked statistically)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import kiln
import kiln.nn as nn
from kiln.nn import init
from tests.oracle import needs_torch, torch

SHAPES = [(5, 7), (4, 3, 2), (6, 2, 3, 3), (2, 3, 1, 4, 5)]


@needs_torch
@pytest.mark.parametrize(
    "name,param",
    [
        ("linear", None),
        ("conv2d", None),
        ("sigmoid", None),
        ("tanh", None),
        ("relu", None),
        ("leaky_relu", None),
        ("leaky_relu", 0.2),
        ("leaky_relu", 3),
        ("selu", None),
    ],
)
def test_calculate_gain_matches_torch(name, param):
    assert init.calculate_gain(name, param) == torch.nn.init.calculate_gain(name, param)


def test_calculate_gain_errors():
    with pytest.raises(ValueError, match="Unsupported nonlinearity softsign"):
        init.calculate_gain("softsign")
    with pytest.raises(ValueError, match="negative_slope True not a valid number"):
        init.calculate_gain("leaky_relu", True)


@needs_torch
@pytest.mark.parametrize("shape", SHAPES)
def test_fan_in_and_fan_out_match_torch(shape):
    expected = torch.nn.init._calculate_fan_in_and_fan_out(torch.empty(shape))
    assert init._calculate_fan_in_and_fan_out(kiln.empty(shape)) == expected


def test_fans_need_two_dims():
    with pytest.raises(ValueError, match="fewer than 2 dimensions"):
        init._calculate_fan_in_and_fan_out(kiln.empty(3))


def _values(t) -> np.ndarray:
    return t.detach().numpy().astype(np.float64).ravel()


def test_uniform_fills_in_place_within_bounds_under_no_grad_of_parameter():
    p = nn.Parameter(kiln.empty(200, 100))
    out = init.uniform_(p, -0.5, 2.0)
    assert out is p and p.requires_grad and p.grad_fn is None
    v = _values(p)
    assert v.min() >= -0.5 and v.max() < 2.0
    assert abs(v.mean() - 0.75) < 0.02 and abs(v.std() - 2.5 / math.sqrt(12)) < 0.02


def test_normal_moments():
    v = _values(init.normal_(kiln.empty(300, 100), mean=1.5, std=0.3))
    assert abs(v.mean() - 1.5) < 0.01 and abs(v.std() - 0.3) < 0.01


@needs_torch
def test_trunc_normal_matches_torch_distribution():
    k = _values(init.trunc_normal_(kiln.empty(400, 100), mean=0.2, std=1.0, a=-1.0, b=1.5))
    t = torch.nn.init.trunc_normal_(torch.empty(400, 100), mean=0.2, std=1.0, a=-1.0, b=1.5)
    t = t.numpy().astype(np.float64).ravel()
    assert k.min() >= -1.0 and k.max() <= 1.5
    assert abs(k.mean() - t.mean()) < 0.02 and abs(k.std() - t.std()) < 0.02


def test_trunc_normal_warns_when_mean_far_outside():
    with pytest.warns(UserWarning, match="mean is more than 2 std"):
        init.trunc_normal_(kiln.empty(3), mean=10.0, std=1.0)


@needs_torch
def test_deterministic_fills_match_torch():
    pairs = [
        (init.constant_(kiln.empty(3, 4), 0.25), torch.nn.init.constant_(torch.empty(3, 4), 0.25)),
        (init.ones_(kiln.empty(2, 3)), torch.nn.init.ones_(torch.empty(2, 3))),
        (init.zeros_(kiln.ones(2, 3)), torch.nn.init.zeros_(torch.ones(2, 3))),
        (init.eye_(kiln.empty(3, 5)), torch.nn.init.eye_(torch.empty(3, 5))),
        (init.dirac_(kiln.empty(4, 2, 3, 3)), torch.nn.init.dirac_(torch.empty(4, 2, 3, 3))),
        (
            init.dirac_(kiln.empty(6, 2, 3), groups=2),
            torch.nn.init.dirac_(torch.empty(6, 2, 3), groups=2),
        ),
    ]
    for k, t in pairs:
        np.testing.assert_array_equal(k.numpy(), t.numpy())
    with pytest.raises(ValueError, match="Only tensors with 2 dimensions are supported"):
        init.eye_(kiln.empty(2, 2, 2))


def test_orthogonal_rows_are_orthonormal_times_gain():
    for shape in ((4, 6), (6, 4), (3, 2, 2)):
        w = init.orthogonal_(kiln.empty(shape), gain=2.0).numpy().reshape(shape[0], -1)
        small = w @ w.T if shape[0] <= w.shape[1] else w.T @ w
        np.testing.assert_allclose(small, 4.0 * np.eye(small.shape[0]), atol=1e-5)


def test_xavier_bounds_and_std():
    t = kiln.empty(300, 200)
    bound = math.sqrt(6.0 / 500) * 1.5
    v = _values(init.xavier_uniform_(t, gain=1.5))
    assert v.max() <= bound and v.min() >= -bound and v.max() > 0.99 * bound
    v = _values(init.xavier_normal_(t, gain=1.5))
    assert abs(v.std() - 1.5 * math.sqrt(2.0 / 500)) < 0.002


@pytest.mark.parametrize("mode,fan", [("fan_in", 200 * 9), ("fan_out", 30 * 9)])
def test_kaiming_std_follows_mode_and_gain(mode, fan):
    t = kiln.empty(30, 200, 3, 3)
    std = math.sqrt(2.0) / math.sqrt(fan)
    v = _values(init.kaiming_normal_(t, mode=mode, nonlinearity="relu"))
    assert abs(v.std() / std - 1) < 0.03
    v = _values(init.kaiming_uniform_(t, a=0.2, mode=mode))
    bound = math.sqrt(3.0) * math.sqrt(2.0 / (1 + 0.04)) / math.sqrt(fan)
    assert v.max() <= bound and v.max() > 0.99 * bound


def test_kaiming_errors_and_empty_tensors():
    with pytest.raises(ValueError, match="Mode fan_avg not supported"):
        init.kaiming_uniform_(kiln.empty(3, 3), mode="fan_avg")
    with pytest.warns(UserWarning, match="Initializing zero-element tensors is a no-op"):
        init.kaiming_uniform_(kiln.empty(0, 3))


def test_generator_and_manual_seed_make_fills_reproducible():
    g1 = kiln.Generator().manual_seed(11)
    g2 = kiln.Generator().manual_seed(11)
    a = init.normal_(kiln.empty(5), generator=g1)
    b = init.normal_(kiln.empty(5), generator=g2)
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    kiln.manual_seed(3)
    first = nn.Linear(4, 3).weight.detach().numpy().copy()
    kiln.manual_seed(3)
    np.testing.assert_array_equal(nn.Linear(4, 3).weight.detach().numpy(), first)


def test_default_initialisations_follow_pytorch():
    lin = nn.Linear(400, 300)
    bound = 1 / math.sqrt(400)
    for p in (lin.weight, lin.bias):
        v = _values(p)
        assert v.max() <= bound and v.min() >= -bound and v.max() > 0.95 * bound
    conv = nn.Conv2d(8, 16, 3)
    bound = 1 / math.sqrt(8 * 9)
    assert _values(conv.weight).max() <= bound and _values(conv.bias).max() <= bound
    emb = _values(nn.Embedding(1000, 50).weight)
    assert abs(emb.mean()) < 0.01 and abs(emb.std() - 1) < 0.01
    norm = nn.LayerNorm(5)
    assert _values(norm.weight).tolist() == [1.0] * 5 and _values(norm.bias).tolist() == [0.0] * 5
    mha = nn.MultiheadAttention(16, 4)
    bound = math.sqrt(6.0 / (48 + 16))
    assert _values(mha.in_proj_weight).max() <= bound
    assert not _values(mha.in_proj_bias).any() and not _values(mha.out_proj.bias).any()


def test_sparse_init_zeroes_a_fraction_of_each_column():
    weight = kiln.nn.init.sparse_(kiln.empty(100, 40), sparsity=0.3, std=0.05)
    assert ((weight == 0).sum(0) >= 30).all().item()
    assert abs(weight[weight != 0].std().item() - 0.05) < 0.01
    with pytest.raises(ValueError, match="Only tensors with 2 dimensions are supported"):
        kiln.nn.init.sparse_(kiln.empty(3), 0.1)


def test_deprecated_init_names_warn_and_still_fill():
    with pytest.warns(FutureWarning, match=r"`nn.init.xavier_uniform` is now deprecated"):
        weight = kiln.nn.init.xavier_uniform(kiln.zeros(30, 30))
    assert weight.abs().max().item() <= np.sqrt(6 / 60) and weight.std().item() > 0
    with pytest.warns(FutureWarning, match=r"`nn.init.constant` is now deprecated"):
        assert kiln.nn.init.constant(kiln.zeros(2), 0.5).tolist() == [0.5, 0.5]


@needs_torch
def test_private_init_fills_and_layer_type_aliases_exist_as_in_torch():
    from kiln.nn.common_types import _size_2_t

    assert _size_2_t == int | tuple[int, int]
    for name in ("uniform_", "normal_", "trunc_normal_", "fill_", "zero_"):
        assert hasattr(kiln.nn.init, f"_no_grad_{name}") and hasattr(
            torch.nn.init, f"_no_grad_{name}"
        )
    weight = kiln.nn.init._no_grad_trunc_normal_(kiln.empty(100), 0.0, 1.0, -0.5, 0.5)
    assert float(weight.abs().max()) <= 0.5
    assert kiln.nn.init._no_grad_fill_(kiln.empty(3), 2.0).tolist() == [2.0, 2.0, 2.0]
