"""Capture suite, part 2: user functions, closures, lambdas, partials, argument passing, loops,
branches resolved at capture time, comprehensions, grad-mode blocks and asserts."""

from __future__ import annotations

import functools

import numpy as np
import pytest

import kiln
from kiln.dynamo.testing import CompileCounter

from .helpers import Case, assert_same, check
from .plain_asserts import assert_on_constants


def t(*shape):
    return kiln.randn(*shape)


SCALE = 3.0
FACTORS = [1.0, 2.0]
USE_RELU = True


def _double(x):
    return x * 2


def _affine(x, w=2.0, *, b=1.0):
    return x * w + b


def _nested_helper(x):
    return _double(x) + _double(x + 1)


def _varargs_sum(*xs):
    return sum(xs)


def _kwargs_scale(x, **opts):
    return x * opts.get("scale", 1.0) + opts.get("shift", 0.0)


def _make_scaler(k):
    def scale(x):
        return x * k

    return scale


_TRIPLE = _make_scaler(3.0)


# ---------------------------------------------------------------- calls and arguments
def call_user_function(x):
    return _double(x) + 1


def call_with_defaults_and_kwonly(x):
    return _affine(x), _affine(x, 3.0), _affine(x, w=0.5, b=-1.0)


def call_nested_functions(x):
    return _nested_helper(x)


def call_varargs(x, y):
    return _varargs_sum(x, y, x * y)


def call_kwargs(x):
    return _kwargs_scale(x, scale=2.0, shift=1.0), _kwargs_scale(x)


def call_star_args(x, y):
    args = (x, y)
    kwargs = {"w": 2.0}
    return _affine(*args[:1], **kwargs), _varargs_sum(*args)


def own_varargs(*tensors, scale=1.0):
    return [t * scale for t in tensors]


def own_kwargs(x, **kw):
    return x + kw["a"] * kw["b"]


def keyword_only_params(x, *, alpha=2.0, beta):
    return x * alpha + beta


def positional_only_params(x, y, /, z=1.0):
    return x + y * z


def read_globals(x):
    return x * SCALE + FACTORS[1]


def global_flag_branch(x):
    if USE_RELU:
        return x.relu()
    return x


def closure_from_factory(x):
    return _TRIPLE(x)


def closure_defined_inside(x, k):
    def inner(y):
        return y * k + x

    return inner(x) + inner(x * 2)


def nonlocal_counter_inside(x):
    count = 0

    def bump():
        nonlocal count
        count += 1
        return count

    bump()
    bump()
    return x * count


def lambda_inside(x):
    f = lambda y: y * 2 + 1  # noqa: E731
    return f(x), (lambda a, b=3: a - b)(x)


def lambda_sorted_key(x, pairs):
    ordered = sorted(pairs)
    return x * ordered[0][1], ordered


def functools_partial(x):
    f = functools.partial(_affine, w=4.0)
    return f(x), f(x, b=0.0)


def partial_of_kiln_function(x):
    f = functools.partial(kiln.clamp, min=-0.5)
    return f(x, max=0.5)


def recursion_depth_ok(x, n=3):
    if n == 0:
        return x
    return recursion_depth_ok(x * 2, n - 1)


def method_of_object(x, obj):
    return obj.apply(x) + obj.scale


def compiled_function_called_inside(x):
    return _COMPILED_DOUBLE(x) + 1


_COMPILED_DOUBLE = kiln.compile(_double)


# ---------------------------------------------------------------- loops and branches
def loop_over_range(x):
    for i in range(4):
        x = x + i
    return x


def loop_over_list_constant(x):
    for f in [0.5, 1.5, 2.5]:
        x = x * f
    return x


def while_loop_constant(x):
    i = 0
    while i < 3:
        x = x - 1
        i += 1
    return x


def nested_loops(x):
    for i in range(2):
        for j in range(3):
            x = x + i * j
    return x


def loop_with_break_continue(x):
    for i in range(10):
        if i % 2 == 0:
            continue
        if i > 6:
            break
        x = x * 1.1
    return x


def branch_on_shape(x):
    if x.shape[0] > 2:
        return x.sum(0)
    return x.sum(1)


def branch_on_dtype(x):
    if x.dtype == kiln.float32:
        return x.double()
    return x


def branch_on_ndim(x):
    if x.dim() == 2:
        x = x.unsqueeze(0)
    return x


def branch_on_flag(x, training):
    return x * 0.5 if training else x


def branch_on_requires_grad(x):
    if x.requires_grad:
        return x * 2
    return x * 3


def ternary_and_boolean_ops(x, a, b):
    c = a and b
    d = a or b
    return x * (1 if c else 2) + (3 if d else 4)


def comprehension_list(x):
    return [x * i for i in range(3)]


def comprehension_dict_set(x):
    d = {f"k{i}": x + i for i in range(2)}
    s = {i % 2 for i in range(5)}
    return d, len(s)


def comprehension_nested_filter(x):
    return [x * i * j for i in range(3) for j in range(3) if i != j]


def generator_expression_in_sum(x):
    return sum(x * i for i in range(4)) if False else sum([x * i for i in range(4)])


def with_no_grad_block(x):
    y = x * 2
    with kiln.no_grad():
        z = y * 3
    return y, z


def with_enable_grad_inside_no_grad(x):
    with kiln.no_grad():
        a = x * 2
        with kiln.enable_grad():
            b = x * 3
    return a, b


def set_grad_enabled_block(x):
    with kiln.set_grad_enabled(False):
        y = x + 1
    return y, x + 2


def early_return(x, flag):
    if flag:
        return x
    y = x * 2
    return y + 1


def swap_and_tuple_assign(x, y):
    x, y = y, x
    a = b = x
    return a - b + y


def augmented_assignments(x):
    n = 2
    n *= 3
    n -= 1
    x = x + n
    x *= 2
    return x


class _Scaler:
    def __init__(self, scale):
        self.scale = scale

    def apply(self, x):
        return x * self.scale


CASES = [
    Case(call_user_function, lambda: (t(3),)),
    Case(call_with_defaults_and_kwonly, lambda: (t(3),)),
    Case(call_nested_functions, lambda: (t(3),)),
    Case(call_varargs, lambda: (t(3), t(3))),
    Case(call_kwargs, lambda: (t(3),)),
    Case(call_star_args, lambda: (t(3), t(3))),
    Case(own_varargs, lambda: (t(2), t(2), t(2))),
    Case(read_globals, lambda: (t(3),)),
    Case(global_flag_branch, lambda: (t(3),)),
    Case(closure_from_factory, lambda: (t(3),)),
    Case(closure_defined_inside, lambda: (t(3), 2.0)),
    Case(nonlocal_counter_inside, lambda: (t(3),)),
    Case(lambda_inside, lambda: (t(3),)),
    Case(lambda_sorted_key, lambda: (t(3), [(2, 1.0), (1, 3.0)])),
    Case(functools_partial, lambda: (t(3),)),
    Case(partial_of_kiln_function, lambda: (t(5),)),
    Case(recursion_depth_ok, lambda: (t(3),)),
    Case(method_of_object, lambda: (t(3), _Scaler(2.5))),
    Case(compiled_function_called_inside, lambda: (t(3),)),
    Case(loop_over_range, lambda: (t(3),)),
    Case(loop_over_list_constant, lambda: (t(3),)),
    Case(while_loop_constant, lambda: (t(3),)),
    Case(nested_loops, lambda: (t(3),)),
    Case(loop_with_break_continue, lambda: (t(3),)),
    Case(branch_on_shape, lambda: (t(3, 2),)),
    Case(branch_on_dtype, lambda: (t(3),)),
    Case(branch_on_ndim, lambda: (t(3, 2),)),
    Case(branch_on_flag, lambda: (t(3), True)),
    Case(branch_on_requires_grad, lambda: (t(3).requires_grad_(),)),
    Case(ternary_and_boolean_ops, lambda: (t(3), 1, 0)),
    Case(comprehension_list, lambda: (t(3),)),
    Case(comprehension_dict_set, lambda: (t(3),)),
    Case(comprehension_nested_filter, lambda: (t(3),)),
    Case(generator_expression_in_sum, lambda: (t(3),)),
    Case(with_no_grad_block, lambda: (t(3).requires_grad_(),)),
    Case(with_enable_grad_inside_no_grad, lambda: (t(3).requires_grad_(),)),
    Case(set_grad_enabled_block, lambda: (t(3).requires_grad_(),)),
    Case(assert_on_constants, lambda: (t(2, 3),)),
    Case(early_return, lambda: (t(3), False)),
    Case(swap_and_tuple_assign, lambda: (t(3), t(3))),
    Case(augmented_assignments, lambda: (t(3),)),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_capture_matches_eager(case):
    check(case.fn, *case.make_args(), graphs=case.graphs, breaks=case.breaks)


def test_keyword_only_and_positional_only_parameters():
    check(keyword_only_params, t(3), kwargs={"beta": 1.0})
    check(keyword_only_params, t(3), kwargs={"alpha": 0.5, "beta": 2.0})
    check(positional_only_params, t(3), t(3))
    check(positional_only_params, t(3), t(3), kwargs={"z": 3.0})


def test_own_kwargs_dict():
    check(own_kwargs, t(2), kwargs={"a": 2.0, "b": 3.0})


def test_wrong_arguments_raise_the_eager_type_error():
    check(keyword_only_params, t(3), graphs=0)
    check(call_user_function, t(3), t(3), graphs=0)


class _Base:
    def transform(self, x):
        return x * 2


class _Derived(_Base):
    def transform(self, x):
        return super().transform(x) + 1


def call_super_method(x, obj):
    return obj.transform(x)


def test_super_method_call():
    check(call_super_method, t(3), _Derived())


class _BaseModule(kiln.nn.Module):
    def forward(self, x):
        return x.relu()


class _DerivedModule(_BaseModule):
    def forward(self, x):
        return super().forward(x) * 3


def test_super_forward_in_module():
    model = _DerivedModule()
    x = t(4)
    compiled = kiln.compile(model, fullgraph=True)
    assert bool((compiled(x) - model(x)).abs().max() == 0)


@kiln.no_grad()
def _no_grad_helper(x):
    return x * 2


def calls_no_grad_decorated(x):
    return _no_grad_helper(x) + x


def test_no_grad_decorated_function_is_inlined():
    check(calls_no_grad_decorated, t(3).requires_grad_())


def decorates_in_the_frame(net, x):
    """Grad-mode decorators applied inside captured code, with and without parentheses; the
    decorated function is returned too (rebuilt as the real decorated function)."""

    @kiln.no_grad()
    def peek(v):
        return net(v) * 2

    @kiln.no_grad
    def peek_bare(v):
        return net(v) * 3

    @kiln.inference_mode()
    def peek_inference(v):
        return net(v) * 4

    total = peek(x) + net(x) + peek_bare(x) + peek_inference(x)
    return total, peek(x).requires_grad, peek


def test_grad_mode_decorators_applied_in_captured_code_stay_in_one_graph():
    net = kiln.nn.Linear(3, 3)
    x = t(4, 3)
    counter = CompileCounter()
    total, needs_grad, peek = kiln.compile(decorates_in_the_frame, backend=counter)(net, x)
    expected, _, _ = decorates_in_the_frame(net, x)
    assert counter.frame_count == 1 and not needs_grad
    assert_same(total, expected)
    assert total.requires_grad and not peek(x).requires_grad


def build_size_and_device(x):
    size = kiln.Size([x.shape[0], 2])
    dev = kiln.device("cpu")
    return kiln.zeros(size, device=dev) + x.sum()


def test_size_and_device_constructors():
    check(build_size_and_device, t(3))


def legacy_constructors(x, depths):
    """NeRF's ``raw2outputs``: ``torch.Tensor([1e10]).expand(...)`` and ``torch.log(
    torch.Tensor([10.0]))``; the typed constructors of old code."""
    far = kiln.Tensor([1e10]).expand(depths[..., :1].shape)
    dists = kiln.cat([depths[..., 1:] - depths[..., :-1], far], -1)
    psnr = -10.0 * kiln.log(x.square().mean()) / kiln.log(kiln.Tensor([10.0]))
    counts = kiln.LongTensor([1, 2]) + kiln.FloatTensor(2).zero_() + kiln.Tensor(2).fill_(0.5)
    return dists, psnr, counts


def test_legacy_constructors_are_captured():
    # each was 'creating a Tensor object', a graph break
    check(legacy_constructors, t(3), t(2, 4).cumsum(-1), graphs=1, breaks=0)


_COSINE_TRIPLET = kiln.nn.TripletMarginWithDistanceLoss(
    distance_function=lambda x, y: 1.0 - kiln.nn.functional.cosine_similarity(x, y), margin=0.5
)
_PAIRWISE = kiln.nn.PairwiseDistance()


def triplet_losses_with_distance_functions(anchor, positive, negative):
    """A siamese net's losses: the distance a lambda (made here or in a module), a module, a
    kiln function; ``distance_function or pairwise_distance`` asks the callable's truth."""
    F = kiln.nn.functional
    return (
        _COSINE_TRIPLET(anchor, positive, negative),
        F.triplet_margin_with_distance_loss(
            anchor, positive, negative, distance_function=lambda x, y: (x - y).abs().sum(-1)
        ),
        F.triplet_margin_with_distance_loss(
            anchor, positive, negative, distance_function=_PAIRWISE, swap=True
        ),
        F.triplet_margin_with_distance_loss(anchor, positive, negative, distance_function=None),
    )


def test_functional_losses_call_the_users_distance_function_in_the_graph():
    # passing the lambda to the loss was a graph break ('passing ... to a kiln function')
    check(triplet_losses_with_distance_functions, t(4, 3), t(4, 3), t(4, 3), graphs=1, breaks=0)


def numpy_type_facts(x):
    """REINFORCE's ``eps = np.finfo(np.float32).eps.item()``, inside the step."""
    eps = np.finfo(np.float32).eps.item()
    return (x - x.mean()) / (x.std() + eps) + np.iinfo(np.int8).max


def test_numpy_finfo_and_iinfo_of_constants_are_constants():
    # 'creating a finfo object' was a graph break
    check(numpy_type_facts, t(4), graphs=1, breaks=0)


def seeding_inside(x):
    kiln.manual_seed(3)
    return x + kiln.rand(3)


def test_stateful_kiln_function_is_a_graph_break():
    check(seeding_inside, t(3), graphs=1, breaks=1)


def _closure_factory(k):
    def with_break(x):
        y = x * k
        print("k is", k)
        return y + k

    return with_break


def test_break_in_a_closure_resumes_with_its_cells():
    check(_closure_factory(2.0), t(3), graphs=2, breaks=1)
    check(_closure_factory(5.0), t(3), graphs=2, breaks=1)


@pytest.mark.parametrize("kind", ["partial", "lambda"])
def test_partials_and_lambdas_in_a_list(kind):
    def pipeline(x):
        fns = [lambda v: v + 1, kiln.sin, functools.partial(kiln.mul, other=2.0)]
        if kind == "lambda":
            fns = fns[:2]
        vals = [f(x) for f in fns]
        return sum(vals), max(len(vals), 2)

    check(pipeline, kiln.randn(2))


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
