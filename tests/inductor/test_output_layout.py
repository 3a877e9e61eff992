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


CONVOLUTIONS = {
    # a strided layer's product is stored [C, N*P]: its NCHW result was a permuted view of it
    "stride_4": dict(stride=4),
    # small-channel direct loops store rows padded to whole vectors: the result was a slice
    "direct_padded_rows": dict(padding=1),
}


def _conv_head(lib, x, w, kwargs):
    return lib.nn.functional.conv2d(x, w, **kwargs)


@needs_torch
@pytest.mark.parametrize("dynamic", [False, True])
@pytest.mark.parametrize("requires_grad", [False, True])
@pytest.mark.parametrize("name", sorted(CONVOLUTIONS))
def test_a_convolution_returned_by_a_compiled_graph_is_contiguous_as_in_eager(
    name, requires_grad, dynamic
):
    """A model whose last layer is a convolution (a segmentation head, a critic) returns its
    result contiguous, as eager and PyTorch do, so ``out.view(batch, -1)`` works; it was a view
    of the kernel's buffer in another order or with padded rows, and ``view`` raised."""
    kwargs = CONVOLUTIONS[name]
    rng = np.random.default_rng(0)
    weight = rng.standard_normal((8, 3, 4, 4)).astype(np.float32)
    compiled = kiln.compile(lambda x, w: _conv_head(kiln, x, w, kwargs), dynamic=dynamic)
    for shape in [(2, 3, 16, 20), (3, 3, 17, 23)]:
        x = rng.standard_normal(shape).astype(np.float32)
        got = compiled(
            kiln.tensor(x, requires_grad=requires_grad), kiln.tensor(weight, requires_grad=True)
        )
        want = _conv_head(torch, torch.tensor(x), torch.tensor(weight), kwargs)
        assert got.stride() == want.stride()
        assert_close(got.view(shape[0], -1).detach(), want.view(shape[0], -1))
