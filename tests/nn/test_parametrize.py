"""nn.utils.parametrize and nn.utils.parametrizations against torch: registering, chaining,
right_inverse, caching, removal, state dicts, errors, and the weight_norm / spectral_norm
parametrizations (values and gradients in float64)."""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest

import kiln
from kiln.nn.utils import parametrizations as KP
from kiln.nn.utils import parametrize as KZ
from tests.oracle import assert_close, needs_torch, torch

pytestmark = needs_torch


def _symmetric(lib):
    class Symmetric(lib.nn.Module):
        def forward(self, X):
            return X.triu() + X.triu(1).transpose(0, 1)

        def right_inverse(self, A):
            return A.triu()

    return Symmetric()


def _scale(lib, factor):
    class Scale(lib.nn.Module):
        def forward(self, X):
            return X * factor

        def right_inverse(self, A):
            return A / factor

    return Scale()


def _linears(n_in=3, n_out=3, seed=0):
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((n_out, n_in))
    b = rng.standard_normal(n_out)
    pair = []
    for lib in (kiln, torch):
        lin = lib.nn.Linear(n_in, n_out).double()
        with lib.no_grad():
            lin.weight.copy_(lib.tensor(w))
            lin.bias.copy_(lib.tensor(b))
        pair.append(lin)
    return pair


def _forward_backward(lib, module, x):
    out = module(lib.tensor(x))
    (out * out).sum().backward()
    return out


def test_register_parametrization_forward_and_gradients_match_torch():
    k, t = _linears()
    for lib, lin, api in ((kiln, k, KZ), (torch, t, torch.nn.utils.parametrize)):
        api.register_parametrization(lin, "weight", _symmetric(lib))
        api.register_parametrization(lin, "weight", _scale(lib, 2.0))
    assert type(k).__name__ == type(t).__name__ == "ParametrizedLinear"
    assert KZ.type_before_parametrizations(k) is kiln.nn.Linear
    assert_close(k.weight, t.weight)
    x = np.random.default_rng(1).standard_normal((4, 3))
    assert_close(_forward_backward(kiln, k, x), _forward_backward(torch, t, x))
    assert_close(k.parametrizations.weight.original.grad, t.parametrizations.weight.original.grad)
    assert list(k.state_dict()) == list(t.state_dict())
    assert [n for n, _ in k.named_parameters()] == [n for n, _ in t.named_parameters()]


def test_assigning_the_parametrized_tensor_calls_right_inverse():
    k, t = _linears()
    KZ.register_parametrization(k, "weight", _symmetric(kiln))
    torch.nn.utils.parametrize.register_parametrization(t, "weight", _symmetric(torch))
    target = np.arange(9.0).reshape(3, 3)
    target = target + target.T
    k.weight = kiln.tensor(target)
    t.weight = torch.tensor(target)
    assert_close(k.parametrizations.weight.original, t.parametrizations.weight.original)
    np.testing.assert_allclose(k.weight.detach().numpy(), target)


def test_is_parametrized_remove_and_leave_parametrized():
    k, t = _linears()
    assert not KZ.is_parametrized(k)
    KZ.register_parametrization(k, "weight", _symmetric(kiln))
    torch.nn.utils.parametrize.register_parametrization(t, "weight", _symmetric(torch))
    assert KZ.is_parametrized(k) and KZ.is_parametrized(k, "weight")
    assert not KZ.is_parametrized(k, "bias")
    KZ.remove_parametrizations(k, "weight")
    torch.nn.utils.parametrize.remove_parametrizations(t, "weight")
    assert type(k) is kiln.nn.Linear and not hasattr(k, "parametrizations")
    assert isinstance(k.weight, kiln.nn.Parameter)
    assert_close(k.weight, t.weight)
    k2, _ = _linears()
    before = k2.weight.detach().numpy().copy()
    KZ.register_parametrization(k2, "weight", _scale(kiln, 3.0))
    KZ.remove_parametrizations(k2, "weight", leave_parametrized=False)
    # the stored original is right_inverse(weight), as in torch
    np.testing.assert_allclose(k2.weight.detach().numpy(), before / 3.0)
    with pytest.raises(ValueError, match="does not have a parametrization on weight"):
        KZ.remove_parametrizations(k2, "weight")


def test_cached_computes_each_parametrized_tensor_once():
    calls = []

    class Counting(kiln.nn.Module):
        def forward(self, X):
            calls.append(1)
            return X * 2

    lin = kiln.nn.Linear(2, 2)
    KZ.register_parametrization(lin, "weight", Counting())
    calls.clear()
    with KZ.cached():
        first = lin.weight
        assert lin.weight is first
        with KZ.cached():
            assert lin.weight is first
    assert len(calls) == 1
    assert lin.weight is not first


def test_registration_errors_match_torch():
    class Shrink(kiln.nn.Module):
        def forward(self, X):
            return X[:1]

    class ToFloat(kiln.nn.Module):
        def forward(self, X):
            return X.float()

    lin = kiln.nn.Linear(3, 3).double()
    with pytest.raises(ValueError, match="may not change the shape"):
        KZ.register_parametrization(lin, "weight", Shrink())
    with pytest.raises(ValueError, match="may not change the dtype"):
        KZ.register_parametrization(lin, "weight", ToFloat())
    with pytest.raises(ValueError, match="does not have a parameter, a buffer, or a parametrized"):
        KZ.register_parametrization(lin, "nothing", Shrink())
    KZ.register_parametrization(lin, "weight", Shrink(), unsafe=True)
    assert lin.weight.shape == (1, 3)
    lin2 = kiln.nn.Linear(3, 3)
    KZ.register_parametrization(lin2, "weight", _scale(kiln, 2.0))
    with pytest.raises(ValueError, match="may not change the shape"):
        KZ.register_parametrization(lin2, "weight", Shrink())
    with pytest.raises(KeyError, match="attribute 'weight' already exists"):
        lin2.weight = kiln.nn.Parameter(kiln.ones(3, 3))


def test_parametrizing_a_buffer_and_multi_tensor_right_inverse():
    class Split(kiln.nn.Module):
        def forward(self, a, b):
            return a + b

        def right_inverse(self, X):
            return X * 0.25, X * 0.75

    bn = kiln.nn.BatchNorm1d(3)
    KZ.register_parametrization(bn, "running_var", _scale(kiln, 2.0))
    assert "parametrizations.running_var.original" in dict(bn.named_buffers())
    np.testing.assert_allclose(bn.running_var.numpy(), np.ones(3))
    lin = kiln.nn.Linear(2, 2)
    w = lin.weight.detach().numpy().copy()
    KZ.register_parametrization(lin, "weight", Split())
    plist = lin.parametrizations.weight
    assert plist.ntensors == 2 and not plist.is_tensor
    np.testing.assert_allclose(plist.original1.detach().numpy(), 0.75 * w, rtol=1e-6)
    np.testing.assert_allclose(lin.weight.detach().numpy(), w, rtol=1e-6)
    with pytest.raises(ValueError, match="Cannot leave unparametrized"):
        KZ.remove_parametrizations(lin, "weight", leave_parametrized=False)


def test_parametrized_module_deepcopies_but_does_not_pickle():
    lin = kiln.nn.Linear(2, 2)
    KZ.register_parametrization(lin, "weight", _scale(kiln, 2.0))
    clone = copy.deepcopy(lin)
    assert type(clone).__name__ == "ParametrizedLinear"
    np.testing.assert_allclose(clone.weight.detach().numpy(), lin.weight.detach().numpy())
    with pytest.raises(RuntimeError, match="Serialization of parametrized modules"):
        pickle.dumps(lin)


def test_transfer_parametrizations_and_params():
    source = kiln.nn.Linear(2, 2)
    KZ.register_parametrization(source, "weight", _scale(kiln, 2.0))
    target = kiln.nn.Linear(2, 2)
    KZ.transfer_parametrizations_and_params(source, target)
    assert KZ.is_parametrized(target, "weight")
    assert target.parametrizations.weight.original is source.parametrizations.weight.original


# ------------------------------------------------------------------------------ parametrizations
@pytest.mark.parametrize("dim", [0, 1, None, -2])
def test_weight_norm_parametrization_matches_torch(dim):
    k, t = _linears(4, 3)
    KP.weight_norm(k, dim=dim)
    torch.nn.utils.parametrizations.weight_norm(t, dim=dim)
    kw = k.parametrizations.weight
    tw = t.parametrizations.weight
    assert_close([kw.original0, kw.original1], [tw.original0, tw.original1])
    x = np.random.default_rng(2).standard_normal((5, 4))
    assert_close(_forward_backward(kiln, k, x), _forward_backward(torch, t, x))
    assert_close([kw.original0.grad, kw.original1.grad], [tw.original0.grad, tw.original1.grad])
    assert list(k.state_dict()) == list(t.state_dict())


def _copy_spectral_state(kmod, tmod):
    ks = kmod.parametrizations.weight[0]
    ts = tmod.parametrizations.weight[0]
    with kiln.no_grad():
        ks._u.copy_(kiln.tensor(ts._u.numpy()))
        ks._v.copy_(kiln.tensor(ts._v.numpy()))


@pytest.mark.parametrize("kind", ["linear", "conv", "conv_transpose"])
def test_spectral_norm_parametrization_matches_torch(kind):
    rng = np.random.default_rng(3)
    if kind == "linear":
        make = lambda lib: lib.nn.Linear(4, 3)  # noqa: E731
        x = rng.standard_normal((2, 4))
    elif kind == "conv":
        make = lambda lib: lib.nn.Conv2d(2, 3, 3)  # noqa: E731
        x = rng.standard_normal((1, 2, 5, 5))
    else:
        make = lambda lib: lib.nn.ConvTranspose2d(2, 3, 3)  # noqa: E731
        x = rng.standard_normal((1, 2, 4, 4))
    k, t = make(kiln).double(), make(torch).double()
    with torch.no_grad():
        for (_, kp), (_, tp) in zip(k.named_parameters(), t.named_parameters()):
            tp.copy_(torch.tensor(kp.detach().numpy()))
    KP.spectral_norm(k, n_power_iterations=2)
    torch.nn.utils.parametrizations.spectral_norm(t, n_power_iterations=2)
    _copy_spectral_state(k, t)
    assert_close(_forward_backward(kiln, k, x), _forward_backward(torch, t, x))
    korig, torig = k.parametrizations.weight.original, t.parametrizations.weight.original
    assert_close(korig.grad, torig.grad)
    k.eval()
    t.eval()
    assert_close(k.weight, t.weight)
    assert_close(k.parametrizations.weight[0]._u, t.parametrizations.weight[0]._u)


def test_spectral_norm_parametrization_normalizes_largest_singular_value():
    lin = kiln.nn.Linear(6, 5).double()
    KP.spectral_norm(lin)
    for _ in range(30):
        lin.weight
    sigma = np.linalg.svd(lin.weight.detach().numpy(), compute_uv=False)[0]
    assert sigma == pytest.approx(1.0, rel=1e-6)
    with pytest.raises(IndexError, match="Dimension out of range"):
        KP.spectral_norm(kiln.nn.Linear(2, 2), dim=2)
    with pytest.raises(ValueError, match="has no parameter or buffer with name 'nope'"):
        KP.spectral_norm(kiln.nn.Linear(2, 2), name="nope")


@pytest.mark.parametrize(
    ("shape", "orthogonal_map", "use_trivialization"),
    [
        ((4, 4), None, True),
        ((4, 4), "cayley", True),
        ((4, 4), "householder", True),
        ((4, 4), "householder", False),
        ((5, 3), "householder", False),
        ((3, 5), "householder", False),
    ],
)
def test_orthogonal_parametrization_matches_torch(shape, orthogonal_map, use_trivialization):
    k, t = _linears(shape[1], shape[0], seed=4)
    KP.orthogonal(k, orthogonal_map=orthogonal_map, use_trivialization=use_trivialization)
    torch.nn.utils.parametrizations.orthogonal(
        t, orthogonal_map=orthogonal_map, use_trivialization=use_trivialization
    )
    assert_close(k.weight, t.weight)
    x = np.random.default_rng(5).standard_normal((2, shape[1]))
    assert_close(_forward_backward(kiln, k, x), _forward_backward(torch, t, x))
    assert_close(k.parametrizations.weight.original.grad, t.parametrizations.weight.original.grad)


@pytest.mark.parametrize("orthogonal_map", ["matrix_exp", "cayley", "householder"])
def test_orthogonal_rectangular_weights_have_orthonormal_columns(orthogonal_map):
    lin = kiln.nn.Linear(3, 5).double()
    KP.orthogonal(lin, orthogonal_map=orthogonal_map)
    w = lin.weight.detach().numpy()
    np.testing.assert_allclose(w.T @ w, np.eye(3), atol=1e-12)
    target = np.linalg.qr(np.random.default_rng(6).standard_normal((5, 3)))[0]
    lin.weight = kiln.tensor(target)
    np.testing.assert_allclose(lin.weight.detach().numpy(), target, atol=1e-12)


def test_orthogonal_errors_match_torch():
    with pytest.raises(ValueError, match="Expected a matrix or batch of matrices"):
        KP.orthogonal(kiln.nn.Linear(2, 2), name="bias")
    with pytest.raises(ValueError, match='orthogonal_map has to be one of "matrix_exp"'):
        KP.orthogonal(kiln.nn.Linear(2, 2), orthogonal_map="qr")
    lin = KP.orthogonal(kiln.nn.Linear(2, 2), use_trivialization=False)
    with pytest.raises(NotImplementedError, match="not possible to assign to the matrix exp"):
        lin.weight = kiln.eye(2)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_parametrized_modules_compile_whole_and_match_eager(backend):
    modules = [
        KP.weight_norm(kiln.nn.Linear(4, 3), dim=1),
        KP.orthogonal(kiln.nn.Linear(4, 4)),
        KP.spectral_norm(kiln.nn.Linear(4, 3)).eval(),
    ]
    x = kiln.tensor(np.random.default_rng(7).standard_normal((2, 4)), dtype=kiln.float32)
    for module in modules:

        def f(inp):
            return module(inp).tanh()

        assert kiln.dynamo.explain(f)(x).graph_break_count == 0
        compiled = kiln.compile(f, backend=backend)
        out = compiled(x)
        expected = f(x)
        assert_close(out, expected, rtol=1e-5, atol=1e-6)
        original = (
            module.parametrizations.weight.original0
            if hasattr(module.parametrizations.weight, "original0")
            else module.parametrizations.weight.original
        )
        (grad_compiled,) = kiln.autograd.grad(out.sum(), original)
        (grad_eager,) = kiln.autograd.grad(expected.sum(), original)
        assert_close(grad_compiled, grad_eager, rtol=1e-5, atol=1e-6)
