"""The hook forms of weight_norm and spectral_norm (and their removal) against
torch.nn.utils: values and gradients in float64, power-iteration state, argument errors."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import kiln
from kiln.nn import utils as kutils
from tests.nn.helpers import float64_pair
from tests.oracle import assert_close, needs_torch, torch

pytestmark = needs_torch


def _run(lib, module, x):
    out = module(lib.tensor(x))
    (out * out.sin()).sum().backward()
    return out


@pytest.mark.parametrize("dim", [0, 1, None, -2])
def test_weight_norm_hook_matches_torch(dim):
    k, t = float64_pair(lambda lib: lib.nn.Linear(4, 3))
    with pytest.warns(FutureWarning, match="weight_norm` is deprecated"):
        kutils.weight_norm(k, dim=dim)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.nn.utils.weight_norm(t, dim=dim)
    assert [n for n, _ in k.named_parameters()] == [n for n, _ in t.named_parameters()]
    assert_close([k.weight_g, k.weight_v], [t.weight_g, t.weight_v])
    x = np.random.default_rng(1).standard_normal((2, 4))
    assert_close(_run(kiln, k, x), _run(torch, t, x))
    assert_close([k.weight_g.grad, k.weight_v.grad], [t.weight_g.grad, t.weight_v.grad])
    kutils.remove_weight_norm(k)
    torch.nn.utils.remove_weight_norm(t)
    assert isinstance(k.weight, kiln.nn.Parameter) and not hasattr(k, "weight_g")
    assert_close(k.weight, t.weight)


def test_weight_norm_hook_on_conv_and_errors():
    k, t = float64_pair(lambda lib: lib.nn.Conv2d(2, 3, 3))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        kutils.weight_norm(k)
        torch.nn.utils.weight_norm(t)
        x = np.random.default_rng(2).standard_normal((1, 2, 5, 5))
        assert_close(_run(kiln, k, x), _run(torch, t, x))
        assert_close(k.weight_g.grad, t.weight_g.grad)
        with pytest.raises(RuntimeError, match="Cannot register two weight_norm hooks"):
            kutils.weight_norm(k)
    with pytest.raises(ValueError, match="weight_norm of 'bias' not found"):
        kutils.remove_weight_norm(k, "bias")


def _copy_uv(k, t):
    with kiln.no_grad():
        k.weight_u.copy_(kiln.tensor(t.weight_u.numpy()))
        k.weight_v.copy_(kiln.tensor(t.weight_v.numpy()))


@pytest.mark.parametrize("kind", ["linear", "conv_transpose"])
def test_spectral_norm_hook_matches_torch(kind):
    if kind == "linear":
        k, t = float64_pair(lambda lib: lib.nn.Linear(5, 4))
        x = np.random.default_rng(3).standard_normal((2, 5))
    else:
        k, t = float64_pair(lambda lib: lib.nn.ConvTranspose2d(2, 3, 3))
        x = np.random.default_rng(3).standard_normal((1, 2, 4, 4))
    kutils.spectral_norm(k, n_power_iterations=3)
    torch.nn.utils.spectral_norm(t, n_power_iterations=3)
    assert sorted(k.state_dict()) == sorted(t.state_dict())
    _copy_uv(k, t)
    assert_close(_run(kiln, k, x), _run(torch, t, x))
    assert_close(k.weight_orig.grad, t.weight_orig.grad)
    assert_close([k.weight_u, k.weight_v], [t.weight_u, t.weight_v])
    k.eval()
    t.eval()
    assert_close(_run(kiln, k, x), _run(torch, t, x))
    kutils.remove_spectral_norm(k)
    torch.nn.utils.remove_spectral_norm(t)
    assert [n for n, _ in k.named_parameters()] == [n for n, _ in t.named_parameters()]
    assert_close(k.weight, t.weight)


def test_spectral_norm_hook_errors():
    lin = kiln.nn.Linear(2, 2)
    with pytest.raises(ValueError, match="Expected n_power_iterations to be positive"):
        kutils.spectral_norm(lin, n_power_iterations=0)
    kutils.spectral_norm(lin)
    with pytest.raises(RuntimeError, match="Cannot register two spectral_norm hooks"):
        kutils.spectral_norm(lin)
    with pytest.raises(ValueError, match="spectral_norm of 'bias' not found"):
        kutils.remove_spectral_norm(lin, "bias")
