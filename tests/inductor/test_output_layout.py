"""Compiled outputs have eager's strides: a pointwise op of a transposed or permuted input keeps
the input's dim order in eager kiln and PyTorch (and in PyTorch's compiled code), so the
inductor stores such an output in that order instead of contiguously. kiln once returned
``x.t() * 2`` compiled with strides (3, 1) where eager gives (1, 4)."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from tests.oracle import assert_close, needs_torch, torch

CODEGENS = ["llvm", "numpy", "triton"]

CASES = {
    "transposed_mul": ((3, 4), lambda t: t.t() * 2),
    "transposed_exp_add": ((3, 4), lambda t: (t.t() * 2).exp() + 1),
    "reduction_broadcast": ((3, 4), lambda t: t.t().sum(0, keepdim=True) + t.t()),
    "permuted_sin": ((2, 3, 4, 5), lambda t: t.permute(0, 2, 3, 1).sin() + 1),
    "two_outputs": ((3, 4), lambda t: (t.t() - 1, (t * 3).t())),
}


def _outputs(result) -> tuple:
    return result if isinstance(result, tuple) else (result,)


def _input(lib, shape, requires_grad: bool):
    values = np.arange(np.prod(shape), dtype=np.float32).reshape(shape) / 10
    return lib.from_numpy(values).requires_grad_(requires_grad)


@needs_torch
@pytest.mark.parametrize("requires_grad", [False, True])
@pytest.mark.parametrize("codegen", CODEGENS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_compiled_output_strides_equal_eager(name, codegen, requires_grad):
    shape, fn = CASES[name]
    x = _input(kiln, shape, requires_grad)
    eager = _outputs(fn(x))
    compiled = _outputs(
        kiln.compile(fn, backend="inductor", options={"cpu_codegen": codegen})(
            _input(kiln, shape, requires_grad)
        )
    )
    reference = _outputs(fn(_input(torch, shape, requires_grad)))
    for got, want, oracle in zip(compiled, eager, reference):
        assert got.stride() == want.stride() == oracle.stride()
        assert_close(got.detach(), want.detach())
