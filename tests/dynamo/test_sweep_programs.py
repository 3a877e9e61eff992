"""Real-program idioms under ``kiln.compile``: each program runs compiled and eagerly (the
``check`` helper compares results, arguments' final state and graph/break counts).

These are regressions of what a sweep of PyTorch-style programs found (generators feeding a
loop, numpy scalars after a break, gradient clipping inside a compiled train step, sorting with
a key, ``Module.compile``...); the expected graph counts are the ones ``torch.compile`` gets.
"""

from __future__ import annotations

import collections
import contextlib
import copy
import functools
import itertools
import operator

import numpy as np
import pytest

import kiln
import kiln.nn as nn
import kiln.nn.functional as F
from kiln.dynamo.testing import CompileCounter

from .helpers import assert_same, check


def t(*shape):
    return kiln.randn(*shape)


# ---------------------------------------------------------------- generators
def _chunks(x, n):
    for i in range(0, x.shape[0], n):
        yield x[i : i + n]


def sum_of_chunks(x):
    total = kiln.zeros(x.shape[1])
    for c in _chunks(x, 2):
        total = total + c.sum(0)
    return total


def generator_expression_in_sum(xs):
    return sum(v * i for i, v in enumerate(xs))


def _pairs(xs):
    yield from zip(xs, xs[1:])
    return "done"


def yield_from_and_next(x):
    gen = _pairs([x, x * 2, x * 3])
    a, b = next(gen)
    rest = [u - v for u, v in gen]
    return a + b, rest


def islice_of_generator(x):
    squares = (x * i for i in itertools.count())
    return list(itertools.islice(squares, 3))


def generator_with_side_effect(x, log):
    def numbered(items):
        for i, item in enumerate(items):
            log.append(i)
            yield item * i

    out = []
    for y in numbered([x, x + 1, x + 2]):
        out.append(y)
        log.append("consumed")
    return out


def test_generator_functions_are_inlined():
    check(sum_of_chunks, t(6, 3))
    check(generator_expression_in_sum, [t(2), t(2), t(2)])
    check(yield_from_and_next, t(3))
    check(islice_of_generator, t(2))


def generators_fed_to_builtins(xs):
    sizes = " ".join(str(t.shape[0]) for t in xs)
    return (
        max(t.shape[0] for t in xs), any(t.shape[0] > 2 for t in xs), sorted(t.dim() for t in xs),
        dict((i, t) for i, t in enumerate(xs)), sizes,
        [u + v for u, v in zip((t * 2 for t in xs), xs)],
        sum((t.sum() for t in xs), kiln.tensor(0.0)),
    )  # fmt: skip


def test_generator_expressions_fed_to_builtins():
    check(generators_fed_to_builtins, [t(3), t(2), t(4)])


def test_generator_body_interleaves_with_its_consumer():
    check(generator_with_side_effect, t(2), [])


_PENALIZED = nn.Linear(3, 2)


def parameter_norm_penalty(x):
    penalty = sum(p.pow(2).sum() for p in _PENALIZED.parameters())
    return _PENALIZED(x).sum() + 0.01 * penalty


def test_generator_over_module_parameters():
    check(parameter_norm_penalty, t(4, 3))


# ---------------------------------------------------------------- values around breaks
@kiln.compiler.disable
def _numpy_total(x):
    return x.numpy().sum()


def numpy_scalar_after_break(x):
    a = x.sin()
    s = _numpy_total(a)
    return a * float(s) + np.float32(0.5)


def test_numpy_scalars_are_constants():
    check(numpy_scalar_after_break, t(3), graphs=2, breaks=1)


def sort_with_key(x):
    parts = [x[:1], x, x[:2]]
    parts = sorted(parts, key=lambda p: -p.shape[0])
    ordered = sorted({"b": 2, "a": 1, "c": 0}.items(), key=lambda kv: kv[1])
    return kiln.cat(parts), [k for k, _ in ordered]


def test_sorted_with_a_key_function():
    check(sort_with_key, t(3))


# ---------------------------------------------------------------- training steps
def _clip_step(model, opt, x, y):
    opt.zero_grad()
    loss = ((model(x) - y) ** 2).mean()
    loss.backward()
    norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm=0.1)
    opt.step()
    return loss.detach(), norm


def test_clip_grad_norm_inside_a_compiled_step_sees_the_gradients():
    kiln.manual_seed(0)
    model = nn.Linear(4, 2)
    twin = copy.deepcopy(model)
    opt = kiln.optim.SGD(model.parameters(), lr=0.5)
    twin_opt = kiln.optim.SGD(twin.parameters(), lr=0.5)
    step = kiln.compile(_clip_step, backend=CompileCounter())
    x, y = t(3, 4), kiln.zeros(3, 2)
    for _ in range(3):
        loss, norm = step(model, opt, x, y)
        twin_loss, twin_norm = _clip_step(twin, twin_opt, x, y)
        assert_same(loss, twin_loss)
        assert_same(norm, twin_norm)
        assert float(norm) > 0
    assert_same(model.state_dict(), twin.state_dict())


# ---------------------------------------------------------------- Module.compile
class _Scaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 2)

    def forward(self, x):
        return self.fc(x).relu() * 2


def test_module_compile_compiles_forward_in_place_and_keeps_hooks():
    model = _Scaled()
    counter = CompileCounter()
    model.compile(backend=counter)
    x = t(4, 3)
    expected = _Scaled.forward(model, x)
    assert_same(model(x), expected)
    assert counter.frame_count == 1
    seen = []
    model.register_forward_hook(lambda mod, args, out: seen.append(out.shape))
    assert_same(model(x), expected)
    assert seen == [(4, 2)] and counter.frame_count == 1
    assert list(model.state_dict()) == ["fc.weight", "fc.bias"]


# ---------------------------------------------------------------- inductor: ops without inputs
def random_ops_without_tensor_inputs(x):
    perm = kiln.randperm(5)
    return x + perm.sort().values, kiln.multinomial(kiln.ones(4), 2).shape


def test_inductor_runs_eager_kernels_of_ops_without_tensor_inputs(recwarn):
    out, shape = kiln.compile(random_ops_without_tensor_inputs, backend="inductor")(kiln.zeros(5))
    assert_same(out, kiln.arange(5.0))
    assert shape == (2,)
    assert not [w for w in recwarn if "failed to compile" in str(w.message)]


@pytest.mark.parametrize("kind", ["partial", "lambda"])
def test_partials_and_lambdas_in_a_list(kind):
    def pipeline(x):
        fns = [lambda v: v + 1, kiln.sin, functools.partial(kiln.mul, other=2.0)]
        if kind == "lambda":
            fns = fns[:2]
        vals = [f(x) for f in fns]
        return sum(vals), max(len(vals), 2)

    check(pipeline, t(2))


# ---------------------------------------------------------------- closures and graph breaks
def break_with_inner_function(x):
    scale = x.shape[0]

    def inner(y):
        return y * scale

    total = inner(x) + inner(x * 2)
    print("inner done")
    return total + scale, inner(x)


def inner_functions_share_cells_across_a_break(x):
    acc = []

    def add(v):
        acc.append(v)
        return len(acc)

    n = add(x * 2)
    print("added", n)
    add(x + 1)
    m = x.sum()

    def later():
        return m * 3

    print("again")
    return sum(acc), later(), n


def returns_a_closure(x):
    k = x.shape[-1]

    def scale(y):
        return y * k

    print("made")
    return scale


def test_graph_breaks_in_functions_with_inner_functions():
    check(break_with_inner_function, t(3), graphs=2, breaks=1)
    check(inner_functions_share_cells_across_a_break, t(2), graphs=3, breaks=2)


def test_a_closure_made_before_a_break_is_returned():
    fn = kiln.compile(returns_a_closure, backend=CompileCounter())(t(2, 4))
    assert fn.__qualname__ == "returns_a_closure.<locals>.scale"
    assert_same(fn(kiln.ones(2)), kiln.full((2,), 4.0))


def _make_counter():
    count = 0

    def step(x):
        nonlocal count
        count += 1
        return x * 2 + 1, count

    return step


def test_nonlocal_write_of_the_compiled_function_is_replayed():
    step = _make_counter()
    counter = CompileCounter()
    compiled = kiln.compile(step, backend=counter)
    twin = _make_counter()
    for _ in range(3):
        assert_same(compiled(kiln.ones(2)), twin(kiln.ones(2)))
    assert step.__closure__[0].cell_contents == 3
    assert counter.frame_count == 1


def test_local_functions_passed_on_do_not_recompile():
    counter = CompileCounter()

    def apply(fn, x):
        return fn(x) + 1

    compiled = kiln.compile(apply, backend=counter)
    for k in (2.0, 3.0):

        def times(y, k=k):
            return y * k

        assert_same(compiled(times, kiln.ones(2)), kiln.full((2,), k + 1))
    assert counter.frame_count == 2  # the default ``k`` changed: guarded, not the function
    for _ in range(2):

        def again(y, k=3.0):
            return y * k

        compiled(again, kiln.ones(2))
    assert counter.frame_count == 3


# ---------------------------------------------------------------- custom autograd functions
class _ClampedSquare(kiln.autograd.Function):
    @staticmethod
    def forward(ctx, x, k):
        ctx.save_for_backward(x)
        ctx.k = k
        return x * x * k

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return (2 * x * grad * ctx.k).clamp(-1.0, 1.0), None


class _SinAndScale(kiln.autograd.Function):
    @staticmethod
    def forward(x, k):
        return x * k, x.sin()

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])
        ctx.k = inputs[1]

    @staticmethod
    def backward(ctx, g_scaled, g_sin):
        (x,) = ctx.saved_tensors
        return g_scaled * ctx.k * 10 + g_sin * x.cos(), None


def custom_functions(x):
    a, b = _SinAndScale.apply(x * 2, 3.0)
    return (_ClampedSquare.apply(a, 0.5) + b).sum()


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
def test_custom_autograd_function_is_one_node_with_its_own_backward(backend):
    counter = CompileCounter(backend)
    x = kiln.tensor([1.0, -2.0, 0.5], requires_grad=True)
    twin = x.detach().clone().requires_grad_(True)
    out = kiln.compile(custom_functions, backend=counter, fullgraph=True)(x)
    expected = custom_functions(twin)
    out.backward()
    expected.backward()
    assert_same(out.detach(), expected.detach())
    assert_same(x.grad, twin.grad)
    assert counter.frame_count == 1
    with kiln.no_grad():
        assert_same(kiln.compile(custom_functions, backend=backend)(x), expected.detach())


# ---------------------------------------------------------------- checkpoint and `with` blocks
_BLOCK = nn.Sequential(nn.Linear(4, 4), nn.GELU())


def checkpointed_residual(x):
    from kiln.utils.checkpoint import checkpoint

    return x + checkpoint(_BLOCK, x, use_reentrant=False)


def test_activation_checkpointing_is_the_plain_call_inside_a_graph():
    check(checkpointed_residual, t(2, 4))


class _Recorder:
    def __init__(self):
        self.entered = 0
        self.exited = 0

    def __enter__(self):
        self.entered += 1
        return self

    def __exit__(self, *exc):
        self.exited += 1
        return False


_RECORDER = _Recorder()


@contextlib.contextmanager
def _doubled(v):
    yield v * 2


def context_managers(x, amp: bool):
    ctx = kiln.autocast("cpu", dtype=kiln.bfloat16) if amp else contextlib.nullcontext()
    with ctx:
        y = x * 3
    with _RECORDER as rec:
        y = y + (rec is _RECORDER)
    with _doubled(y) as d:
        y = d - 1
    return y


def test_with_blocks_over_plain_and_generator_context_managers():
    check(context_managers, t(3), False)
    assert (_RECORDER.entered, _RECORDER.exited) == (3, 3)  # eager once, compiled twice


# ---------------------------------------------------------------- numpy constants
def numpy_math_on_shapes(x):
    d = x.shape[-1]
    return x / np.sqrt(d) + np.prod(x.shape) + np.float32(0.5) + np.pi


def test_numpy_functions_of_constants_fold():
    check(numpy_math_on_shapes, t(2, 4))


# ---------------------------------------------------------------- try / except
def _lookup(d, key):
    if key not in d:
        raise KeyError(key)
    return d[key]


def _limited(xs):
    for x in xs:
        if x.shape[0] > 2:
            raise ValueError("too long")
        yield x * 2


def exceptions_caught_in_the_graph(x, d):
    try:
        v = d["missing"]
    except KeyError as e:
        v = x * len(str(e))
    finally:
        v = v + 1
    try:
        w = _lookup(d, "other")
    except (TypeError, KeyError) as e:
        w = x * len(e.args)
    else:
        w = w * 0
    out = []
    try:
        for y in _limited([x, x, kiln.ones(3)]):
            out.append(y)
    except ValueError as err:
        out.append(x * 0 + len(str(err)))
    try:
        if x.dim() != 2:  # (an ``assert`` here would be rewritten by pytest)
            raise AssertionError("needs a matrix")
    except AssertionError:
        out.append(x - 1)
    return v, w, out


def test_exceptions_raised_and_caught_stay_in_one_graph():
    check(exceptions_caught_in_the_graph, t(2), {"a": 1})


def exception_escapes(x):
    try:
        raise RuntimeError("boom")
    except ValueError:
        return x


def test_an_uncaught_exception_still_reaches_the_caller():
    check(exception_escapes, t(2), graphs=0, breaks=1)


# ---------------------------------------------------------------- script boilerplate
def test_config_modules_imported_by_their_torch_names_are_the_ones_kiln_reads():
    import importlib

    from kiln.dynamo import eval_frame

    dynamo_config = importlib.import_module("kiln._dynamo.config")
    inductor_config = importlib.import_module("kiln._inductor.config")
    assert dynamo_config is eval_frame.config
    assert inductor_config is kiln._inductor.config
    inductor_config.coordinate_descent_tuning = True
    inductor_config.triton.unique_kernel_names = True
    inductor_config.coordinate_descent_tuning = False


def test_torch_logging_switches_map_onto_kiln_logs(capsys):
    kiln._logging.set_logs(graph_breaks=True, dynamo=20, perf_hints=True)
    try:
        kiln.compile(print_in_the_middle, backend="eager")(t(2))
    finally:
        kiln._logging.set_logs(graph_breaks=False)
    assert "graph break" in capsys.readouterr().err


def print_in_the_middle(x):
    y = x + 1
    print("mid")
    return y * 2


def test_cudagraphs_backend_runs_like_aot_eager():
    check_backend = CompileCounter("cudagraphs")
    x = t(3)
    assert_same(kiln.compile(print_in_the_middle, backend=check_backend)(x), (x + 1) * 2)
    assert check_backend.frame_count == 2


# ---------------------------------------------------------------- small Python idioms
_Point = collections.namedtuple("_Point", "x y")


def python_idioms(x):
    total = functools.reduce(operator.add, [x, x * 2, x * 3])
    p = _Point(1, 2)._replace(y=5)
    fields = p._asdict()
    return total * p.y + fields["x"], functools.reduce(lambda a, b: a * b, [2, 3], 1)


def test_reduce_and_namedtuple_helpers_are_captured():
    check(python_idioms, t(3))


def leaf_and_data(x, w):
    y = x * w
    y.data.add_(1)
    return y, x.is_leaf, y.is_leaf, w.data.is_leaf, w.detach().is_leaf


def test_is_leaf_and_data_are_captured():
    w = t(3).requires_grad_(True)
    check(leaf_and_data, t(3), w)


# ---------------------------------------------------------------- module containers
class _Scales(nn.Module):
    def __init__(self):
        super().__init__()
        self.per_layer = nn.ParameterList([nn.Parameter(t(4)) for _ in range(3)])
        self.named = nn.ParameterDict({"shift": nn.Parameter(t(4))})

    def forward(self, x):
        for i, p in enumerate(self.per_layer):
            x = x * p + i
        x = x + self.per_layer[-1] + self.named["shift"] + len(self.per_layer)
        return nn.Flatten()(x.unsqueeze(1)), nn.Softmax(dim=-1)(x)


_SCALES = _Scales()


def parameter_containers(x):
    return _SCALES(x)


def test_parameter_list_dict_and_modules_built_in_forward():
    check(parameter_containers, t(2, 4))


# ---------------------------------------------------------------- grad-mode blocks
_CLASSIFIER = nn.Linear(4, 3)


def grad_mode_queries(x):
    with kiln.no_grad():
        inside = kiln.is_grad_enabled()
    with kiln.set_grad_enabled(False):
        switched = kiln.is_grad_enabled()
    return x * 2, inside, kiln.is_grad_enabled(), switched


def eval_step_with_item(x, y):
    with kiln.no_grad():
        logits = _CLASSIFIER(x)
        loss = F.cross_entropy(logits, y)
        acc = (logits.argmax(-1) == y).float().mean().item()
        scaled = logits * 2
    again = _CLASSIFIER(x)
    return loss, acc, scaled, again, kiln.is_grad_enabled()


def nested_blocks_with_breaks(x):
    with kiln.enable_grad():
        a = _CLASSIFIER(x)
        with kiln.no_grad():
            b = _CLASSIFIER(x)
            print("inner", kiln.is_grad_enabled())
            c = _CLASSIFIER(x) * 2
        d = _CLASSIFIER(x)
        print("outer", kiln.is_grad_enabled())
    return a, b, c, d


def enable_grad_inside(x, w):
    with kiln.enable_grad():
        y = x * w
    return y, x * w


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
def test_grad_mode_blocks_with_breaks_and_switches(backend):
    for fn, args, graphs in [
        (grad_mode_queries, (t(2),), 1),
        (eval_step_with_item, (t(5, 4), kiln.tensor([0, 1, 2, 0, 1])), 2),
        (nested_blocks_with_breaks, (t(5, 4),), 2),
    ]:
        counter = CompileCounter(backend)
        compiled = kiln.compile(fn, backend=counter)
        for grad in (True, False):
            with kiln.set_grad_enabled(grad):
                assert_same(compiled(*args), fn(*args))
                assert kiln.is_grad_enabled() is grad
        assert counter.frame_count == 2 * graphs
    x, w = t(2), t(2).requires_grad_(True)
    twin = w.detach().clone().requires_grad_(True)
    with kiln.no_grad():
        out = kiln.compile(enable_grad_inside, backend=backend)(x, w)
        expected = enable_grad_inside(x, twin)
    assert_same(out, expected)
    out[0].sum().backward()
    expected[0].sum().backward()
    assert_same(w.grad, twin.grad)


# ---------------------------------------------------------------- numbers that keep changing
def warmup_scaled(x, step: int, alpha: float):
    warm = min(1.0, step / 10)
    return x * warm * alpha + step


def test_a_number_changing_every_call_stops_recompiling_without_a_warning(recwarn):
    counter = CompileCounter()
    compiled = kiln.compile(warmup_scaled, backend=counter)
    x = t(2)
    for step in range(20):
        assert_same(compiled(x, step, 0.5), warmup_scaled(x, step, 0.5))
    assert counter.frame_count <= 8
    assert not [w for w in recwarn if "recompiled" in str(w.message)]


def _lr_step(model, opt, sched, x):
    opt.zero_grad()
    loss = model(x).pow(2).mean()
    loss.backward()
    opt.step()
    return loss.detach()


def test_compiled_step_with_a_per_step_lr_schedule_matches_eager(recwarn):
    kiln.manual_seed(0)
    model = nn.Linear(3, 2)
    twin = copy.deepcopy(model)
    runs = []
    for m in (model, twin):
        opt = kiln.optim.Adam(m.parameters(), lr=0.1)
        runs.append((m, opt, kiln.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=10)))
    counter = CompileCounter()
    step = kiln.compile(_lr_step, backend=counter)
    x = t(4, 3)
    for _ in range(12):
        (m, opt, sched), (m2, opt2, sched2) = runs
        assert_same(step(m, opt, sched, x), _lr_step(m2, opt2, sched2, x))
        sched.step()
        sched2.step()
    assert_same(model.state_dict(), twin.state_dict())
    assert counter.frame_count <= 8
    assert not [w for w in recwarn if "recompiled" in str(w.message)]


def closure_called_after_a_break(x, k):
    acc = [x]

    def add(v):
        acc.append(v * k)

    with kiln.no_grad():
        add(x)
        print("mid")
        add(x + 1)
    return sum(acc), len(acc)


@pytest.mark.parametrize("backend", ["eager", "inductor"])
def test_a_local_function_called_after_breaks_uses_this_calls_closure(backend):
    compiled = kiln.compile(closure_called_after_a_break, backend=backend)
    x = t(2)
    for k in (1, 2, 3, 4, 5):
        assert_same(compiled(x, k), closure_called_after_a_break(x, k))
