"""softmax, log_softmax and cross_entropy in eager mode through the row kernels in machine code
(``llvm/eager_softmax.py``): values and gradients against PyTorch over row lengths with and
without a scalar tail, NaN and infinite rows, the layouts the kernels leave to numpy, the
compiled kernels, and the numpy kernels when the machine code is missing."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
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
}

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


@needs_torch
@pytest.mark.parametrize("case", sorted(_CASES))
@pytest.mark.parametrize("shape", _SHAPES, ids=lambda s: "x".join(map(str, s)))
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


def test_compiled_matches_eager():
    assert machine_code.get("softmax") is not None  # the eager values below are the machine code's
    x = _inputs((33, 77))
    g = _inputs((33, 77))[::-1].copy()

    def f(t):
        return kiln.softmax(t, -1) * 2 + kiln.log_softmax(t, -1)

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
    monkeypatch.setitem(machine_code._loaders, "softmax", broken)
    monkeypatch.delitem(machine_code._built, "softmax", raising=False)
    for case in _CASES:
        for got, want in zip(_run(kiln, case, x), expected[case]):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    warned = capsys.readouterr().err
    assert "no machine code for softmax" in warned and "no JIT here" in warned
