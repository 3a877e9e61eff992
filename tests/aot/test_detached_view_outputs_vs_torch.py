"""A compiled function returning a detached view of an intermediate (``y.diagonal().detach()``)
gives eager's strides: the graph returns ``y`` and the wrapper makes the view from it, then
detaches it, as for an output that is a view.

A detached alias records no view chain, so the output analysis took it for a tensor of its own
and returned the view itself from the graph; the inductor writes graph outputs densely, so a
diagonal came back with stride (1,) where eager and PyTorch give (3,) (fuzz campaign).
"""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from tests.oracle import assert_close, needs_torch, torch

pytestmark = needs_torch

CASES = {
    "diagonal": lambda lib, x: lib.sin(x).diagonal(0, -2, -1).detach(),
    "strided_slice": lambda lib, x: (x * 2)[:, ::2].detach(),
    "column": lambda lib, x: x.cos()[:, 1].detach(),
    "view_and_its_detach": lambda lib, x: (lambda d: (d, d.detach()))(lib.sin(x).diagonal()),
}


def _input(lib, dtype: str, requires_grad: bool):
    x = lib.tensor(np.arange(9).reshape(3, 3) / 4, dtype=getattr(lib, dtype))
    return x.requires_grad_() if requires_grad else x


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize(
    "dtype,requires_grad", [("int64", False), ("float32", False), ("float32", True)]
)
@pytest.mark.parametrize("case", CASES)
def test_a_detached_view_of_an_intermediate_keeps_eager_strides(
    case, dtype, requires_grad, backend
):
    fn = CASES[case]
    expected = fn(torch, _input(torch, dtype, requires_grad))
    compiled = kiln.compile(lambda x: fn(kiln, x), backend=backend, fullgraph=True)
    got = compiled(_input(kiln, dtype, requires_grad))
    expected = expected if isinstance(expected, tuple) else (expected,)
    got = got if isinstance(got, tuple) else (got,)
    for g, e in zip(got, expected, strict=True):
        assert_close(g, e)
        assert g.stride() == e.stride()
        assert g.requires_grad == e.requires_grad
        assert (g._base is None) == (e._base is None)
