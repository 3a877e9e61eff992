"""Variance compiles to Welford's single pass; layer_norm reads each row once."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.inductor.compile_fx import inductor_decompositions
from tests.inductor.helpers import compile_traced

F = kiln.nn.functional
CODEGENS = ["numpy", "llvm", "triton"]


@pytest.mark.parametrize("codegen", CODEGENS)
@pytest.mark.parametrize(
    "fn",
    [
        lambda x: x.var(1),
        lambda x: x.var(0, correction=0, keepdim=True),
        lambda x: x.var(),
        lambda x: x.std(-1),
    ],
    ids=["rows", "cols-biased", "all", "std"],
)
def test_variance_matches_eager(fn, codegen):
    x = kiln.randn(23, 301) * 4 + 100  # a large mean: naive sum-of-squares would lose digits
    got = compile_traced(fn, x, codegen=codegen, decompositions=inductor_decompositions())(x)[0]
    np.testing.assert_allclose(got.numpy(), fn(x).numpy(), rtol=2e-5, atol=1e-4)


@pytest.mark.parametrize("codegen", CODEGENS)
def test_variance_is_one_welford_reduction(codegen):
    compiled = compile_traced(
        lambda x: x.var(1),
        kiln.randn(8, 64),
        codegen=codegen,
        decompositions=inductor_decompositions(),
    )
    types = [
        b.data.reduction_type
        for b in compiled.schedule.lowered.buffers
        if hasattr(b, "data") and hasattr(b.data, "reduction_type")
    ]
    assert types == ["welford_m2"]


def test_layer_norm_mean_and_variance_share_one_loop():
    w, b = kiln.randn(96), kiln.randn(96)
    x = kiln.randn(10, 96)
    compiled = compile_traced(
        lambda t: F.layer_norm(t, (96,), w, b), x, decompositions=inductor_decompositions()
    )
    (kernel,) = compiled.schedule.kernels
    from kiln.inductor.codegen.llvm.loop_plan import plan_kernel

    plan = plan_kernel(kernel)
    loops = [s for s in plan.steps if not isinstance(s, tuple)]
    reductions = [
        n.data.reduction_type for n in loops[0].nodes if hasattr(n.data, "reduction_type")
    ]
    assert sorted(reductions) == ["sum", "welford_m2"]  # mean's sum and the variance, one pass
    np.testing.assert_allclose(
        compiled(x)[0].numpy(), F.layer_norm(x, (96,), w, b).numpy(), rtol=1e-5, atol=1e-5
    )
