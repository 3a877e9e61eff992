"""nn.utils against torch.nn.utils: gradient clipping by norm (every norm type) and by value,
and parameters <-> vector conversion."""

from __future__ import annotations

import math

import numpy as np
import pytest

import kiln
from kiln.nn import utils as kutils
from tests.oracle import assert_close, needs_torch, torch


def _params(lib, scale: float = 1.0):
    rng = np.random.default_rng(0)
    shapes = [(3, 4), (4,), (2, 2, 2)]
    params = []
    for shape in shapes:
        p = lib.tensor(rng.standard_normal(shape).astype(np.float32), requires_grad=True)
        p.grad = lib.tensor((rng.standard_normal(shape) * scale).astype(np.float32))
        params.append(p)
    no_grad = lib.tensor(np.ones(2, np.float32), requires_grad=True)
    return params + [no_grad]


@needs_torch
@pytest.mark.parametrize("norm_type", [2.0, 1, 3.5, math.inf, 0, "inf"])
@pytest.mark.parametrize("max_norm", [0.5, 100.0])
def test_clip_grad_norm_matches_torch(norm_type, max_norm):
    norm_type = float(norm_type)
    k_params, t_params = _params(kiln, 2.0), _params(torch, 2.0)
    k_total = kutils.clip_grad_norm_(k_params, max_norm, norm_type)
    t_total = torch.nn.utils.clip_grad_norm_(t_params, max_norm, norm_type)
    assert_close(k_total, t_total, rtol=1e-5, atol=1e-6)
    for k, t in zip(k_params, t_params):
        if t.grad is None:
            assert k.grad is None
        else:
            assert_close(k.grad, t.grad, rtol=1e-5, atol=1e-6)


def _odd_params(lib, dtype, bad: float | None):
    """float64 or float32 gradients, one of them transposed (not contiguous), one 0-d, and
    optionally a NaN or inf in one of them."""
    rng = np.random.default_rng(1)
    params = []
    for shape in [(5, 3), (7,), ()]:
        p = lib.tensor(np.zeros(shape, dtype), requires_grad=True)
        params.append(p)
    grads = [rng.standard_normal((3, 5)).T, rng.standard_normal(7), np.array(0.25)]
    if bad is not None:
        grads[1][2] = bad
    for p, g in zip(params, grads):
        p.grad = lib.tensor(np.array(g, dtype))
        if g.ndim == 2:
            p.grad = lib.tensor(np.ascontiguousarray(g.T).astype(dtype)).t()
    return params


@needs_torch
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("norm_type", [2.0, 1.0, math.inf])
@pytest.mark.parametrize("bad", [None, float("nan"), float("inf")])
def test_clip_grad_norm_dtypes_layouts_and_nonfinite_match_torch(dtype, norm_type, bad):
    k_params, t_params = _odd_params(kiln, dtype, bad), _odd_params(torch, dtype, bad)
    assert not k_params[0].grad.is_contiguous()
    k_total = kutils.clip_grad_norm_(k_params, 0.5, norm_type)
    t_total = torch.nn.utils.clip_grad_norm_(t_params, 0.5, norm_type)
    assert k_total.dtype == kiln.float64 if dtype == np.float64 else kiln.float32
    assert_close(k_total, t_total, rtol=1e-6, atol=0, equal_nan=True)
    for k, t in zip(k_params, t_params):
        assert_close(k.grad, t.grad, rtol=1e-6, atol=1e-7, equal_nan=True)
        assert k.grad._version > 0  # written in place, as mul_ does


@needs_torch
def test_clip_grads_with_norm_of_another_dtype_matches_torch():
    for total in (0.25, 3.0):
        k_params, t_params = (
            _odd_params(kiln, np.float32, None),
            _odd_params(torch, np.float32, None),
        )
        kutils.clip_grads_with_norm_(k_params, 1.0, kiln.tensor(total, dtype=kiln.float64))
        torch.nn.utils.clip_grads_with_norm_(
            t_params, 1.0, torch.tensor(total, dtype=torch.float64)
        )
        for k, t in zip(k_params, t_params):
            assert_close(k.grad, t.grad, rtol=1e-6, atol=1e-7)


def test_clip_grad_norm_single_tensor_and_no_grads():
    p = kiln.tensor([3.0, 4.0], requires_grad=True)
    p.grad = kiln.tensor([3.0, 4.0])
    total = kutils.clip_grad_norm_(p, 1.0)
    assert float(total) == 5.0
    np.testing.assert_allclose(p.grad.numpy(), [0.6, 0.8], rtol=1e-5)
    assert float(kutils.clip_grad_norm_([kiln.ones(2, requires_grad=True)], 1.0)) == 0.0


def test_clip_grad_norm_error_if_nonfinite():
    p = kiln.ones(2, requires_grad=True)
    p.grad = kiln.tensor([1.0, float("inf")])
    with pytest.raises(RuntimeError, match="The total norm of order 2.0 for gradients"):
        kutils.clip_grad_norm_([p], 1.0, error_if_nonfinite=True)
    kutils.clip_grad_norm_([p], 1.0)


@needs_torch
def test_clip_grad_value_matches_torch():
    k_params, t_params = _params(kiln, 3.0), _params(torch, 3.0)
    kutils.clip_grad_value_(k_params, 0.7)
    torch.nn.utils.clip_grad_value_(t_params, 0.7)
    for k, t in zip(k_params, t_params):
        if t.grad is not None:
            assert_close(k.grad, t.grad)


@needs_torch
def test_parameters_to_vector_and_back_match_torch():
    k_params, t_params = _params(kiln)[:3], _params(torch)[:3]
    k_vec = kutils.parameters_to_vector(k_params)
    t_vec = torch.nn.utils.parameters_to_vector(t_params)
    assert_close(k_vec, t_vec)
    for p in k_params:
        p.grad = None
    (k_vec * 2).sum().backward()
    assert k_params[0].grad.tolist() == [[2.0] * 4] * 3  # the vector is differentiable
    with kiln.no_grad():
        new = kiln.arange(float(k_vec.numel()))
    kutils.vector_to_parameters(new, k_params)
    torch.nn.utils.vector_to_parameters(torch.arange(float(t_vec.numel())), t_params)
    for k, t in zip(k_params, t_params):
        assert_close(k, t)
    with pytest.raises(TypeError, match="expected torch.Tensor, but got: list"):
        kutils.vector_to_parameters([1.0], k_params)


@needs_torch
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


@needs_torch
def test_clip_grad_norm_is_a_deprecated_alias():
    results = []
    for lib, utils in ((kiln, kutils), (torch, torch.nn.utils)):
        p = lib.ones(4, requires_grad=True)
        p.grad = lib.tensor([3.0, 4.0, 0.0, 0.0])
        with pytest.warns(FutureWarning, match="clip_grad_norm` is now deprecated"):
            total = utils.clip_grad_norm(p, 1.0)
        results.append((total, p.grad))
    assert_close(results[0], results[1])


@needs_torch
def test_parameters_to_vector_edge_cases_match_torch():
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


@pytest.mark.parametrize("norm_type", [2.0, math.inf])
def test_clip_grad_norm_is_captured_whole_and_matches_eager(norm_type):
    """The eager fast path reads numpy buffers: captured code must keep the op path (a read of
    ``_data`` is a graph break) and give eager's values."""
    rng = np.random.default_rng(3)
    grads = [rng.standard_normal(s).astype(np.float32) for s in ((4, 3), (3,), (2, 2, 2))]

    def params():
        ps = [kiln.tensor(g * 0, requires_grad=True) for g in grads]
        for p, g in zip(ps, grads):
            p.grad = kiln.tensor(g)
        return ps

    def clip(ps):
        return kutils.clip_grad_norm_(ps, 0.5, norm_type)

    eager_ps, compiled_ps = params(), params()
    want = clip(eager_ps)
    report = kiln._dynamo.explain(clip)(params())
    assert report.graph_break_count == 0
    got = kiln.compile(clip)(compiled_ps)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)
    for a, b in zip(compiled_ps, eager_ps):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-6)
