"""Guards and recompilation: what invalidates a cache entry, the recompile limit, reset()."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

import kiln
from kiln.dynamo import config
from kiln.dynamo.testing import CompileCounter
from tests.oracle import needs_torch, torch

from .helpers import assert_same


def t(*shape):
    return kiln.randn(*shape)


def scale(x, k=2.0):
    return x * k


def compiled_with_counter(fn, **options):
    counter = CompileCounter()
    return kiln.compile(fn, backend=counter, **options), counter


@pytest.mark.parametrize(
    "first, second",
    [
        ((t(3),), (t(4),)),
        ((t(3),), (t(3).double(),)),
        ((t(3),), (t(3).requires_grad_(),)),
        ((t(3), 2.0), (t(3), 3.0)),
        ((t(3), 2), (t(3), 2.0)),
        ((t(4, 4),), (t(4, 4).t(),)),
    ],
    ids=["shape", "dtype", "requires_grad", "constant value", "constant type", "strides"],
)
def test_a_changed_input_recompiles_once(first, second):
    fn, counter = compiled_with_counter(scale)
    for _ in range(2):
        assert_same(fn(*first), scale(*first))
    assert counter.frame_count == 1
    for _ in range(2):
        assert_same(fn(*second), scale(*second))
    assert counter.frame_count == 2
    assert_same(fn(*first), scale(*first))
    assert counter.frame_count == 2


def test_same_tensor_passed_twice_is_a_different_entry():
    def add_inplace(a, b):
        a.add_(b)
        return a

    fn, counter = compiled_with_counter(add_inplace)
    x, y = t(3), t(3)
    fn(x.clone(), y)
    z = t(3)
    expected = add_inplace(z.clone(), z.clone())
    assert_same(fn(z, z), expected * 1)
    assert counter.frame_count == 2


HELPER_SCALE = 2.0


def _uses_global(x):
    return x * HELPER_SCALE


def test_changing_a_global_constant_recompiles(monkeypatch):
    fn, counter = compiled_with_counter(_uses_global)
    x = t(3)
    assert_same(fn(x), x * 2.0)
    monkeypatch.setattr(__import__(__name__, fromlist=["x"]), "HELPER_SCALE", 5.0)
    assert_same(fn(x), x * 5.0)
    assert counter.frame_count == 2


def _inner_a(x):
    return x + 1


def _inner_b(x):
    return x - 1


INNER = _inner_a


def _calls_global_function(x):
    return INNER(x)


def test_rebinding_a_global_function_recompiles(monkeypatch):
    fn, counter = compiled_with_counter(_calls_global_function)
    x = t(3)
    assert_same(fn(x), x + 1)
    monkeypatch.setattr(__import__(__name__, fromlist=["x"]), "INNER", _inner_b)
    assert_same(fn(x), x - 1)
    assert counter.frame_count == 2


def test_changing_a_closure_value_recompiles():
    k = 2.0

    def closure(x):
        return x * k

    fn, counter = compiled_with_counter(closure)
    x = t(3)
    assert_same(fn(x), x * 2.0)
    k = 4.0
    assert_same(fn(x), x * 4.0)
    assert counter.frame_count == 2


def test_grad_mode_is_guarded():
    fn, counter = compiled_with_counter(scale)
    x = t(3).requires_grad_()
    assert fn(x).requires_grad
    with kiln.no_grad():
        assert not fn(x).requires_grad
    assert counter.frame_count == 2


def test_recompile_limit_runs_eagerly_and_warns_once():
    fn, counter = compiled_with_counter(scale, dynamic=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in range(1, config.recompile_limit + 5):
            x = t(n)
            assert_same(fn(x), scale(x))
    assert counter.frame_count == config.recompile_limit  # entries in all, as PyTorch counts
    messages = [str(w.message) for w in caught if "recompiled" in str(w.message)]
    assert len(messages) == 1
    assert "x.shape" in messages[0]


def test_new_shapes_past_the_limit_run_eagerly_without_a_warning(monkeypatch):
    # without automatic dynamic shapes every new shape compiles a static graph, up to the limit
    monkeypatch.setattr(config, "automatic_dynamic_shapes", False)
    fn, counter = compiled_with_counter(scale)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in range(1, config.shape_recompile_limit + 5):
            x = t(n)
            assert_same(fn(x), scale(x))
            assert_same(fn(x), scale(x))
        fn(t(3))  # a shape compiled before still runs its entry
    assert counter.frame_count == config.shape_recompile_limit + 1
    assert not [w for w in caught if "recompiled" in str(w.message)]


def test_recompiles_log_names_the_failed_guard(capsys):
    kiln.dynamo.set_logs("recompiles")
    try:
        fn, _ = compiled_with_counter(scale)
        fn(t(3))
        fn(t(3).double())
    finally:
        kiln.dynamo.set_logs("")
    err = capsys.readouterr().err
    assert "recompiling scale" in err
    assert "x.dtype == kiln.float32" in err


def test_guard_function_is_generated_python():
    fn, _ = compiled_with_counter(scale)
    fn(t(2, 3))
    src = fn._kiln_cache.guards[0].src
    assert src.startswith("def ___guard(___closure, x, k=")
    assert "x._shape == (2, 3)" in src


def test_reset_forgets_compiled_entries():
    fn, counter = compiled_with_counter(scale)
    x = t(3)
    fn(x)
    kiln.dynamo.reset()
    fn(x)
    kiln.compiler.reset()
    fn(x)
    assert counter.frame_count == 3


def test_aliased_arguments_then_distinct_ones_recompile():
    def add_inplace(a, b):
        a.add_(b)
        return a * 1

    fn, counter = compiled_with_counter(add_inplace)
    z = t(3)
    expected = add_inplace(z.clone(), z.clone() * 1)
    z1 = z.clone()
    fn(z1, z1)
    x, y = t(3), t(3)
    assert_same(fn(x.clone(), y), add_inplace(x.clone(), y))
    assert counter.frame_count == 2
    assert expected is not None


def test_compiling_the_same_function_twice_shares_the_cache():
    counter = CompileCounter()
    x = t(3)
    for _ in range(3):
        kiln.compile(scale, backend=counter)(x)
    assert counter.frame_count == 1


def test_identity_and_key_guards_describe_tensors_and_modules_briefly():
    # a parameter's repr formats its values, a model's walks its submodules: guard texts
    # (logs, recompile reasons) name them by type and shape instead
    lin = kiln.nn.Linear(3, 2)
    table = {lin.weight: 2.0}

    def f(x):
        # ``parameters()`` reads the module's whole tree: it pins the module by identity
        return lin(x) * table[lin.weight] + len(list(lin.parameters()))

    fn, counter = compiled_with_counter(f)
    x = t(4, 3)
    assert_same(fn(x), f(x))
    texts = "".join(g.text + "\n" for g in fn._kiln_cache.guards[0].guards)
    param = "Parameter(shape=(2, 3), dtype=kiln.float32)"
    assert " is Linear(in_features=3, out_features=2, bias=True)\n" in texts
    assert f".weight is {param}\n" in texts
    assert f" == [{param}]\n" in texts
    assert "tensor([" not in texts
    table[lin.bias] = 3.0  # the key guard still checks the keys
    assert_same(fn(x), f(x))
    assert counter.frame_count == 2


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_a_window_of_a_growing_buffer_compiles_once(backend):
    # ``ids[:, -1:]`` in a generation loop: the size-1 dim's stride grows with the buffer and
    # is never used to reach an element, so it is not guarded
    def step(x):
        return x * 2 + 1, x.t(), x.view(-1)

    counter = CompileCounter(backend)
    compiled = kiln.compile(step, backend=counter)
    for length in (5, 7, 9, 12):
        window = kiln.randn(1, length)[:, -3:]
        for got, expected in zip(compiled(window), step(window)):
            np.testing.assert_array_equal(got.numpy(), expected.numpy())
            assert got.stride() == expected.stride()
    assert counter.frame_count == 1


_LAYOUT_CHOOSERS = {
    "conv2d": lambda lib, x: lib.nn.functional.conv2d(x, lib.ones(5, 3, 1, 1)),
    "max_pool2d": lambda lib, x: lib.nn.functional.max_pool2d(x, 1),
    "interpolate": lambda lib, x: lib.nn.functional.interpolate(x, scale_factor=2),
}


def _laid_out(lib, strides: tuple, data: np.ndarray):
    """``data`` (shape ``(2, 3, 1, 4)``) in a buffer with ``strides``."""
    x = lib.as_strided(lib.zeros(64), data.shape, strides)
    x.copy_(lib.tensor(data))
    return x


@needs_torch
@pytest.mark.parametrize("op", sorted(_LAYOUT_CHOOSERS))
def test_a_size_one_stride_that_changes_the_channels_last_choice_recaptures(op):
    # channels-last (2, 3, 1, 4) is (12, 1, 12, 3); with the size-1 dim's stride 3 or 1 it
    # looks contiguous to the channels-last test, and the result is laid out otherwise
    fn = _LAYOUT_CHOOSERS[op]
    compiled = kiln.compile(lambda x: fn(kiln, x))
    data = np.random.default_rng(0).standard_normal((2, 3, 1, 4)).astype(np.float32)
    layouts = [(12, 1, 12, 3), (12, 1, 3, 3), (12, 1, 1, 3), (12, 1, 24, 3)]
    for strides in layouts + layouts[::-1]:
        got = compiled(_laid_out(kiln, strides, data))
        eager = fn(kiln, _laid_out(kiln, strides, data))
        want = fn(torch, _laid_out(torch, strides, data))
        assert got.stride() == eager.stride() == want.stride(), strides
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)


def test_a_read_stride_of_a_size_one_dim_is_guarded():
    def scaled(x):
        return x * x.stride(0)

    compiled = kiln.compile(scaled, backend="aot_eager")
    for length in (5, 7):
        window = kiln.ones(1, length)[:, -3:]
        np.testing.assert_array_equal(compiled(window).numpy(), scaled(window).numpy())


@pytest.mark.parametrize(
    "changed",
    [
        lambda x, y: (x, y.double()),
        lambda x, y: (x, kiln.randn(1, 3)),
        lambda x, y: (x, kiln.randn(3, 2).t()),
        lambda x, y: (x.requires_grad_(), y),
    ],
    ids=["dtype", "shape", "strides", "requires_grad"],
)
def test_checks_joined_in_one_if_each_still_guard(changed):
    # the checks between two setup lines are one ``if`` of joined conditions (a GPT-2 step's
    # guard compiled in half the time): each of them still fails the guard on its own, and the
    # recompile names the one that failed
    def f(x, y):
        return x * 2 + y

    fn, counter = compiled_with_counter(f)
    x, y = t(2, 3), t(2, 3)
    fn(x, y)
    guard = fn._kiln_cache.guards[0]
    assert "            and (x._shape == (2, 3))" in guard.src
    args = changed(x.clone(), y.clone())
    assert guard.failure_reason(None, args, {}) is not None
    assert_same(fn(*args), f(*args))
    assert counter.frame_count == 2


def _zero_non_finite(x):
    """N-BEATS' divide_no_nan: module-level infinities read in the frame (np.inf, math.inf)."""
    result = x / x.sum()
    result[result == np.inf] = 0.0
    result[result == -math.inf] = 0.0
    return result + (x < math.inf) + (x > -np.inf)


@pytest.mark.parametrize("dynamic", [None, True])
def test_an_infinite_float_constant_is_guarded_once_not_on_every_call(dynamic):
    """A guard on a float constant that is inf or -inf was written as the literal ``inf``, a
    name the guard does not have: it failed on every call, recompiling the frame each time."""
    fn, counter = compiled_with_counter(_zero_non_finite, dynamic=dynamic)
    for values in ([0.0, 1.0, -1.0], [2.0, -2.0, 3.0], [1.0, 2.0, 3.0]):
        x = t(3) * 0 + kiln.tensor(values)
        assert_same(fn(x), _zero_non_finite(x))
    assert counter.frame_count == 1
