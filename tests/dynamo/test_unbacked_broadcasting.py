"""A size known only when the graph runs (``unique``'s length) broadcast against a plain one:
PyTorch's size-oblivious rule (not 1; equal to the other, asserted when the graph runs) keeps the
graph compiled, forward and backward, where deciding it at capture failed the compile."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import kiln


def _index_put_unique(base, idx, src):
    return base.clone().index_put_((idx[:5].flip(0).unique(),), src[:3], accumulate=False)


@pytest.mark.parametrize("backend", ["inductor", "aot_eager"])
def test_index_put_with_unique_indices_compiles(backend):
    idx = kiln.tensor([1, 2, 3, 2, 1, 7])
    base = kiln.zeros(10, requires_grad=True)
    src = kiln.arange(6.0, requires_grad=True)
    expected = _index_put_unique(base, idx, src)
    expected.sum().backward()
    grads = base.grad.clone(), src.grad.clone()
    base.grad = src.grad = None
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # no fallback to the eager backend
        got = kiln.compile(_index_put_unique, backend=backend)(base, idx, src)
    np.testing.assert_array_equal(got.detach().numpy(), expected.detach().numpy())
    got.sum().backward()
    np.testing.assert_array_equal(base.grad.numpy(), grads[0].numpy())
    np.testing.assert_array_equal(src.grad.numpy(), grads[1].numpy())


def test_a_mismatch_known_only_at_run_time_still_raises():
    def f(idx, src):
        return kiln.zeros(10).index_put_((idx.unique(),), src)

    compiled = kiln.compile(f, backend="aot_eager")
    idx = kiln.tensor([1, 2, 3, 2])
    np.testing.assert_array_equal(compiled(idx, kiln.ones(3)).numpy(), f(idx, kiln.ones(3)).numpy())
    with pytest.raises(RuntimeError):
        compiled(kiln.tensor([1, 2, 3, 4, 5]), kiln.ones(3))
