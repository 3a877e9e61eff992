"""gelu, silu, sigmoid and log_sigmoid in eager mode as one machine-code pass
(``llvm/eager_activations.py``): values and gradients against PyTorch, compiled kernels' bits for
gelu, PyTorch's rounding for sigmoid, and the numpy kernels when the machine code is missing."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.runtime import machine_code
from tests.oracle import gelu_depends_on_host, needs_torch, torch

_CASES = {
    "gelu": lambda F, x: F.gelu(x),
    "gelu-tanh": lambda F, x: F.gelu(x, approximate="tanh"),
    "silu": lambda F, x: F.silu(x),
    "sigmoid": lambda F, x: x.sigmoid(),
    "logsigmoid": lambda F, x: F.logsigmoid(x),
    "bce-with-logits": lambda F, x: F.binary_cross_entropy_with_logits(
        x, (x.detach() > 0).to(x.dtype) * 0.75, reduction="none"
    ),
}


def _inputs(n: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(5)
    x = (rng.standard_normal(n) * 3).astype(np.float32)
    x[:9] = [0.0, -0.0, np.inf, -np.inf, np.nan, -20.0, 20.0, 1e-30, -6.0]
    return x, rng.standard_normal(n).astype(np.float32)


def _run(lib, case, x, g, shape):
    t = lib.tensor(x.reshape(shape), requires_grad=True)
    y = _CASES[case](lib.nn.functional, t)
    (grad,) = lib.autograd.grad(y, [t], lib.tensor(g.reshape(shape)))
    return y.detach().numpy(), grad.numpy()


@needs_torch
@pytest.mark.parametrize("case", sorted(_CASES))
@pytest.mark.parametrize("shape", [(1031,), (64, 65)], ids=["tail", "2d"])
def test_values_and_gradients_match_torch(case, shape):
    x, g = _inputs(int(np.prod(shape)))
    if case.startswith("gelu"):
        x = np.where(gelu_depends_on_host(x), np.float32(1.5), x)
    for got, want in zip(_run(kiln, case, x, g, shape), _run(torch, case, x, g, shape)):
        assert got.dtype == want.dtype and got.shape == want.shape
        # (the tanh form keeps its lower tail, where PyTorch's 1 + tanh cancels to 0: ~1e-6)
        np.testing.assert_allclose(got, want, rtol=2e-6, atol=5e-6)
        # NaN where PyTorch has NaN; zeros of PyTorch's sign at the special values
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))


@needs_torch
def test_gelu_zeros_have_torchs_sign():
    x, g = _inputs(2048)
    got = _run(kiln, "gelu", x, g, x.shape)[0]
    want = _run(torch, "gelu", x, g, x.shape)[0]
    # a negative x's zero (-0.0's, a very negative x's) depends on the host's MKL
    zeros = (want == 0) & (x == 0) & ~np.signbit(x)
    assert zeros.sum() == 1
    np.testing.assert_array_equal(np.signbit(got[zeros]), np.signbit(want[zeros]))
    np.testing.assert_array_equal(got[(x < -15) & np.isfinite(x)], 0.0)


def test_eager_gelu_is_the_compiled_kernels_bits():
    x, _ = _inputs(4099)
    t = kiln.tensor(x)
    eager = kiln.nn.functional.gelu(t).numpy()
    compiled = kiln.compile(lambda v: kiln.nn.functional.gelu(v))(t).numpy()
    np.testing.assert_array_equal(eager, compiled)


@needs_torch
def test_eager_sigmoid_rounds_as_torchs_formula():
    """1 / (1 + e^-x) with the kernels' exp: PyTorch's bits where the two exps agree (numpy's
    exp left 69 of these 400 a bit apart, ``tests/runtime/test_float_rounding.py``)."""
    x = (np.random.default_rng(2).standard_normal(400) * 3).astype(np.float32)
    got = kiln.sigmoid(kiln.tensor(x)).numpy()
    want = torch.sigmoid(torch.tensor(x)).numpy()
    assert np.count_nonzero(got != want) <= 20
    np.testing.assert_allclose(got, want, rtol=2e-7)


@needs_torch
@pytest.mark.parametrize("dtype", ["float64", "float16", "bfloat16", "int32"])
def test_sigmoid_of_other_dtypes_and_layouts_matches_torch(dtype):
    """Only contiguous float32 takes the machine code; numpy's four passes into one result
    serve the rest (a transposed operand keeps its layout, as PyTorch's result does)."""
    x, _ = _inputs(64 * 48)
    x = np.nan_to_num(x, nan=0.5).reshape(64, 48)
    if dtype == "int32":
        x = np.round(x).astype(np.int32)
    k = kiln.tensor(x).to(getattr(kiln, dtype)).T
    t = torch.tensor(x).to(getattr(torch, dtype)).T
    got, want = k.sigmoid(), t.sigmoid()
    assert str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1]
    assert got.stride() == want.stride()
    np.testing.assert_allclose(got.float().numpy(), want.float().numpy(), rtol=4e-3, atol=1e-7)


@needs_torch
@pytest.mark.parametrize("dtype", ["float64", "float16", "bfloat16", "float32"])
@pytest.mark.parametrize("value", [1.5, -30.0, float("inf"), float("nan")])
def test_sigmoid_of_a_0d_tensor_matches_torch(dtype, value):
    """A 0-d operand's numpy passes work on an array, not the scalar numpy's ufuncs return for
    it (float64 0-d sigmoid raised TypeError: the fuzzer's dtype rules found it)."""
    got = kiln.tensor(value, dtype=getattr(kiln, dtype)).sigmoid()
    want = torch.tensor(value, dtype=getattr(torch, dtype)).sigmoid()
    assert got.shape == () and str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1]
    np.testing.assert_allclose(got.float().item(), want.float().item(), rtol=1e-7)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compiled_gelu_tanh_keeps_the_eager_lower_tail(backend):
    """Compiled code computes the tanh form as the eager kernels do, x sigmoid(2 inner): down
    the lower tail 1 + tanh cancels (to 0 below about -5), so ``log(-gelu(x))`` (the fuzzer's
    find) differed from eager by up to inf. Values and gradients agree in relative terms."""

    def f(v):
        y = kiln.nn.functional.gelu(v, approximate="tanh")
        return y, kiln.log(-y)

    x = np.linspace(-9, -1, 2001).astype(np.float32)  # (the gradient crosses 0 near -0.75)
    eager_in = kiln.tensor(x, requires_grad=True)
    compiled_in = kiln.tensor(x, requires_grad=True)
    eager = f(eager_in)
    compiled = kiln.compile(f, backend=backend)(compiled_in)
    np.testing.assert_allclose(compiled[0].detach().numpy(), eager[0].detach().numpy(), rtol=2e-5)
    np.testing.assert_allclose(compiled[1].detach().numpy(), eager[1].detach().numpy(), rtol=2e-6)
    (eager_grad,) = kiln.autograd.grad(eager[0].sum(), [eager_in])
    (compiled_grad,) = kiln.autograd.grad(compiled[0].sum(), [compiled_in])
    np.testing.assert_allclose(compiled_grad.numpy(), eager_grad.numpy(), rtol=2e-5, atol=1e-30)


def test_broadcast_gradient_and_half_types():
    # ``y.sum().backward()`` hands a broadcast gradient; float16 computes in float32 between casts
    x, _ = _inputs(3000)
    x32 = kiln.tensor(x, requires_grad=True)
    kiln.nn.functional.gelu(x32).sum().backward()
    xh = kiln.tensor(x).half().requires_grad_()
    yh = kiln.nn.functional.silu(xh)
    yh.sum().backward()
    assert yh.dtype is kiln.float16 and xh.grad.dtype is kiln.float16
    expected = kiln.nn.functional.silu(xh.float())
    np.testing.assert_allclose(
        yh.detach().float().numpy(), expected.detach().numpy(), rtol=1e-3, atol=1e-3
    )
    # against the derivative taken from a dense gradient of ones
    dense = kiln.tensor(x, requires_grad=True)
    (want,) = kiln.autograd.grad(kiln.nn.functional.gelu(dense), [dense], kiln.ones(3000))
    np.testing.assert_array_equal(x32.grad.numpy(), want.numpy())


def test_numpy_kernels_when_the_machine_code_is_missing(monkeypatch, capsys):
    def broken():
        raise OSError("no JIT here")

    x, g = _inputs(2000)
    expected = {case: _run(kiln, case, x, g, x.shape) for case in _CASES}
    monkeypatch.setitem(machine_code._loaders, "activations", broken)
    monkeypatch.delitem(machine_code._built, "activations", raising=False)
    for case in _CASES:
        for got, want in zip(_run(kiln, case, x, g, x.shape), expected[case]):
            np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-6)
    warned = capsys.readouterr().err
    assert "no machine code for activations" in warned and "no JIT here" in warned
