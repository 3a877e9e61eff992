"""Second sweep of ``torch.compile`` programs: regressions of what running ordinary PyTorch code
under ``kiln.compile`` found wrong (error classes user code catches, ``explain`` of a bound
method, ``logger.info`` inside compiled code, ``torch.cond``, in-place view methods...).

Where PyTorch is installed the same snippet, written against a ``lib`` argument, also runs with
``torch`` and the printed outcome must match; the kiln-only checks compare compiled with eager.
"""

from __future__ import annotations

import logging

import pytest

import kiln
import kiln.nn as nn
from kiln.dynamo import exc
from tests.oracle import needs_torch, torch

from .helpers import assert_same, check

BACKENDS = ["eager", "aot_eager", "inductor"]


def _outcome(fn, lib):
    """What a snippet prints: its result's repr (``kiln.`` read as ``torch.``) or its error."""
    try:
        result = fn(lib)
    except Exception as e:  # noqa: BLE001 - the exception is the outcome compared
        return ("raises", type(e).__name__)
    return ("returns", repr(result).replace("kiln.", "torch."))


def _same_as_torch(fn) -> None:
    expected = _outcome(fn, torch)
    if hasattr(torch, "_dynamo"):
        torch._dynamo.reset()
    assert _outcome(fn, kiln) == expected


# ---------------------------------------------------------------- error classes
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
    _same_as_torch(lambda lib: _catch_unsupported(lib, fn))


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


def test_unsupported_inside_capture_still_breaks_the_graph():
    """The evaluator's own ``Unsupported`` is now a RuntimeError: a break must not be taken for
    an error of the user's code (a ``try/except RuntimeError`` around it stays a break)."""

    def fn(x):
        try:
            y = x * 2
            print("inside try")
        except RuntimeError:
            y = x * 100
        return y + 1

    check(fn, kiln.ones(2), graphs=0, breaks=1)


# ---------------------------------------------------------------- compile options
@needs_torch
def test_unknown_mode_error_matches_torch():
    def snippet(lib):
        lib.compile(lambda x: x, mode="fast")

    with pytest.raises(RuntimeError) as ours:
        snippet(kiln)
    with pytest.raises(RuntimeError) as theirs:
        snippet(torch)
    assert str(ours.value) == str(theirs.value)


def test_every_torch_mode_name_compiles():
    for mode in ("default", "lite", "reduce-overhead", "max-autotune-no-cudagraphs"):
        fn = kiln.compile(lambda x: x.relu() + 1, mode=mode, backend="eager")
        assert fn(kiln.tensor([-1.0, 2.0])).tolist() == [1.0, 3.0]


# ---------------------------------------------------------------- explain
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

    _same_as_torch(snippet)


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


# ---------------------------------------------------------------- logging
_log = logging.getLogger("sweep_compile2_tests")


def _logs_in_the_middle(x):
    y = x + 1
    _log.info("step %d", 3)
    return y.sin()


def test_logger_call_is_one_graph_break(caplog):
    with caplog.at_level(logging.INFO, logger=_log.name):
        check(_logs_in_the_middle, kiln.ones(2), graphs=2, breaks=1)
    assert [r.getMessage() for r in caplog.records] == ["step 3"] * 3  # eager + two calls
    report = kiln._dynamo.explain(_logs_in_the_middle)(kiln.ones(2))
    assert report.break_reasons[0].reason == "call to logging.Logger.info"


def _helper_that_logs(x):
    _log.debug("inside helper")
    return x * 3


def _calls_helper_that_logs(x):
    return _helper_that_logs(x + 1) - 1


def test_logger_call_inside_a_helper_keeps_the_helper_compiled():
    """The helper is compiled on its own (its ``x * 3`` is a graph), not run eagerly."""
    counter, _ = check(_calls_helper_that_logs, kiln.ones(2), graphs=3, breaks=2)
    assert counter.op_count == 3  # add | mul | sub: nothing left to eager code


# ---------------------------------------------------------------- torch.cond
def _true_branch(x, y):
    return x + y, x * y


def _false_branch(x, y):
    return x - y, x / y


def _uses_cond(x, y):
    a, b = kiln.cond(x.mean() > y.mean(), _true_branch, _false_branch, (x, y))
    return a.sum() + b.sum()


@pytest.mark.parametrize("backend", BACKENDS)
def test_cond_with_a_tensor_predicate_is_one_graph(backend):
    compiled = kiln.compile(_uses_cond, backend=backend, fullgraph=True)
    for x in (kiln.ones(3), kiln.ones(3) * 5):
        y = kiln.full((3,), 2.0)
        assert_same(compiled(x, y), _uses_cond(x, y))
    check(_uses_cond, kiln.ones(3), kiln.full((3,), 2.0), graphs=1, breaks=0)


def test_cond_gradients_flow_to_the_taken_branch_only():
    def fn(x):
        return kiln.cond(x.sum() > 0, lambda v: (v * v).sum(), lambda v: v.exp().sum(), (x,))

    for sign in (1.0, -1.0):
        x1 = kiln.tensor([1.0, 2.0]) * sign
        x1.requires_grad_()
        x2 = x1.detach().clone().requires_grad_()
        kiln.compile(fn, backend="aot_eager")(x1).backward()
        fn(x2).backward()
        assert_same(x1.grad, x2.grad)


def test_cond_with_side_effects_or_mutation_falls_back_to_eager():
    calls = []

    def noisy(x):
        calls.append(1)
        return x + 1

    def with_side_effect(x):
        return kiln.cond(x.sum() > 0, noisy, lambda x: x - 1, (x,))

    def with_mutation(x):
        return kiln.cond(x.sum() > 0, lambda x: x.add_(1), lambda x: x - 1, (x,))

    def with_local_mutation(x):
        return kiln.cond(x.sum() > 0, lambda x: (x * 2).add_(1), lambda x: x - 1, (x,))

    check(with_side_effect, kiln.ones(2), graphs=1, breaks=1)
    check(with_mutation, kiln.ones(2), graphs=1, breaks=1)
    check(with_mutation, -kiln.ones(2), graphs=1, breaks=1)
    check(with_local_mutation, kiln.ones(2), graphs=1, breaks=0)


def test_cond_with_a_constant_predicate_inlines_the_branch():
    def fn(x, flag):
        return kiln.cond(flag, lambda x: x.sin(), lambda x: x.cos(), [x])

    check(fn, kiln.ones(2), True)
    check(fn, kiln.ones(2), False)


@needs_torch
@pytest.mark.parametrize(
    "snippet",
    [
        lambda lib: lib.cond(lib.tensor(True), lambda x: x + 1, lambda x: x - 1, (lib.ones(2),)),
        lambda lib: lib.cond(False, lambda: lib.ones(1), lambda: lib.zeros(1)),
        lambda lib: lib.cond(True, lambda x: x * 2, lambda x: x - 1, lib.ones(1)),
        lambda lib: lib.cond(lib.ones(2) > 0, lambda x: x, lambda x: x, (lib.ones(1),)),
        lambda lib: lib.cond(True, lambda x, n: x, lambda x, n: x, (lib.ones(2), 3)),
        lambda lib: lib.cond(
            lib.tensor(True),
            lambda x, y: (x + 1, {"a": y + 0}),
            lambda x, y: (x - 1, {"a": y * 2}),
            (lib.ones(2), lib.zeros(1)),
        ),
        lambda lib: lib.compile(
            lambda x: lib.cond(x.sum() > 0, lambda v: v.sin(), lambda v: v.cos(), (x,)),
            backend="aot_eager",
        )(-lib.ones(2)),
    ],
)
def test_cond_matches_torch(snippet):
    _same_as_torch(snippet)


# ---------------------------------------------------------------- in-place view methods
def _unsqueeze_input(x):
    x.unsqueeze_(0)
    return x * 2


def _transpose_input_after_view_write(x):
    v = x.view(-1)
    v[1] = 7
    x.t_()
    return v


def _reshape_intermediate_in_place(x):
    y = x * 2
    held = [y]
    y.unsqueeze_(0).t_()
    y.transpose_(0, 1)
    y.squeeze_(0)
    z = y * 1
    z.unsqueeze_(-1).swapdims_(0, 1)
    return held[0] + 1, y.shape, z


@pytest.mark.parametrize("backend", BACKENDS)
def test_inplace_view_methods_under_compile(backend):
    for fn, args in (
        (_unsqueeze_input, (kiln.ones(3),)),
        (_transpose_input_after_view_write, (kiln.zeros(2, 2),)),
        (_reshape_intermediate_in_place, (kiln.arange(3.0),)),
    ):
        eager_args = [a.clone() for a in args]
        compiled_args = [a.clone() for a in args]
        expected = fn(*eager_args)
        actual = kiln.compile(fn, backend=backend)(*compiled_args)
        assert_same(actual, expected)
        assert_same(compiled_args, eager_args)  # inputs change shape as they do eagerly


def test_inplace_view_of_an_intermediate_needs_no_break():
    check(_reshape_intermediate_in_place, kiln.arange(3.0), graphs=1, breaks=0)
    check(_unsqueeze_input, kiln.ones(3), graphs=1, breaks=1)


def test_inplace_view_keeps_gradients():
    x1 = kiln.arange(3.0).requires_grad_()
    x2 = x1.detach().clone().requires_grad_()
    out1 = kiln.compile(_reshape_intermediate_in_place, backend="aot_eager")(x1)
    out2 = _reshape_intermediate_in_place(x2)
    (out1[0].sum() + out1[2].pow(2).sum()).backward()
    (out2[0].sum() + out2[2].pow(2).sum()).backward()
    assert_same(x1.grad, x2.grad)


@needs_torch
def test_inplace_view_methods_match_torch():
    def snippet(lib):
        xx = lib.zeros(2, 2)
        r = lib.compile(_transpose_input_after_view_write, backend="aot_eager")(xx)
        y = lib.ones(3)
        s = lib.compile(_unsqueeze_input, backend="aot_eager")(y)
        return r, xx, s, y.shape

    _same_as_torch(snippet)


# ---------------------------------------------------------------- numbers that change
def _scaled(x, n, f):
    y = x * n + f
    y = y / n
    y += n
    return y, n - x, x > f, f**x


@pytest.mark.parametrize("backend", BACKENDS)
def test_changing_numbers_stay_in_the_graph_as_inputs(backend):
    """Once an int/float argument has changed a few times it is a 0-dim tensor input of the
    graph (promoting like the Python number), not a recompile per value nor eager code."""
    counter = CompileCounterFor(backend)
    compiled = kiln.compile(_scaled, backend=counter)
    for x in (kiln.tensor([1.0, -2.0]), kiln.tensor([1.0, 2.0], dtype=kiln.float64)):
        for n, f in [(1, 0.5), (2, 0.25), (3, 1.5), (4, 2.5), (5, 1e-8), (-7, 3.0)]:
            assert_same(compiled(x, n, f), _scaled(x, n, f))
    frames = counter.frame_count
    for n, f in [(11, 0.125), (12, 9.0), (13, -1.0)]:
        x = kiln.tensor([3.0, 4.0], dtype=kiln.float64)
        assert_same(compiled(x, n, f), _scaled(x, n, f))
    assert counter.frame_count == frames  # no recompiles for new values
    assert counter.op_count >= 6 * frames  # and no arithmetic left to eager code


def test_changing_int_next_to_an_int_tensor_keeps_its_dtype():
    def fn(x, n):
        return x * n, x + n, x // n, n * 1.5 + x if False else x % n

    x = kiln.tensor([7, -3], dtype=kiln.int32)
    compiled = kiln.compile(fn, backend="eager")
    for n in (2, 3, 4, 5, 6):
        assert_same(compiled(x, n), fn(x, n))


def CompileCounterFor(backend):  # noqa: N802 - reads like the class it makes
    from kiln.dynamo.testing import CompileCounter

    return CompileCounter(backend)


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
    with pytest.raises(TypeError) as expected:
        call(_many_kinds)
    with pytest.raises(TypeError) as actual:
        call(compiled)
    assert str(actual.value) == str(expected.value)


# ---------------------------------------------------------------- compiler controls
@pytest.fixture
def default_stance():
    yield
    kiln.compiler.set_stance("default")


def test_set_stance_force_eager_as_call_block_and_decorator(default_stance):
    counter = CompileCounterFor("eager")
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
    counter = CompileCounterFor("eager")
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


def test_list_backends_and_invalid_backend_like_torch():
    assert "eager" not in kiln.compiler.list_backends()
    assert "eager" in kiln._dynamo.list_backends(exclude_tags=None)
    with pytest.raises(kiln._dynamo.exc.InvalidBackend) as info:
        kiln.compile(lambda x: x, backend="nonexistent_backend")
    assert isinstance(info.value, RuntimeError)
    assert str(info.value).startswith("Invalid backend: 'nonexistent_backend', see `")


def test_importing_dynamo_submodules_by_torch_names_finds_kiln_modules():
    import importlib
    import sys

    for name in ("exc", "config", "testing"):
        module = importlib.import_module(f"kiln._dynamo.{name}")
        assert module is sys.modules[f"kiln.dynamo.{name}"]
    from kiln._dynamo.testing import CompileCounter

    assert CompileCounter is kiln.dynamo.testing.CompileCounter


# ---------------------------------------------------------------- new shapes
def _row_sums(x):
    return x.sum(0) * 2


def test_a_new_length_each_call_compiles_a_static_then_one_dynamic_graph():
    """A generation loop (a new length each call) compiles twice, as PyTorch does: the first
    call's static graph, then a graph whose changed dim is symbolic and serves every length."""
    counter = CompileCounterFor("eager")
    fn = kiln.compile(_row_sums, backend=counter)
    frames = []
    for n in range(1, 7):
        x = kiln.arange(n * 2.0).reshape(n, 2)
        assert_same(fn(x), _row_sums(x))
        frames.append(counter.frame_count)
    assert frames == [1, 2, 2, 2, 2, 2]
    x = kiln.arange(8.0).reshape(4, 2)
    assert_same(fn(x), _row_sums(x))
    assert counter.frame_count == 2


def test_dynamic_true_compiles_one_shape_before_waiting_for_repeats():
    counter = CompileCounterFor("eager")
    fn = kiln.compile(_row_sums, backend=counter, dynamic=True)
    for n in (3, 4, 5, 6):
        fn(kiln.ones(n, 2))
    assert counter.frame_count == 1


def test_mark_dynamic_compiles_one_shape_before_waiting_for_repeats():
    counter = CompileCounterFor("eager")
    fn = kiln.compile(_row_sums, backend=counter)
    for n in (2, 3, 4, 5):
        x = kiln.arange(n * 2.0).reshape(n, 2)
        kiln._dynamo.mark_dynamic(x, 0)
        assert_same(fn(x), _row_sums(x))
    assert counter.frame_count == 1  # PyTorch: one dynamic graph


@needs_torch
def test_frame_counts_for_changing_shapes_match_torch():
    def snippet(lib):
        from importlib import import_module

        counter = import_module(f"{lib.__name__}._dynamo.testing").CompileCounter()
        fn = lib.compile(_row_sums, backend=counter)
        counts = []
        for n in (1, 2, 3, 4, 5):
            fn(lib.ones(n, 2))
            counts.append(counter.frame_count)
        return counts

    _same_as_torch(snippet)


# ---------------------------------------------------------------- module hooks
def _hooked_net():
    kiln.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    feats = {}

    def save(module, inputs, output):
        feats["relu"] = output.detach()

    net[1].register_forward_hook(save)
    net[0].register_forward_pre_hook(lambda m, args: (args[0] * 2,))
    net[2].register_forward_pre_hook(lambda m, a, kw: ((a[0] + 1,), kw), with_kwargs=True)
    net[2].register_forward_hook(lambda m, a, kw, out: out * 3, with_kwargs=True)
    return net, feats


def test_forward_hooks_of_submodules_are_captured():
    net, feats = _hooked_net()
    x = kiln.randn(3, 4)
    expected = net(x)
    saved = feats.pop("relu")
    report = kiln._dynamo.explain(net)(x)
    assert (report.graph_count, report.graph_break_count) == (1, 0)
    for backend in BACKENDS:
        feats.clear()
        assert_same(kiln.compile(net, backend=backend)(x), expected)
        assert_same(feats["relu"], saved)


def test_hooks_added_or_removed_after_compiling_are_seen():
    net, _ = _hooked_net()
    x = kiln.randn(3, 4)
    compiled = kiln.compile(net, backend="eager")
    compiled(x)
    handle = net[1].register_forward_hook(lambda m, i, o: o * 0)
    assert_same(compiled(x), net(x))
    handle.remove()
    assert_same(compiled(x), net(x))
    top = net.register_forward_hook(lambda m, i, o: o + 100)  # the compiled module's own
    counter = CompileCounterFor("eager")
    compiled = kiln.compile(net, backend=counter)
    assert_same(compiled(x), net(x))
    assert counter.frame_count == 1
    top.remove()
    assert_same(compiled(x), net(x))


def test_backward_hooks_still_run_eagerly_and_correctly():
    net, _ = _hooked_net()
    grads = []
    net[2].register_full_backward_hook(lambda m, gi, go: grads.append(go[0].shape))
    x = kiln.randn(3, 4)
    out = kiln.compile(net, backend="aot_eager")(x)
    out.sum().backward()
    assert grads == [(3, 2)]
    assert_same(out, net(x))


@needs_torch
def test_hooked_module_graph_counts_match_torch():
    def snippet(lib):
        lib.manual_seed(0)
        net = lib.nn.Sequential(lib.nn.Linear(4, 8), lib.nn.ReLU(), lib.nn.Linear(8, 2))
        net[1].register_forward_hook(lambda m, i, o: o * 2)
        net[0].register_forward_pre_hook(lambda m, args: (args[0] * 2,))
        report = lib._dynamo.explain(net)(lib.ones(3, 4))
        return report.graph_count, report.graph_break_count

    _same_as_torch(snippet)


def _times(x, n):
    return x * n


@needs_torch
def test_frame_counts_for_changing_numbers_match_torch():
    def snippet(lib):
        from importlib import import_module

        counter = import_module(f"{lib.__name__}._dynamo.testing").CompileCounter()
        fn = lib.compile(_times, backend=counter)
        counts = []
        for n in (0, 1, 2, 3, 4, 5, 2.5, 3.5, 4.5):
            fn(lib.ones(1), n)
            counts.append(counter.frame_count)
        return counts

    _same_as_torch(snippet)


def test_a_flag_and_a_number_changing_together_settle():
    """Every number that changed counts (not only the first failing guard): the flag keeps one
    entry per value, the number becomes an input, and calls stop recompiling."""

    def fn(x, mode, scale):
        if mode == 1:
            return x * scale
        return x - scale

    counter = CompileCounterFor("eager")
    compiled = kiln.compile(fn, backend=counter)
    for mode, scale in [(0, 1.0), (1, 2.0), (0, 3.0), (1, 4.0), (0, 5.0), (1, 0.5), (0, 7.0)]:
        assert_same(compiled(kiln.ones(2), mode, scale), fn(kiln.ones(2), mode, scale))
    assert counter.frame_count == 3


# ---------------------------------------------------------------- torch._assert
def _checks_rank(x):
    kiln._assert(x.dim() == 1, "expected a vector")
    return x.log()


def _checks_values(x):
    kiln._assert(x.sum() > 0, "must be positive")
    return x.log()


def test_assert_function_under_compile():
    check(_checks_rank, kiln.ones(2), graphs=1, breaks=0)
    check(_checks_rank, kiln.ones(2, 2), graphs=0, breaks=1)  # raises, as eagerly
    check(_checks_values, kiln.ones(2), graphs=2, breaks=1)
    check(_checks_values, -kiln.ones(2), graphs=1, breaks=1)


@needs_torch
@pytest.mark.parametrize(
    "snippet",
    [
        lambda lib: lib._assert(False, "msg"),
        lambda lib: lib._assert(lib.tensor(False), "msg2"),
        lambda lib: lib._assert(lib.tensor([True]), "msg3"),
        lambda lib: lib.compile(_checks_rank, backend="eager")(lib.ones(2, 2)),
    ],
)
def test_assert_function_matches_torch(snippet):
    _same_as_torch(snippet)


# ---------------------------------------------------------------- copying compiled modules
def _plus_one(module, inputs, output):
    return output + 1


def test_deepcopy_and_pickle_of_a_compiled_module():
    import copy
    import io

    kiln.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 3), nn.ReLU())
    net.register_forward_hook(_plus_one)  # its compiled call path is set up
    compiled = kiln.compile(net, backend="aot_eager")
    x = kiln.ones(2, 3)
    compiled(x)
    twin = copy.deepcopy(compiled)
    assert type(twin) is type(compiled) and twin._orig_mod is not net
    assert_same(twin(x), compiled(x))
    with kiln.no_grad():
        twin._orig_mod[0].weight.add_(1)
    assert not kiln.allclose(twin(x), compiled(x))  # a copy, not a view
    buf = io.BytesIO()
    kiln.save(compiled, buf)
    buf.seek(0)
    loaded = kiln.load(buf, weights_only=False)
    assert type(loaded).__name__ == "OptimizedModule"
    assert list(loaded.state_dict()) == list(compiled.state_dict())
    assert_same(loaded(x), compiled(x))


# ---------------------------------------------------------------- explain's counts
def _two_prints(x):
    x = x + 1
    print("first")
    x = x * 2
    print("second")
    return x - 3


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
@pytest.mark.parametrize("fn", [_two_prints, _break_in_loop, _item_at_the_end, _item_in_the_middle])
def test_explain_graph_and_break_counts_match_torch(fn):
    """PyTorch counts breaks as graphs minus one (-1 for a frame that ran eagerly)."""

    def snippet(lib):
        report = lib._dynamo.explain(fn)(lib.ones(3))
        return report.graph_count, report.graph_break_count

    _same_as_torch(snippet)


# ---------------------------------------------------------------- config knobs
_KNOBS = [
    "verbose", "automatic_dynamic_shapes", "assume_static_by_default", "capture_scalar_outputs",
    "capture_dynamic_output_shape_ops", "optimize_ddp", "accumulated_cache_size_limit",
    "accumulated_recompile_limit", "specialize_int", "specialize_float", "guard_nn_modules",
    "skip_nnmodule_hook_guards", "force_parameter_static_shapes", "error_on_recompile",
    "dynamic_shapes", "cache_size_limit", "recompile_limit", "disable", "allow_rnn",
]  # fmt: skip


@needs_torch
def test_config_knobs_read_like_torch():
    _same_as_torch(lambda lib: [getattr(lib._dynamo.config, n) for n in _KNOBS])


def test_config_disable_and_error_on_recompile_take_effect(default_stance):
    config = kiln._dynamo.config
    counter = CompileCounterFor("eager")
    fn = kiln.compile(lambda x: x * 2, backend=counter)
    config.disable = True
    try:
        assert fn(kiln.ones(1)).tolist() == [2.0] and counter.frame_count == 0
    finally:
        config.disable = False
    fn(kiln.ones(1))
    assert counter.frame_count == 1
    config.error_on_recompile = True
    try:
        with pytest.raises(RuntimeError, match="Detected recompile"):
            fn(kiln.ones(2))
    finally:
        config.error_on_recompile = False


def test_automatic_dynamic_shapes_off_compiles_every_shape(monkeypatch):
    monkeypatch.setattr(kiln._dynamo.config, "automatic_dynamic_shapes", False)
    counter = CompileCounterFor("eager")
    fn = kiln.compile(_row_sums, backend=counter)
    for n in range(1, 5):
        fn(kiln.ones(n, 2))
    assert counter.frame_count == 4


class _Annealed(nn.Module):
    """A temperature set from outside and a step counter the forward advances."""

    def __init__(self):
        super().__init__()
        self.temp = 1.0
        self.step = 0

    def forward(self, x):
        self.step += 1
        return (x / self.temp).softmax(-1) * self.step + (self.step - 0.5) * 2


def test_changing_module_attributes_and_counters_stay_in_the_graph():
    model, twin = _Annealed(), _Annealed()
    counter = CompileCounterFor("aot_eager")
    compiled = kiln.compile(model, backend=counter)
    x = kiln.arange(4.0)
    for temp in (1.0, 0.9, 0.8, 0.7, 0.6, 0.5):
        model.temp = twin.temp = temp
        assert_same(compiled(x), twin(x))
    assert model.step == twin.step == 6
    assert counter.frame_count == 2  # the first values baked in, then both are inputs


def _flagged(x, flag):
    return x + 1 if flag == "a" else x - 1


@needs_torch
def test_recompile_limit_counts_entries_like_torch():
    def snippet(lib):
        from importlib import import_module

        config = lib._dynamo.config
        old = config.cache_size_limit
        config.cache_size_limit = 2
        try:
            counter = import_module(f"{lib.__name__}._dynamo.testing").CompileCounter()
            fn = lib.compile(_flagged, backend=counter, dynamic=False)
            counts = []
            for flag in ["a", "b", "c", "d", "a", "b", "e"]:
                fn(lib.ones(1), flag)
                counts.append(counter.frame_count)
            return counts
        finally:
            config.cache_size_limit = old

    with pytest.warns(RuntimeWarning):
        _same_as_torch(snippet)
