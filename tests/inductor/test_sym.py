"""Index expressions simplify the way reshapes need (checked by brute-force evaluation)."""

from __future__ import annotations

import itertools

import pytest

from kiln.inductor import sym
from kiln.inductor.codegen.numpy_backend import eval_expr


def _check(expr, reference, vars_):
    for values in itertools.product(*(range(v.size) for v in vars_)):
        env = dict(zip(vars_, values))
        assert eval_expr(expr, env) == reference(*values)


def test_floordiv_and_mod_of_a_split_index_simplify_away():
    i, j = sym.Var("i", 6), sym.Var("j", 4)
    e = sym.as_expr(i) * 4 + j
    assert e // 4 == sym.as_expr(i)
    assert e % 4 == sym.as_expr(j)


def test_recombining_a_split_gives_the_original_variable():
    x = sym.as_expr(sym.Var("x", 24))
    assert (x // 4) * 4 + x % 4 == x


@pytest.mark.parametrize("d", [2, 3, 5, 8])
def test_floordiv_and_mod_are_exact(d):
    i, j = sym.Var("i", 5), sym.Var("j", 7)
    e = sym.as_expr(i) * 7 + j * 2 + 1
    _check(e // d, lambda a, b: (a * 7 + b * 2 + 1) // d, [i, j])
    _check(e % d, lambda a, b: (a * 7 + b * 2 + 1) % d, [i, j])


def test_bounds_and_affine_only():
    i = sym.Var("i", 10)
    assert (sym.as_expr(i) * 3 - 2).bounds() == (-2, 25)
    with pytest.raises(TypeError):
        sym.as_expr(i) * sym.as_expr(i)


def test_expressions_are_hashable_values():
    i = sym.Var("i", 3)
    assert {sym.as_expr(i) + 1: 1}[sym.as_expr(i) + 1] == 1


def test_strides_over_symbolic_sizes_build_indices_without_deciding_anything(monkeypatch):
    """A stride that is a product of sizes is kept as a coefficient as it is: asking whether
    it is 0 cost a decision over the symbols' ranges per term (a quarter of the decisions a
    symbolic GPT block's compile made); the index still evaluates like the arithmetic."""
    from kiln.runtime import symbolic
    from kiln.runtime.symbolic import ShapeEnv

    env = ShapeEnv()
    s0, s1 = (env.symint(env.create_symbol(h, f"x.size()[{i}]")) for i, h in enumerate((3, 5)))
    asked = []
    decide = symbolic._decide_exprs
    monkeypatch.setattr(symbolic, "_decide_exprs", lambda *a: asked.append(a) or decide(*a))
    x0, x1 = sym.Var("x0", s0), sym.Var("x1", s1)
    with env.kernel_scope():
        index = sym.as_expr(x0) * (s1 * 4) + sym.as_expr(x1) * 4
    assert asked == []
    for a, b in itertools.product(range(3), range(5)):
        stride = index.terms[x0].expr.evaluate({s1.expr.as_symbol(): 5})
        assert stride * a + index.terms[x1] * b == a * 20 + b * 4


def _symbols(*hints):
    from kiln.runtime.symbolic import ShapeEnv

    env = ShapeEnv()
    return env, [env.symint(env.create_symbol(h, f"x.size()[{i}]")) for i, h in enumerate(hints)]


def test_unflattening_over_symbolic_sizes_recombines_to_the_flat_index():
    """A flat loop over ``[s0, s1, s2]`` (or ``[s0, s1, 1024]``, rows of 1024) unflattens its
    index into digits; each digit left in a contiguous access costs a division by a size per
    vector lane (a symbolic tanh kernel ran 6x slower than its static twin)."""
    from kiln.inductor.codegen.llvm.loop_plan import _expand

    env, (s0, s1, s2) = _symbols(3, 5, 7)
    with env.kernel_scope():
        f = sym.as_expr(sym.Var("f", s0 * s1 * s2))
        x0, x1, x2 = _expand((s0, s1, s2), (s0 * s1 * s2,), [f])
        assert x0 * (s1 * s2) + x1 * s2 + x2 == f
        assert x2 + x1 * s2 + x0 * (s1 * s2) == f
        row, j = sym.Var("r", s0 * s1), sym.Var("j", 1024)
        flat = sym.as_expr(row) * 1024 + j
        x0, x1, x2 = _expand((s0, s1, 1024), (s0 * s1 * 1024,), [flat])
        assert x0 * (s1 * 1024) + x1 * 1024 + x2 == flat


def test_a_split_by_a_symbolic_stride_simplifies_whichever_order_built_it():
    """``(X*X*m0 + X*m1 + m2) // (4*X*X)`` over loops ``(4*s0, X, X)`` is ``m0 // 4`` (its
    remainder ``X*m1 + m2`` stays below the symbolic stride ``X*X``), and the digits recombine
    to the flat index: a view whose body built the division from the flat index kept it
    standing, so its kernel merged no loops where a kernel with the same body over its own loops
    (the division built digit by digit) merged them, and the twin check refused CycleGAN's
    graph."""
    from kiln.inductor.codegen.numpy_backend import eval_expr

    env, (s0, s1) = _symbols(2, 3)
    x = 2 * ((s1 + 1) // 2)
    with env.kernel_scope():
        m0, m1, m2 = sym.Var("m0", 4 * s0), sym.Var("m1", x), sym.Var("m2", x)
        flat = sym.as_expr(m0) * (x * x) + sym.as_expr(m1) * x + m2
        quotient, remainder = flat // (4 * x * x), flat % (4 * x * x)
        assert quotient == sym.as_expr(m0) // 4
        assert quotient * (4 * x * x) + remainder == flat
    for a, b in [(2, 3), (3, 4), (1, 5)]:
        values = {s0.expr.as_symbol(): a, s1.expr.as_symbol(): b}
        side = 2 * ((b + 1) // 2)
        for i, j, k in itertools.product(range(4 * a), range(side), range(side)):
            point = {m0: i, m1: j, m2: k}
            index = i * side * side + j * side + k
            assert eval_expr(quotient, point, values) == index // (4 * side * side)
            assert eval_expr(remainder, point, values) == index % (4 * side * side)


def test_nested_floor_divisions_merge_and_digits_recombine():
    x = sym.as_expr(sym.Var("x", 4 * 6 * 5))
    assert (x // 5) // 6 == x // 30
    assert x % 5 + ((x // 5) % 6) * 5 == x % 30
    assert x % 5 + ((x // 5) % 6) * 5 + (x // 30) * 30 == x
    _check((x // 5) // 6, lambda a: a // 30, [sym.Var("x", 120)])


def test_a_constant_outside_the_modulus_is_reduced_floor_wise():
    """``(x - 512) % 256`` is ``x % 256`` (floor semantics): a cat part read at a shifted index
    gets a non-negative dividend whose range the simplifier knows."""
    x = sym.Var("x", 768)
    e = (sym.as_expr(x) - 512) % 256
    assert e == sym.as_expr(x) % 256
    _check((sym.as_expr(x) - 3) % 5, lambda a: (a - 3) % 5, [x])
    _check(
        (sym.as_expr(x) * 2 - 7) % 4 + (sym.as_expr(x) - 9) // 4,
        lambda a: (2 * a - 7) % 4 + (a - 9) // 4,
        [x],
    )


def test_a_new_size_set_is_evaluated_like_the_expressions():
    """``SizeBinding`` evaluates a new size set with one generated function: every layout, its
    view arguments, row counts and returned sizes must equal what ``Expr.evaluate`` gives
    (floor division, modulo, max/min, offsets, an empty dim)."""
    from kiln.inductor.ir import Layout
    from kiln.inductor.symbolic_sizes import SizeBinding
    from kiln.runtime import dtypes as dt
    from kiln.runtime.symbolic import sym_max, sym_min
    from kiln.runtime.tensor import make_fake

    env, (s0, s1) = _symbols(6, 5)
    x = make_fake((s0, s1), dt.float32, "cpu", (s1, 1), 0)
    binding = SizeBinding([x], [s0.expr.as_symbol(), s1.expr.as_symbol()])
    layouts = {
        "a": Layout((s0, s1 * 2), (s1 * 2, 1), dt.float32, 0, "cpu"),
        "b": Layout(((s0 + 1) // 2, s1 % 3), (1, (s0 + 1) // 2), dt.float64, s1 - 1, "cpu"),
        "c": Layout((s0 - 2, 4), (4, 1), dt.int64, 0, "cpu"),  # empty when s0 == 2
        "d": Layout((3, 4), (4, 1), dt.bool_, 0, "cpu"),
    }
    binding.bind(layouts, {3: (s0 * s1, s0), 5: (7, 7)}, (sym_max(s0, s1), sym_min(s0, s1 * 2)))
    for a, b in [(2, 2), (6, 5), (9, 3), (2, 11)]:
        sizes = binding.resolve((make_fake((a, b), dt.float32, "cpu", (b, 1), 0),))
        values = {s0.expr.as_symbol(): a, s1.expr.as_symbol(): b}
        for layout, got in zip(layouts.values(), sizes.layouts):
            want = layout.evaluate(values) if layout.is_symbolic else layout
            assert got == want and hash(got) == hash(want)
            assert got.view_args == Layout(*[getattr(want, f) for f in (
                "shape", "stride", "dtype", "offset", "device")]).view_args  # fmt: skip
        assert sizes.rows == {3: (a * b, a), 5: (7, 7)}
        assert sizes.consts == (max(a, b), min(a, 2 * b))


def test_index_keys_tell_variables_of_other_sizes_apart():
    """Memos of offsets and reads key on ``index_key``: ``Var`` compares by name alone, the
    key by name and size, so a loop of another size never gets an answer made for this one."""
    a, b = sym.Var("x0", 4), sym.Var("x0", 8)
    assert a == b and sym.index_key([a]) != sym.index_key([b])
    e = a * 3 + 1
    assert sym.index_key([e]) == sym.index_key([sym.Var("x0", 4) * 3 + 1])
    assert sym.index_key([e]) != sym.index_key([b * 3 + 1])
    assert sym.index_key([a], [b]) != sym.index_key([a, b])  # where the lists part counts
    # divisions and moduli are keyed by their divisor and their variables' sizes too
    assert sym.index_key([a // 2]) == sym.index_key([sym.Var("x0", 4) // 2])
    assert sym.index_key([a // 2]) != sym.index_key([b // 2])
    assert sym.index_key([(a * 4 + 1) // 3]) != sym.index_key([(a * 4 + 1) // 5])
    assert sym.index_key([(a * 4 + 1) % 3]) != sym.index_key([(a * 4 + 1) // 3])
    assert sym.index_key([sym.Indirect("_ind1", 4)]) is None  # an indirect index is not keyed


def test_remembered_offsets_and_reads_follow_the_variables_sizes():
    from kiln.inductor import ir
    from kiln.inductor.dependencies import reads_of
    from kiln.runtime import dtypes as dt

    layout = ir.Layout.contiguous((4, 1), dt.float32)
    small, large = sym.Var("x0", 4), sym.Var("x0", 8)
    first = layout.offset_expr([small, sym.ZERO])
    assert layout.offset_expr([sym.Var("x0", 4), sym.ZERO]) is first  # remembered
    again = layout.offset_expr([large, sym.ZERO])
    assert [a.size for a in again.terms] == [8]

    src = ir.InputBuffer("src", layout)
    buf = ir.ComputedBuffer(
        "buf", layout, ir.Pointwise((4, 1), dt.float32, lambda idx: src.make_loader()(idx))
    )
    (read,) = reads_of(buf, [small, sym.ZERO])
    (read8,) = reads_of(buf, [large, sym.ZERO])
    assert [a.size for a in read.index.terms] == [4]
    assert [a.size for a in read8.index.terms] == [8]
    buf.data = ir.Pointwise((4, 1), dt.float32, lambda idx: ir.ops.load("other", sym.ZERO))
    assert [r.name for r in reads_of(buf, [small, sym.ZERO])] == ["other"]  # a new body


def test_sums_and_products_drop_cancelled_terms_as_the_constructor_does():
    # the arithmetic builds its results without ``Expr()``'s copy: they must still equal (and
    # hash as) the expression made by it, with no zero coefficient left
    i, j, k = sym.Var("i", 6), sym.Var("j", 4), sym.Var("k", 3)
    e = sym.as_expr(i) * 4 + j * 2 + 5
    cancelled = e + (sym.as_expr(i) * -4) + (-5)
    assert cancelled.terms == {j: 2} and cancelled.const == 0
    assert cancelled == sym.Expr({j: 2}, 0) and hash(cancelled) == hash(sym.Expr({j: 2}, 0))
    assert (e * 0).terms == {} and e * 0 == 0
    assert e * 3 == sym.Expr({i: 12, j: 6}, 15)
    assert e - e == 0 and (e - e).terms == {}
    assert sym.as_expr(7) == sym.Expr({}, 7) and sym.as_expr(True) == 1
    _check(e + k * 3 - j * 2, lambda a, b, c: 4 * a + 3 * c + 5, [i, j, k])
