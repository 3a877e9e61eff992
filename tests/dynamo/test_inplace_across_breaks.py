"""In-place ops on a tensor with autograd history that crosses a graph break.

After a break, such a tensor is an input of the resumed graph. It is no leaf (it has a
grad_fn), so PyTorch's dynamo functionalizes an in-place op on it like any other; only a leaf
that requires grad refuses the write, in eager and compiled code alike."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from tests.oracle import needs_torch, torch

pytestmark = needs_torch


def _add_after_a_break(lib, x):
    y = x * 2
    print("between graphs")
    y.add_(1)
    return y.sum()


def _view_written_after_a_break(lib, x):
    y = (x * 2)[1:]
    print("between graphs")
    y[0].mul_(3)
    return (y * y).sum()


def _written_inputs(lib, y, counts):
    print("between graphs")
    y.mul_(3)
    counts.add_(1)
    return y.sum()


def _grads(fn, lib, make_input):
    """``fn``'s result and the gradient of its input leaf, eagerly in ``lib``."""
    x = make_input()
    out = fn(lib, x)
    out.backward()
    return out.detach().numpy(), x.grad.numpy()


@pytest.mark.parametrize("fn", [_add_after_a_break, _view_written_after_a_break])
def test_inplace_on_a_non_leaf_after_a_break_is_captured_with_torchs_values(fn, capsys):
    data = np.random.default_rng(0).standard_normal(5).astype(np.float32)
    report = kiln._dynamo.explain(fn)(kiln, kiln.tensor(data, requires_grad=True))
    assert report.graph_count == 2
    assert [b.reason for b in report.break_reasons] == ["print() has a side effect on the console"]
    compiled = kiln.compile(fn)
    for _ in range(2):  # a second call takes the same entries
        got = _grads(compiled, kiln, lambda: kiln.tensor(data, requires_grad=True))
        want = _grads(fn, torch, lambda: torch.tensor(data, requires_grad=True))
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-6)


def test_a_leaf_arriving_where_a_non_leaf_was_written_is_refused_before_any_write(capsys):
    compiled = kiln.compile(_written_inputs)
    x = kiln.ones(3, requires_grad=True)
    out = compiled(kiln, x * 2, kiln.zeros(3))
    out.backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.full(3, 6.0, np.float32))
    # a leaf that requires grad: the write to it raises before ``counts`` is written, as in eager
    counts, torch_counts = kiln.zeros(3), torch.zeros(3)
    with pytest.raises(RuntimeError) as got:
        compiled(kiln, kiln.ones(3, requires_grad=True), counts)
    with pytest.raises(RuntimeError) as want:
        _written_inputs(torch, torch.ones(3, requires_grad=True), torch_counts)
    assert str(got.value) == str(want.value)
    np.testing.assert_array_equal(counts.numpy(), torch_counts.numpy())


def test_a_compiled_module_applies_an_inplace_relu_to_its_non_leaf_input_in_one_graph():
    def build(lib):
        lib.manual_seed(0)
        return lib.nn.Sequential(lib.nn.ReLU(inplace=True), lib.nn.Linear(4, 3))

    module, reference = build(kiln), build(torch)
    reference.load_state_dict({k: torch.tensor(v.numpy()) for k, v in module.state_dict().items()})
    data = np.random.default_rng(1).standard_normal((2, 4)).astype(np.float32)
    report = kiln._dynamo.explain(module)(kiln.tensor(data, requires_grad=True) * 3)
    assert report.graph_count == 1 and report.break_reasons == []
    results = []
    for lib, model, call in ((kiln, module, kiln.compile(module)), (torch, reference, reference)):
        x = lib.tensor(data, requires_grad=True)
        hidden = x * 3
        (call(hidden) ** 2).sum().backward()
        # the input itself is rectified, and gradients flow through that write
        results.append([hidden.detach().numpy(), x.grad.numpy(), model[1].weight.grad.numpy()])
    for got, want in zip(*results):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
