"""Result strides of ops on channels-last and transposed inputs: PyTorch's, and the meta's the
same as the kernel's (a compiled graph plans with the meta's; a later ``view`` of a result works
or fails by its strides, as a ViT's ``cat((cls, patches.transpose(1, 2)))...view()`` does)."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from tests.oracle import needs_torch, torch

pytestmark = needs_torch


def _ops(lib):
    F = lib.nn.functional

    def long_zeros(v):
        return lib.zeros_like(v, dtype=lib.long)

    return {
        "softmax": lambda v: v.softmax(-1),
        "softmax-dim1": lambda v: v.softmax(1),
        "log_softmax": lambda v: F.log_softmax(v, -1),
        "layer_norm": lambda v: F.layer_norm(v, v.shape[-1:]),
        "rms_norm": lambda v: F.rms_norm(v, v.shape[-1:]),
        "relu": lambda v: F.relu(v),
        "masked_fill": lambda v: v.masked_fill(v > 0, 0.0),
        "cummax": lambda v: v.cummax(1),
        "cummin": lambda v: v.cummin(1),
        "cumsum": lambda v: v.cumsum(1),
        "tril": lambda v: v.tril(),
        "triu": lambda v: v.triu(1),
        "masked_scatter": lambda v: v.masked_scatter(v > 0, lib.zeros(v.numel())),
        "gather": lambda v: v.gather(1, long_zeros(v)),
        "cat": lambda v: lib.cat([v, v], 1),
        "cat-mixed": lambda v: lib.cat([v, v.contiguous()], 0),
        "stack-contiguous": lambda v: lib.stack([v.contiguous(), v.contiguous()]),
        "where": lambda v: lib.where(v > 0, v, 0.0),
        "add": lambda v: v + 1,
        "clone": lambda v: v.clone(),
        "gelu": lambda v: F.gelu(v),
        "batch_norm": lambda v: F.batch_norm(v, None, None, training=True),
        "group_norm": lambda v: F.group_norm(v, 3),
        "scatter": lambda v: v.scatter(1, long_zeros(v), 1.0),
    }


def _inputs(lib):
    lib.manual_seed(0)
    return {
        "channels-last": lib.randn(2, 3, 4, 6).to(memory_format=lib.channels_last),
        "transposed": lib.randn(2, 6, 3).transpose(1, 2),
    }


def _strides(result):
    results = result if isinstance(result, tuple) else (result,)
    return [r.stride() for r in results]


@pytest.mark.parametrize("layout", ["channels-last", "transposed"])
@pytest.mark.parametrize("op", sorted(_ops(kiln)))
def test_strides_match_torch_and_the_meta(op, layout):
    x = _inputs(kiln)[layout]
    eager = _strides(_ops(kiln)[op](x))
    assert eager == _strides(_ops(torch)[op](_inputs(torch)[layout]))
    assert _strides(_ops(kiln)[op](x.to("meta"))) == eager


def test_view_of_cat_of_transposed_patches_compiles():
    # the ViT patch-embedding pattern under aot_eager, which plans with the metas' strides
    def embed(cls, patches):
        tokens = kiln.cat([cls, patches.flatten(2).transpose(1, 2)], 1)
        return tokens.view(-1, tokens.shape[-1])

    cls, patches = kiln.randn(2, 1, 8), kiln.randn(2, 8, 3, 3)
    expected = embed(cls, patches)
    got = kiln.compile(embed, backend="aot_eager")(cls, patches)
    assert got.shape == expected.shape
    assert kiln.equal(got, expected)


_VIEWED_AFTER = {
    "softmax": lambda v: kiln.softmax(v, 0),
    "log_softmax": lambda v: kiln.nn.functional.log_softmax(v, 0),
    "layer_norm": lambda v: kiln.nn.functional.layer_norm(v, v.shape[-1:]),
    "masked_fill": lambda v: v.masked_fill(v > 0, 0.0),
    "cummax": lambda v: v.cummax(0).values,
    "tril": lambda v: v.tril(),
    "gather": lambda v: v.gather(1, kiln.zeros(v.shape, dtype=kiln.long)),
}


@pytest.mark.parametrize("backend", ["inductor", "aot_eager"])
@pytest.mark.parametrize("op", sorted(_VIEWED_AFTER))
def test_compiled_view_of_a_result_from_a_permuted_input(op, backend):
    # compiled graphs decompose these ops into pointwise parts that keep the input's layout:
    # their results are laid out as the op's (else ``view`` fails where eager works)
    fn = _VIEWED_AFTER[op]
    x = kiln.randn(3, 4).t().requires_grad_()
    expected = fn(x).view(-1)
    got = kiln.compile(lambda v: fn(v).view(-1), backend=backend)(x)
    np.testing.assert_allclose(got.detach().numpy(), expected.detach().numpy(), rtol=1e-6)
    got.sum().backward()
    assert x.grad is not None and x.grad.shape == x.shape
