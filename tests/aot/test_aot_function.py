"""aot_function: compiled forward/backward pairs equal eager, with both partitioners."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.aot import aot_function, default_partition, min_cut_partition


def eager_compiler(gm, example_inputs):
    def run(*args):
        out = gm(*args)
        return out if isinstance(out, tuple) else (out,)

    return run


class CountingCompiler:
    def __init__(self):
        self.graphs = []

    def __call__(self, gm, example_inputs):
        self.graphs.append(gm)
        return eager_compiler(gm, example_inputs)


PARTITIONERS = [default_partition, min_cut_partition]


def _grads(fn, *inputs):
    for t in inputs:
        t.grad = None
    out = fn(*inputs)
    outs = out if isinstance(out, tuple) else (out,)
    total = sum((o.float() * (i + 1)).sum() for i, o in enumerate(outs) if o.requires_grad)
    total.backward()
    return [o.detach().clone() for o in outs], [
        None if t.grad is None else t.grad.clone() for t in inputs
    ]


def _check(fn, *inputs, partition_fn=default_partition, rtol=1e-5, atol=1e-6):
    compiled = aot_function(fn, eager_compiler, partition_fn=partition_fn)
    kiln.manual_seed(0)
    eager_out, eager_grads = _grads(fn, *inputs)
    kiln.manual_seed(0)
    comp_out, comp_grads = _grads(compiled, *inputs)
    for e, c in zip(eager_out, comp_out):
        np.testing.assert_allclose(c.numpy(), e.numpy(), rtol=rtol, atol=atol)
    for e, c in zip(eager_grads, comp_grads):
        if e is None:
            assert c is None
        else:
            np.testing.assert_allclose(c.numpy(), e.numpy(), rtol=rtol, atol=atol)
    return compiled


def _leaf(*shape, dtype=None):
    return kiln.randn(*shape, dtype=dtype).requires_grad_()


@pytest.mark.parametrize("partition_fn", PARTITIONERS)
def test_pointwise_and_reduction_chain(partition_fn):
    _check(
        lambda x, y: ((x * y).sin() + x.exp()).sum(0).tanh(),
        _leaf(4, 5),
        _leaf(4, 5),
        partition_fn=partition_fn,
    )


@pytest.mark.parametrize("partition_fn", PARTITIONERS)
def test_linear_layer_with_broadcast_bias(partition_fn):
    _check(
        lambda x, w, b: (x @ w.t() + b).relu().mean(),
        kiln.randn(8, 3),
        _leaf(5, 3),
        _leaf(5),
        partition_fn=partition_fn,
    )


@pytest.mark.parametrize("partition_fn", PARTITIONERS)
def test_multiple_outputs_and_non_differentiable_output(partition_fn):
    def f(x, y):
        s = x * y
        return s.exp(), s.argmax(), (x + 1).detach()

    compiled = _check(f, _leaf(3, 4), _leaf(3, 4), partition_fn=partition_fn)
    out = compiled(_leaf(3, 4), _leaf(3, 4))
    assert out[0].requires_grad and not out[1].requires_grad and not out[2].requires_grad
    assert out[1].dtype is kiln.int64


def test_inputs_that_do_not_require_grad_get_none():
    x = kiln.randn(3)
    w = _leaf(3)
    _check(lambda a, b: (a * b).sum(), x, w)
    assert x.grad is None


def test_unused_input_gets_no_gradient():
    a, b = _leaf(3), _leaf(3)
    compiled = aot_function(lambda x, y: (x * 2).sum(), eager_compiler)
    compiled(a, b).backward()
    assert b.grad is None and np.allclose(a.grad.numpy(), 2)


def test_retain_graph_allows_two_backwards():
    x = _leaf(4)
    compiled = aot_function(lambda t: (t.exp() * t).sum(), eager_compiler)
    y = compiled(x)
    y.backward(retain_graph=True)
    first = x.grad.clone()
    y.backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * first.numpy(), rtol=1e-6)


def test_eager_code_around_compiled_region_backpropagates():
    x = _leaf(3, 3)
    compiled = aot_function(lambda t: t.sigmoid() * 2, eager_compiler)
    (compiled(x * 3) ** 2).sum().backward()
    expected_x = x.detach().clone().requires_grad_()
    ((expected_x * 3).sigmoid() * 2).pow(2).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), expected_x.grad.numpy(), rtol=1e-5)


def test_double_backward_through_compiled_region_raises():
    x = _leaf(3)
    compiled = aot_function(lambda t: (t**3).sum(), eager_compiler)
    y = compiled(x)
    with pytest.raises(RuntimeError, match="double backward.*@kiln.compiler.disable"):
        kiln.autograd.grad(y, x, create_graph=True)


def test_inference_path_traces_only_the_forward():
    counter = CountingCompiler()
    compiled = aot_function(lambda x, w: (x @ w).relu(), counter)
    x, w = kiln.randn(2, 3), _leaf(3, 4)
    with kiln.no_grad():
        out = compiled(x, w)
    assert len(counter.graphs) == 1 and not out.requires_grad
    np.testing.assert_allclose(out.numpy(), (x @ w.detach()).relu().numpy(), rtol=1e-6)
    assert not any("tangents" in n.name for n in counter.graphs[0].graph.nodes)


def test_cache_by_signature():
    counter = CountingCompiler()
    compiled = aot_function(lambda x: (x * 2).sum(), counter, counter)
    compiled(_leaf(3))
    compiled(_leaf(3))
    assert len(counter.graphs) == 2  # forward + backward, once
    compiled(_leaf(4))
    assert len(counter.graphs) == 4


def test_input_mutation_is_applied_to_the_real_input():
    def f(x, buf):
        buf.add_(x.detach())
        return (x * buf).sum()

    x = _leaf(4)
    buf_eager = kiln.ones(4)
    buf_comp = kiln.ones(4)
    expected = f(x, buf_eager)
    expected.backward()
    g_eager = x.grad.clone()
    x.grad = None
    got = aot_function(f, eager_compiler)(x, buf_comp)
    got.backward()
    np.testing.assert_allclose(buf_comp.numpy(), buf_eager.numpy())
    np.testing.assert_allclose(got.item(), expected.item(), rtol=1e-6)
    np.testing.assert_allclose(x.grad.numpy(), g_eager.numpy(), rtol=1e-6)


def test_mutation_through_a_view_of_an_input():
    def f(x, buf):
        buf[1:3].mul_(2)
        buf[0] = x.sum().detach()
        return buf * x

    x = _leaf(4)
    b1, b2 = kiln.arange(4.0), kiln.arange(4.0)
    e = f(x, b1)
    c = aot_function(f, eager_compiler)(x, b2)
    np.testing.assert_allclose(b2.numpy(), b1.numpy())
    np.testing.assert_allclose(c.detach().numpy(), e.detach().numpy())


def test_in_place_ops_on_intermediates_are_functionalized():
    def f(x):
        y = x * 2
        y.add_(1)
        y[0] = 0.0
        z = y.view(2, 2)
        z.mul_(x.view(2, 2))
        return y.exp().sum()

    counter = CountingCompiler()
    x = _leaf(4)
    compiled = aot_function(f, counter)
    e = f(x)
    e.backward()
    g = x.grad.clone()
    x.grad = None
    c = compiled(x)
    c.backward()
    np.testing.assert_allclose(c.item(), e.item(), rtol=1e-6)
    np.testing.assert_allclose(x.grad.numpy(), g.numpy(), rtol=1e-5)
    for gm in counter.graphs:
        assert not any(getattr(n.target, "inplace", False) for n in gm.graph.nodes)


def test_graphs_contain_only_prims():
    counter = CountingCompiler()
    f = lambda x: kiln.nn.functional.gelu(x).mean() + x.square().sum()  # noqa: E731
    aot_function(f, counter)(_leaf(5)).backward()
    for gm in counter.graphs:
        for n in gm.graph.nodes:
            if n.op == "call_function" and isinstance(n.target, kiln.ops.Op):
                assert n.target.is_prim, f"{n.target.name} is not a prim"


def test_random_ops_draw_from_the_generator_each_call_and_backward_matches_forward():
    def f(x):
        mask = (kiln.rand(x.shape) > 0.5).to(x.dtype)
        return (x * mask * 2).sum(), mask

    x = _leaf(1000)
    compiled = aot_function(f, eager_compiler, partition_fn=min_cut_partition)
    kiln.manual_seed(3)
    y1, m1 = compiled(x)
    y1.backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * m1.numpy())
    y2, m2 = compiled(x)
    assert not np.array_equal(m1.numpy(), m2.numpy())
    kiln.manual_seed(3)
    _, m_eager = f(x)
    np.testing.assert_array_equal(m_eager.numpy(), m1.numpy())


def test_min_cut_saves_fewer_bytes_on_a_pointwise_heavy_function():
    def f(x, w):
        h = x @ w
        return (h.sin() * h.cos() + h.exp()).tanh().sum()

    x, w = kiln.randn(64, 32), _leaf(32, 64)
    saved = {}
    for pf in PARTITIONERS:
        compiled = aot_function(f, eager_compiler, partition_fn=pf)
        compiled(x, w).backward()
        (entry,) = compiled._aot_cache.values()
        saved[pf.__name__] = entry.partition.saved_bytes
    assert saved["min_cut_partition"] < saved["default_partition"]
