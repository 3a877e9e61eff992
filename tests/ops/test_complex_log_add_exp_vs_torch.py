"""``logaddexp`` and ``logcumsumexp`` of complex tensors against PyTorch: its ordering of the
operands by real part, its special values (both real parts -inf or +inf, NaN), eager and
compiled; ``logaddexp``'s conjugated gradient; ``logaddexp2`` still refused, as PyTorch's."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from tests.oracle import needs_torch, torch

pytestmark = needs_torch

INF, NAN = np.inf, np.nan


def _operands(dtype: str) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((3, 5)) * 3 + 1j * rng.standard_normal((3, 5)) * 3
    b = rng.standard_normal((3, 5)) * 3 + 1j * rng.standard_normal((3, 5)) * 3
    # both -inf, both +inf, one -inf, a NaN in either, equal real parts
    a[0] = [-INF + 1j, INF + 1j, -INF + 0j, NAN + 0j, 2 + 1j]
    b[0] = [-INF + 2j, INF + 2j, 1 + 3j, 1 + 0j, 2 - 1j]
    a[2, 0], b[2, 1] = complex(-INF, NAN), complex(3, NAN)  # NaN in the larger operand
    return a.astype(dtype), b.astype(dtype)


def _assert_same(got, want) -> None:
    assert str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1]
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=2e-5, atol=2e-5, equal_nan=True)


CALLS = {
    "logaddexp": lambda lib, a, b: lib.logaddexp(a, b),
    "logaddexp swapped": lambda lib, a, b: lib.logaddexp(b, a),
    "logcumsumexp dim 1": lambda lib, a, b: lib.logcumsumexp(a, 1),
    "logcumsumexp dim 0": lambda lib, a, b: lib.logcumsumexp(b, 0),
    "logcumsumexp method": lambda lib, a, b: b.logcumsumexp(-1),
    "logcumsumexp of -inf + nanj": lambda lib, a, b: (a * 0.5).logcumsumexp(-1),
}


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
@pytest.mark.parametrize("name", list(CALLS))
def test_complex_log_add_exp_gives_pytorchs_values(name, dtype, compiled):
    call = CALLS[name]
    a, b = _operands(dtype)
    want = call(torch, torch.tensor(a), torch.tensor(b))
    fn = lambda x, y: call(kiln, x, y)  # noqa: E731
    if compiled:
        kiln.dynamo.reset()
        fn = kiln.compile(fn)
    _assert_same(fn(kiln.tensor(a), kiln.tensor(b)), want)


def test_complex_logaddexp_gradient_is_conjugated():
    a, b = (x[1:].astype(np.complex128) for x in _operands("complex128"))
    grads = []
    for lib in (kiln, torch):
        x, y = lib.tensor(a, requires_grad=True), lib.tensor(b, requires_grad=True)
        out = lib.logaddexp(x, y)
        (out.real.sum() + 2 * out.imag.sum()).backward()
        grads.append((x.grad, y.grad))
    for got, want in zip(grads[0], grads[1]):
        _assert_same(got, want)


def test_complex_logcumsumexp_gradient_is_refused_by_name():
    x = kiln.tensor(_operands("complex64")[0][1:], requires_grad=True)
    out = kiln.logcumsumexp(x, 1)
    with pytest.raises(NotImplementedError, match="logcumsumexp: the derivative for complex"):
        out.real.sum().backward()


def test_complex_logaddexp2_is_refused_as_pytorch_refuses_it():
    a, b = _operands("complex64")
    with pytest.raises(NotImplementedError) as expected:
        torch.logaddexp2(torch.tensor(a), torch.tensor(b))
    with pytest.raises(NotImplementedError) as got:
        kiln.logaddexp2(kiln.tensor(a), kiln.tensor(b))
    assert str(got.value) == str(expected.value)
