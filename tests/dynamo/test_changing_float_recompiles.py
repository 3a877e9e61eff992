"""A Python float that changes between calls (a loss read with ``.item()`` and fed back, a
scheduled scale) is baked into the first graph and stops being baked in at its first change:
one recompile, as PyTorch's automatic dynamic makes it a symbolic float then. Graph counts are
compared with ``torch.compile`` (a counting backend on each side); values with eager."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.dynamo.testing import CompileCounter
from tests.oracle import needs_torch, torch


def _programs(lib):
    def loss_of(x):
        return (x * x).mean().item()  # a float read with ``.item()``

    def scaled(x, s):
        return x * s + 1

    def branch(x, s):
        return x * (2.0 if s > 0 else 0.5)

    def both(x, s):
        y = x * s
        return y - 1 if s < 100 else y

    return loss_of, {"scaled": scaled, "branch": branch, "both": both}


_VALUES = [1.0, 2.0, 3.0, 1.0, 4.0, 5.0]


def _graphs_per_call(lib, name: str) -> tuple[list[int], list]:
    """Graphs compiled after each call of ``name`` fed the floats of ``loss_of`` (compiled)."""
    loss_of, programs = _programs(lib)
    fn = programs[name]
    if lib is torch:
        from torch._dynamo.testing import CompileCounter as TorchCounter

        torch._dynamo.reset()
        counter = TorchCounter()
    else:
        counter = CompileCounter()
    read_loss = lib.compile(loss_of, backend="eager")
    compiled = lib.compile(fn, backend=counter)
    counts, outputs = [], []
    for v in _VALUES:
        s = read_loss(lib.ones(3) * v)
        assert type(s) is float
        x = lib.arange(3.0)
        got = compiled(x, s)
        np.testing.assert_allclose(got.numpy(), fn(x, s).numpy(), rtol=1e-6)
        outputs.append(got.numpy())
        counts.append(counter.frame_count)
    return counts, outputs


@needs_torch
@pytest.mark.parametrize("name", ["scaled", "branch", "both"])
def test_a_float_from_item_recompiles_as_often_as_in_pytorch(name):
    kiln_counts, kiln_out = _graphs_per_call(kiln, name)
    torch_counts, torch_out = _graphs_per_call(torch, name)
    assert kiln_counts == torch_counts
    for a, b in zip(kiln_out, torch_out):
        np.testing.assert_allclose(a, b, rtol=1e-6)


@pytest.mark.parametrize("name", ["scaled", "branch", "both"])
def test_a_changing_float_recompiles_once(name):
    counts, _ = _graphs_per_call(kiln, name)
    assert counts == [1, 2, 2, 2, 2, 2]
