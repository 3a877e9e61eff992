"""``autograd.graph.increment_version``: a write autograd cannot see, announced by hand, makes a
backward that saved the tensor raise PyTorch's in-place error (a tensor, a view of it, or an
iterable of them), and leaves a tensor nobody saved free to differentiate."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from tests.oracle import needs_torch, torch


def _run(lib, announce):
    x = lib.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = x * 2
    loss = (y * y).sum()
    before = y._version
    announce(lib, y)
    after = y._version
    try:
        loss.backward()
    except RuntimeError as error:
        return after - before, str(error).replace(lib.__name__, "torch"), None
    return after - before, None, x.grad.numpy()


_ANNOUNCE = {
    "tensor": lambda lib, y: lib.autograd.graph.increment_version(y),
    "view": lambda lib, y: lib.autograd.graph.increment_version(y[1:]),
    "list": lambda lib, y: lib.autograd.graph.increment_version([y, y[:1]]),
}


@needs_torch
@pytest.mark.parametrize("how", sorted(_ANNOUNCE))
def test_announced_write_refuses_the_backward_as_torch(how):
    got, want = _run(kiln, _ANNOUNCE[how]), _run(torch, _ANNOUNCE[how])
    assert got[0] == want[0]  # the version moved as much
    assert got[1] is not None and got[1] == want[1]


@needs_torch
def test_unsaved_tensor_differentiates_after_an_announced_write():
    def run(lib):
        x = lib.tensor([1.0, -2.0], requires_grad=True)
        y = x + 1  # an add saves nothing
        lib.autograd.graph.increment_version(y)
        y.sum().backward()
        return x.grad.numpy()

    np.testing.assert_array_equal(run(kiln), run(torch))


def test_non_tensors_are_refused():
    with pytest.raises(TypeError, match="expects Tensors"):
        kiln.autograd.graph.increment_version([kiln.ones(1), 3])
