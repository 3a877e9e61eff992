"""softmax, log_softmax, cross_entropy, layer_norm and rms_norm in eager mode through the row kernels in
machine code (``llvm/eager_rows.py``): values and gradients against PyTorch over row lengths with
and without a scalar tail, NaN and infinite rows, the layouts the kernels leave to numpy, the
compiled kernels, and the numpy kernels when the machine code is missing."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
import kiln.nn.functional as F
from kiln.runtime import machine_code
from tests.oracle import needs_torch, torch

_CASES = {
    "softmax": lambda lib, x: lib.softmax(x, -1),
    "log_softmax": lambda lib, x: lib.nn.functional.log_softmax(x, -1),
    "softmax-dim0": lambda lib, x: lib.softmax(x, 0),
    "softmax-transposed": lambda lib, x: lib.softmax(x.t(), -1),
    "cross_entropy": lambda lib, x: lib.nn.functional.cross_entropy(
        x, lib.arange(x.shape[0]) % x.shape[1], reduction="none"
    ),
    "log_softmax-then-softmax": lambda lib, x: lib.softmax(lib.log_softmax(x, -1) * 0.5, -1),
    "layer_norm": lambda lib, x: lib.nn.functional.layer_norm(x, x.shape[-1:]),
    "layer_norm-affine": lambda lib, x: lib.nn.functional.layer_norm(
        x, x.shape[-1:], _affine(lib, x, 1.5), _affine(lib, x, -0.25)
    ),
    "layer_norm-weight": lambda lib, x: lib.nn.functional.layer_norm(
        x, x.shape[-1:], _affine(lib, x, 0.5)
    ),
    "layer_norm-bias": lambda lib, x: lib.nn.functional.layer_norm(
        x, x.shape[-1:], None, _affine(lib, x, 2.0)
    ),
    "layer_norm-transposed": lambda lib, x: lib.nn.functional.layer_norm(x.t(), x.shape[:1]),
    "rms_norm": lambda lib, x: lib.nn.functional.rms_norm(x, x.shape[-1:]),
    "rms_norm-weight": lambda lib, x: lib.nn.functional.rms_norm(
        x, x.shape[-1:], _affine(lib, x, 0.5), eps=1e-4
    ),
}


def _affine(lib, x, scale):
    """A weight or bias for ``x``'s last dim (a constant here: its gradient is checked by
    ``test_layer_norm_parameter_gradients_match_torch``)."""
    n = x.shape[-1]
    return lib.tensor(np.linspace(-1.0, 1.0, n, dtype=np.float32) * scale + 1.0)


_SHAPES = [(8, 16), (3, 5), (64, 65), (2, 1000), (7, 1)]


def _inputs(shape) -> np.ndarray:
    return (np.random.default_rng(7).standard_normal(shape) * 4).astype(np.float32)


def _run(lib, case, x, ones=False):
    """The case's values and the gradient of x for a seeded random gradient of them."""
    t = lib.tensor(x, requires_grad=True)
    y = _CASES[case](lib, t)
    g = np.random.default_rng(9).standard_normal(tuple(y.shape)).astype(np.float32)
    (grad,) = lib.autograd.grad(y, [t], lib.tensor(np.ones_like(g) if ones else g))
    return y.detach().numpy(), grad.numpy()


# every case at every shape, except two ill-conditioned ones where float32 results differ by
# more than rounding: layer norm over the 2-element rows of the transposed 2x1000 input (two
# nearly equal values cancel: kiln and PyTorch are both ~3e-5 from the float64 result, in
# different directions), and the one-element rows of rms_norm, whose gradient at a small x is
# a large rstd times eps / (x^2 + eps) (kiln 3e-6 from float64 there, PyTorch 1.3e-5)
_ILL_CONDITIONED = {("layer_norm-transposed", (2, 1000)), ("rms_norm", (7, 1))}
_CASE_SHAPES = [
    (case, shape)
    for case in sorted(_CASES)
    for shape in _SHAPES
    if (case, shape) not in _ILL_CONDITIONED and (case.split("-")[0], shape) not in _ILL_CONDITIONED
]


@needs_torch
@pytest.mark.parametrize(
    "case, shape", _CASE_SHAPES, ids=[f"{c}-{'x'.join(map(str, s))}" for c, s in _CASE_SHAPES]
)
def test_values_and_gradients_match_torch(case, shape):
    x = _inputs(shape)
    for got, want in zip(_run(kiln, case, x), _run(torch, case, x)):
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-6)


@needs_torch
def test_nan_and_infinite_rows_match_torch():
    x = np.array(
        [
            [1.0, np.nan, 2.0, 0.5, 1.0, 2.0, 3.0, 4.0, 5.0],
            [-np.inf] * 9,
            [np.inf, 1.0, 2.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
            [0.0, -np.inf, 1.0, -np.inf, 2.0, 3.0, -np.inf, 4.0, 80.0],
            [-1e30, 1e30, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -0.0],
        ],
        np.float32,
    )
    for case in ("softmax", "log_softmax"):
        for got, want in zip(_run(kiln, case, x, True), _run(torch, case, x, True)):
            np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
            np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
            finite = np.isfinite(want)
            np.testing.assert_allclose(got[finite], want[finite], rtol=1e-5, atol=1e-6)


@needs_torch
def test_no_grad_and_batched_rows_match_torch():
    x = _inputs((4, 3, 37))
    with kiln.no_grad():
        for name in ("softmax", "log_softmax"):
            got = getattr(kiln, name)(kiln.tensor(x), -1).numpy()
            want = getattr(torch, name)(torch.tensor(x), -1).numpy()
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-6)


@needs_torch
@pytest.mark.parametrize("shape", [(6, 4, 10), (5, 3, 7), (33, 1), (2, 600)])
@pytest.mark.parametrize("weighted", [True, False])
def test_rms_norm_weight_gradient_matches_torch(shape, weighted):
    x = _inputs(shape)
    g = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
    normalized = shape[1:]
    w = np.random.default_rng(4).standard_normal(normalized).astype(np.float32)
    results = []
    for lib in (kiln, torch):
        t = lib.tensor(x, requires_grad=True)
        wt = lib.tensor(w, requires_grad=True) if weighted else None
        y = lib.nn.functional.rms_norm(t, normalized, wt)
        grads = lib.autograd.grad(y, [t] + ([wt] if weighted else []), lib.tensor(g))
        results.append([y.detach().numpy()] + [v.numpy() for v in grads])
    for got, want in zip(*results):
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-5)


@needs_torch
@pytest.mark.parametrize("shape", [(6, 4, 10), (5, 3, 7), (33, 1), (2, 600)])
@pytest.mark.parametrize("affine", ["both", "weight", "bias"])
def test_layer_norm_parameter_gradients_match_torch(shape, affine):
    x = _inputs(shape)
    g = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
    normalized = shape[1:]  # one or more trailing dims
    rng = np.random.default_rng(4)
    w = rng.standard_normal(normalized).astype(np.float32)
    b = rng.standard_normal(normalized).astype(np.float32)
    results = []
    for lib in (kiln, torch):
        t = lib.tensor(x, requires_grad=True)
        wt = lib.tensor(w, requires_grad=True) if affine != "bias" else None
        bt = lib.tensor(b, requires_grad=True) if affine != "weight" else None
        y = lib.nn.functional.layer_norm(t, normalized, wt, bt, eps=1e-3)
        wanted = [v for v in (t, wt, bt) if v is not None]
        grads = lib.autograd.grad(y, wanted, lib.tensor(g))
        results.append([y.detach().numpy()] + [v.numpy() for v in grads])
    for got, want in zip(*results):
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-5)


def _one_element_rows_weight_grad(lib, x, w, g, layer_norm):
    t = lib.tensor(x, requires_grad=True)
    wt = lib.tensor(w, requires_grad=True)
    (gw,) = lib.autograd.grad(layer_norm(t, [1], wt), [wt], lib.tensor(g))
    return gw.numpy()


@needs_torch
@pytest.mark.parametrize("path", ["machine_code", "numpy", "compiled"])
def test_layer_norm_weight_gradient_over_one_element_rows_rounds_as_torch(path, monkeypatch):
    """Rows of one element have zero variance: PyTorch's xhat for the weight gradient, the
    multiply-add x * rstd + (-rstd * mean) fused, is the product's rounding (rstd = 1 /
    sqrt(eps)), a few 1e-6 summed, not the exact 0 of (x - mean) * rstd."""
    x = _inputs((2, 4, 1))
    g = np.random.default_rng(2).standard_normal((2, 4, 1)).astype(np.float32)
    w = np.array([0.75], np.float32)
    want = _one_element_rows_weight_grad(torch, x, w, g, torch.nn.functional.layer_norm)
    layer_norm = F.layer_norm
    if path == "numpy":
        monkeypatch.setitem(machine_code._built, "rows", False)  # as when building failed
    elif path == "compiled":
        layer_norm = kiln.compile(F.layer_norm)
    got = _one_element_rows_weight_grad(kiln, x, w, g, layer_norm)
    assert want != 0.0
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=0)


def test_compiled_matches_eager():
    assert machine_code.get("rows") is not None  # the eager values below are the machine code's
    x = _inputs((33, 77))
    g = _inputs((33, 77))[::-1].copy()

    w = kiln.tensor(np.linspace(0.5, 1.5, 77, dtype=np.float32))

    def f(t):
        normalized = F.layer_norm(t, (77,), w) - F.rms_norm(t, (77,), w)
        return kiln.softmax(t, -1) * 2 + kiln.log_softmax(t, -1) + normalized

    t = kiln.tensor(x, requires_grad=True)
    eager = f(t)
    (eager_grad,) = kiln.autograd.grad(eager, [t], kiln.tensor(g))
    compiled = kiln.compile(f)(t)
    (compiled_grad,) = kiln.autograd.grad(compiled, [t], kiln.tensor(g))
    np.testing.assert_allclose(
        compiled.detach().numpy(), eager.detach().numpy(), rtol=1e-5, atol=1e-6
    )
    np.testing.assert_allclose(compiled_grad.numpy(), eager_grad.numpy(), rtol=1e-5, atol=1e-6)


def test_numpy_kernels_when_the_machine_code_is_missing(monkeypatch, capsys):
    def broken():
        raise OSError("no JIT here")

    x = _inputs((64, 65))
    expected = {case: _run(kiln, case, x) for case in _CASES}
    monkeypatch.setitem(machine_code._loaders, "rows", broken)
    monkeypatch.delitem(machine_code._built, "rows", raising=False)
    for case in _CASES:
        for got, want in zip(_run(kiln, case, x), expected[case]):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    warned = capsys.readouterr().err
    assert "no machine code for rows" in warned and "no JIT here" in warned


@needs_torch
@pytest.mark.parametrize("case", ["softmax", "log_softmax", "cross_entropy"])
def test_rows_shared_by_the_thread_pool_match_one_thread_and_torch(case):
    """Enough rows (a causal attention softmax's 8x4x64x64, some rows with -inf) are cut into
    chunks the compiled kernels' threads share: the values and gradients are those of one
    thread, bit for bit (each row is computed alone), and PyTorch's."""
    x = _inputs((2048, 64))
    x[np.triu_indices(64, 1)] = -np.inf  # the first 64 rows: a causal mask
    before = kiln.get_num_threads()
    try:
        results = []
        for threads in (2, 1):
            kiln.set_num_threads(threads)
            results.append(_run(kiln, case, x))
    finally:
        kiln.set_num_threads(before)
    for pooled, alone in zip(*results):
        np.testing.assert_array_equal(pooled, alone)
    for got, want in zip(results[0], _run(torch, case, x)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-6)


@needs_torch
@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("shape, normalized", [((2, 0), [0]), ((0, 3), [3]), ((2, 3, 0), [3, 0])])
def test_layer_norm_gradients_of_empty_tensors_are_empty_as_torch(shape, normalized, compiled):
    """An empty row (the normalized shape holds a 0) has no element for the 1/n scale: the
    backward raised ZeroDivisionError; PyTorch returns empty gradients."""

    def grads(lib, layer_norm):
        x = lib.zeros(shape, requires_grad=True)
        w = lib.ones(normalized, requires_grad=True)
        b = lib.zeros(normalized, requires_grad=True)
        layer_norm(x, normalized, w, b).sum().backward()
        return [t.grad.detach().numpy() for t in (x, w, b)]

    want = grads(torch, torch.nn.functional.layer_norm)
    layer_norm = kiln.compile(F.layer_norm) if compiled else F.layer_norm
    for got, expected in zip(grads(kiln, layer_norm), want):
        assert got.shape == expected.shape
        np.testing.assert_array_equal(got, expected)
