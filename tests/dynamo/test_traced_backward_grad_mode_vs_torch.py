"""A backward that kiln's own code runs while a graph is captured (the ``vjp_fn`` that
``kiln.func.vjp`` returns, called after the transform broke the graph) runs under grad mode
``create_graph``: the graph replays that switch, so its gradients carry no history where
PyTorch's carry none (probe round 19: ``requires_grad`` was True, with a ``grad_fn``, under
every backend, because the gradient formulas' ops replayed with grad enabled)."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from tests.oracle import needs_torch, torch

pytestmark = needs_torch

BACKENDS = ("eager", "aot_eager", "inductor")


def _vjp_of_sin_times_x(lib, x, create_graph=None):
    out, vjp_fn = lib.func.vjp(lambda x: x.sin() * x, x)
    kwargs = {} if create_graph is None else {"create_graph": create_graph}
    return vjp_fn(lib.ones_like(out), **kwargs)[0] * 2


def _hvp_of_cubes(lib, x):
    return lib.autograd.functional.hvp(lambda x: (x**3).sum(), x, lib.ones_like(x))[1]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("requires_grad", [False, True])
@pytest.mark.parametrize("program", [_vjp_of_sin_times_x, _hvp_of_cubes])
def test_gradients_taken_during_capture_keep_history_only_as_torch(program, requires_grad, backend):
    values = [0.5, -1.0, 2.0]
    expected = program(torch, torch.tensor(values, requires_grad=requires_grad))
    got = kiln.compile(lambda x: program(kiln, x), backend=backend)(
        kiln.tensor(values, requires_grad=requires_grad)
    )
    assert got.requires_grad == expected.requires_grad
    assert (got.grad_fn is None) == (expected.grad_fn is None)
    np.testing.assert_allclose(got.detach().numpy(), expected.detach().numpy(), rtol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_traced_backward_leaves_the_callers_grad_mode_in_the_graph(backend):
    """After the backward the graph's later ops record history again, as PyTorch's do."""
    w = {lib: lib.tensor([1.5, -0.5, 2.0], requires_grad=True) for lib in (kiln, torch)}

    def program(lib, x):
        return _vjp_of_sin_times_x(lib, x) + x * w[lib]

    values = [0.5, -1.0, 2.0]
    expected = program(torch, torch.tensor(values))
    got = kiln.compile(lambda x: program(kiln, x), backend=backend)(kiln.tensor(values))
    assert got.requires_grad and expected.requires_grad
    got.sum().backward()
    expected.sum().backward()
    np.testing.assert_allclose(got.detach().numpy(), expected.detach().numpy(), rtol=1e-6)
    np.testing.assert_allclose(w[kiln].grad.numpy(), w[torch].grad.numpy(), rtol=1e-6)
