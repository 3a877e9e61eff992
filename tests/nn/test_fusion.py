"""Conv/Linear + BatchNorm fusion (``fuse_conv_bn_eval`` and friends) against
torch.nn.utils, and fused or hook-normalized modules under ``kiln.compile``."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import kiln
from kiln.nn import utils as kutils
from tests.nn.helpers import float64_pair
from tests.oracle import assert_close, needs_torch, torch

pytestmark = needs_torch


def _bn_pair(num, seed):
    k, t = float64_pair(lambda lib: lib.nn.BatchNorm2d(num), seed)
    rng = np.random.default_rng(seed + 10)
    mean, var = rng.standard_normal(num), rng.uniform(0.5, 2.0, num)
    with torch.no_grad(), kiln.no_grad():
        for bn in (k, t):
            lib = kiln if bn is k else torch
            bn.running_mean.copy_(lib.tensor(mean))
            bn.running_var.copy_(lib.tensor(var))
    return k.eval(), t.eval()


@pytest.mark.parametrize("transpose", [False, True])
@pytest.mark.parametrize("bias", [True, False])
def test_fuse_conv_bn_eval_matches_torch_and_unfused(transpose, bias):
    cls = "ConvTranspose2d" if transpose else "Conv2d"
    kc, tc = float64_pair(lambda lib: getattr(lib.nn, cls)(2, 3, 3, bias=bias))
    kbn, tbn = _bn_pair(3, 1)
    kc.eval()
    tc.eval()
    kf = kutils.fuse_conv_bn_eval(kc, kbn, transpose=transpose)
    tf = torch.nn.utils.fuse_conv_bn_eval(tc, tbn, transpose=transpose)
    assert_close([kf.weight, kf.bias], [tf.weight, tf.bias])
    assert isinstance(kf.weight, kiln.nn.Parameter) and kf is not kc
    x = kiln.tensor(np.random.default_rng(4).standard_normal((1, 2, 5, 5)))
    assert_close(kf(x), kbn(kc(x)))


def test_fuse_linear_bn_eval_matches_torch_and_unfused():
    kl, tl = float64_pair(lambda lib: lib.nn.Linear(4, 3))
    kbn, tbn = _bn_pair(3, 2)
    kl.eval()
    tl.eval()
    kbn1 = kiln.nn.BatchNorm1d(3).double().eval()
    tbn1 = torch.nn.BatchNorm1d(3).double().eval()
    kbn1.load_state_dict(kbn.state_dict())
    tbn1.load_state_dict(tbn.state_dict())
    kf = kutils.fuse_linear_bn_eval(kl, kbn1)
    tf = torch.nn.utils.fuse_linear_bn_eval(tl, tbn1)
    assert_close([kf.weight, kf.bias], [tf.weight, tf.bias])
    x = kiln.tensor(np.random.default_rng(5).standard_normal((2, 4)))
    assert_close(kf(x), kbn1(kl(x)))
    with pytest.raises(AssertionError, match="Fusion only for eval!"):
        kutils.fuse_linear_bn_eval(kl.train(), kbn1)
    with pytest.raises(AssertionError, match="linear.out_features == bn.num_features"):
        kutils.fuse_linear_bn_eval(kiln.nn.Linear(4, 2).eval(), kbn1)


def test_fuse_weights_functions_with_missing_affine():
    rng = np.random.default_rng(6)
    w, rm, rv = rng.standard_normal((3, 2, 1, 1)), rng.standard_normal(3), rng.uniform(1, 2, 3)
    k = kutils.fuse_conv_bn_weights(
        kiln.tensor(w), None, kiln.tensor(rm), kiln.tensor(rv), 1e-5, None, None
    )
    t = torch.nn.utils.fuse_conv_bn_weights(
        torch.tensor(w), None, torch.tensor(rm), torch.tensor(rv), 1e-5, None, None
    )
    assert_close(k, t)
    assert k[0].requires_grad == t[0].requires_grad
    lw, lb = rng.standard_normal((3, 4)), rng.standard_normal(3)
    bw, bb = rng.standard_normal(3), rng.standard_normal(3)
    args = (lw, lb, rm, rv, 1e-3, bw, bb)
    k = kutils.fuse_linear_bn_weights(
        *(kiln.tensor(a) if isinstance(a, np.ndarray) else a for a in args)
    )
    t = torch.nn.utils.fuse_linear_bn_weights(
        *(torch.tensor(a) if isinstance(a, np.ndarray) else a for a in args)
    )
    assert_close(k, t)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_fused_and_hook_normalized_modules_compile_and_match_eager(backend):
    rng = np.random.default_rng(8)
    conv, bn = kiln.nn.Conv2d(2, 3, 3).eval(), kiln.nn.BatchNorm2d(3).eval()
    with kiln.no_grad():
        bn.running_mean.copy_(kiln.tensor(rng.standard_normal(3), dtype=kiln.float32))
        bn.running_var.copy_(kiln.tensor(rng.uniform(0.5, 2.0, 3), dtype=kiln.float32))
    fused = kutils.fuse_conv_bn_eval(conv, bn)
    x = kiln.tensor(rng.standard_normal((2, 2, 5, 5)), dtype=kiln.float32)
    with kiln.no_grad():
        out = kiln.compile(lambda inp: fused(inp).relu(), backend=backend)(x)
        assert_close(out, bn(conv(x)).relu(), rtol=1e-5, atol=1e-5)
    # the hook forms run their pre-hook eagerly (a graph break) and compile the rest
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        modules = [
            kutils.weight_norm(kiln.nn.Linear(4, 3)),
            kutils.spectral_norm(kiln.nn.Linear(4, 3)),
        ]
    y = kiln.tensor(rng.standard_normal((2, 4)), dtype=kiln.float32)
    for module in modules:
        module.eval()
        out = kiln.compile(lambda inp: module(inp).tanh(), backend=backend)(y)
        assert_close(out, module(y).tanh(), rtol=1e-5, atol=1e-6)
