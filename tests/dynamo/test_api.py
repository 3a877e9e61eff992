"""The user-facing API: kiln.compile forms, fullgraph errors, explain, backends, logs and dumps."""

from __future__ import annotations

import inspect
import os

import pytest

import kiln
import kiln.nn as nn
from kiln.backends import list_backends, lookup, register_backend
from kiln.dynamo import GraphBreakError, exc
from kiln.dynamo.testing import CompileCounter
from kiln.runtime import logs as klog
from tests.oracle import assert_raises_alike, needs_torch, torch

from .helpers import assert_same, same_as_torch, two_breaks


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
    assert not klog.enabled("graph")  # a rejected spec changes nothing


def test_debug_dir_receives_graph_guards_and_bytecode(tmp_path, monkeypatch):
    monkeypatch.setenv("KILN_DEBUG_DIR", str(tmp_path))
    kiln.compile(simple)(t(2), t(2))
    names = sorted(os.listdir(tmp_path))
    assert any(n.endswith("_graph.py") for n in names)
    assert any(n.endswith("_guards.py") for n in names)
    assert any(n.endswith("_bytecode.txt") for n in names)
    graph_file = next(n for n in names if n.endswith("_graph.py"))
    assert "kiln.ops.relu" in (tmp_path / graph_file).read_text()


def _data_dependent(x):
    if x.sum() > 0:
        return x + 1
    return x - 1


def _prints(x):
    print("inside")
    return x * 2


def _catch_unsupported(lib, fn):
    try:
        lib.compile(fn, fullgraph=True, backend="eager")(lib.ones(3))
    except lib._dynamo.exc.Unsupported:
        return "Unsupported"
    return "no error"


def test_fullgraph_break_is_caught_as_dynamo_unsupported():
    for fn in (_data_dependent, _prints):
        with pytest.raises(exc.Unsupported) as info:
            kiln.compile(fn, fullgraph=True)(kiln.ones(3))
        assert isinstance(info.value, RuntimeError)
        assert isinstance(info.value, kiln._dynamo.exc.TorchDynamoException)
        assert isinstance(info.value, exc.GraphBreakError)  # kiln's own name still works
        assert info.value.reason.function == fn.__name__


@needs_torch
@pytest.mark.parametrize("fn", [_data_dependent, _prints])
def test_fullgraph_except_clause_matches_torch(fn):
    same_as_torch(lambda lib: _catch_unsupported(lib, fn))


@needs_torch
def test_dynamo_exception_classes_match_torch():
    names = [
        "TorchDynamoException", "Unsupported", "TorchRuntimeError", "InternalTorchDynamoError",
        "BackendCompilerFailed", "UserError", "RecompileError", "SkipFrame",
    ]  # fmt: skip
    for name in names:
        ours, theirs = getattr(kiln._dynamo.exc, name), getattr(torch._dynamo.exc, name)
        for base in names + ["RuntimeError"]:
            ref = getattr(torch._dynamo.exc, base, RuntimeError)
            mine = getattr(kiln._dynamo.exc, base, RuntimeError)
            assert issubclass(ours, mine) == issubclass(theirs, ref), (name, base)


def _many_kinds(a, /, b, *args, c, d=2, **kw):
    return a + b + sum(args) + c * d + sum(kw.values())


@pytest.mark.parametrize(
    "call",
    [
        lambda f: f(a=kiln.ones(1), b=2, c=1),
        lambda f: f(kiln.ones(1), 2),
        lambda f: f(kiln.ones(1), 2, c=1, z=kiln.ones(1), b=3),
    ],
)
def test_bad_arguments_to_a_compiled_function_raise_pythons_error(call):
    """Once compiled, a call whose arguments do not bind raises the function's own TypeError
    (not one naming the generated guard)."""
    compiled = kiln.compile(_many_kinds, backend="eager")
    compiled(kiln.ones(1), 2, 3, c=5)  # an entry exists: its guard sees the bad call first
    assert_raises_alike(TypeError, lambda: call(compiled), lambda: call(_many_kinds))


@needs_torch
def test_unknown_mode_error_matches_torch():
    def snippet(lib):
        lib.compile(lambda x: x, mode="fast")

    assert_raises_alike(RuntimeError, lambda: snippet(kiln), lambda: snippet(torch))


def test_every_torch_mode_name_compiles():
    for mode in ("default", "lite", "reduce-overhead", "max-autotune-no-cudagraphs"):
        fn = kiln.compile(lambda x: x.relu() + 1, mode=mode, backend="eager")
        assert fn(kiln.tensor([-1.0, 2.0])).tolist() == [1.0, 3.0]


class _PrintNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = nn.Linear(4, 2)

    def forward(self, x):
        h = self.a(x).relu()
        print("mid")
        return self.b(h)


def test_explain_of_bound_method_and_compiled_module():
    net = _PrintNet()
    x = kiln.randn(3, 4)
    compiled = kiln.compile(net)
    for target in (net, net.forward, compiled, compiled.forward):
        report = kiln._dynamo.explain(target)(x)
        assert (report.graph_count, report.graph_break_count) == (2, 1), target
        assert len(report.graphs) == 2 and len(report.ops_per_graph) == 2
        assert "print()" in report.break_reasons[0].reason


@needs_torch
def test_explain_counts_of_module_and_bound_method_match_torch():
    def snippet(lib):
        lib.manual_seed(0)
        net = _make_print_net(lib)
        x = lib.randn(3, 4)
        counts = []
        for target in (net, net.forward):
            report = lib._dynamo.explain(target)(x)
            counts.append((report.graph_count, report.graph_break_count, len(report.graphs)))
        return counts

    same_as_torch(snippet)


def _make_print_net(lib):
    class Net(lib.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = lib.nn.Linear(4, 4)

        def forward(self, x):
            h = self.a(x)
            print("mid")
            return h.relu()

    return Net()


def test_explain_str_starts_like_torch():
    def fn(x):
        y = x.sin()
        print("break")
        return y.cos()

    text = str(kiln._dynamo.explain(fn)(kiln.ones(2)))
    assert text.startswith("Graph Count: 2\nGraph Break Count: 1\nOp Count: 2\nBreak Reasons:\n")
    assert "  Break Reason 1:\n    Reason: print()" in text
    assert "Ops per Graph:\n  Ops 1" in text


def test_explain_reports_guards_and_time_like_torch():
    report = kiln._dynamo.explain(lambda x, n: x.sin() * n)(kiln.ones(2), 3)
    texts = [g.text for g in report.out_guards]
    assert "x.shape == [2]" in texts and "n == 3" in texts
    assert "Out Guards:\n  Guard 1:" in str(report)
    assert report.compile_times.endswith(" s")


def _break_in_loop(x):
    for i in range(3):
        x = x * 2
        if x.sum() > 10:
            x = x - 1
    return x


def _item_at_the_end(x):
    return (x * 2).sum().item()


def _item_in_the_middle(x):
    s = x.sum().item()
    return x * s


@needs_torch
@pytest.mark.parametrize(
    "fn",
    # (the shared two_breaks keeps the id this case had when it was defined here)
    [
        pytest.param(two_breaks, id="_two_prints"),
        _break_in_loop,
        _item_at_the_end,
        _item_in_the_middle,
    ],
)
def test_explain_graph_and_break_counts_match_torch(fn):
    """PyTorch counts breaks as graphs minus one (-1 for a frame that ran eagerly)."""

    def snippet(lib):
        report = lib._dynamo.explain(fn)(lib.ones(3))
        return report.graph_count, report.graph_break_count

    same_as_torch(snippet)


def test_list_backends_and_invalid_backend_like_torch():
    assert "eager" not in kiln.compiler.list_backends()
    assert "eager" in kiln._dynamo.list_backends(exclude_tags=None)
    with pytest.raises(kiln._dynamo.exc.InvalidBackend) as info:
        kiln.compile(lambda x: x, backend="nonexistent_backend")
    assert isinstance(info.value, RuntimeError)
    assert str(info.value).startswith("Invalid backend: 'nonexistent_backend', see `")


def random_ops_without_tensor_inputs(x):
    perm = kiln.randperm(5)
    return x + perm.sort().values, kiln.multinomial(kiln.ones(4), 2).shape


def test_inductor_runs_eager_kernels_of_ops_without_tensor_inputs(recwarn):
    out, shape = kiln.compile(random_ops_without_tensor_inputs, backend="inductor")(kiln.zeros(5))
    assert_same(out, kiln.arange(5.0))
    assert shape == (2,)
    assert not [w for w in recwarn if "failed to compile" in str(w.message)]


def print_in_the_middle(x):
    y = x + 1
    print("mid")
    return y * 2


def test_cudagraphs_backend_runs_like_aot_eager():
    check_backend = CompileCounter("cudagraphs")
    x = kiln.randn(3)
    assert_same(kiln.compile(print_in_the_middle, backend=check_backend)(x), (x + 1) * 2)
    assert check_backend.frame_count == 2


def test_torch_logging_switches_map_onto_kiln_logs(capsys):
    kiln._logging.set_logs(graph_breaks=True, dynamo=20, perf_hints=True)
    try:
        kiln.compile(print_in_the_middle, backend="eager")(kiln.randn(2))
    finally:
        kiln._logging.set_logs(graph_breaks=False)
    assert "graph break" in capsys.readouterr().err
