"""PyTorch's capture controls: disable, allow_in_graph, graph_break, mark_dynamic, optimize,
list/register_backend, as ``kiln.compiler.*`` and ``kiln._dynamo.*``."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.dynamo.decorators import dynamic_dims
from kiln.dynamo.testing import CompileCounter
from tests.oracle import needs_torch, torch

from .helpers import check


def _counting_backend():
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    return backend, graphs


def test_disabled_function_runs_eagerly_and_splits_the_graph():
    calls = []

    @kiln.compiler.disable
    def helper(x):
        calls.append(kiln.compiler.is_compiling())
        return x * 2

    def fn(x):
        y = x.sin()
        y = helper(y)
        return y.cos()

    backend, graphs = _counting_backend()
    x = kiln.randn(4)
    got = kiln.compile(fn, backend=backend)(x)
    np.testing.assert_allclose(got.numpy(), fn(x).numpy(), rtol=1e-6)
    assert len(graphs) == 2
    assert calls == [False, False]  # eager in the compiled call, eager in the reference call
    explanation = kiln._dynamo.explain(fn)(x)
    assert explanation.graph_break_count == 1
    assert "disable" in str(explanation.break_reasons[0])


def test_compile_of_a_disabled_function_returns_it():
    @kiln._dynamo.disable
    def f(x):
        return x + 1

    assert kiln.compile(f) is f
    assert f(kiln.ones(2)).tolist() == [2.0, 2.0]


def test_disabled_method_of_a_module_is_not_captured():
    class M(kiln.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = kiln.nn.Linear(3, 3)

        @kiln.compiler.disable
        def post(self, y):
            return y.relu()

        def forward(self, x):
            return self.post(self.lin(x)) + 1

    m = M()
    backend, graphs = _counting_backend()
    x = kiln.randn(2, 3)
    got = kiln.compile(m, backend=backend)(x)
    np.testing.assert_allclose(got.detach().numpy(), m(x).detach().numpy(), rtol=1e-6)
    assert len(graphs) == 2


def test_graph_break_splits_without_changing_results():
    def fn(x):
        y = x * 3
        kiln._dynamo.graph_break()
        return y - 1

    backend, graphs = _counting_backend()
    x = kiln.randn(5)
    np.testing.assert_allclose(kiln.compile(fn, backend=backend)(x).numpy(), fn(x).numpy())
    assert len(graphs) == 2
    with pytest.raises(Exception, match="graph_break"):
        kiln.compile(fn, backend=backend, fullgraph=True)(x)


def test_allow_in_graph_puts_the_function_ops_in_one_graph():
    @kiln.compiler.allow_in_graph
    def scaled(x, k):
        return x * k + x.exp()

    def fn(x):
        return scaled(x, 2.0).sum()

    backend, graphs = _counting_backend()
    x = kiln.randn(6, dtype=kiln.float64)
    got = kiln.compile(fn, backend=backend, fullgraph=True)(x)
    np.testing.assert_allclose(got.item(), fn(x).item(), rtol=1e-12)
    assert len(graphs) == 1
    with pytest.raises(TypeError, match="Python function"):
        kiln.compiler.allow_in_graph(kiln.sin)


def test_mark_dynamic_records_and_validates():
    x = kiln.randn(4, 5)
    kiln._dynamo.mark_dynamic(x, 0)
    kiln._dynamo.maybe_mark_dynamic(x, [-1])
    assert dynamic_dims(x) == {0, 1}
    kiln._dynamo.mark_static(x, 1)
    assert dynamic_dims(x) == {0}
    with pytest.raises(IndexError, match="out of range"):
        kiln._dynamo.mark_dynamic(x, 2)
    f = kiln.compile(lambda t: t * 2, backend="eager")
    np.testing.assert_allclose(f(x).numpy(), (x * 2).numpy())


def test_optimize_and_backend_registry():
    everything = set(kiln._dynamo.list_backends(exclude_tags=None))
    assert {"eager", "aot_eager", "inductor"} <= everything
    assert "inductor" in kiln._dynamo.list_backends()
    assert "eager" not in kiln._dynamo.list_backends()  # PyTorch leaves "debug" backends out
    assert kiln.compiler.list_backends() == kiln._dynamo.list_backends()
    seen = []

    @kiln._dynamo.register_backend(name="kiln_test_recording_backend")
    def recording(gm, example_inputs):
        seen.append(len(example_inputs))
        return gm.forward

    assert "kiln_test_recording_backend" in kiln.compiler.list_backends()

    @kiln._dynamo.optimize("kiln_test_recording_backend")
    def f(a, b):
        return a @ b

    a, b = kiln.randn(2, 3), kiln.randn(3, 2)
    np.testing.assert_allclose(f(a, b).numpy(), (a @ b).numpy(), rtol=1e-6)
    assert seen == [2]


def test_is_compiling_aliases_answer_true_in_captured_code():
    def fn(x):
        if kiln.compiler.is_dynamo_compiling() and kiln._dynamo.is_compiling():
            return x + 1
        return x - 1

    x = kiln.zeros(2)
    assert fn(x).tolist() == [-1.0, -1.0]
    assert kiln.compile(fn, backend="eager", fullgraph=True)(x).tolist() == [1.0, 1.0]
    kiln.compiler.cudagraph_mark_step_begin()


def test_cache_size_limit_is_the_recompile_limit():
    config = kiln._dynamo.config
    old = config.recompile_limit
    try:
        config.cache_size_limit = 2
        assert config.recompile_limit == 2
        f = kiln.compile(lambda x: x + 1, backend="eager", dynamic=False)
        with pytest.warns(RuntimeWarning, match=r"hit config.recompile_limit \(2\)"):
            for n in range(1, 5):
                f(kiln.ones(n))
    finally:
        config.recompile_limit = old
    assert config.cache_size_limit == old


def test_set_stance_force_eager_as_call_block_and_decorator(default_stance):
    counter = CompileCounter("eager")
    fn = kiln.compile(lambda x: x * 2, backend=counter)
    kiln.compiler.set_stance("force_eager")
    assert fn(kiln.ones(2)).tolist() == [2.0, 2.0] and counter.frame_count == 0
    kiln.compiler.set_stance("default")
    with kiln.compiler.set_stance("force_eager"):
        fn(kiln.ones(3))
    assert counter.frame_count == 0

    @kiln.compiler.set_stance("force_eager")
    def run():
        return fn(kiln.ones(4))

    run()
    assert counter.frame_count == 0  # the decorator's stance held only inside ``run``
    fn(kiln.ones(4))
    assert counter.frame_count == 1


def test_set_stance_recompile_policies(default_stance):
    counter = CompileCounter("eager")
    fn = kiln.compile(lambda x: x + 1, backend=counter)
    kiln.compiler.set_stance("eager_then_compile")
    fn(kiln.ones(1))
    assert counter.frame_count == 0
    fn(kiln.ones(1))
    assert counter.frame_count == 1
    kiln.compiler.set_stance("eager_on_recompile")
    assert fn(kiln.ones(5)).tolist() == [2.0] * 5 and counter.frame_count == 1
    kiln.compiler.set_stance("fail_on_recompile")
    fn(kiln.ones(1))  # cached: fine
    with pytest.raises(RuntimeError, match="Detected recompile when torch.compile stance is"):
        fn(kiln.ones(6))
    kiln.compiler.set_stance("default", force_backend=counter)
    kiln.compile(lambda x: x - 1, backend="inductor")(kiln.ones(1))
    assert counter.frame_count == 2  # the forced backend compiled it


@needs_torch
def test_set_stance_errors_match_torch(default_stance):
    def snippet(lib):
        try:
            lib.compiler.set_stance("force_eager", force_backend="eager")
        except RuntimeError as e:
            return str(e)

    assert snippet(kiln) == snippet(torch)


def test_assume_constant_result_is_baked_in():
    calls = []

    @kiln.compiler.assume_constant_result
    def scale():
        calls.append(1)
        return 3.0

    counter, _ = check(lambda x: x * scale(), kiln.ones(2), graphs=1, breaks=0)
    assert len(calls) == 2  # the eager run and the one capture
