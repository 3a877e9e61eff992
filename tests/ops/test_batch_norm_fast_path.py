"""Batch norm's eager kernel and the numpy form of its training-mode derivative against PyTorch.

A plain backward (grad mode off, nothing tracing) takes ``_np_batch_norm_grad``; a backward
with ``create_graph`` keeps the kiln-op derivative. Both are compared with PyTorch on batched
1-3d inputs, channels-last and transposed layouts, with and without affine parameters, for the
gradients asked for alone or together.
"""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from tests.oracle import needs_torch, torch

pytestmark = needs_torch

_TOL = {"float32": (1e-5, 1e-5), "float64": (1e-10, 1e-10)}

LAYOUTS = {
    "contiguous": lambda lib, t: t,
    "channels_last": lambda lib, t: t.contiguous(memory_format=lib.channels_last),
    "transposed": lambda lib, t: t.transpose(-1, -2).contiguous().transpose(-1, -2),
}


def _run(lib, x, weight, bias, training, layout, create_graph, wanted):
    leaves = [lib.tensor(a, requires_grad=True) if a is not None else None for a in (x, weight)]
    leaves.append(lib.tensor(bias, requires_grad=True) if bias is not None else None)
    xt = LAYOUTS[layout](lib, leaves[0]) if x.ndim == 4 else leaves[0]
    channels = x.shape[1]
    mean = lib.tensor(np.linspace(-0.5, 0.5, channels).astype(x.dtype))
    var = lib.tensor(np.linspace(0.5, 2.0, channels).astype(x.dtype))
    y = lib.nn.functional.batch_norm(xt, mean, var, leaves[1], leaves[2], training, 0.1, 1e-5)
    g = lib.tensor(np.sin(np.arange(y.numel())).reshape(tuple(y.shape)).astype(x.dtype))
    inputs = [leaves[i] for i in wanted if leaves[i] is not None]
    grads = lib.autograd.grad(y, inputs, g, create_graph=create_graph)
    return [y.detach().numpy(), mean.numpy(), var.numpy()] + [t.detach().numpy() for t in grads]


def _compare(shape, dtype, affine=True, training=True, layout="contiguous", create_graph=False,
             wanted=(0, 1, 2)):  # fmt: skip
    rng = np.random.default_rng(len(shape))
    x = (rng.standard_normal(shape) * 3 + 1).astype(dtype)
    weight = rng.standard_normal(shape[1]).astype(dtype) if affine else None
    bias = rng.standard_normal(shape[1]).astype(dtype) if affine else None
    args = (x, weight, bias, training, layout, create_graph, wanted)
    rtol, atol = _TOL[dtype]
    for got, want in zip(_run(kiln, *args), _run(torch, *args), strict=True):
        np.testing.assert_allclose(got, want, rtol, atol)


@pytest.mark.parametrize("create_graph", [False, True], ids=["numpy", "kiln-ops"])
@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape", [(6, 4), (3, 5, 7), (4, 3, 6, 5), (2, 3, 4, 3, 2)])
def test_training_values_and_gradients_match_torch(shape, dtype, affine, create_graph):
    _compare(shape, dtype, affine, create_graph=create_graph)


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_non_contiguous_layouts_match_torch(layout):
    _compare((4, 3, 6, 5), "float32", layout=layout)


@pytest.mark.parametrize("wanted", [(0,), (1,), (2,), (1, 2)], ids=["x", "w", "b", "w-b"])
def test_each_gradient_alone_matches_torch(wanted):
    _compare((4, 3, 5, 5), "float64", wanted=wanted)


@pytest.mark.parametrize("affine", [True, False])
def test_eval_mode_matches_torch(affine):
    _compare((4, 3, 5, 5), "float32", affine, training=False)


def test_gradient_of_a_sum_broadcasts_like_torch():
    """``y.sum().backward()`` hands the derivative an expanded (stride-0) gradient."""
    x = np.random.default_rng(0).standard_normal((4, 3, 5)).astype("float32")
    grads = []
    for lib in (kiln, torch):
        xt = lib.tensor(x, requires_grad=True)
        w = lib.tensor(np.array([0.5, 2.0, -1.0], "float32"), requires_grad=True)
        (lib.nn.functional.batch_norm(xt, None, None, w, None, True) * 3).sum().backward()
        grads.append((xt.grad.numpy(), w.grad.numpy()))
    for got, want in zip(*grads):
        np.testing.assert_allclose(got, want, 1e-5, 1e-5)


@pytest.mark.parametrize("create_graph", [False, True], ids=["numpy", "kiln-ops"])
def test_large_odd_batch_matches_torch(create_graph):
    """Contiguous inputs take per-row statistics (a product with ones per row, one fused
    pass for each sum of products): thousands of elements per channel stay within float32
    tolerance of PyTorch."""
    _compare((5, 6, 33, 31), "float32", create_graph=create_graph)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_inputs_match_torch(dtype):
    """Half inputs are normalized in float32 and rounded once; batch statistics are float32."""
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((4, 3, 6, 5)) * 3 + 1).astype("float32")
    outs = []
    for lib in (kiln, torch):
        half = getattr(lib, dtype)
        xt = lib.tensor(x).to(half)
        w = lib.tensor(np.array([0.5, 2.0, -1.0], "float32"))  # float32 parameters, as AMP
        b = lib.tensor(np.array([0.1, -0.2, 0.3], "float32"))
        mean, var = lib.zeros(3), lib.ones(3)
        y = lib.nn.functional.batch_norm(xt, mean, var, w, b, True, 0.1, 1e-5)
        assert y.dtype == half
        outs.append([y.float().numpy(), mean.numpy(), var.numpy()])
    for got, want in zip(*outs):
        np.testing.assert_allclose(got, want, 1e-2, 1e-2)


@pytest.mark.parametrize("kernels", ["numpy", "machine-code"])
def test_backward_reuses_the_forward_statistics(monkeypatch, kernels):
    """The plain backward takes the batch's mean and 1/std from the forward pass: in numpy the
    variance's pass (a per-channel dot product) runs once in the forward and the gradient's
    own sum of products once in the backward; in machine code the backward gets the forward's
    statistics; and the gradients equal PyTorch's."""
    from kiln.ops.nn import normalization
    from kiln.runtime import machine_code

    calls = []
    real = normalization._channel_dot

    def counting(*args):
        calls.append(args[0].shape)
        return real(*args)

    monkeypatch.setattr(normalization, "_channel_dot", counting)
    if kernels == "numpy":
        monkeypatch.setitem(machine_code._built, "rows", False)
        _compare((4, 3, 6, 5), "float32")
        assert len(calls) == 2
        return
    native = machine_code.get("rows")
    stats = {}
    forward, backward = native.batch_norm, native.batch_norm_grad

    def recording_forward(x, out, w, b, mean, var, rstd, eps):
        forward(x, out, w, b, mean, var, rstd, eps)
        stats["forward"] = (mean.copy(), rstd.copy())

    def recording_backward(x, g, w, mean, rstd, *rest):
        stats["backward"] = (mean.copy(), rstd.copy())
        backward(x, g, w, mean, rstd, *rest)

    monkeypatch.setattr(native, "batch_norm", recording_forward)
    monkeypatch.setattr(native, "batch_norm_grad", recording_backward)
    _compare((4, 3, 6, 5), "float32")
    assert not calls
    for f, b in zip(stats["forward"], stats["backward"]):
        np.testing.assert_array_equal(f, b)


def test_retained_graph_backward_twice_matches_torch():
    x = (np.random.default_rng(5).standard_normal((3, 4, 5, 6)) * 2 - 1).astype("float32")
    got = {}
    for lib in (kiln, torch):
        xt = lib.tensor(x, requires_grad=True)
        w = lib.tensor(np.linspace(0.5, 1.5, 4).astype("float32"), requires_grad=True)
        y = lib.nn.functional.batch_norm(xt, None, None, w, None, True)
        g = lib.tensor(np.cos(np.arange(y.numel())).reshape(x.shape).astype("float32"))
        y.backward(g, retain_graph=True)
        first = xt.grad.clone()
        y.backward(g)
        got[lib] = (first.numpy(), xt.grad.numpy(), w.grad.numpy())
    for mine, want in zip(got[kiln], got[torch]):
        np.testing.assert_allclose(mine, want, 1e-5, 1e-5)


def test_batch_mean_changed_in_place_leaves_the_gradient_alone():
    """The kept mean is the backward's own copy: changing the op's returned batch mean in
    place after the forward does not change the input gradient."""
    x = np.random.default_rng(6).standard_normal((2, 3, 4, 4)).astype("float32")
    grads = []
    for change in (False, True):
        xt = kiln.tensor(x, requires_grad=True)
        y, mean, _ = kiln.ops._native_batch_norm(xt, None, None, None, None, True, 0.1, 1e-5)
        if change:
            with kiln.no_grad():
                mean.add_(10.0)
        (y * y.detach()).sum().backward()
        grads.append(xt.grad.numpy())
    np.testing.assert_array_equal(grads[0], grads[1])


@pytest.mark.parametrize("create_graph", [False, True])
def test_backward_makes_no_zero_gradients_for_the_unused_statistics(create_graph, monkeypatch):
    """Batch norm's derivative never reads its statistics' gradients: the engine passes None
    there instead of making zero tensors for them, and the gradients still match PyTorch."""
    from kiln.ops.creation import api

    made = []
    real = api.zeros

    def counting(*args, **kwargs):
        made.append(args)
        return real(*args, **kwargs)

    x = np.random.default_rng(7).standard_normal((4, 3, 5, 6)).astype("float32")
    w = np.linspace(0.5, 1.5, 3).astype("float32")
    b = np.linspace(-0.2, 0.2, 3).astype("float32")
    want = _run(torch, x, w, b, True, "contiguous", False, (0, 1, 2))
    monkeypatch.setattr(api, "zeros", counting)
    got = _run(kiln, x, w, b, True, "contiguous", create_graph, (0, 1, 2))
    assert made == []
    for mine, theirs in zip(got, want):
        np.testing.assert_allclose(mine, theirs, 1e-5, 1e-5)
