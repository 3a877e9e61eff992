"""Lowering corners the op samples reached first: eager fallbacks of multi-output ops, empty
reductions in the numpy executor, half-precision conversions that have no single LLVM
instruction, and in-place ops whose functional form promotes the dtype."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from tests.inductor.helpers import compiled_by_inductor
from tests.oracle import assert_close, needs_torch, to_torch, torch

CODEGENS = ["numpy", "llvm"]


@pytest.mark.parametrize("codegen", CODEGENS)
def test_multi_output_op_without_lowering_runs_its_kernel_once_per_call(codegen):
    a = kiln.randn(3, 4, 4, dtype=kiln.float64)

    def fn(a):
        sign, logabs = kiln.linalg.slogdet(a)
        return sign * logabs.exp() + 1

    expected = fn(a)
    got = compiled_by_inductor(fn, codegen)(a)
    np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-10)


@pytest.mark.parametrize("codegen", CODEGENS)
def test_empty_max_reduction_over_an_empty_output(codegen):
    x = kiln.randn(3, 0, 5)
    got = compiled_by_inductor(lambda x: x.amax(-1) + 1, codegen)(x)
    assert tuple(got.shape) == (3, 0)


@pytest.mark.parametrize("codegen", CODEGENS)
@pytest.mark.parametrize(
    "src", [kiln.float64, kiln.int64, kiln.int32, kiln.int16, kiln.int8, kiln.uint8, kiln.bool]
)
def test_half_conversions_from_and_to_every_dtype(codegen, src):
    x = (kiln.rand(37) * 40).to(src)
    to_half = compiled_by_inductor(lambda x: x.half() * 1, codegen)(x)
    np.testing.assert_array_equal(to_half.numpy(), x.half().numpy())
    y = (kiln.rand(37) * 40).half()
    from_half = compiled_by_inductor(lambda y: (y * 1).to(src), codegen)(y)
    np.testing.assert_array_equal(from_half.numpy(), y.to(src).numpy())


@pytest.mark.parametrize("codegen", CODEGENS)
def test_half_gradient_through_a_float64_computation(codegen):
    x = (kiln.rand(5) + 0.5).half().requires_grad_()
    xe = x.detach().clone().requires_grad_()
    fn = lambda x: kiln.float_power(x, 0.5)  # noqa: E731
    (g,) = kiln.autograd.grad(compiled_by_inductor(fn, codegen)(x).sum(), x)
    (ge,) = kiln.autograd.grad(fn(xe).sum(), xe)
    assert g.dtype is kiln.float16
    np.testing.assert_allclose(g.float().numpy(), ge.float().numpy(), rtol=2e-3)


@pytest.mark.parametrize("codegen", CODEGENS)
def test_inplace_scan_keeps_the_input_dtype(codegen):
    def fn(x):
        y = x.clone()
        return y.cumsum_(1)

    x = kiln.randint(-5, 5, (3, 4), dtype=kiln.int32)
    got = compiled_by_inductor(fn, codegen)(x)
    assert got.dtype is kiln.int32
    np.testing.assert_array_equal(got.numpy(), fn(x).numpy())


@pytest.mark.parametrize("codegen", CODEGENS)
def test_cummin_of_bools(codegen):
    x = kiln.tensor([True, False, True, True, False, False, True])
    got = compiled_by_inductor(lambda x: kiln.cummin(x, 0).values, codegen)(x)
    np.testing.assert_array_equal(got.numpy(), kiln.cummin(x, 0).values.numpy())


@pytest.mark.parametrize("n", [1000, 4096 + 77])
def test_wide_vector_loops_with_several_math_calls(n):
    """Loops with two or more vector-math calls per element run 4x wider vectors, then the normal
    width, then scalars: every tail length, strided and broadcast reads, mixed dtypes."""
    x = kiln.randn(n)
    y = kiln.randn(3, n)[1]  # a row of a matrix: offset reads
    z = kiln.randn(n, 2)[:, 0]  # strided reads (gathers)

    def fn(x, y, z):
        a = x.sin().exp() + y.tanh() * z.sigmoid()
        mask = a > 1.0
        return a, mask, (a * 100).to(kiln.int32), kiln.where(mask, x.cos(), z.log1p().abs())

    expected = fn(x, y, z)
    got = compiled_by_inductor(fn, "llvm")(x, y, z)
    for g, e in zip(got, expected):
        assert g.dtype is e.dtype
        if e.dtype.is_floating_point:
            np.testing.assert_allclose(g.numpy(), e.numpy(), rtol=2e-6, atol=1e-6)
        else:
            # the int cast may differ where a value sits within rounding of an integer
            assert (g.numpy() != e.numpy()).mean() < 0.01


_SCANS = {
    "cumsum": lambda lib, x, d: x.cumsum(d),
    "cumprod": lambda lib, x, d: x.cumprod(d),
    "logcumsumexp": lambda lib, x, d: lib.logcumsumexp(x.float(), d),
}


@needs_torch
@pytest.mark.parametrize("codegen", CODEGENS)
@pytest.mark.parametrize("scan", sorted(_SCANS))
@pytest.mark.parametrize("dtype", ["bool", "float32"])
@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_scan_result_is_contiguous_along_every_dim(codegen, scan, dtype, layout):
    """PyTorch's scans write a contiguous result; the decomposition once reduced with the
    scanned dim last and returned a permuted view of that (strides (9, 1, 3) for dim 1)."""
    values = np.random.default_rng(0).integers(0, 2, (3, 3, 3)).astype(np.float32)
    x = kiln.from_numpy(values).to(getattr(kiln, dtype))
    t = to_torch(x)
    if layout == "transposed":
        x, t = x.transpose(0, 2), t.transpose(0, 2)
    for d in range(3):
        expected = _SCANS[scan](torch, t, d)
        for got in (
            _SCANS[scan](kiln, x, d),
            compiled_by_inductor(_SCANS[scan], codegen)(kiln, x, d),
        ):
            assert got.stride() == expected.stride(), f"dim {d}"
            assert_close(got, expected)
