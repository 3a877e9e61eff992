"""Symbolic sizes in the core: expressions, SymInt arithmetic and guards, unbacked values.

Expressions are checked against plain integer arithmetic at many symbol values; decisions are
checked to record exactly the guards they rely on (none where the symbols' ranges decide), and
every conversion that loses the symbol to specialize it with a guard.
"""

from __future__ import annotations

import math
import operator
import random

import numpy as np
import pytest

import kiln
from kiln.runtime.sym_expr import INF, expr_from_data, expr_to_data
from kiln.runtime.symbolic import (
    ConstraintViolationError,
    GuardOnDataDependentError,
    ShapeEnv,
    SymBool,
    SymInt,
    known_same_shape,
    statically_known_true,
    sym_max,
)
from kiln.runtime.tensor import contiguous_strides, make_fake
from tests.oracle import assert_raises_alike, needs_torch, torch


def _env_with(*hints):
    env = ShapeEnv()
    return env, [env.symint(env.create_symbol(h, f"x.size()[{i}]")) for i, h in enumerate(hints)]


def _random_expression(rng: random.Random, leaves: list, depth: int):
    """A random int expression over ``leaves`` (SymInts or ints), as a nested (op, a, b)."""
    if depth == 0 or rng.random() < 0.3:
        return rng.choice(leaves + [rng.randint(1, 9)])
    op = rng.choice(["+", "-", "*", "//", "%", "max", "min"])
    return (
        op,
        _random_expression(rng, leaves, depth - 1),
        _random_expression(rng, leaves, depth - 1),
    )


_APPLY = {
    "+": operator.add, "-": operator.sub, "*": operator.mul, "//": operator.floordiv,
    "%": operator.mod, "max": kiln.sym_max, "min": kiln.sym_min,
}  # fmt: skip


def _evaluate(tree, values):
    if isinstance(tree, tuple):
        op, a, b = tree
        a, b = _evaluate(a, values), _evaluate(b, values)
        if op in ("//", "%"):
            b = kiln.sym_max(b, 1)  # positive divisors (sizes divide by sizes)
        return _APPLY[op](a, b)
    return values.get(id(tree), tree)


@pytest.mark.parametrize("seed", range(40))
def test_expressions_evaluate_like_integer_arithmetic(seed):
    rng = random.Random(seed)
    env, (s0, s1, s2) = _env_with(3, 5, 8)
    tree = _random_expression(rng, [s0, s1, s2], 4)
    with env.suppress_guards():
        symbolic = _evaluate(tree, {})
    for _ in range(20):
        values = [rng.randint(1, 40) for _ in range(3)]
        ints = dict(zip((id(s0), id(s1), id(s2)), values))

        def plain(t):
            if isinstance(t, tuple):
                op, a, b = t
                a, b = plain(a), plain(b)
                if op in ("//", "%"):
                    b = max(b, 1)
                return {"max": max, "min": min}.get(op, _APPLY[op])(a, b)
            return ints.get(id(t), t)

        expected = plain(tree)
        if isinstance(symbolic, SymInt):
            mapping = {s.expr.as_symbol(): v for s, v in zip((s0, s1, s2), values)}
            assert symbolic.expr.evaluate(mapping) == expected, (tree, values)


@pytest.mark.parametrize("seed", range(12))
def test_a_stored_expression_rebuilt_over_another_captures_symbols_evaluates_alike(seed):
    """The compiled-graph cache stores size expressions as data naming their symbols and
    rebuilds them over the symbols of the capture that loads them."""
    rng = random.Random(seed)
    env, leaves = _env_with(3, 5, 8)
    with env.suppress_guards():
        symbolic = _evaluate(_random_expression(rng, leaves, 4), {})
    if not isinstance(symbolic, SymInt):
        symbolic = leaves[0] * 2 + symbolic
    _, others = _env_with(4, 6, 9)
    by_name = {s.expr.as_symbol().name: s.expr.as_symbol() for s in others}
    rebuilt = expr_from_data(expr_to_data(symbolic.expr), by_name)
    assert rebuilt.code() == symbolic.expr.code()
    for _ in range(10):
        values = [rng.randint(2, 40) for _ in range(3)]
        mine = {s.expr.as_symbol(): v for s, v in zip(leaves, values)}
        theirs = {s.expr.as_symbol(): v for s, v in zip(others, values)}
        assert rebuilt.evaluate(theirs) == symbolic.expr.evaluate(mine)


def test_a_damaged_stored_expression_is_refused():
    env, (s0, s1) = _env_with(3, 5)
    data = expr_to_data((s0 * s1 // 2).expr)
    by_name = {"s0": s0.expr.as_symbol(), "s1": s1.expr.as_symbol()}
    unknown_symbol = ((((("s", "s7"),), 1),), 0)
    unknown_atom = ((((9, data, data),), 1),), 0
    for bad in ((data[0], "1"), unknown_symbol, unknown_atom, 5, (((), 1),)):
        with pytest.raises(ValueError):
            expr_from_data(bad, by_name)


def test_products_of_sizes_simplify():
    env, (s0, s1) = _env_with(6, 4)
    assert (s0 * s1) // s1 is not None and str((s0 * s1) // s1) == "s0"
    assert str((4 * s0 + 3) // 4) == "s0"
    assert (s0 * 4) % 4 == 0 and type((s0 * 4) % 4) is int
    assert type(s0 - s0) is int
    assert str(kiln.sym_max(s0, 1)) == "s0"  # sizes are at least 1
    assert env.guards == []


def test_a_quotient_by_a_sum_of_sizes_simplifies_when_it_divides_exactly():
    """A view's -1 over a batch of patch grids plus a class token, ``(16*b*h*w + 16*b) //
    (b*h*w + b)``, is 16 for every size; one that does not divide stays a division."""
    env, (b, h, w) = _env_with(2, 3, 4)
    tokens = b * h * w + b
    assert (16 * tokens) // tokens == 16 and type((16 * tokens) // tokens) is int
    assert str(((h + 1) * (w + 2)) // (w + 2)) == "s1 + 1"
    assert str((tokens + 1) // tokens) not in ("1", "0")
    assert str((b * h + b) // (h + 2)).count("//") == 1
    assert env.guards == []


def test_symint_is_not_an_int_subclass_so_every_index_use_specializes():
    """CPython reads an int subclass's value for range(), seq[n] and slicing without calling
    __index__; a SymInt must go through __index__ (a guard) instead of baking the hint in."""
    env, (s0,) = _env_with(5)
    assert not isinstance(s0, int)
    assert isinstance(s0, __import__("numbers").Integral)
    assert len(range(s0)) == 5
    assert [g.text() for g in env.guards] == ["s0 == 5"]


@pytest.mark.parametrize(
    "use",
    [
        lambda s: list(range(10))[s],
        lambda s: list(range(10))[:s],
        lambda s: int(s),
        lambda s: float(s),
        lambda s: hash(s),
        lambda s: np.zeros((s,)),
        lambda s: operator.index(s),
    ],
    ids=["index", "slice", "int", "float", "hash", "numpy", "operator.index"],
)
def test_conversions_that_lose_the_symbol_specialize(use):
    env, (s0,) = _env_with(4)
    use(s0)
    assert [(g.text(), g.kind) for g in env.guards] == [("s0 == 4", "specialize")]


def test_comparisons_decided_by_ranges_record_no_guard():
    env, (s0, s1) = _env_with(6, 4)
    assert s0 >= 1 and s0 != 0 and not (s0 < 0) and bool(s0)
    assert s0 * s1 >= s1 and s0 * s1 * 2 > s1  # exact ratios of products
    assert statically_known_true("<=", s1, s0 * s1)
    assert env.guards == []


def test_floor_divisions_by_constants_relate_to_their_dividends():
    """A stride-2 convolution's output size ``(s + 1) // 2`` against its input ``s``: intervals
    over ``s`` and the quotient separately leave these open, the expanded form decides them
    (no guard); a relation that does depend on ``s``'s parity stays undecided."""
    env, (s,) = _env_with(9)
    half = (s + 1) // 2
    assert not (s - 2 * half + 2 < 0) and s - 2 * half + 1 >= 0 and 2 * half <= s + 1
    assert 2 * half >= s and 3 * ((s + 2) // 3) >= s
    assert env.guards == []
    assert not statically_known_true(">", s - 2 * half, -1)  # s even: 0; odd: -1
    for value in range(2, 40):  # the decided relations hold for every size
        h = (value + 1) // 2
        assert value - 2 * h + 1 >= 0 and 2 * h <= value + 1 and 2 * h >= value


def test_products_against_their_factors_are_decided_from_lower_bounds():
    """``s1 * q - s1`` with ``q`` an output size (at least 1) is non-negative whatever the
    sizes, though intervals over ``s1 * q`` and ``s1`` separately leave it open: each factor
    taken as its lower bound plus a non-negative part decides it (no guard). A relation that
    fails for some sizes (the same less 1) stays undecided."""
    env, (n, c, s) = _env_with(8, 6, 9)
    q = (s + 1) // 2  # s >= 2, so q >= 1
    assert statically_known_true(">=", n * q - n, 0)
    assert statically_known_true(">=", n * c * q - n * c + 3 * n * q - 3 * n, 0)
    assert statically_known_true("<", -(c * q) + c - 1, 0)
    assert not statically_known_true(">=", n * q - n - 1, 0)  # -1 at s == 2
    assert not statically_known_true(">", n * q - n, 0)  # 0 at s == 2
    assert env.guards == []
    for nv in (2, 5):
        for cv in (2, 7):
            for sv in range(2, 12):
                qv = (sv + 1) // 2
                assert nv * qv - nv >= 0 and nv * cv * qv - nv * cv + 3 * nv * qv - 3 * nv >= 0


def test_a_kernel_scope_remembers_its_decisions_until_it_ends(monkeypatch):
    """A symbolic compile asks the same relations thousands of times while no range changes:
    inside ``kernel_scope`` each is decided once; after it, guards narrow ranges again and
    the answers follow them."""
    from kiln.runtime import symbolic

    env, (s0, s1) = _env_with(6, 4)
    asked = []
    decide = symbolic._decide_exprs
    monkeypatch.setattr(symbolic, "_decide_exprs", lambda *a: asked.append(a) or decide(*a))
    with env.kernel_scope():
        for _ in range(3):
            assert statically_known_true("<=", s1, s0 * s1)
            assert not statically_known_true(">=", s0, 4)
            assert s0 * s1 >= s1
    assert len(asked) == 3
    assert (s0 > 5) is True  # a guard: s0 >= 6 from now on
    assert statically_known_true(">=", s0, 4)


def test_undecided_comparisons_follow_the_hint_and_record_a_guard():
    env, (s0, s1) = _env_with(6, 4)
    assert (s0 > s1) is True
    assert (s0 == 5) is False
    assert [g.text() for g in env.guards] == ["s0 - s1 > 0", "s0 != 5"]
    # every guard holds for the hints it was decided on
    values = {s.expr.as_symbol(): s.hint for s in (s0, s1)}
    assert all(g.holds(values) for g in env.guards)


def test_a_guard_pinning_a_symbol_folds_it_into_later_expressions():
    env, (s0, s1) = _env_with(6, 8)
    assert s1 == 8
    assert type(s1 * 2) is int and s1 * 2 == 16
    assert str(s0 * s1) == "8*s0"


def test_sizes_computed_before_a_pin_fold_it_in_what_they_build_after():
    """Arithmetic skips looking for pinned symbols in operands known to hold none; a pin made
    after an operand was built must still be folded into what is built from it."""
    env, (s0, s1) = _env_with(6, 8)
    before = s0 * s1 + 3  # built while nothing is pinned
    stride = 4 * s1
    assert s1 == 8  # pins s1
    assert str(before * 2) == "16*s0 + 6"
    assert str(2 - before) == "-8*s0 - 1"
    assert type(stride + 1) is int and stride + 1 == 33
    assert type(-stride) is int and -stride == -32
    assert kiln.runtime.symbolic.size_or_one(stride) == 32
    assert statically_known_true("==", stride, 32)
    assert statically_known_true("<=", s0, s0) and not statically_known_true("<", s0, s0)
    assert [g.text() for g in env.guards] == ["s1 == 8"]


def test_guards_on_a_multiple_are_reduced():
    env, (s0,) = _env_with(3)
    assert 8 * s0 != 8
    assert [g.text() for g in env.guards] == ["s0 != 1"]
    assert env.symbols[0].lower == 2  # the guard narrowed the range


def test_a_guard_on_a_rising_expression_of_one_size_bounds_it_from_below():
    """A pooled size ``((s + 1) // 2) // 2 >= 1`` (a size check records it) holds from s = 3
    up: the range says so afterwards, and sizes built before are simplified when asked."""
    env, (s0, s1) = _env_with(13, 7)
    pooled = ((s0 + 1) // 2) // 2
    stride = kiln.runtime.symbolic.size_or_one(pooled)  # made while s0 could still be 1
    assert pooled >= 1
    assert env.symbols[0].lower == 3
    assert statically_known_true("==", stride, pooled)
    assert s1 * 2 - s0 >= 0  # two symbols: no range changes
    assert env.symbols[0].lower == 3 and env.symbols[1].lower == 1
    assert (s0 % 4) >= 1  # not monotone: no range changes
    assert env.symbols[0].lower == 3
    # every value the new bound admits satisfies the guard, the one below it does not
    guard = env.guards[0]
    assert guard.text() == "(((s0 + 1) // 2) // 2) >= 1"
    assert not guard.holds({env.symbols[0]: 2}) and guard.holds({env.symbols[0]: 3})


def test_printing_a_symbolic_size_records_no_guard():
    env, (s0, s1) = _env_with(6, 4)
    assert repr(s0 * s1 + 1) == "s0*s1 + 1"
    assert f"{s0}" == "s0" and f"{s0:>3}" == "  6"
    assert str((s0 + 1) // 2) == "((s0 + 1) // 2)"
    assert env.guards == []


def test_shape_comparisons_check_the_rank_first():
    """A tuple compares items before lengths: ``(s0, 32) == (32,)`` would guard ``s0 != 32``."""
    env, (s0,) = _env_with(6)
    assert not kiln.runtime.symbolic.same_shape((s0, 32), (32,))
    assert not known_same_shape((s0, 32), (s0,))
    assert known_same_shape((s0, 32), (s0, 32))
    assert env.guards == []


def test_fake_tensors_with_symbolic_sizes_have_symbolic_strides():
    env, (s0, s1) = _env_with(6, 4)
    t = make_fake((s0, s1, 8), kiln.float32, kiln.device("cpu"))
    assert [str(s) for s in t.stride()] == ["8*s1", "8", "1"]
    assert str(t.numel()) == "8*s0*s1"
    assert t.is_contiguous()
    assert contiguous_strides((s0, 1)) == (1, 1)
    assert env.guards == []


def test_meta_functions_keep_sizes_symbolic():
    from kiln.ops.core.fake import FakeTensorMode

    env, (s0, s1) = _env_with(6, 4)
    x = make_fake((s0, s1, 8), kiln.float32, kiln.device("cpu"))
    with FakeTensorMode():
        y = x.view(s0 * s1, 8).t()
        z = (x + x.sum(1, keepdim=True)).reshape(s0, -1)
        w = x.permute(1, 0, 2)[:, 1:].expand(2, s1, s0 - 1, 8)
    assert [str(s) for s in y.shape] == ["8", "s0*s1"]
    assert [str(s) for s in z.shape] == ["s0", "8*s1"]
    assert [str(s) for s in w.shape] == ["2", "s1", "s0 - 1", "8"]
    assert env.guards == []


def _merged_copy(mutate: bool):
    """``contiguous()`` of a transposed (8, n) tensor, which copies unless n == 1 (eager code
    then returns the tensor itself); ``mutate``: the copy is written in place afterwards."""
    from kiln.ops.core.fake import FakeTensorMode

    env, (s0, s1) = _env_with(6, 4)
    x = make_fake((s0, s1, 8), kiln.float32, kiln.device("cpu"))
    with FakeTensorMode():
        y = x.view(s0 * s1, 8).t().contiguous()
        if mutate:
            y.mul_(2)
    assert y.is_contiguous()
    assert env.guards == []  # the copy is right for every size until aliasing is observed
    return env, y


@pytest.mark.parametrize("observed", ["nothing", "leaves the graph", "mutated"])
def test_copy_or_alias_decisions_guard_the_size_only_where_aliasing_is_observed(observed):
    """A size of 1 is served by the copy unless the capture shows the aliasing eager code
    would have (the copy leaves the graph, or it is written in place): then it is guarded."""
    env, y = _merged_copy(mutate=observed == "mutated")
    env.settle_aliasing([y] if observed == "leaves the graph" else [])
    expected = [] if observed == "nothing" else ["s0*s1 != 1"]
    assert [g.text() for g in env.guards] == expected


# ------------------------------------------------------------------------------ unbacked


def test_relations_on_unbacked_sizes_are_symbolic_booleans():
    env = ShapeEnv()
    u0 = env.unbacked_size("nonzero")
    assert u0 >= 0  # the range decides
    relation = u0 == 5
    assert isinstance(relation, SymBool)
    with env.user_code(), pytest.raises(GuardOnDataDependentError, match="u0"):
        bool(relation)
    assert bool(u0 == 1) is False  # library code: unbacked sizes count as >= 2
    assert env.guards == []


def test_library_code_decides_a_max_built_before_an_unbacked_size_counted_as_at_least_two():
    # a contiguous stride of a (3, u0) boolean-mask result is max(1, u0); whether it equals u0
    # (is the result contiguous?) is asked when AOT lays out the output's gradient
    env = ShapeEnv()
    u0 = env.unbacked_size("boolean-mask indexing")
    stride = sym_max(1, u0)
    assert bool(stride == u0) is True
    assert bool(stride != u0) is False
    with env.user_code(), pytest.raises(GuardOnDataDependentError, match="u0"):
        bool(stride == u0)
    assert env.guards == []


def test_check_turns_a_relation_into_a_runtime_assertion():
    env = ShapeEnv()
    u0 = env.symint(env.create_unbacked("t.item()"))
    kiln._check(u0 >= 0)
    kiln._check(u0 <= 64)
    assert [a.guard.text() for a in env.pending_asserts] == ["u0 >= 0", "u0 <= 64"]
    assert env.symbols[0].lower == 0 and env.symbols[0].upper == 64


def test_unbacked_values_cannot_specialize():
    env = ShapeEnv()
    u0 = env.unbacked_size("nonzero")
    with pytest.raises(GuardOnDataDependentError, match="only known when the graph runs"):
        int(u0)


# ------------------------------------------------------------------------------ user ranges


def test_constraining_a_symbolic_size_narrows_its_range_with_the_users_line():
    env, (s0,) = _env_with(10)
    kiln.sym_constrain_range(s0, min=2, max=64)
    (guard_low, guard_high) = env.range_guards()
    assert guard_low.kind == guard_high.kind == "user"
    assert "sym_constrain_range(s0, min=2, max=64)" in guard_low.message
    with pytest.raises(ConstraintViolationError, match="s0 = x.size.*must lie in"):
        kiln.sym_constrain_range(s0, min=11)


@needs_torch
@pytest.mark.parametrize(
    "call",
    [
        lambda lib: lib.sym_constrain_range(5, min=0, max=3),
        lambda lib: lib._constrain_as_size(5, min=0, max=3),
        lambda lib: lib._check(False),
        lambda lib: lib._check(False, lambda: "boom"),
    ],
    ids=["range", "as_size", "check", "check-message"],
)
def test_eager_checks_raise_like_torch(call):
    assert_raises_alike(RuntimeError, lambda: call(kiln), lambda: call(torch))


@needs_torch
def test_sym_functions_on_plain_values_match_torch():
    for name, args in [
        ("sym_max", (3, 5)), ("sym_min", (3, 5)), ("sym_int", (3.7,)), ("sym_float", (3,)),
        ("sym_not", (True,)), ("sym_ite", (True, 1, 2)), ("sym_constrain_range", (2,)),
    ]:  # fmt: skip
        assert getattr(kiln, name)(*args) == getattr(torch, name)(*args), name


def test_sym_max_and_min_build_expressions_without_guards():
    env, (s0, s1) = _env_with(6, 4)
    assert str(kiln.sym_max(s0, s1)) == "max(s0, s1)"
    assert str(kiln.sym_min(s0 - 10, 0)) == "min(0, s0 - 10)"
    assert env.guards == []
    assert math.isinf(INF)
