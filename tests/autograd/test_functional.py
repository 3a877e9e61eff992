"""kiln.autograd.functional against torch.autograd.functional: vjp, jvp, jacobian (both
strategies, tuple inputs/outputs, create_graph, strict), hessian, hvp, vhp, in float64."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.autograd import functional as KF
from tests.oracle import assert_close, needs_torch, torch

pytestmark = needs_torch


def _pair(*shapes, seed=0):
    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal(s) for s in shapes]
    return (
        tuple(kiln.tensor(a, dtype=kiln.float64) for a in arrays),
        tuple(torch.tensor(a, dtype=torch.float64) for a in arrays),
    )


def _one(lib, x):
    return (x.sin() * x.exp()).sum(-1)


def _two_in_two_out(lib, x, y):
    return (x * y[:2].tanh()).sum(0), (x.exp() @ y.t()).sum()


def _scalar(lib, x, y=None):
    if y is None:
        return (x.sin() * x * x).sum()
    return (x.sin() * y.exp()).sum() + (x * x * y).sum()


def _apply(api, fn, lib, inputs, *args, **kwargs):
    single = len(inputs) == 1
    return api(lambda *a: fn(lib, *a), inputs[0] if single else tuple(inputs), *args, **kwargs)


def _apply_both(name: str, fn, kin, tin, **options):
    """``name`` from kiln's and torch's autograd.functional on the paired inputs, same options."""
    k = _apply(getattr(KF, name), fn, kiln, kin, **options)
    return k, _apply(getattr(torch.autograd.functional, name), fn, torch, tin, **options)


@pytest.mark.parametrize("create_graph", [False, True])
def test_vjp_single_input_matches_torch(create_graph):
    (kx,), (tx,) = _pair((3, 4))
    (kv,), (tv,) = _pair((3,), seed=1)
    k_out, k_vjp = KF.vjp(lambda x: _one(kiln, x), kx, kv, create_graph=create_graph)
    t_out, t_vjp = torch.autograd.functional.vjp(
        lambda x: _one(torch, x), tx, tv, create_graph=create_graph
    )
    assert_close(k_out, t_out)
    assert_close(k_vjp, t_vjp)
    assert k_vjp.requires_grad == t_vjp.requires_grad == create_graph


def test_vjp_tuple_inputs_and_outputs_matches_torch():
    kin, tin = _pair((2, 3), (4, 3))
    kv, tv = _pair((3,), (), seed=2)
    k = _apply(KF.vjp, _two_in_two_out, kiln, kin, kv)
    t = _apply(torch.autograd.functional.vjp, _two_in_two_out, torch, tin, tv)
    assert isinstance(k[1], tuple) and len(k[1]) == 2
    assert_close(k, t)


def test_vjp_v_none_needs_single_element_output():
    (kx,), (tx,) = _pair((3,))
    k = KF.vjp(lambda x: (x * x).sum(), kx)
    t = torch.autograd.functional.vjp(lambda x: (x * x).sum(), tx)
    assert_close(k, t)
    with pytest.raises(RuntimeError, match="The vector v can only be None if the user-provided"):
        KF.vjp(lambda x: x * 2, kx)


def test_vjp_wrong_v_shape_and_types_raise_like_torch():
    (kx,), _ = _pair((3,))
    with pytest.raises(RuntimeError, match="v has invalid size: should be"):
        KF.vjp(lambda x: x * 2, kx, kiln.ones(4, dtype=kiln.float64))
    with pytest.raises(TypeError, match="The inputs given to vjp must be either a Tensor"):
        KF.vjp(lambda x: x, [1.0, 2.0])
    with pytest.raises(RuntimeError, match="v is a tuple of invalid length"):
        KF.vjp(lambda x: (x, x), kx, (kx,))


def test_vjp_unused_input_is_zero_or_strict_error():
    kin, tin = _pair((3,), (2,))
    kv, tv = _pair((3,), seed=3)
    k = KF.vjp(lambda x, y: x * 3, kin, kv[0])
    t = torch.autograd.functional.vjp(lambda x, y: x * 3, tin, tv[0])
    assert_close(k, t)
    with pytest.raises(RuntimeError, match="independent of input 1"):
        KF.vjp(lambda x, y: x * 3, kin, kv[0], strict=True)


@pytest.mark.parametrize("create_graph", [False, True])
def test_jvp_matches_torch(create_graph):
    kin, tin = _pair((2, 3), (4, 3))
    kv, tv = _pair((2, 3), (4, 3), seed=4)
    k = _apply(KF.jvp, _two_in_two_out, kiln, kin, kv, create_graph=create_graph)
    t = _apply(torch.autograd.functional.jvp, _two_in_two_out, torch, tin, tv)
    assert_close(k, t)


def test_jvp_of_independent_output_is_zero_and_strict_raises():
    (kx,), (tx,) = _pair((3,))
    k = KF.jvp(lambda x: (x * 2, kiln.ones(2, dtype=kiln.float64)), kx, kx)
    t = torch.autograd.functional.jvp(lambda x: (x * 2, torch.ones(2, dtype=torch.float64)), tx, tx)
    assert_close(k, t)
    with pytest.raises(RuntimeError, match="does not require gradients"):
        KF.jvp(lambda x: (x * 2, kiln.ones(2, dtype=kiln.float64)), kx, kx, strict=True)


@pytest.mark.parametrize("strategy", ["reverse-mode", "forward-mode"])
def test_jacobian_single_matches_torch(strategy):
    (kx,), (tx,) = _pair((3, 2))
    k = KF.jacobian(lambda x: _one(kiln, x), kx, strategy=strategy, vectorize=True)
    t = torch.autograd.functional.jacobian(
        lambda x: _one(torch, x), tx, strategy=strategy, vectorize=True
    )
    assert k.shape == (3, 3, 2)
    assert_close(k, t)


@pytest.mark.parametrize("strategy", ["reverse-mode", "forward-mode"])
def test_jacobian_tuple_nesting_matches_torch(strategy):
    kin, tin = _pair((2, 3), (4, 3))
    k, t = _apply_both("jacobian", _two_in_two_out, kin, tin, strategy=strategy, vectorize=True)
    assert len(k) == 2 and all(len(row) == 2 for row in k)
    assert_close(k, t)


def test_jacobian_tuple_input_single_output_and_unused_input():
    kin, tin = _pair((3,), (2,))
    k = KF.jacobian(lambda x, y: x.exp(), kin)
    t = torch.autograd.functional.jacobian(lambda x, y: x.exp(), tin)
    assert_close(k, t)
    with pytest.raises(RuntimeError, match="Output 0 of the user-provided function is independent"):
        KF.jacobian(lambda x, y: x.exp(), kin, strict=True)


def test_jacobian_create_graph_is_differentiable_like_torch():
    (kx,), (tx,) = _pair((3,))
    kx.requires_grad_()
    tx.requires_grad_()
    kj = KF.jacobian(lambda x: x.sin() * x, kx, create_graph=True)
    tj = torch.autograd.functional.jacobian(lambda x: x.sin() * x, tx, create_graph=True)
    assert kj.requires_grad
    (kj * kj).sum().backward()
    (tj * tj).sum().backward()
    assert_close(kx.grad, tx.grad)


def test_jacobian_bad_strategy_and_forward_mode_limits():
    (kx,), _ = _pair((3,))
    with pytest.raises(AssertionError, match="Expected strategy to be either"):
        KF.jacobian(lambda x: x, kx, strategy="sideways")
    with pytest.raises(NotImplementedError, match="create_graph=True"):
        KF.jacobian(lambda x: x, kx, create_graph=True, strategy="forward-mode")
    with pytest.raises(RuntimeError, match="strict=True"):
        KF.jacobian(lambda x: x, kx, strict=True, strategy="forward-mode")
    with pytest.raises(NotImplementedError, match="only implemented for `vectorize=True`"):
        KF.jacobian(lambda x: x, kx, strategy="forward-mode")
    with pytest.raises(NotImplementedError, match="only implemented for `vectorize=True`"):
        KF.hessian(lambda x: (x * x).sum(), kx, outer_jacobian_strategy="forward-mode")


@pytest.mark.parametrize("strategy", ["reverse-mode", "forward-mode"])
def test_jacobian_dtype_follows_torch_for_mixed_precision(strategy):
    # reverse mode gives gradients in the input's dtype, forward mode tangents in the output's
    kx = kiln.ones(3, dtype=kiln.float64)
    tx = torch.ones(3, dtype=torch.float64)
    k = KF.jacobian(lambda x: x.float() * 2, kx, strategy=strategy, vectorize=True)
    t = torch.autograd.functional.jacobian(
        lambda x: x.float() * 2, tx, strategy=strategy, vectorize=True
    )
    assert str(k.dtype).split(".")[-1] == str(t.dtype).split(".")[-1]
    assert_close(k, t)


@pytest.mark.parametrize("outer", ["reverse-mode", "forward-mode"])
def test_hessian_matches_torch(outer):
    kin, tin = _pair((3,), (3,))
    k, t = _apply_both("hessian", _scalar, kin, tin, outer_jacobian_strategy=outer, vectorize=True)
    assert_close(k, t)
    (kx,), (tx,) = _pair((2, 2))
    assert_close(
        KF.hessian(lambda x: _scalar(kiln, x), kx),
        torch.autograd.functional.hessian(lambda x: _scalar(torch, x), tx),
    )


def test_hessian_requires_scalar_output():
    (kx,), _ = _pair((3,))
    with pytest.raises(RuntimeError, match="should contain a single element"):
        KF.hessian(lambda x: x * x, kx)
    with pytest.raises(RuntimeError, match="should return a single Tensor"):
        KF.hessian(lambda x: (x.sum(), x.sum()), kx)


@pytest.mark.parametrize("api", ["hvp", "vhp"])
@pytest.mark.parametrize("create_graph", [False, True])
def test_hvp_vhp_match_torch(api, create_graph):
    kin, tin = _pair((3,), (3,))
    kv, tv = _pair((3,), (3,), seed=5)
    k = _apply(getattr(KF, api), _scalar, kiln, kin, kv, create_graph=create_graph)
    t = _apply(
        getattr(torch.autograd.functional, api), _scalar, torch, tin, tv, create_graph=create_graph
    )
    assert_close(k, t)
    assert k[1][0].requires_grad == t[1][0].requires_grad == create_graph


def test_hvp_linear_function_strict_raises():
    (kx,), _ = _pair((3,))
    with pytest.raises(RuntimeError, match="jacobian of the user-provided function"):
        KF.hvp(lambda x: (2 * x).sum(), kx, kx, strict=True)
    ((zero,),) = (KF.hvp(lambda x: (2 * x).sum(), (kx,), (kx,))[1],)
    np.testing.assert_array_equal(zero.numpy(), 0.0)
