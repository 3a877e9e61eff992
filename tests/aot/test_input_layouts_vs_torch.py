"""Compiled functions of inputs that require grad and are not dense (expanded, transposed) give
PyTorch's values and gradients, and compile (the conftest turns a fallback into an error).

AOT traces such an input through a clone folded back into it afterwards; layout-dependent
choices made while tracing (``reshape`` as a view or a copy, ``contiguous`` as a no-op) must be
those the real input gets, or a view lands on an expanded input where it is invalid.
"""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from tests.oracle import assert_close, needs_torch

pytestmark = needs_torch


def _leaf(lib, stored: np.ndarray, layout: str, dtype: str):
    """A leaf requiring grad of shape (2, 4, 3) over ``stored`` values, laid out as named."""
    base = lib.from_numpy(stored.copy()).to(getattr(lib, dtype))
    view = base.expand(2, 4, 3) if layout == "expanded" else base.transpose(-1, -2)
    return view.detach().requires_grad_(True)


_STORED = {
    "expanded": np.random.default_rng(0).uniform(0.5, 1.5, (1, 4, 1)).astype(np.float32),
    "transposed": np.random.default_rng(1).uniform(0.5, 1.5, (2, 3, 4)).astype(np.float32),
}


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("layout", ["expanded", "transposed"])
@pytest.mark.parametrize(
    "fn",
    [
        pytest.param(lambda x: x.prod(), id="prod"),
        pytest.param(lambda x: x.contiguous().view(-1) * 2, id="contiguous_view"),
        pytest.param(lambda x: x.flatten() * x.reshape(-1), id="flatten"),
        pytest.param(lambda x: x.prod() * x.detach().transpose(0, 2)[1].sum(), id="detach"),
    ],
)
def test_non_dense_input_that_requires_grad_matches_torch(fn, layout, dtype, backend):
    import torch

    x = _leaf(kiln, _STORED[layout], layout, dtype)
    t = _leaf(torch, _STORED[layout], layout, dtype)
    got = kiln.compile(fn, backend=backend, fullgraph=True)(x)
    expected = fn(t)
    assert_close(got, expected)
    cotangent = np.random.default_rng(2).integers(-3, 4, tuple(expected.shape))
    got.backward(kiln.from_numpy(cotangent.astype(np.float32)).to(got.dtype))
    expected.backward(torch.from_numpy(cotangent.astype(np.float32)).to(expected.dtype))
    assert_close(x.grad, t.grad)
