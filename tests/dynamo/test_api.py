"""The user-facing API: kiln.compile forms, fullgraph errors, explain, backends, logs and dumps."""

from __future__ import annotations

import inspect
import os

import pytest

import kiln
from kiln.backends import list_backends, lookup, register_backend
from kiln.dynamo import GraphBreakError
from kiln.dynamo.testing import CompileCounter

from .helpers import assert_same


def t(*shape):
    return kiln.randn(*shape)


def simple(x, y):
    return (x + y).relu()


def with_print(x):
    y = x * 2
    print("side")
    return y


def with_item(x):
    return x * x.sum().item()


# ---------------------------------------------------------------- kiln.compile forms
def test_compile_as_function_and_decorators():
    x, y = t(3), t(3)
    expected = simple(x, y)
    assert_same(kiln.compile(simple)(x, y), expected)

    @kiln.compile
    def bare(a, b):
        return (a + b).relu()

    @kiln.compile(backend="eager", fullgraph=True)
    def with_args(a, b):
        return (a + b).relu()

    assert_same(bare(x, y), expected)
    assert_same(with_args(x, y), expected)


def test_compiled_function_keeps_name_doc_and_signature():
    def documented(x, scale=2.0):
        """Scales x."""
        return x * scale

    compiled = kiln.compile(documented)
    assert compiled.__name__ == "documented"
    assert compiled.__doc__ == "Scales x."
    assert str(inspect.signature(compiled)) == "(x, scale=2.0)"


def test_compile_disable_and_bad_arguments():
    assert kiln.compile(simple, disable=True) is simple
    with pytest.raises(RuntimeError, match="mode or options"):
        kiln.compile(simple, mode="default", options={})
    with pytest.raises(kiln._dynamo.exc.InvalidBackend, match="Invalid backend: 'no-such-b"):
        kiln.compile(simple, backend="no-such-backend")  # a RuntimeError and a ValueError


def test_compile_a_bound_method_and_a_callable_object():
    class Scaler:
        def __init__(self, k):
            self.k = k

        def apply(self, x):
            return x * self.k

        def __call__(self, x):
            return x + self.k

    s = Scaler(3.0)
    x = t(3)
    assert_same(kiln.compile(s.apply)(x), x * 3.0)
    assert_same(kiln.compile(s)(x), x + 3.0)
    assert_same(kiln.compile(kiln.sin)(x), kiln.sin(x))


# ---------------------------------------------------------------- fullgraph
def test_fullgraph_break_names_file_line_and_reason():
    compiled = kiln.compile(with_print, fullgraph=True)
    line = inspect.getsourcelines(with_print)[1] + 2
    with pytest.raises(GraphBreakError) as info:
        compiled(t(3))
    message = str(info.value)
    assert f"{__file__}:{line}" in message
    assert "print()" in message
    assert info.value.reason.category == "unsupported-but-fixable"


def test_fullgraph_break_inside_inlined_call_points_at_the_callee():
    def outer(x):
        return with_item(x) + 1

    line = inspect.getsourcelines(with_item)[1] + 1
    with pytest.raises(GraphBreakError, match=f"test_api.py:{line}.*item"):
        kiln.compile(outer, fullgraph=True)(t(3))


def test_fullgraph_user_exception_propagates_unchanged():
    def bad(x, y):
        return x @ y

    with pytest.raises(RuntimeError) as compiled_error:
        kiln.compile(bad, fullgraph=True)(t(2, 3), t(2, 3))
    with pytest.raises(RuntimeError) as eager_error:
        bad(t(2, 3), t(2, 3))
    assert str(compiled_error.value) == str(eager_error.value)


def test_fullgraph_success_is_one_graph():
    counter = CompileCounter()
    compiled = kiln.compile(simple, backend=counter, fullgraph=True)
    compiled(t(3), t(3))
    assert counter.frame_count == 1


# ---------------------------------------------------------------- explain
def test_explain_reports_graphs_ops_and_breaks():
    def fn(x):
        y = x.sin() + 1
        print("break")
        z = y.cos()
        if z.sum() > -100:
            z = z * 2
        return z

    report = kiln.dynamo.explain(fn)(t(4))
    assert report.graph_count == 3
    assert report.graph_break_count == 2
    assert report.ops_per_graph[0] == ["sin", "add"]
    kinds = [r.category for r in report.break_reasons]
    assert kinds == ["unsupported-but-fixable", "fundamental"]
    first = inspect.getsourcelines(fn)[1]
    assert report.break_reasons[0].location == f"{__file__}:{first + 2}"
    assert report.break_reasons[1].location == f"{__file__}:{first + 4}"
    text = str(report)
    assert text.startswith("Graph Count: 3\nGraph Break Count: 2\nOp Count: 6\n")  # PyTorch's
    assert "Hint:" in text and "Category: fundamental" in text and "Ops per Graph:" in text


def test_explain_old_style_call():
    report = kiln.dynamo.explain(simple, t(2), t(2))
    assert report.graph_count == 1 and report.graph_break_count == 0
    assert report.op_count == 2


# ---------------------------------------------------------------- backends
def test_builtin_backend_registry():
    assert "eager" in list_backends()
    assert callable(lookup("eager"))
    assert lookup(simple) is simple


def test_register_backend_as_decorator_and_call():
    @register_backend
    def my_test_backend_a(gm, example_inputs):
        return gm.forward

    def my_test_backend_b(gm, example_inputs):
        return gm.forward

    register_backend(my_test_backend_b, "my_test_backend_b")

    @register_backend(name="my_test_backend_c")
    def other(gm, example_inputs):
        return gm.forward

    assert {"my_test_backend_a", "my_test_backend_b", "my_test_backend_c"} <= set(list_backends())
    x, y = t(3), t(3)
    for name in ("my_test_backend_a", "my_test_backend_b", "my_test_backend_c"):
        assert_same(kiln.compile(simple, backend=name)(x, y), simple(x, y))
    with pytest.raises(ValueError, match="already registered"):
        register_backend(lambda gm, ex: gm.forward, "my_test_backend_a")


def test_user_backend_rewrites_the_graph_and_its_effect_is_seen():
    """A backend that replaces every relu with sigmoid: the compiled function must use it."""

    def relu_to_sigmoid(gm, example_inputs):
        for node in gm.graph.nodes:
            if node.op == "call_function" and node.target is kiln.ops.relu:
                node.target = kiln.ops.sigmoid
        gm.recompile()
        return gm.forward

    x, y = t(4), t(4)
    out = kiln.compile(simple, backend=relu_to_sigmoid)(x, y)
    assert_same(out, (x + y).sigmoid())


def test_backend_receives_example_inputs():
    seen = []

    def recorder(gm, example_inputs):
        seen.append([tuple(e.shape) for e in example_inputs])
        return gm.forward

    kiln.compile(simple, backend=recorder)(t(2, 3), t(2, 3))
    assert seen == [[(2, 3), (2, 3)]]


def test_failing_backend_falls_back_to_eager_with_a_warning():
    def broken(gm, example_inputs):
        raise NotImplementedError("this backend cannot compile anything")

    x, y = t(3), t(3)
    with pytest.warns(RuntimeWarning, match="cannot compile anything"):
        out = kiln.compile(simple, backend=broken)(x, y)
    assert_same(out, simple(x, y))


# ---------------------------------------------------------------- logs and dumps
def test_kiln_logs_artifacts(capsys):
    kiln.dynamo.set_logs("graph,graph_breaks,guards,bytecode")
    try:
        kiln.compile(with_print)(t(3))
    finally:
        kiln.dynamo.set_logs("")
    err = capsys.readouterr().err
    assert "[kiln.graph] captured graph" in err
    assert "[kiln.graph_breaks]" in err and "print()" in err
    assert "[kiln.guards]" in err and "def ___guard" in err
    assert "[kiln.bytecode] transformed bytecode" in err


def test_unknown_log_artifact_is_rejected():
    with pytest.raises(ValueError, match="unknown KILN_LOGS artifact"):
        kiln.dynamo.set_logs("graph,nonsense")


def test_debug_dir_receives_graph_guards_and_bytecode(tmp_path, monkeypatch):
    monkeypatch.setenv("KILN_DEBUG_DIR", str(tmp_path))
    kiln.compile(simple)(t(2), t(2))
    names = sorted(os.listdir(tmp_path))
    assert any(n.endswith("_graph.py") for n in names)
    assert any(n.endswith("_guards.py") for n in names)
    assert any(n.endswith("_bytecode.txt") for n in names)
    graph_file = next(n for n in names if n.endswith("_graph.py"))
    assert "kiln.ops.relu" in (tmp_path / graph_file).read_text()
