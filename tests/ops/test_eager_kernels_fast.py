"""The fused eager kernels of the hot nn ops (gelu, silu, softmax, log_softmax, layer_norm,
linear) and the numpy fast path of their derivatives.

Large contiguous inputs run through cache-sized blocks (``nn_ops.blockwise`` / ``row_blocks``);
these tests shrink the block size so small tensors take the blocked path too. Every case is
compared with PyTorch (values and gradients, float32 and float64, contiguous and transposed
inputs) and with kiln's own kiln-op derivative (``create_graph=True`` keeps that path), and the
blocked forward results must equal the unblocked ones bit for bit.
"""

from __future__ import annotations

import numpy as np
import pytest

import kiln
import kiln.ops.nn.softmax_linear as nn_ops
from tests.oracle import needs_torch, torch

F = kiln.nn.functional

_TOL = {"float32": (1.3e-6, 1e-5), "float64": (1e-7, 1e-7)}


@pytest.fixture(params=["small-blocks", "default-blocks"])
def blocks(request, monkeypatch):
    """Blocks of 4 KiB (so a 16 KiB tensor is split) or the production size."""
    if request.param == "small-blocks":
        monkeypatch.setattr(nn_ops, "_BLOCK_BYTES", 4096)
    return request.param


def _close(actual, expected, dtype: str, scale: float = 1.0) -> None:
    rtol, atol = _TOL[dtype]
    np.testing.assert_allclose(
        np.asarray(actual, np.float64), np.asarray(expected, np.float64), rtol * scale, atol * scale
    )


def _pair(array: np.ndarray, transposed: bool):
    """The same leaf in kiln and torch, as a transposed (non-contiguous) view if asked."""
    k = kiln.tensor(array)
    t = torch.tensor(array)
    if transposed:
        k, t = k.t(), t.t()
    return k.requires_grad_(), t.requires_grad_()


def _run(lib, fn, leaves, grad_out, create_graph=False):
    y = fn(lib, *leaves)
    grads = lib.autograd.grad(y, leaves, grad_out, create_graph=create_graph)
    return [y.detach().numpy()] + [g.detach().numpy() for g in grads]


UNARY = {
    "gelu_tanh": lambda lib, x: lib.nn.functional.gelu(x, approximate="tanh"),
    "gelu": lambda lib, x: lib.nn.functional.gelu(x),
    "silu": lambda lib, x: lib.nn.functional.silu(x),
    "softmax": lambda lib, x: lib.nn.functional.softmax(x, -1),
    "softmax_dim0": lambda lib, x: lib.nn.functional.softmax(x, 0),
    "log_softmax": lambda lib, x: lib.nn.functional.log_softmax(x, -1),
    "layer_norm_plain": lambda lib, x: lib.nn.functional.layer_norm(x, (x.shape[-1],)),
}


@needs_torch
@pytest.mark.parametrize("transposed", [False, True], ids=["contiguous", "transposed"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_values_and_grads_match_torch(name, dtype, transposed, blocks):
    rng = np.random.default_rng(len(name))
    shape = (64, 70)  # 17.5 KiB in float32: blocked when blocks are 4 KiB
    x = (rng.standard_normal(shape) * 3).astype(dtype)
    x[0, :4] = [0.0, -0.0, -30.0, 30.0]
    g = rng.standard_normal(shape[::-1] if transposed else shape).astype(dtype)
    xk, xt = _pair(x, transposed)
    new = _run(kiln, UNARY[name], [xk], kiln.tensor(g))
    ref = _run(torch, UNARY[name], [xt], torch.tensor(g))
    # kiln's derivative in kiln ops (create_graph keeps that path) agrees with the numpy one
    slow = _run(kiln, UNARY[name], [xk], kiln.tensor(g), create_graph=True)
    for a, b, s in zip(new, ref, slow):
        assert a.dtype == b.dtype
        _close(a, b, dtype, scale=4.0 if name == "gelu" else 1.0)  # PyTorch's float erf is coarse
        _close(a, s, dtype)


@needs_torch
@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape,k", [((6, 40, 30), 1), ((6, 5, 40), 2), ((30,), 1)])
def test_layer_norm_values_and_grads_match_torch(shape, k, dtype, affine, blocks):
    rng = np.random.default_rng(k)
    norm = shape[len(shape) - k :]
    x = (rng.standard_normal(shape) * 2 + 0.5).astype(dtype)
    g = rng.standard_normal(shape).astype(dtype)
    w = rng.standard_normal(norm).astype(dtype)
    b = rng.standard_normal(norm).astype(dtype)

    def leaves(lib):
        out = [lib.tensor(x, requires_grad=True)]
        if affine:
            out += [lib.tensor(w, requires_grad=True), lib.tensor(b, requires_grad=True)]
        return out

    def fn(lib, x, *wb):
        return lib.nn.functional.layer_norm(x, norm, *wb)

    new = _run(kiln, fn, leaves(kiln), kiln.tensor(g))
    ref = _run(torch, fn, leaves(torch), torch.tensor(g))
    slow = _run(kiln, fn, leaves(kiln), kiln.tensor(g), create_graph=True)
    for a, r, s in zip(new, ref, slow):
        assert a.shape == r.shape
        _close(a, r, dtype, scale=2.0)  # weight/bias gradients are sums over the rows
        _close(a, s, dtype)


@needs_torch
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_layer_norm_grad_of_weight_only_and_transposed_input(dtype, blocks):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((50, 40)).astype(dtype)
    g = rng.standard_normal((40, 50)).astype(dtype)
    w = rng.standard_normal(50).astype(dtype)
    out = []
    for lib in (kiln, torch):
        xt = lib.tensor(x).t()  # a non-contiguous input that needs no grad
        wt = lib.tensor(w, requires_grad=True)
        y = lib.nn.functional.layer_norm(xt, (50,), wt, None)
        out.append(lib.autograd.grad(y, [wt], lib.tensor(g))[0].numpy())
    _close(out[0], out[1], dtype, scale=2.0)


@pytest.mark.parametrize("name", ["gelu_tanh", "gelu", "silu", "softmax", "log_softmax"])
def test_blocked_forward_equals_whole_array_forward(name, monkeypatch):
    x = kiln.tensor(np.random.default_rng(0).standard_normal((64, 300)).astype(np.float32))
    whole = UNARY[name](kiln, x).numpy()
    monkeypatch.setattr(nn_ops, "_BLOCK_BYTES", 2048)
    blocked = UNARY[name](kiln, x).numpy()
    np.testing.assert_array_equal(blocked, whole)


def test_blocked_layer_norm_equals_whole_array_layer_norm(monkeypatch):
    rng = np.random.default_rng(1)
    x = kiln.tensor(rng.standard_normal((16, 30, 20)).astype(np.float32))
    w = kiln.tensor(rng.standard_normal((30, 20)).astype(np.float32))
    b = kiln.tensor(rng.standard_normal((30, 20)).astype(np.float32))
    whole = F.layer_norm(x, (30, 20), w, b).numpy()
    monkeypatch.setattr(nn_ops, "_BLOCK_BYTES", 1024)
    np.testing.assert_array_equal(F.layer_norm(x, (30, 20), w, b).numpy(), whole)


def test_row_blocks_cover_the_rows_evenly(monkeypatch):
    monkeypatch.setattr(nn_ops, "_BLOCK_BYTES", 4096)
    blocks = nn_ops.row_blocks(1001, 400, 4)  # 2 rows of 1600 bytes per 4 KiB block
    assert blocks[0][0] == 0 and blocks[-1][1] == 1001
    assert all(a[1] == b[0] for a, b in zip(blocks, blocks[1:]))
    sizes = {e - s for s, e in blocks}
    assert min(sizes) >= 2 and max(sizes) - min(sizes) <= 1
    # a block never holds so few elements that float_sum would add them in another order
    assert min(e - s for s, e in nn_ops.row_blocks(1001, 100, 4)) * 100 > 1024
    assert nn_ops.row_blocks(0, 100, 4) == [(0, 0)]


@needs_torch
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("name", ["gelu_tanh", "gelu", "silu"])
def test_half_gradients_round_once_like_torch(name, dtype):
    x = (np.random.default_rng(2).standard_normal(500) * 3).astype(np.float32)
    grads = []
    for lib in (kiln, torch):
        t = lib.tensor(x, dtype=getattr(lib, dtype), requires_grad=True)
        UNARY[name](lib, t).sum().backward()
        assert t.grad.dtype == getattr(lib, dtype)
        grads.append(t.grad.float().numpy())
    ulp = 1e-3 if dtype == "float16" else 8e-3
    np.testing.assert_allclose(grads[0], grads[1], rtol=ulp, atol=ulp)


@needs_torch
@pytest.mark.parametrize("name", ["gelu_tanh", "gelu", "silu", "softmax", "log_softmax"])
def test_double_backward_still_goes_through_kiln_ops(name):
    x = np.random.default_rng(4).standard_normal((5, 6))
    out = []
    for lib in (kiln, torch):
        t = lib.tensor(x, requires_grad=True)
        y = UNARY[name](lib, t)
        (g,) = lib.autograd.grad((y * y).sum(), [t], create_graph=True)
        (gg,) = lib.autograd.grad(g.sum(), [t])
        out.append((g.detach().numpy(), gg.numpy()))
    for a, b in zip(out[0], out[1]):
        _close(a, b, "float64", scale=10.0)


@needs_torch
def test_layer_norm_double_backward():
    rng = np.random.default_rng(5)
    x, w = rng.standard_normal((4, 7)), rng.standard_normal(7)
    out = []
    for lib in (kiln, torch):
        xt, wt = lib.tensor(x, requires_grad=True), lib.tensor(w, requires_grad=True)
        y = lib.nn.functional.layer_norm(xt, (7,), wt)
        gx, gw = lib.autograd.grad((y**3).sum(), [xt, wt], create_graph=True)
        out.append([t.numpy() for t in lib.autograd.grad((gx * gx).sum() + gw.sum(), [xt, wt])])
    for a, b in zip(out[0], out[1]):
        _close(a, b, "float64", scale=10.0)


def test_numpy_derivative_path_is_off_while_tracing_or_recording():
    x = kiln.randn(3, requires_grad=True)
    with kiln.no_grad():
        assert nn_ops.numpy_derivative_ok(x)
        assert not nn_ops.numpy_derivative_ok(x.half())
        assert nn_ops.numpy_derivative_ok(x.half(), halves=True)
    assert not nn_ops.numpy_derivative_ok(x)  # grad mode on: a double backward records a graph


@needs_torch
def test_zero_dim_and_empty_inputs():
    for lib in (kiln, torch):
        x = lib.tensor(1.5, requires_grad=True)
        y = lib.nn.functional.softmax(x, 0)
        (g,) = lib.autograd.grad(y, [x])
        assert float(y.detach()) == 1.0 and float(g) == 0.0
    xk = kiln.zeros(0, 5, requires_grad=True)
    wk = kiln.ones(5, requires_grad=True)
    y = F.layer_norm(xk, (5,), wk)
    gx, gw = kiln.autograd.grad(y.sum(), [xk, wk])
    assert gx.shape == (0, 5) and gw.tolist() == [0.0] * 5


@needs_torch
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape", [(4, 3, 20), (20,), (7, 20)])
def test_linear_pooled_output_matches_torch(shape, dtype):
    rng = np.random.default_rng(6)
    x = rng.standard_normal(shape).astype(dtype)
    w = rng.standard_normal((9, 20)).astype(dtype)
    b = rng.standard_normal(9).astype(dtype)
    out = []
    for lib in (kiln, torch):
        y = lib.nn.functional.linear(lib.tensor(x), lib.tensor(w), lib.tensor(b))
        out.append(y.numpy())
    assert out[0].shape == out[1].shape
    _close(out[0], out[1], dtype)


POOLS = [
    # (input shape, kernel, stride, padding, dilation, ceil_mode)
    ((2, 3, 9, 10), (2, 2), (2, 2), (0, 0), (1, 1), False),
    ((2, 3, 9, 10), (3, 3), (2, 2), (1, 1), (1, 1), True),
    ((2, 3, 11, 12), (3, 2), (1, 2), (1, 0), (2, 1), False),
    ((2, 4, 13), (3,), (2,), (1,), (1,), False),
    ((1, 2, 5, 6, 7), (2, 2, 2), (2, 1, 2), (0, 1, 0), (1, 1, 1), True),
]


@needs_torch
@pytest.mark.parametrize("special", ["plain", "ties", "nan"])
@pytest.mark.parametrize("case", POOLS, ids=lambda c: f"{len(c[1])}d-k{c[1]}-s{c[2]}")
def test_max_pool_values_indices_and_grads_match_torch(case, special):
    shape, kernel, stride, padding, dilation, ceil_mode = case
    rng = np.random.default_rng(len(shape))
    x = rng.standard_normal(shape).astype(np.float32)
    if special == "ties":
        x = np.round(x)  # many equal values in a window: the first one is picked
        x.reshape(-1)[::7] = -np.inf
    elif special == "nan":
        x.reshape(-1)[::11] = np.nan
    results = []
    g = None
    for lib in (kiln, torch):
        pool = getattr(lib.nn.functional, f"max_pool{len(kernel)}d")
        t = lib.tensor(x, requires_grad=True)
        y, idx = pool(t, kernel, stride, padding, dilation, ceil_mode, return_indices=True)
        if g is None:
            g = rng.standard_normal(tuple(y.shape)).astype(np.float32)
        (gx,) = lib.autograd.grad(y, [t], lib.tensor(g))
        results.append((y.detach().numpy(), idx.numpy(), gx.numpy()))
    (yk, ik, gk), (yt, it, gt) = results
    np.testing.assert_array_equal(yk, yt)
    np.testing.assert_array_equal(ik, it)
    np.testing.assert_allclose(gk, gt, rtol=1e-6, atol=1e-6)


LOG_SOFTMAX_DIMS = {
    "last": lambda lib, x: lib.nn.functional.log_softmax(x, -1),
    "middle": lambda lib, x: lib.nn.functional.log_softmax(x, 1),
    "first": lambda lib, x: lib.nn.functional.log_softmax(x, 0),
}


@needs_torch
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("dim", sorted(LOG_SOFTMAX_DIMS))
def test_log_softmax_kept_softmax_gradient_matches_torch(dim, dtype, blocks):
    """A recorded log_softmax keeps its softmax for the derivative (no exp in the backward)."""
    rng = np.random.default_rng(7)
    x = (rng.standard_normal((6, 40, 30)) * 4).astype(dtype)
    x[0, 0, :3] = [60.0, -60.0, 0.0]
    g = rng.standard_normal(x.shape).astype(dtype)
    fn = LOG_SOFTMAX_DIMS[dim]
    xk, xt = kiln.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    new = _run(kiln, fn, [xk], kiln.tensor(g))
    ref = _run(torch, fn, [xt], torch.tensor(g))
    slow = _run(kiln, fn, [xk], kiln.tensor(g), create_graph=True)
    for a, r, s in zip(new, ref, slow):
        _close(a, r, dtype, scale=2.0)
        _close(a, s, dtype, scale=2.0)
    with kiln.no_grad():  # the recording kernel's forward is the plain kernel's, bit for bit
        np.testing.assert_array_equal(fn(kiln, kiln.tensor(x)).numpy(), new[0])


def test_log_softmax_kept_softmax_respects_in_place_writes_and_retain_graph():
    x = kiln.randn(8, 5, requires_grad=True)
    y = F.log_softmax(x, 1)
    y.mul_(2)  # a saved output written in place: backward refuses, as PyTorch does
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()
    y = F.log_softmax(x, 1)
    g = kiln.randn(8, 5)
    (first,) = kiln.autograd.grad(y, [x], g, retain_graph=True)
    (second,) = kiln.autograd.grad(y, [x], g)
    np.testing.assert_array_equal(first.numpy(), second.numpy())


CE_CASES = {
    "plain": {},
    "ignore_index": {"ignore_index": 3},
    "weight": {"weight": True},
    "label_smoothing": {"label_smoothing": 0.1, "weight": True},
    "sum": {"reduction": "sum"},
    "none": {"reduction": "none"},
}


@needs_torch
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("case", sorted(CE_CASES))
def test_cross_entropy_over_a_large_vocabulary_matches_torch(case, dtype):
    """700 x 1000 logits (blocked rows), with a NaN row and an inf logit."""
    rng = np.random.default_rng(8)
    x = (rng.standard_normal((700, 1000)) * 3).astype(dtype)
    x[5, 7] = np.nan
    x[9, 2] = np.inf
    target = rng.integers(0, 1000, 700)
    target[:20] = 3
    w = rng.uniform(0.5, 1.5, 1000).astype(dtype)
    opts = dict(CE_CASES[case])
    results = []
    for lib in (kiln, torch):
        kw = {k: v for k, v in opts.items() if k != "weight"}
        if opts.get("weight"):
            kw["weight"] = lib.tensor(w)
        xl = lib.tensor(x, requires_grad=True)
        loss = lib.nn.functional.cross_entropy(xl, lib.tensor(target), **kw)
        grad_fn = type(loss.grad_fn).__name__ if lib is torch else loss.grad_fn.name()
        loss.backward(lib.ones_like(loss))
        results.append((loss.detach().numpy(), xl.grad.numpy(), grad_fn))
    (kl, kg, kname), (tl, tg, tname) = results
    assert kname == tname
    np.testing.assert_allclose(kl, tl, rtol=2e-5 if dtype == "float32" else 1e-10)
    np.testing.assert_allclose(kg, tg, rtol=1e-4, atol=1e-7 if dtype == "float32" else 1e-12)


@needs_torch
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_gelu_tanh_special_values_and_lower_tail_match_torch(dtype):
    """The tanh form runs as x * sigmoid(2 inner) (one ``exp``): infinities, NaN, signed zeros
    and overflowing inputs give PyTorch's results, and values and gradients stay within a few
    ulp of the exact ones down the lower tail too (where ``1 + tanh`` cancels)."""
    special = [0.0, -0.0, 1e-30, -1e-30, 1e20, -1e20, 3e38, -3e38, np.inf, -np.inf, np.nan]
    x = np.concatenate([special, np.linspace(-12, 12, 4001)]).astype(dtype)
    g = np.random.default_rng(6).standard_normal(x.shape).astype(dtype)
    out = {}
    for lib in (kiln, torch):
        t = lib.tensor(x, requires_grad=True)
        y = lib.nn.functional.gelu(t, approximate="tanh")
        (grad,) = lib.autograd.grad(y, [t], lib.tensor(g))
        out[lib.__name__] = (y.detach().numpy(), grad.numpy())
    n = len(special)
    for a, b in zip(out["kiln"], out["torch"]):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a[:n], b[:n])  # the same, NaN and signed zeros included
    # the exact values in float64, without cancellation: 0.5 (1 + tanh(u)) = 1 / (1 + e^-2u)
    x64, g64 = x[n:].astype(np.float64), g[n:].astype(np.float64)
    inner = np.sqrt(2 / np.pi) * (x64 + 0.044715 * x64**3)
    e = np.exp(-2 * inner)
    s = 1 / (1 + e)
    dinner = np.sqrt(2 / np.pi) * (1 + 3 * 0.044715 * x64**2)
    exact = (x64 * s, g64 * (s + 2 * x64 * s * (e * s) * dinner))
    # within a few ulp, times the exp's condition where e^-2u is large (the input's rounding,
    # |2u| eps, grows into e^-2u's relative error); below float's range the result is zero
    eps, tiny = np.finfo(dtype).eps, np.finfo(dtype).tiny
    conditioning = 8 + 8 * np.abs(inner)
    y, grad = out["kiln"]
    assert np.all(np.abs(y[n:] - exact[0]) <= conditioning * eps * np.abs(exact[0]) + 4 * tiny)
    # the gradient adds two terms (and changes sign near x = -0.75): a few ulp of |g| too
    bound = 4 * conditioning * eps * np.abs(exact[1]) + 32 * eps * np.abs(g64) + 4 * tiny
    assert np.all(np.abs(grad[n:] - exact[1]) <= bound)
