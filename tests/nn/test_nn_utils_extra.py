"""nn.utils extras against torch.nn.utils: the hook forms of weight_norm and spectral_norm (and
their removal), Conv/Linear + BatchNorm fusion, skip_init, the deprecated clip_grad_norm, and
parameters_to_vector / vector_to_parameters edge cases. Values and gradients in float64."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import kiln
from kiln.nn import utils as kutils
from tests.oracle import assert_close, needs_torch, torch

pytestmark = needs_torch


def _pair(make, seed=0):
    """The same module in kiln and torch (float64, equal parameters)."""
    k, t = make(kiln).double(), make(torch).double()
    rng = np.random.default_rng(seed)
    with torch.no_grad():
        for (_, kp), (_, tp) in zip(k.named_parameters(), t.named_parameters()):
            value = rng.standard_normal(tuple(kp.shape))
            tp.copy_(torch.tensor(value))
            with kiln.no_grad():
                kp.copy_(kiln.tensor(value))
    return k, t


def _run(lib, module, x):
    out = module(lib.tensor(x))
    (out * out.sin()).sum().backward()
    return out


# ------------------------------------------------------------------------------ weight_norm
@pytest.mark.parametrize("dim", [0, 1, None, -2])
def test_weight_norm_hook_matches_torch(dim):
    k, t = _pair(lambda lib: lib.nn.Linear(4, 3))
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
    k, t = _pair(lambda lib: lib.nn.Conv2d(2, 3, 3))
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


# ------------------------------------------------------------------------------ spectral_norm
def _copy_uv(k, t):
    with kiln.no_grad():
        k.weight_u.copy_(kiln.tensor(t.weight_u.numpy()))
        k.weight_v.copy_(kiln.tensor(t.weight_v.numpy()))


@pytest.mark.parametrize("kind", ["linear", "conv_transpose"])
def test_spectral_norm_hook_matches_torch(kind):
    if kind == "linear":
        k, t = _pair(lambda lib: lib.nn.Linear(5, 4))
        x = np.random.default_rng(3).standard_normal((2, 5))
    else:
        k, t = _pair(lambda lib: lib.nn.ConvTranspose2d(2, 3, 3))
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


# ------------------------------------------------------------------------------ fusion
def _bn_pair(num, seed):
    k, t = _pair(lambda lib: lib.nn.BatchNorm2d(num), seed)
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
    kc, tc = _pair(lambda lib: getattr(lib.nn, cls)(2, 3, 3, bias=bias))
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
    kl, tl = _pair(lambda lib: lib.nn.Linear(4, 3))
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


# ------------------------------------------------------------------------------ misc
def test_skip_init_builds_without_initialising():
    lin = kutils.skip_init(kiln.nn.Linear, 3, 4, bias=True, dtype=kiln.float64)
    t = torch.nn.utils.skip_init(torch.nn.Linear, 3, 4, bias=True, dtype=torch.float64)
    assert lin.weight.shape == t.weight.shape and lin.weight.dtype is kiln.float64
    assert lin.weight.device.type == "cpu" and isinstance(lin.weight, kiln.nn.Parameter)
    assert lin(kiln.ones(2, 3, dtype=kiln.float64)).shape == (2, 4)
    with pytest.raises(RuntimeError, match="Expected a Module"):
        kutils.skip_init(int)

    class NoDevice(kiln.nn.Module):
        def __init__(self, n):
            super().__init__()

    with pytest.raises(RuntimeError, match="Module must support a 'device' arg"):
        kutils.skip_init(NoDevice, 3)


def test_clip_grad_norm_is_a_deprecated_alias():
    results = []
    for lib, utils in ((kiln, kutils), (torch, torch.nn.utils)):
        p = lib.ones(4, requires_grad=True)
        p.grad = lib.tensor([3.0, 4.0, 0.0, 0.0])
        with pytest.warns(FutureWarning, match="clip_grad_norm` is now deprecated"):
            total = utils.clip_grad_norm(p, 1.0)
        results.append((total, p.grad))
    assert_close(results[0], results[1])


def test_parameters_to_vector_and_back_match_torch():
    for lib, utils in ((kiln, kutils), (torch, torch.nn.utils)):
        a = lib.nn.Parameter(lib.arange(6.0).reshape(2, 3))
        b = lib.nn.Parameter(lib.ones(2))
        vec = utils.parameters_to_vector([a, b])
        assert vec.shape == (8,) and vec.requires_grad
        utils.vector_to_parameters(lib.arange(8.0) * 2, [a, b])
        np.testing.assert_array_equal(a.detach().numpy(), np.arange(6.0).reshape(2, 3) * 2)
        np.testing.assert_array_equal(b.detach().numpy(), [12.0, 14.0])
        with pytest.raises(TypeError, match="expected torch.Tensor, but got: list"):
            utils.vector_to_parameters([1.0], [a])
        with pytest.raises(RuntimeError, match="view size is not compatible"):
            utils.parameters_to_vector([lib.nn.Parameter(lib.ones(3, 4).t())])
        meta = lib.nn.Parameter(lib.ones(2, device="meta"))
        with pytest.raises(RuntimeError, match="device"):
            utils.parameters_to_vector([b, meta])


# ------------------------------------------------------------------------------ compile
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
